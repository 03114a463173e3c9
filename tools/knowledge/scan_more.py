"""What scan.py's walk does not read: progress-bar descriptions and the C/C++ sources' error texts.

Two passes over the same archives, kept apart from scan.py so that its cached parses (keyed by its own
hash) stay valid; this module's results are cached under CACHE/scan-more/, keyed by this file and
scan.py together.

- **Progress bars.** A tqdm bar's description is what a log shows while a phase runs (SGLang's
  ``capture_range.set_description(f"Capturing batches ({bs=} {avail_mem=:.2f} GB)")``, vLLM's
  ``tqdm(..., desc="Capturing CUDA graphs ({}, {})".format(...))``). ``desc=`` keywords of any call and
  ``.set_description(...)`` are read as templates of level ``progress``, with their enclosing
  function. A self-documenting field (``{bs=}``) prints the value's repr, which for the numbers these
  bars show is the number: its type comes from its name, as any other placeholder's. Only files that
  hold ``desc`` are parsed, so the pass costs little beside the decompression.
- **C/C++ sources** of the libraries underneath (``CSOURCES``: vLLM's cumem allocator, torch_memory_saver):
  ``std::cerr << ... ;`` chains and ``snprintf(buf, size, "...", ...)`` formats, macro bodies
  included, as templates of level ``error`` whose function is the macro or function they sit in. Their
  CUDA error text comes at run time from ``cuGetErrorString``: a template whose placeholder is that
  string (or, where none is printed, the ``CUresult`` code) also gets the out-of-memory form,
  ``CUDA_ERROR_OUT_OF_MEMORY`` (code 2, "out of memory", CUDA driver API, enum CUresult), which is what
  the catalogue keeps as a memory message.
"""

from __future__ import annotations

import ast
import re
import tarfile
import zipfile
from pathlib import Path

import scan

# Per distribution: the C/C++ files whose messages are read (paths inside the sdist, from its root).
CSOURCES: dict[str, re.Pattern[str]] = {
    "vllm": re.compile(r"^csrc/cumem_allocator[^/]*\.(cpp|h)$"),
    "torch_memory_saver": re.compile(r"^csrc/[^/]+\.(cpp|h)$"),
}
# CUDA_ERROR_OUT_OF_MEMORY in the driver API: what cuGetErrorString says for it, and its code.
CUDA_OOM_STRING = "out of memory"
CUDA_OOM_CODE = "2"


# --- progress bars ---------------------------------------------------------------------------------


def _plain_selfdoc(node: ast.expr) -> ast.expr:
    """An f-string whose ``{name=}`` fields print a repr: typed by the name instead (the repr of a number is the number)."""
    if not isinstance(node, ast.JoinedStr):
        return node
    values = list(node.values)
    for i, v in enumerate(values):
        prev = values[i - 1] if i else None
        if (
            isinstance(v, ast.FormattedValue)
            and v.conversion == ord("r")
            and v.format_spec is None
            and isinstance(prev, ast.Constant)
            and isinstance(prev.value, str)
            and prev.value.endswith("=")
        ):
            values[i] = ast.FormattedValue(v.value, -1, None)
    return ast.JoinedStr(values)


class _ProgressWalker(scan._Walker):
    """scan's walk (qualified names, assigned strings), reading progress descriptions instead of log calls."""

    def visit_Call(self, node: ast.Call) -> None:
        descs = [k.value for k in node.keywords if k.arg == "desc"]
        if isinstance(node.func, ast.Attribute) and node.func.attr == "set_description" and node.args:
            descs.append(node.args[0])
        for desc in descs:
            self._add(_plain_selfdoc(desc), "progress")
        self.generic_visit(node)


def progress_messages(source: bytes, module: str) -> list[scan.Message]:
    if b"desc" not in source:
        return []
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    w = _ProgressWalker()
    w.visit(tree)
    return w.messages


# --- C/C++ -----------------------------------------------------------------------------------------

_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
_DEFINE = re.compile(r"^\s*#\s*define\s+(\w+)")
_FUNC = re.compile(r"^[\w:<>\*&\s]*?\b(\w+)\s*\([^;{}]*\)\s*(?:const\s*)?\{?\s*$")
_CONTROL = frozenset({"if", "for", "while", "switch", "return", "sizeof", "do", "else", "catch"})
_CU_VAR = re.compile(r"\bCUresult\s+(\w+)\s*=")
_INT_VAR = re.compile(r"\b(?:cudaError_t|hipError_t|int|size_t)\s+(\w+)\s*=")
_ERR_STRING = re.compile(r"cuGetErrorString\s*\(\s*\w+\s*,\s*(?:\([^)]*\)\s*)?&\s*(\w+)\s*\)")
_PRINTF = re.compile(r"%[-+ #0]*(\d+|\*)?(\.(\d+|\*))?(hh|h|ll|l|z|j|t|L)?([diouxXeEfFgGcsp%])")
_SPECIAL = {"__FILE__": ("file", "str"), "__LINE__": ("line", "int"), "__func__": ("func", "str"), "__FUNCTION__": ("func", "str")}


def _unescape(text: str) -> str:
    return text.replace('\\"', '"').replace("\\n", " ").replace("\\t", " ").replace("\\\\", "\\")


def _split_top(text: str, sep: str) -> list[str]:
    """``text`` split on ``sep`` outside strings and brackets."""
    out, depth, cur, i = [], 0, [], 0
    while i < len(text):
        c = text[i]
        if c == '"':
            m = _STRING.match(text, i)
            end = m.end() if m else len(text)
            cur.append(text[i:end])
            i = end
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if depth == 0 and text.startswith(sep, i):
            out.append("".join(cur))
            cur = []
            i += len(sep)
            continue
        cur.append(c)
        i += 1
    out.append("".join(cur))
    return out


def _c_name(expr: str) -> str:
    """A placeholder name for a C expression: the identifier it reads (``(err_str ? err_str : "x")`` -> err_str)."""
    words = [w for w in re.findall(r"[A-Za-z_]\w*", re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)) if w not in ("std", "endl", "static_cast", "const", "char")]
    name = (words[0] if words else "value").strip("_").lower() or "value"
    return name


def _stream_template(chain: str, ints: set[str]) -> tuple[str, list[str]]:
    """A ``std::cerr << a << "b" ...`` chain as a template and the expressions of its placeholders."""
    parts, exprs = [], []
    for piece in _split_top(chain, "<<")[1:]:
        piece = piece.strip()
        if not piece or piece in ("std::endl", "endl", "std::flush"):
            continue
        strings = _STRING.fullmatch(piece)
        if strings:
            parts.append(scan._lit(_unescape(strings.group(1))))
            continue
        if piece in _SPECIAL:
            parts.append(scan._ph(*_SPECIAL[piece]))
            continue
        name = _c_name(piece)
        # An error code declared in the same body (CUresult r = ...) prints as its number.
        typ = "int" if re.fullmatch(r"\(?\s*(\w+)\s*\)?", piece) and piece.strip("() ") in ints else scan._type_from_name(name)
        parts.append(scan._ph(name, typ))
        exprs.append(piece)
    return "".join(parts), exprs


def _printf_template(fmt: str, args: list[str]) -> tuple[str, list[str]]:
    out, pos, i, exprs = [], 0, 0, []
    for m in _PRINTF.finditer(fmt):
        out.append(scan._lit(fmt[pos : m.start()]))
        pos = m.end()
        conv = m.group(5)
        if conv == "%":
            out.append("%")
            continue
        arg = args[i].strip() if i < len(args) else "value"
        i += 1
        if arg in _SPECIAL:
            out.append(scan._ph(*_SPECIAL[arg]))
            continue
        out.append(scan._ph(_c_name(arg), "float" if conv in "eEfFgG" else "int" if conv in "diouxX" else "str"))
        exprs.append(arg)
    out.append(scan._lit(fmt[pos:]))
    return "".join(out), exprs


def _logical_lines(text: str) -> list[str]:
    """Source lines with backslash continuations joined (a macro body is one line) and // comments cut."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    out: list[str] = []
    buf = ""
    for raw in text.splitlines():
        line = re.sub(r'//(?=(?:[^"]*"[^"]*")*[^"]*$).*', "", raw)
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        out.append(buf + line)
        buf = ""
    if buf:
        out.append(buf)
    return out


def c_messages(source: str) -> list[scan.Message]:
    """The error texts of one C/C++ file, each with the macro or function it sits in."""
    statements: list[tuple[str, str]] = []  # (macro or function, statement)
    bodies: dict[str, str] = {}
    function, pending = "<file>", ""
    for line in _logical_lines(source):
        d = _DEFINE.match(line)
        if d:  # a macro is one logical line: its statements are its own
            bodies[d.group(1)] = line
            statements.extend((d.group(1), stmt) for stmt in line.split(";"))
            continue
        f = _FUNC.match(line)
        if f and f.group(1) not in _CONTROL and not pending.strip():
            function = f.group(1)
        bodies[function] = bodies.get(function, "") + " " + line
        pending += " " + line.strip()
        if ";" in line or line.rstrip().endswith(("{", "}")):
            statements.extend((function, stmt) for stmt in pending.split(";"))
            pending = ""
    messages: list[scan.Message] = []
    for fn, stmt in statements:
        body = bodies.get(fn, "")
        found = _message_of(stmt, set(_CU_VAR.findall(body)) | set(_INT_VAR.findall(body)))
        if found is None:
            continue
        template, exprs = found
        tpl = scan.normalise(template)
        if tpl is None:
            continue
        messages.append(scan.Message(tpl, "error", fn))
        oom = _oom_form(template, exprs, body)
        if oom is not None:
            messages.append(scan.Message(oom, "error", fn))
    return messages


def _message_of(stmt: str, ints: set[str]) -> tuple[str, list[str]] | None:
    if "cerr" in stmt and "<<" in stmt:
        chain = stmt[stmt.index("cerr") :]
        return _stream_template(chain, ints)
    m = re.search(r"\bsnprintf\s*\((.*)\)\s*$", stmt.strip())
    if m:
        args = _split_top(m.group(1), ",")
        if len(args) >= 3:
            fmt = _STRING.fullmatch(args[2].strip())
            if fmt:
                return _printf_template(_unescape(fmt.group(1)), args[3:])
    return None


def _oom_form(template: str, exprs: list[str], body: str) -> str | None:
    """The template with its CUDA error placeholder filled as CUDA_ERROR_OUT_OF_MEMORY prints it, or None."""
    strings = set(_ERR_STRING.findall(body))
    codes = set(_CU_VAR.findall(body))
    phs = list(re.finditer(r"\{[a-z_][a-z0-9_]*:(?:int|float|str)\}", template))
    # Placeholders that are not __FILE__/__LINE__/__func__ line up with exprs in order.
    special = {scan._ph(*v) for v in _SPECIAL.values()}
    plain = [p for p in phs if p.group(0) not in special]
    if len(plain) != len(exprs):
        return None
    target, value = None, None
    for p, e in zip(plain, exprs, strict=True):
        if strings and any(re.search(rf"\b{re.escape(s)}\b", e) for s in strings):
            target, value = p, CUDA_OOM_STRING
            break
    if target is None and not strings:
        for p, e in zip(plain, exprs, strict=True):
            if any(re.fullmatch(rf"\(?\s*{re.escape(c)}\s*\)?", e) for c in codes):
                target, value = p, CUDA_OOM_CODE
                break
    if target is None:
        return None
    return scan.normalise(template[: target.start()] + value + template[target.end() :])


# --- archives --------------------------------------------------------------------------------------


def _c_path(member: str, pattern: re.Pattern[str]) -> str | None:
    """The path of an sdist member from the sdist's root (``vllm-0.9.0/csrc/x.cpp`` -> ``csrc/x.cpp``)."""
    rest = member.split("/", 1)[1] if "/" in member else member
    return rest if pattern.match(rest) else None


def scan_archive(archive: Path, name: str, package: str) -> list[dict]:
    """Modules (path, messages) of one release that the main walk does not read: progress descriptions of
    the Python files, error texts of the C/C++ files."""
    out: dict[str, list[scan.Message]] = {}
    cpattern = CSOURCES.get(name)
    if archive.name.endswith((".whl", ".zip")):
        with zipfile.ZipFile(archive) as zf:
            members = [(n, (lambda n=n: zf.read(n))) for n in sorted(zf.namelist())]
            _collect(members, package, cpattern, out)
    else:
        with tarfile.open(archive) as tf:
            files = sorted((m for m in tf.getmembers() if m.isfile()), key=lambda m: m.name)

            def reader(m: tarfile.TarInfo) -> bytes:
                f = tf.extractfile(m)
                return f.read() if f is not None else b""

            _collect([(m.name, (lambda m=m: reader(m))) for m in files], package, cpattern, out)
    return [{"path": p, "messages": [[x.template, x.level, x.function, x.exception] for x in msgs]} for p, msgs in sorted(out.items()) if msgs]


def _collect(members, package: str, cpattern: re.Pattern[str] | None, out: dict[str, list[scan.Message]]) -> None:
    seen: set[str] = set()
    for name, read in members:
        mod = scan._module_path(name, package)
        if mod and mod not in seen:
            seen.add(mod)
            msgs = progress_messages(read(), mod)
            if msgs:
                out[mod] = msgs
            continue
        if cpattern is not None:
            path = _c_path(name, cpattern)
            if path and path not in out:
                msgs = c_messages(read().decode("utf-8", "replace"))
                if msgs:
                    out[path] = msgs

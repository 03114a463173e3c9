"""Reading one release: its Python files, parsed with `ast` straight out of the archive.

Nothing is imported or run. For each module the walk yields
  - messages: the text of every logging call, print to stderr, warnings.warn, raise and assert
    message, as a template (literal text plus typed placeholders), with the enclosing function;
  - functions: every function's qualified name and the names it calls (for the phase call graph).
"""

from __future__ import annotations

import ast
import re
import string
import tarfile
import warnings
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

# Logger method -> level. vLLM adds *_once variants; `exception` and `critical` log at error or worse.
LOG_METHODS = {
    "debug": "debug",
    "debug_once": "debug",
    "info": "info",
    "info_once": "info",
    "warning": "warning",
    "warning_once": "warning",
    "warn": "warning",
    "error": "error",
    "exception": "error",
    "critical": "error",
    "fatal": "error",
}
# Module-level helpers some releases log through (vllm.utils.print_warning_once, sglang's print_info_once).
LOG_FUNCTIONS = {"print_warning_once": "warning", "print_info_once": "info", "warning_once": "warning", "info_once": "info"}


@dataclass
class Message:
    template: str
    level: str  # debug / info / warning / error / raise
    function: str  # qualified name of the enclosing function ("<module>" at top level)
    exception: str = ""  # the raised class for level "raise"


@dataclass
class Function:
    qualname: str
    cls: str  # enclosing class, "" for a module-level function
    calls: set[str] = field(default_factory=set)  # "self.NAME" for calls on self, else the called NAME


@dataclass
class Module:
    path: str  # dotted module path, e.g. sglang.srt.model_executor.model_runner
    messages: list[Message]
    functions: list[Function]


# --- templates -------------------------------------------------------------------------------------

_FLOAT_NAME = re.compile(r"(gib|gb|mib|mb|kib|mem|memory|ratio|fraction|frac|util|utilization|percent|seconds|(^|_)time(_|$)|elapsed|_s$|latency|usage)", re.I)
_INT_NAME = re.compile(
    r"(^num|num_|_num|count|^n_|size|len|tokens|token|blocks|block|^bs$|batch|^idx|_idx|rank|_id$|^i$|^j$|bytes|pages|slots|capacity|max_|min_|dim|layers|^tp|_tp)",
    re.I,
)
# Ids of requests, sessions, jobs, nodes, transfers and engines are strings in the engines and Ray ("chat-7e63...",
# "cmpl-...", a uuid, a hex node id), even where a counter made them look numeric; ids of devices, ranks, layers
# and blocks are numbers.
_STR_ID_NAME = re.compile(r"(^|_)((req|request|session|job|node|transfer|engine|trace|seq_group|conversation|chat)_id|rid)$", re.I)
_PERCENT_SPEC = re.compile(r"%(\((?P<key>\w+)\))?[#0\- +]*(\*|\d+)?(\.(\*|\d+))?[hlL]?(?P<conv>[diouxXeEfFgGcrsa%])")
_NAME_CLEAN = re.compile(r"[^a-z0-9_]+")


def _expr_name(node: ast.AST | None) -> str:
    """A readable placeholder name for an interpolated expression."""
    if node is None:
        return "value"
    if isinstance(node, ast.Name):
        name = node.id
    elif isinstance(node, ast.Attribute):
        name = node.attr
    elif isinstance(node, ast.Call):
        inner = _expr_name(node.func)
        # round(x, 2), len(x), str(x), int(x): the argument names the value better than the wrapper.
        if inner in {"round", "int", "float", "str", "repr", "format", "abs", "max", "min", "sum"} and node.args:
            return _expr_name(node.args[0])
        name = inner
    elif isinstance(node, ast.Subscript):
        name = _expr_name(node.value)
    elif isinstance(node, ast.BinOp):
        name = _expr_name(node.left)
    else:
        name = "value"
    name = _NAME_CLEAN.sub("_", name.lower()).strip("_") or "value"
    return ("v_" + name) if name[0].isdigit() else name


def _type_from_spec(spec: str, conversion: int | str, name: str) -> str:
    if conversion in ("r", "s", "a", ord("r"), ord("s"), ord("a")):
        return "str"
    spec = spec.strip()
    if spec:
        last = spec[-1]
        if last in "eEfFgG%":
            return "float"
        if last in "dxXobn":
            return "int"
        if last == "s":
            return "str"
    return _type_from_name(name)


def _type_from_name(name: str) -> str:
    if _STR_ID_NAME.search(name):
        return "str"
    if _FLOAT_NAME.search(name):
        return "float"
    if _INT_NAME.search(name):
        return "int"
    return "str"


def _lit(text: str) -> str:
    """Literal text in a template: braces doubled, as in str.format, so placeholders stay unambiguous."""
    return text.replace("{", "{{").replace("}", "}}")


def _ph(name: str, typ: str) -> str:
    return "{" + name + ":" + typ + "}"


def _spec_text(spec: ast.expr | None) -> str:
    if isinstance(spec, ast.JoinedStr):
        return "".join(v.value for v in spec.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
    return ""


def _percent_template(fmt: str, args: list[ast.expr]) -> str:
    out, pos, i = [], 0, 0
    for m in _PERCENT_SPEC.finditer(fmt):
        out.append(_lit(fmt[pos : m.start()]))
        pos = m.end()
        conv = m.group("conv")
        if conv == "%":
            out.append("%")
            continue
        key = m.group("key")
        arg = args[i] if i < len(args) else None
        if key is None:
            i += 1
        name = _NAME_CLEAN.sub("_", key.lower()) if key else _expr_name(arg)
        if conv in "eEfFgG":
            typ = "float"
        elif conv in "diouxX":
            typ = "int"
        elif conv == "s" and arg is not None and not isinstance(arg, ast.Constant):
            typ = _type_from_name(name)  # %s of a number prints it as str() would: the name tells the type
        else:
            typ = "str"
        out.append(_ph(name, typ))
    out.append(_lit(fmt[pos:]))
    return "".join(out)


def _format_template(fmt: str, args: list[ast.expr], keywords: list[ast.keyword]) -> str:
    out, auto = [], 0
    kw = {k.arg: k.value for k in keywords if k.arg}
    try:
        parsed = list(string.Formatter().parse(fmt))
    except ValueError:
        return _lit(fmt)
    for literal, fname, spec, conv in parsed:
        out.append(_lit(literal))
        if fname is None:
            continue
        base = re.split(r"[.\[]", fname, maxsplit=1)[0]
        if base == "":
            arg = args[auto] if auto < len(args) else None
            auto += 1
        elif base.isdigit():
            idx = int(base)
            arg = args[idx] if idx < len(args) else None
        else:
            arg = kw.get(base)
        name = _expr_name(arg) if arg is not None else _NAME_CLEAN.sub("_", base.lower()) or "value"
        out.append(_ph(name, _type_from_spec(spec or "", conv or "", name)))
    return "".join(out)


def template_of(node: ast.expr, extra_args: list[ast.expr] | None = None) -> str | None:
    """The template of a message expression, or None when it has no literal text to recognise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        if extra_args:  # logger.info("... %s", x): logging formats lazily with %
            return _percent_template(node.value, extra_args)
        return _lit(node.value)
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant) and isinstance(v.value, str):
                parts.append(_lit(v.value))
            elif isinstance(v, ast.FormattedValue):
                name = _expr_name(v.value)
                parts.append(_ph(name, _type_from_spec(_spec_text(v.format_spec), v.conversion if v.conversion != -1 else "", name)))
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str):
        right = node.right
        args = list(right.elts) if isinstance(right, ast.Tuple) else [right]
        return _percent_template(node.left.value, args)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = template_of(node.left), template_of(node.right)
        if left is None and right is None:
            return None
        return (left if left is not None else _ph(_expr_name(node.left), "str")) + (right if right is not None else _ph(_expr_name(node.right), "str"))
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
        and isinstance(node.func.value, ast.Constant)
        and isinstance(node.func.value.value, str)
    ):
        return _format_template(node.func.value.value, list(node.args), list(node.keywords))
    return None


_HAS_WORDS = re.compile(r"[A-Za-z]{3,}")


def normalise(template: str) -> str | None:
    """Whitespace folded the way a log line shows it; None when nothing literal is left to match on."""
    text = " ".join(template.split())
    literal = re.sub(r"\{[a-z_][a-z0-9_]*:(int|float|str)\}", "", text.replace("{{", "").replace("}}", ""))
    if not _HAS_WORDS.search(literal):
        return None
    return text


# --- the walk --------------------------------------------------------------------------------------


def _call_name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _receiver(func: ast.expr) -> str:
    """The dotted receiver of a method call, lower-cased: `logger`, `self.logger`, `logging`."""
    if not isinstance(func, ast.Attribute):
        return ""
    parts = []
    node: ast.expr = func.value
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts)).lower()


def _is_stderr(call: ast.Call) -> bool:
    for k in call.keywords:
        if k.arg == "file":
            return "stderr" in ast.unparse(k.value)
    return False


class _Walker(ast.NodeVisitor):
    def __init__(self) -> None:
        self.stack: list[str] = []  # qualified-name parts
        self.class_stack: list[str] = []
        self.func_stack: list[Function] = []
        self.messages: list[Message] = []
        self.functions: list[Function] = []
        # Per function: names last assigned a string expression (msg = f"..."; raise ValueError(msg)).
        self.assigned: list[dict[str, ast.expr]] = [{}]

    def _qualname(self) -> str:
        return ".".join(self.stack) if self.stack else "<module>"

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.stack.append(node.name)
        self.class_stack.append(node.name)
        self.generic_visit(node)
        self.class_stack.pop()
        self.stack.pop()

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.stack.append(node.name)
        # A method's class is the innermost class directly around it (not one around an outer function).
        cls = self.class_stack[-1] if self.class_stack and len(self.stack) >= 2 and self.stack[-2] == self.class_stack[-1] else ""
        fn = Function(".".join(self.stack), cls)
        self.functions.append(fn)
        self.func_stack.append(fn)
        self.assigned.append({})
        self.generic_visit(node)
        self.assigned.pop()
        self.func_stack.pop()
        self.stack.pop()

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function

    def visit_Assign(self, node: ast.Assign) -> None:
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if template_of(node.value) is not None:
                self.assigned[-1][node.targets[0].id] = node.value
            else:
                self.assigned[-1].pop(node.targets[0].id, None)
        self.generic_visit(node)

    def _add(self, node: ast.expr, level: str, extra: list[ast.expr] | None = None, exception: str = "") -> None:
        if isinstance(node, ast.Name) and node.id in self.assigned[-1]:
            node = self.assigned[-1][node.id]
        tpl = template_of(node, extra)
        if tpl is None:
            return
        tpl = normalise(tpl)
        if tpl is None:
            return
        self.messages.append(Message(tpl, level, self._qualname(), exception))

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = _call_name(func)
        if self.func_stack and name:
            recv = _receiver(func)
            self.func_stack[-1].calls.add(f"self.{name}" if recv == "self" else name)
        recv = _receiver(func)
        if isinstance(func, ast.Attribute) and name in LOG_METHODS and ("log" in recv) and node.args:
            self._add(node.args[0], LOG_METHODS[name], list(node.args[1:]))
        elif isinstance(func, ast.Name) and name in LOG_FUNCTIONS and node.args:
            self._add(node.args[0], LOG_FUNCTIONS[name], list(node.args[1:]))
        elif name == "warn" and recv == "warnings" and node.args:
            self._add(node.args[0], "warning")
        elif isinstance(func, ast.Name) and name == "print" and node.args and _is_stderr(node):
            self._add(node.args[0], "error")
        self.generic_visit(node)

    def visit_Raise(self, node: ast.Raise) -> None:
        exc = node.exc
        if isinstance(exc, ast.Call) and exc.args:
            self._add(exc.args[0], "raise", exception=_call_name(exc.func))
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        if node.msg is not None:
            self._add(node.msg, "raise", exception="AssertionError")
        self.generic_visit(node)


def scan_source(source: bytes, module: str) -> Module | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences in old engine code
            tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    w = _Walker()
    w.visit(tree)
    return Module(module, w.messages, w.functions)


def _module_path(member: str, package: str) -> str | None:
    """Dotted module path of an archive member inside the import package, None for anything else."""
    if not member.endswith(".py"):
        return None
    parts = member.split("/")
    if package not in parts:
        return None
    parts = parts[parts.index(package) :]
    if any(p in {"tests", "test", "benchmarks", "examples"} for p in parts):
        return None
    parts[-1] = parts[-1][:-3]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def iter_sources(archive: Path, package: str) -> Iterator[tuple[str, bytes]]:
    """(module path, source) for each Python file of the package in an sdist or wheel, in name order."""
    seen: set[str] = set()
    if archive.name.endswith((".whl", ".zip")):
        with zipfile.ZipFile(archive) as zf:
            for name in sorted(zf.namelist()):
                mod = _module_path(name, package)
                if mod and mod not in seen:
                    seen.add(mod)
                    yield mod, zf.read(name)
    else:
        with tarfile.open(archive) as tf:
            members = sorted((m for m in tf.getmembers() if m.isfile()), key=lambda m: m.name)
            for m in members:
                mod = _module_path(m.name, package)
                if mod and mod not in seen:
                    f = tf.extractfile(m)
                    if f is not None:
                        seen.add(mod)
                        yield mod, f.read()


def scan_archive(archive: Path, package: str) -> tuple[list[Module], int]:
    """All modules of a release and how many files would not parse with this interpreter."""
    modules, failed = [], 0
    for mod, src in iter_sources(archive, package):
        parsed = scan_source(src, mod)
        if parsed is None:
            failed += 1
        else:
            modules.append(parsed)
    return modules, failed

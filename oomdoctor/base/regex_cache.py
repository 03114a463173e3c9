"""Compiled regular expressions kept across runs: ``compile`` is ``re.compile`` without most of its cost.

Why: a small log's diagnosis uses about 80 of the package's patterns, and CPython's ``re`` parses and
compiles every pattern in pure Python on every start: ~7 ms of a ~35 ms run (issue 15 measures a small
log's start against a bare interpreter's). ``re.compile`` is two steps. The first, in Python, turns
the pattern into a list of integer opcodes (plus its flags and group names). The second,
``_sre.compile``, is C: it checks those opcodes and builds the Pattern, in microseconds. The first
step's output is plain data, so it is kept in one ``disk_cache`` entry, and a later run does only the
second step. The opcodes are kept packed, as the machine's unsigned ints (``CODESIZE`` bytes each),
because ``marshal`` reads a bytes object with one copy and a list with one object per opcode: the
table of ~200 patterns loaded in 1.4 ms as lists and loads in ~0.1 ms packed.

Why it is safe: the entry is named by the interpreter build (``sys.version``, the implementation's
cache tag, byte order, ``_sre.MAGIC`` and ``CODESIZE``), so one Python never reads another's opcodes; ``_sre``
checks every opcode list it is given and refuses a bad one (RuntimeError), and any failure here (no
cache, a damaged entry, PyPy, a Python whose ``re`` internals differ) means ``re.compile``. A pattern
built from the cache compares equal to ``re.compile``'s (CPython compares patterns by flags, text
and opcodes): tests/test_regex_cache.py checks every pattern a diagnosis of each fixture uses.

What this run compiled that the entry lacked is written back once, at exit (``disk_cache.Table``).

Nothing here imports ``re`` until a pattern must be compiled afresh: ``import re`` costs ~4 ms of a
start (it imports enum, functools and collections), a third of what a small log's diagnosis costs.
So the flags callers pass and ``escape`` are here too, with the values and behaviour of ``re``'s
(tests compare them), and a warm start builds every pattern with ``_sre`` alone.
"""

from __future__ import annotations

import sys

from oomdoctor.base import disk_cache

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost); mypy reads this as True
if TYPE_CHECKING:
    import re
    from typing import Any, AnyStr

# re.RegexFlag's values, as plain ints (an int is what _sre takes, and what re.compile accepts).
IGNORECASE = I = 2  # noqa: E741 - the name re gives it
MULTILINE = M = 8
DOTALL = S = 16
VERBOSE = X = 64
DEBUG = 128
ASCII = A = 256

# re.escape's table (CPython 3.7+): a backslash before each of these characters.
_SPECIAL_CHARS = {i: "\\" + chr(i) for i in b"()[]{}?*+-|^$\\.&~# \t\n\r\v\f"}


def escape(pattern: AnyStr) -> AnyStr:
    """``re.escape``: ``pattern`` with every character a regex would read specially escaped."""
    if isinstance(pattern, str):
        return pattern.translate(_SPECIAL_CHARS)
    return str(pattern, "latin1").translate(_SPECIAL_CHARS).encode("latin1")

# Bump when the cached form changes (it is part of the entry's name).
_FORMAT = b"oomdoctor-regex-cache-2"
# A bound on the entry: patterns come from the package (a few hundred) and from rule files a user
# adds; past this, new patterns are compiled every run instead of growing the entry without limit.
MAX_PATTERNS = 4096

_memo: dict[tuple[Any, int], Any] = {}  # this process's compiled patterns
_enabled = sys.implementation.name == "cpython"
if _enabled:
    import _sre  # built into the interpreter: free

    # Packed opcodes are read back as the native unsigned int ("I"): only where that is an opcode's size.
    _enabled = _sre.CODESIZE == 4 and memoryview(bytes(4)).cast("I").itemsize == 4


def _build_id() -> bytes:
    import _sre  # built into the interpreter: free

    return disk_cache.interpreter_build() + f"|{sys.byteorder}|{_sre.MAGIC}|{_sre.CODESIZE}".encode()


# (pattern, flags) -> the arguments _sre.compile takes after the pattern.
TABLE = disk_cache.Table(_FORMAT, _build_id(), limit=MAX_PATTERNS)


def compile(pattern: AnyStr, flags: int = 0) -> re.Pattern[AnyStr]:
    """``re.compile(pattern, flags)``, from the cache when this interpreter compiled it before."""
    flags = int(flags)
    memo_key = (pattern, flags)
    compiled = _memo.get(memo_key)
    if compiled is not None:
        return compiled
    cacheable = _enabled and not flags & DEBUG
    compiled = _from_table(pattern, flags) if cacheable else None
    if compiled is None and cacheable:
        compiled = _build(pattern, flags)
    if compiled is None:
        import re

        compiled = re.compile(pattern, flags)
    _memo[memo_key] = compiled
    return compiled


def _from_table(pattern: Any, flags: int) -> Any:
    args = TABLE.get((pattern, flags))
    if args is None:
        return None
    try:
        import _sre

        flags_out, packed, groups, groupindex, indexgroup = args
        code = memoryview(packed).cast("I").tolist()
        return _sre.compile(pattern, flags_out, code, groups, groupindex, indexgroup)
    except Exception:  # noqa: BLE001 - a damaged or foreign entry: compile it afresh
        return None


def _build(pattern: Any, flags: int) -> Any:
    """Compile as ``re`` does, keeping the opcodes for the cache; None where that cannot be done here."""
    try:
        import _sre

        if sys.version_info >= (3, 11):
            from re import _compiler, _parser
        else:  # pragma: no cover - Python 3.10
            import sre_compile as _compiler
            import sre_parse as _parser
        parsed = _parser.parse(pattern, flags)
        code = _compiler._code(parsed, flags)  # type: ignore[attr-defined]
        groupindex = dict(parsed.state.groupdict)
        indexgroup: list[str | None] = [None] * parsed.state.groups
        for group_name, index in groupindex.items():
            indexgroup[index] = group_name
        # Opcodes are int subclasses (named constants): plain ints for _sre, packed for the entry.
        opcodes = [int(c) for c in code]
        groups = parsed.state.groups - 1
        compiled = _sre.compile(pattern, int(flags | parsed.state.flags), opcodes, groups, groupindex, tuple(indexgroup))
        packed = b"".join(c.to_bytes(_sre.CODESIZE, sys.byteorder) for c in opcodes)
        args = (int(flags | parsed.state.flags), packed, groups, groupindex, tuple(indexgroup))
    except Exception:  # noqa: BLE001 - a syntax error (re.compile words it) or different re internals
        return None
    TABLE.add((pattern, flags), args)
    return compiled

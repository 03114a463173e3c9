"""Compiled regular expressions kept across runs: ``compile`` is ``re.compile`` without most of its cost.

Why: a small log's diagnosis uses about 80 of the package's patterns, and CPython's ``re`` parses and
compiles every pattern in pure Python on every start: ~7 ms of a ~35 ms run (issue 15 measures a small
log's start against a bare interpreter's). ``re.compile`` is two steps. The first, in Python, turns
the pattern into a list of integer opcodes (plus its flags and group names). The second,
``_sre.compile``, is C: it checks those opcodes and builds the Pattern, in microseconds. The first
step's output is plain data, so it is kept in one ``disk_cache`` entry, and a later run does only the
second step.

Why it is safe: the entry is named by the interpreter build (``sys.version``, the implementation's
cache tag, ``_sre.MAGIC`` and ``CODESIZE``), so one Python never reads another's opcodes; ``_sre``
checks every opcode list it is given and refuses a bad one (RuntimeError), and any failure here (no
cache, a damaged entry, PyPy, a Python whose ``re`` internals differ) means ``re.compile``. A pattern
built from the cache compares equal to ``re.compile``'s (CPython compares patterns by flags, text
and opcodes): tests/test_regex_cache.py checks every pattern a diagnosis of each fixture uses.

What this run compiled that the entry lacked is written back once, at exit (``disk_cache.Table``).
"""

from __future__ import annotations

import re
import sys

from oomdoctor import disk_cache

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost); mypy reads this as True
if TYPE_CHECKING:
    from typing import Any, AnyStr

# Bump when the cached form changes (it is part of the entry's name).
_FORMAT = b"oomdoctor-regex-cache-1"
# A bound on the entry: patterns come from the package (a few hundred) and from rule files a user
# adds; past this, new patterns are compiled every run instead of growing the entry without limit.
MAX_PATTERNS = 4096

_memo: dict[tuple[Any, int], Any] = {}  # this process's compiled patterns
_enabled = sys.implementation.name == "cpython"


def _build_id() -> bytes:
    import _sre  # already loaded by re: free

    return disk_cache.interpreter_build() + f"|{_sre.MAGIC}|{_sre.CODESIZE}".encode()


# (pattern, flags) -> the arguments _sre.compile takes after the pattern.
TABLE = disk_cache.Table(_FORMAT, _build_id(), limit=MAX_PATTERNS)


def compile(pattern: AnyStr, flags: int = 0) -> re.Pattern[AnyStr]:
    """``re.compile(pattern, flags)``, from the cache when this interpreter compiled it before."""
    flags = int(flags)
    memo_key = (pattern, flags)
    compiled = _memo.get(memo_key)
    if compiled is not None:
        return compiled
    cacheable = _enabled and not flags & re.DEBUG
    compiled = _from_table(pattern, flags) if cacheable else None
    if compiled is None and cacheable:
        compiled = _build(pattern, flags)
    if compiled is None:
        compiled = re.compile(pattern, flags)
    _memo[memo_key] = compiled
    return compiled


def _from_table(pattern: Any, flags: int) -> Any:
    args = TABLE.get((pattern, flags))
    if args is None:
        return None
    try:
        import _sre

        return _sre.compile(pattern, *args)
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
        # Opcodes are int subclasses (named constants), which marshal does not store: plain ints.
        args = (int(flags | parsed.state.flags), [int(c) for c in code], parsed.state.groups - 1, groupindex, tuple(indexgroup))
        compiled = _sre.compile(pattern, *args)
    except Exception:  # noqa: BLE001 - a syntax error (re.compile words it) or different re internals
        return None
    TABLE.add((pattern, flags), args)
    return compiled

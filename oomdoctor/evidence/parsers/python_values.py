"""One value of a Python repr, as the engines print their arguments (SGLang's ``ServerArgs(...)``, vLLM's
engine config and ``non-default args`` dict), read as a Python value.

The parsers capture each ``key=value`` with their own patterns (a full parse fails on real pastes:
some fields have reprs that do not parse, and hard wraps break the expression), then read the value
here. ``ast.literal_eval`` is the definition; the common forms are read without it, because importing
ast costs every start ~1 ms (issue 15).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

_CONSTANTS = {"True": True, "False": False, "None": None}
# In a quoted value, what literal_eval reads differently from the text (escapes) or refuses (a null byte,
# a line break inside the quotes).
_NEEDS_AST = re.compile(r"[\\\x00\r\n]")
_INT_RE = re.compile(r"[+-]?(?:0|[1-9][0-9]*)")
_FLOAT_RE = re.compile(r"[+-]?(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?[0-9]+[eE][+-]?[0-9]+")


def python_value(raw: str) -> Any:
    """``ast.literal_eval(raw)``, or ``raw`` itself where that raises.

    The common forms (a constant, a quoted text without escapes, a plain number, a bare name such as
    ``auto``, which is no literal) are read here; the rest (escapes, ``0x10``, ``1_000``, a dict or a
    list) goes to ast. tests/test_evidence_parsers_python_values.py checks both agree.
    """
    if raw in _CONSTANTS:
        return _CONSTANTS[raw]
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"" and not _NEEDS_AST.search(raw) and raw[0] not in raw[1:-1]:
        return raw[1:-1]
    if _INT_RE.fullmatch(raw):
        return int(raw)
    if _FLOAT_RE.fullmatch(raw):
        return float(raw)
    if raw[:1].isalpha() or raw[:1] == "_":
        return raw  # a name, not a literal: the text stays, as literal_eval's ValueError left it
    import ast
    import warnings

    try:
        # An invalid escape ('C:\\path' from a log) warns on stderr (DeprecationWarning, SyntaxWarning from
        # 3.12): the value is read as Python reads it, and the warning is not the user's concern.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return raw

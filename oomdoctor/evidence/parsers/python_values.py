"""One value of a Python repr, as the engines print their arguments (SGLang's ``ServerArgs(...)``, vLLM's
engine config and ``non-default args`` dict), read as a Python value.

The parsers capture each ``key=value`` with their own patterns (a full parse fails on real pastes:
some fields have reprs that do not parse, and hard wraps break the expression), then read the value
here with ``ast.literal_eval``.
"""

from __future__ import annotations

import ast
import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any


def python_value(raw: str) -> Any:
    """``ast.literal_eval(raw)``, or ``raw`` itself where that raises (a bare name such as ``auto`` is no literal)."""
    try:
        # An invalid escape ('C:\\path' from a log) warns on stderr (DeprecationWarning, SyntaxWarning from
        # 3.12): the value is read as Python reads it, and the warning is not the user's concern.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.literal_eval(raw)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return raw

"""JSON text as ``json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False)`` writes it, without importing json.

Why: ``import json`` costs ~1.3 ms of a small log's ~28 ms ``diagnose --format json`` (issue 15 holds
that start to 3x a bare interpreter's): json's decoder and encoder compile six regular expressions in
pure Python when imported, and the ``_json`` accelerator is a shared library to load. With ``indent``
set, ``json.dumps`` runs its pure-Python encoder anyway, so this one is no slower. What it writes is
checked byte for byte against ``json.dumps`` (tests/test_json_text.py, hypothesis), including control
characters, lone surrogates, NaN and the infinities, non-string keys and int/float subclasses.

One difference: a structure that contains itself is a RecursionError here, ValueError in json; the
view model is a tree built fresh for each report.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost); mypy reads this as True
if TYPE_CHECKING:
    from typing import Any

INDENT = "  "

# ensure_ascii=False escapes only the quote, the backslash and the C0 controls (named ones short, others \u00XX).
_ESCAPES = {c: f"\\u{c:04x}" for c in range(0x20)}
_ESCAPES.update({0x22: '\\"', 0x5C: "\\\\", 0x08: "\\b", 0x0C: "\\f", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"})


def dumps(obj: Any) -> str:
    """``json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False)``; TypeError for what JSON cannot hold."""
    out: list[str] = []
    _encode(obj, out, "\n")
    return "".join(out)


def _string(text: str) -> str:
    return '"' + text.translate(_ESCAPES) + '"'


def _float(x: float) -> str:
    if x != x:
        return "NaN"
    if x == float("inf"):
        return "Infinity"
    if x == -float("inf"):
        return "-Infinity"
    return float.__repr__(x)


def _scalar(o: Any) -> str | None:
    """The text of a JSON scalar, or None for a container (or something JSON cannot hold)."""
    if isinstance(o, str):
        return _string(o)
    if o is None:
        return "null"
    if o is True:
        return "true"
    if o is False:
        return "false"
    if isinstance(o, int):
        return int.__repr__(o)  # an IntEnum member is its number, as json writes it
    if isinstance(o, float):
        return _float(o)
    return None


def _key(k: Any) -> str:
    """A key as json writes it: a string as itself, a number, bool or None as its scalar text, quoted."""
    if isinstance(k, str):
        return _string(k)
    text = _scalar(k)
    if text is None:
        raise TypeError(f"keys must be str, int, float, bool or None, not {k.__class__.__name__}")
    return '"' + text + '"'


def _encode(o: Any, out: list[str], newline: str) -> None:
    """Append ``o``'s text; ``newline`` is the line break and indentation of the level ``o`` sits on."""
    text = _scalar(o)
    if text is not None:
        out.append(text)
        return
    inner = newline + INDENT
    if isinstance(o, (list, tuple)):
        if not o:
            out.append("[]")
            return
        separator = "[" + inner
        for item in o:
            out.append(separator)
            _encode(item, out, inner)
            separator = "," + inner
        out.append(newline + "]")
        return
    if isinstance(o, dict):
        if not o:
            out.append("{}")
            return
        separator = "{" + inner
        for k, v in sorted(o.items()):
            out.append(separator + _key(k) + ": ")
            _encode(v, out, inner)
            separator = "," + inner
        out.append(newline + "}")
        return
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")

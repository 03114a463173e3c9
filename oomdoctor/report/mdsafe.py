"""Text from a log made safe for one cell of a GitHub-flavoured Markdown table.

A server log is untrusted: a model path, GPU name or process name can carry ``|`` (a new column),
a newline (a new row, or the end of the table), ``</details>`` (closing the summary's fold early) or
``<img src=...>`` (an image fetched by everyone who opens the issue). In a cell, HTML specials become
entities, Markdown punctuation is backslash-escaped, line breaks become spaces and control and
bidirectional-override characters are dropped, so the cell renders as the literal text.
"""

from __future__ import annotations

import re

# HTML specials first (entities), then the punctuation that starts Markdown inline syntax.
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}
_MD_PUNCT = frozenset("\\`*_[]|~!#$")
# C0/C1 controls (tab kept) and the Unicode bidi overrides/isolates that reorder what a reader sees.
_INVISIBLE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_BREAKS = re.compile(r"\r\n|[\r\n\u2028\u2029\x85]")


def escape_markdown_cell(text: object) -> str:
    """``text`` as one table cell: no HTML, no Markdown syntax, no column or row break."""
    s = _BREAKS.sub(" ", str(text))
    s = _INVISIBLE.sub("", s)
    out = []
    for ch in s:
        if ch in _ENTITIES:
            out.append(_ENTITIES[ch])
        elif ch in _MD_PUNCT:
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def escape_markdown_html(text: object) -> str:
    """Prose from a log (a summary, a message) with its HTML made literal; Markdown emphasis is left alone.

    Enough to stop ``</details>`` or ``<img>`` from acting, while keeping a sentence readable.
    """
    s = _INVISIBLE.sub("", str(text))
    return "".join(_ENTITIES.get(ch, ch) for ch in s)

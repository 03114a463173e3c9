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


# Tokens GitHub turns into something live in prose: a mention notifies a user or team, a reference
# cross-links (and back-links from) another issue, a URL or e-mail becomes a link. In a code span they
# are inert text, so each is written as one; everything around them is escaped as in a cell.
_LIVE_TOKEN = re.compile(
    r"(?:https?|ftp|file)://\S+|\bwww\.\S+|[\w.+-]+@[\w-]+(?:\.[\w-]+)+"
    r"|(?<!\w)@[A-Za-z0-9][\w.-]*(?:/[\w.-]+)?"
    r"|(?:\b[\w.-]+/[\w.-]+)?#\d+\b|\bGH-\d+\b",
    re.I,
)


def code_span(text: object, in_table: bool = False) -> str:
    """``text`` as one inline code span it cannot close: a backtick run longer than any inside it.

    ``in_table``: the span sits in a table cell, where GFM splits on ``|`` even inside code (``\\|`` is kept).
    """
    s = _INVISIBLE.sub("", _BREAKS.sub(" ", str(text)))
    if in_table:
        s = s.replace("|", "\\|")
    longest = max((len(m) for m in re.findall(r"`+", s)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if s.startswith(("`", " ")) or s.endswith(("`", " ")) or not s.strip() else ""
    return f"{ticks}{pad}{s}{pad}{ticks}"


def code_fence(body: str, lang: str = "text") -> str:
    """``body`` as a fenced block it cannot close: a fence longer than any backtick run inside it."""
    longest = max((len(m) for m in re.findall(r"`+", body)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{body}\n{ticks}"


def escape_markdown_prose(text: object, in_table: bool = False) -> str:
    """Text from a log (or a sentence quoting it) written into Markdown prose, rendering as itself.

    No HTML, no Markdown syntax (emphasis, links, images, headings), no line break; and no live
    ``@mention``, ``#123`` cross-link, URL or e-mail link: those are written as code spans.
    """
    s = _INVISIBLE.sub("", _BREAKS.sub(" ", str(text)))
    out: list[str] = []
    pos = 0
    for m in _LIVE_TOKEN.finditer(s):
        out.append(escape_markdown_cell(s[pos : m.start()]))
        out.append(code_span(m.group(0), in_table=in_table))
        pos = m.end()
    out.append(escape_markdown_cell(s[pos:]))
    return "".join(out)

"""A bug report (markdown body or an issue's JSON export) read as a log: the stream transform.

Small inputs whose text is an issue body are replaced by the body's log lines in place (prose
blanked, oomdoctor.input.issue_body.log_lines) before scanning, and the facts the reporter states come back
as events of kind KIND_REPORTED. Anything else streams through unchanged.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from oomdoctor.base.evidence import Event, LineRef
from oomdoctor.base.limits import chained, take_head, whole_if_small

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

KIND_REPORTED = "reported_fact"
# An issue body to triage is small; larger inputs are logs and stream as they are.
ISSUE_MAX_BYTES = 4 << 20
_ISSUE_SUFFIXES = (".md", ".markdown", ".mdown")
# A superset of issue_body._DETAILS_OPEN_RE's matches (same flags, no \b).
_DETAILS_RE = re.compile(r"<details", re.I)


_NOT_JSON = object()
_EXPORT_START = re.compile(r"\s*(?:\{|\[\s*\{)")


def _parsed_json(text: str) -> object:
    """``text`` parsed as JSON, or _NOT_JSON; parsed once here, since an export can be megabytes."""
    # An export is an object or a list of objects (issue_body.thread_markdown): "[2025-01-01 ..." or
    # "[rank0]: ..." starts many logs and is never one, so such a text is not handed to the JSON parser.
    if not _EXPORT_START.match(text):
        return _NOT_JSON
    import json  # only for a text that starts like JSON

    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return _NOT_JSON


_HEAD_BYTES = 65536


def _may_be_markdown_issue(text: str, path: str) -> bool:
    """False only when issue_body cannot take ``text`` for a markdown bug report: keeps issue_body off a plain log's start.

    A markdown report needs a fence (``` or ~~~) or a <details> tag (issue_body.looks_like_issue), so a head
    without either character sequence is a log.
    """
    if path.lower().endswith(_ISSUE_SUFFIXES):
        return True
    head = text[:_HEAD_BYTES]
    return "```" in head or "~~~" in head or ("<" in head and _DETAILS_RE.search(head) is not None)


def issue_chunks(chunks: Iterable[bytes], path: str, display: str, on_issue: Callable[[list[Event]], None]) -> Iterator[bytes]:
    """Yield the chunks, or, when they hold an issue body, its log lines (and report its stated facts)."""
    # Only a text that starts like JSON or whose head may be markdown is held whole and read here; a
    # log (most inputs) is decoded only as far as its first _HEAD_BYTES characters (at most 4 bytes each)
    # and streams on as it came.
    first, more = take_head(chunks, 4 * _HEAD_BYTES)
    start = first[0] if first and (len(first) == 1 or len(first[0]) >= 4 * _HEAD_BYTES) else b"".join(first)
    head = start[: 4 * _HEAD_BYTES].decode("utf-8", "replace")[:_HEAD_BYTES]
    if not _EXPORT_START.match(head) and not _may_be_markdown_issue(head, path):
        yield from first
        yield from more
        return
    data, rest = whole_if_small(chained(first, more), ISSUE_MAX_BYTES)
    if data is None:
        yield from rest
        return
    text = data.decode("utf-8", "replace")
    parsed = _parsed_json(text)
    from oomdoctor.input import issue_body

    markdown = issue_body.thread_markdown(parsed) if parsed is not _NOT_JSON else None
    if markdown is None and (path.lower().endswith(_ISSUE_SUFFIXES) or issue_body.looks_like_issue(text)):
        markdown = text
    if markdown is None:
        yield data
        return
    evidence = issue_body.read(markdown)
    on_issue([Event(KIND_REPORTED, (LineRef(display, r.line, None, r.text),), {"name": r.name, "value": r.value}) for r in evidence.reported])
    yield ("\n".join(evidence.log) + "\n").encode("utf-8")

"""Evidence completeness (DESIGN §2.1): is the failure record whole, cut, or a lone quoted message?

``complete``: the failure record is whole. ``incomplete``: the input stops inside the record (a
traceback without its exception line, "... hit an exception:" with nothing after it) or the paste
says it was cut. ``fragment``: a quoted message with next to no log around it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from oomdoctor.base.evidence import Event, LineRef
from oomdoctor.input.files import STREAM_CUT_PREFIX

if TYPE_CHECKING:
    from collections.abc import Sequence

# Lines a record may end before the end of the input and still be "where the input stops": the
# source line under the last frame, a caret line, a blank line or a closing code fence.
_TAIL_SLACK_LINES = 4
# Engine lines that announce a failure whose cause (a traceback, an exception line) follows them.
_FAILURE_HEADERS = frozenset({"vllm_engine_failed", "scheduler_exception"})
# A fragment is a message quoted with at most this many lines in all (a handful of wrapped lines).
_FRAGMENT_MAX_LINES = 12


class Completeness(NamedTuple):
    status: str  # complete | incomplete | fragment
    reason: str = ""
    ref: LineRef | None = None
    # A failure record was opened and not finished: a crash is evident, its cause is not.
    record_open: bool = False

    @property
    def incomplete(self) -> bool:
        return self.status == "incomplete"

    def to_json(self) -> dict[str, str]:
        return {"status": self.status, "reason": self.reason}


# How far above an engine's failure header its cause may end: the worker's own error, then the executor's notice.
_CAUSE_ABOVE_LINES = 3


def lines_after(line: int, total_lines: int, pieces: Sequence[int] = ()) -> int:
    """Lines of the input after ``line``, not counting a hard wrap's pieces (blank lines now, oomdoctor/input/unwrap.py)."""
    if not pieces:
        return total_lines - line
    from bisect import bisect_right  # a hard-wrapped paste only

    return total_lines - line - (len(pieces) - bisect_right(pieces, line))


def open_record_at_end(records: list[Event], total_lines: int, pieces: Sequence[int] = ()) -> Event | None:
    """The record the input stops inside of, if any."""
    for r in reversed(records):
        if not r.get("complete") and lines_after(r.get("last_line", 0), total_lines, pieces) <= _TAIL_SLACK_LINES:
            return r
    return None


def assess(
    events: list[Event], records: list[Event], cuts: list[Event], total_lines: int, oom_decided: bool, engine_events: int, pieces: Sequence[int] = ()
) -> Completeness:
    """Completeness of one run's evidence.

    ``oom_decided``: a whole OOM message or an engine verdict line is evident (the class does not
    hang on what was cut). ``engine_events``: events other than the failure itself (startup lines,
    context), to tell a fragment from a log. ``pieces``: sorted line numbers of a hard wrap's pieces.
    """
    cut_record = open_record_at_end(records, total_lines, pieces)
    if cut_record is not None:
        if cut_record.get("opened_by") == "hit_exception" and not cut_record.get("frames"):
            reason = f"'{cut_record.ref.text.strip()[:80]}' at line {cut_record.ref.line} with nothing after it"
        else:
            reason = f"the input stops inside a traceback (from line {cut_record.ref.line}) before its exception line"
        return Completeness("incomplete", reason, cut_record.ref, record_open=True)
    cut_inside = records[-1] if records and not records[-1].get("complete") and not oom_decided else None
    if cut_inside is not None:
        # Python always ends a traceback with its exception line, so a last record that never reached one was cut by
        # whoever pasted it: a traceback's first frames, then the server's log (or the command) pasted below them.
        if cut_inside.get("frames"):
            where = f"the traceback from line {cut_inside.ref.line} (its last frame at line {cut_inside.get('last_line')})"
        else:
            where = f"'{cut_inside.ref.text.strip()[:80]}' at line {cut_inside.ref.line}"
        reason = f"{where} has no exception line, and the paste goes on with other text"
        return Completeness("incomplete", reason, cut_inside.ref, record_open=True)
    header = next((e for e in reversed(events) if e.kind in _FAILURE_HEADERS), None)
    # A whole record that ended just above the header is its cause ("Failed: Cuda error ... 'invalid argument'",
    # then "Worker proc VllmWorker-0 died unexpectedly"): nothing is missing then.
    cause_above = header is not None and any(r.get("complete") and 0 <= header.ref.line - r.get("last_line", 0) <= _CAUSE_ABOVE_LINES for r in records)
    if header is not None and not oom_decided and not cause_above and lines_after(header.ref.line, total_lines, pieces) <= _TAIL_SLACK_LINES and not any(r.ref.line >= header.ref.line for r in records) and not any(
        e.ref.line > header.ref.line and e.kind != "context_line" for e in events
    ):
        # "EngineCore failed to start." and then nothing: the failure began, its cause is cut off.
        return Completeness("incomplete", f"the engine reported a failure at line {header.ref.line} and the input stops before its cause", header.ref, record_open=True)
    if cuts and not oom_decided:
        c = cuts[-1]
        if str(c.get("text")).startswith(STREAM_CUT_PREFIX):
            # The input layer's own marker (oomdoctor/input/files.py): a compressed stream stops there.
            return Completeness("incomplete", f"the input is cut at line {c.ref.line}: its compressed stream is truncated or damaged there", c.ref)
        return Completeness("incomplete", f"the paste was cut at line {c.ref.line} ('{c.get('text')}')", c.ref)
    if total_lines == 0 and any(e.get("source") == "capture_observer" for e in events):
        return Completeness("fragment", "the capture hook's record of the OOM alone: no input holds the message, the traceback or the server's log")
    content_lines = total_lines - len(pieces)
    if content_lines <= _FRAGMENT_MAX_LINES and engine_events == 0:
        return Completeness("fragment", f"a quoted message of {content_lines} line(s) without the log around it")
    return Completeness("complete")

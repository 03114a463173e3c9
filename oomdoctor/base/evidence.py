"""Typed evidence: what parsers emit, each item citing the log line it came from."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from typing import Any

# The event that stands for occurrences of a repeating kind left out to bound memory; its values are
# {"kind": the kind, "dropped": how many were left out, "total": how many were read}.
KIND_REPEATS = "repeats"


class LineRef(NamedTuple):
    """Where a piece of evidence was read: input path, 1-based line number, rank tag, text."""

    path: str
    line: int
    rank: str | None = None
    text: str = ""
    ts: str | None = None
    node: str | None = None  # the node the line's prefix names, split once by the scanner

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "rank": self.rank, "text": self.text}


class Line(NamedTuple):
    """One log line after prefix stripping: the message, its rank and timestamp, and its origin."""

    ref: LineRef
    msg: str
    ts: str | None = None
    anchored: bool = True  # False for a context line read only because it follows an anchor
    system: str | None = None  # the serving system the line's prefix style belongs to, if any
    node: str | None = None  # the node a multiplexing prefix names (kubectl --prefix, srun -l, Ray ip=)
    # Of an anchored line, one bit per anchor of the scan it holds (bit i: the scan's i-th anchor; -1:
    # not known, every bit): which parsers it is for.
    anchors: int = -1
    # A line of a repeating kind read after the lines that follow it (input/scan.py Reading): it has
    # no place in a parser's sequence of lines, so it is read as a line on its own.
    replayed: bool = False


class Event(NamedTuple):
    """One recognised log event.

    ``kind`` names the event (see the KIND_* constants of each parser); ``values`` holds its numbers
    (sizes always as ``*_bytes`` ints) and strings. ``refs`` lists every line the event was read from
    (a wrapped message spans several).
    """

    kind: str
    refs: tuple[LineRef, ...]
    values: dict[str, Any]

    @property
    def ref(self) -> LineRef:
        return self.refs[0]

    @property
    def rank(self) -> str | None:
        return self.refs[0].rank

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


class ProcessUsage(NamedTuple):
    """A "Process N has X memory in use" entry of a PyTorch OOM message."""

    pid: int | None
    used_bytes: int
    is_self: bool


class Unavailable(NamedTuple):
    """Evidence that could not be had, with the reason; never NaN, never an exception."""

    reason: str

    def __bool__(self) -> bool:
        return False

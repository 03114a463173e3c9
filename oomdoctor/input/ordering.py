"""Newest-first console exports (some web consoles and log viewers export the latest line first).

Every later step reads a log oldest first: run segmentation, the phase from the lines *before* a
failure, the cut record at the *end*. A small input whose timestamps mostly decrease is reversed
before scanning, and the input says so. Large inputs stream as they are (an export to paste is small).
"""

from __future__ import annotations

import itertools
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

# At least this many timestamped lines, and this share of decreasing steps between them.
_MIN_STAMPS = 5
_DECREASING_SHARE = 0.8

_STAMP_RE = re.compile(
    rb"(?:^|[\s\[(])(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)"  # ISO-ish date and time
    rb"|(?:^|\s)(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) (\d{2}-\d{2} \d{2}:\d{2}:\d{2})"  # vLLM's MM-DD HH:MM:SS
)


def _stamps(lines: list[bytes]) -> list[bytes]:
    out = []
    for line in lines:
        m = _STAMP_RE.search(line[:200])
        if m:
            out.append((m.group(1) or m.group(2)).replace(b"T", b" ").replace(b",", b"."))
    return out


def is_newest_first(data: bytes) -> bool:
    """Whether the timestamped lines of ``data`` mostly go back in time."""
    stamps = _stamps(data.splitlines())
    if len(stamps) < _MIN_STAMPS:
        return False
    steps = [(a, b) for a, b in itertools.pairwise(stamps) if a != b]
    if not steps:
        return False
    down = sum(1 for a, b in steps if b < a)
    return down / len(steps) >= _DECREASING_SHARE


def oldest_first(data: bytes, on_reversed: Callable[[], None]) -> bytes:
    """``data`` as it is, or reversed line by line when it is a newest-first export."""
    if data and is_newest_first(data):
        on_reversed()
        lines = data.splitlines(keepends=True)
        if lines and not lines[-1].endswith(b"\n"):
            lines[-1] += b"\n"
        return b"".join(reversed(lines))
    return data

"""The repairs a pasted excerpt gets before it is scanned, in one buffer.

A paste is small; a server's own log file is not. An input up to PASTE_MAX_BYTES is held whole and
put back the way the program printed it: a newest-first console export read oldest first
(ordering.py), an indent over the whole paste removed (indentation.py), a terminal's hard wrap
joined (unwrap.py), in that order (the wrap happened first, so it is undone last). A larger input
streams on untouched, with at most PASTE_MAX_BYTES held while that is decided. Each repair that
applies calls its note, so the input says what was done to it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from oomdoctor.indentation import dedent
from oomdoctor.limits import whole_if_small
from oomdoctor.ordering import oldest_first
from oomdoctor.unwrap import unwrap

PASTE_MAX_BYTES = 8 << 20


def repaired(
    chunks: Iterable[bytes],
    on_reversed: Callable[[], None],
    on_dedent: Callable[[int], None],
    on_unwrap: Callable[[int, tuple[int, ...]], None],
) -> Iterator[bytes]:
    """Pass chunks through; a small input is yielded once, repaired."""
    data, rest = whole_if_small(chunks, PASTE_MAX_BYTES)
    if data is None:
        yield from rest
        return
    yield unwrap(dedent(oldest_first(data, on_reversed), on_dedent), on_unwrap)

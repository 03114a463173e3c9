"""The repairs a pasted excerpt gets before it is scanned, in one buffer.

A paste is small; a server's own log file is not. An input up to PASTE_MAX_BYTES is held whole and
put back the way the program printed it, undoing the damage in the reverse of the order it was done:
the indent over the whole paste, added when it was posted, is removed first (indentation.py); then
the terminal's hard wrap, made as the lines were shown, is joined (unwrap.py); then a newest-first
console export is read oldest first (ordering.py: the console showed the lines newest first, and
each line's pieces in reading order). A larger input
streams on untouched, with at most PASTE_MAX_BYTES held while that is decided. Each repair that
applies calls its note, so the input says what was done to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomdoctor.base.limits import whole_if_small
from oomdoctor.input.indentation import dedent
from oomdoctor.input.ordering import oldest_first
from oomdoctor.input.unwrap import unwrap

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

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
    wraps: list[tuple[int, tuple[int, ...]]] = []
    data = unwrap(dedent(data, on_dedent), lambda width, pieces: wraps.append((width, pieces)))
    turned: list[bool] = []
    data = oldest_first(data, lambda: turned.append(True))
    if turned:
        on_reversed()
    if wraps:
        width, pieces = wraps[0]
        if turned:
            # The pieces' numbers as the scan will count them: line k of n is line n - k + 1 now.
            n = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
            pieces = tuple(sorted(n - k + 1 for k in pieces))
        on_unwrap(width, pieces)
    yield data

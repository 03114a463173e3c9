"""The repairs a pasted excerpt gets before it is scanned, in one buffer.

A paste is small; a server's own log file is not. An input up to PASTE_MAX_BYTES is held whole and
put back the way the program printed it, undoing the damage in the reverse of the order it was done:
the indent over the whole paste, added when it was posted, is removed first (indentation.py); then a
console handler's columns are joined into the lines the program logged (columns.py); then the terminal's hard
wrap, made as the lines were shown, is joined (unwrap.py); then a newest-first
console export is read oldest first (ordering.py: the console showed the lines newest first, and
each line's pieces in reading order). A larger input
streams on untouched, with at most PASTE_MAX_BYTES held while that is decided. Each repair that
applies calls its note, so the input says what was done to it.

The repairs read every line (~18 ms/MB, more than the scan that follows), so only an input up to
PASTE_HEAD_BYTES (every pasted excerpt of the corpus is far smaller) is always read by them. A larger
one, up to PASTE_MAX_BYTES (a log file copied whole, a rank's or a rotated file), is repaired whole
only when its head (its first HEAD_SAMPLE_BYTES) shows the damage: an indent on every line, a console
handler's columns, a hard wrap, newest-first order; else it streams as it came, as a server's own file does. Pasted damage is
on every line, so the head shows it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomdoctor.base.limits import chained, take_head, whole_if_small
from oomdoctor.input.columns import join_columns
from oomdoctor.input.indentation import dedent
from oomdoctor.input.ordering import is_newest_first, oldest_first
from oomdoctor.input.unwrap import unwrap

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

PASTE_MAX_BYTES = 8 << 20
PASTE_HEAD_BYTES = 64 << 10
# Of a larger input, the head read for damage: its whole lines within these bytes (the wrap test reads
# each), and of them the first HEAD_ORDER_LINES for the order (the order test reads each line's time).
HEAD_SAMPLE_BYTES = 16 << 10
HEAD_ORDER_LINES = 100


def _ignore(*_: object) -> None:
    return None


def _head_damaged(data: bytes) -> bool:
    """Whether the head of ``data`` (its whole lines within HEAD_SAMPLE_BYTES) needs one of the repairs."""
    cut = data.rfind(b"\n", 0, HEAD_SAMPLE_BYTES)
    head = data[: cut + 1] if cut >= 0 else data[:HEAD_SAMPLE_BYTES]
    if dedent(head, _ignore) is not head or join_columns(head, _ignore) is not head or unwrap(head, _ignore) is not head:
        return True
    end = 0
    for _ in range(HEAD_ORDER_LINES):
        end = head.find(b"\n", end) + 1
        if end == 0:
            end = len(head)
            break
    return is_newest_first(head[:end])


def repaired(
    chunks: Iterable[bytes],
    on_reversed: Callable[[], None],
    on_dedent: Callable[[int], None],
    on_unwrap: Callable[[int, tuple[int, ...]], None],
    on_columns: Callable[[int, tuple[int, ...]], None] = _ignore,
) -> Iterator[bytes]:
    """Pass chunks through; a small input is yielded once, repaired."""
    head, more = take_head(chunks, PASTE_HEAD_BYTES)
    if sum(map(len, head)) > PASTE_HEAD_BYTES and not _head_damaged(head[0] if len(head[0]) > PASTE_HEAD_BYTES else b"".join(head)):
        # Read as it is, as it came: not held whole (nor copied into one buffer) while that is decided.
        yield from head
        yield from more
        return
    data, rest = whole_if_small(chained(head, more), PASTE_MAX_BYTES)
    if data is None:
        yield from rest
        return
    wraps: list[tuple[int, tuple[int, ...]]] = []
    columns: list[tuple[int, tuple[int, ...]]] = []
    data = dedent(data, on_dedent)
    data = join_columns(data, lambda records, pieces: columns.append((records, pieces)))
    data = unwrap(data, lambda width, pieces: wraps.append((width, pieces)))
    turned: list[bool] = []
    data = oldest_first(data, lambda: turned.append(True))
    if turned:
        on_reversed()
    n = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)

    def as_scanned(pieces: tuple[int, ...]) -> tuple[int, ...]:
        # The pieces' numbers as the scan will count them: line k of n is line n - k + 1 when the paste was turned.
        return tuple(sorted(n - k + 1 for k in pieces)) if turned else pieces

    if columns:
        on_columns(columns[0][0], as_scanned(columns[0][1]))
    if wraps:
        on_unwrap(wraps[0][0], as_scanned(wraps[0][1]))
    yield data

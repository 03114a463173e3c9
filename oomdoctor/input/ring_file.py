"""A file kept as a head and a ring of its last bytes: reading the ring back from its first whole line."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import BinaryIO

# Bytes per read when scanning a ring for its first newline.
BLOCK_BYTES = 1 << 20


def first_line_end(f: BinaryIO, spans: list[tuple[int, int]]) -> int:
    """Bytes of ``spans`` of ``f`` up to and including their first newline (0 when none, or when it is the last byte)."""
    total = sum(size for _, size in spans)
    seen = 0
    for offset, size in spans:
        for at in range(offset, offset + size, BLOCK_BYTES):
            f.seek(at)
            block = f.read(min(BLOCK_BYTES, offset + size - at))
            nl = block.find(b"\n")
            if nl >= 0:
                end = seen + nl + 1
                return end if end < total else 0
            seen += len(block)
    return 0


def spans_after(spans: list[tuple[int, int]], skip: int) -> list[tuple[int, int]]:
    """``spans`` without their first ``skip`` bytes."""
    out: list[tuple[int, int]] = []
    for offset, size in spans:
        cut = min(skip, size)
        skip -= cut
        if size - cut > 0:
            out.append((offset + cut, size - cut))
    return out

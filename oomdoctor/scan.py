"""The scanner: byte chunks to the few lines worth parsing, each with its number and prefixes split.

Most of a large server log is batch statistics. Each chunk is searched once per anchor with
``bytes.find`` (C speed); only lines holding an anchor, plus a few lines after each for messages
that wrap, are decoded and handed to the parsers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from functools import lru_cache

from oomdoctor.evidence import Line, LineRef
from oomdoctor.prefixes import split_prefix, strip_ansi

# Lines after an anchor that are also read: wrapped OOM messages, the multi-line KV allocator
# error ("Try to allocate N tokens." / "Available full tokens: ..."), hard-wrapped server_args.
CONTEXT_LINES = 3

MAX_TEXT_CHARS = 4000

# Lines above a failure line that are also read, for the phase step's context (serving traffic,
# loader or capture progress). Twelve covers a traceback header block and a few log lines.
BEFORE_LINES = 12


@lru_cache(maxsize=8)
def _compiled(anchors: tuple[bytes, ...]):
    """One alternation of every anchor, compiled with RE2 when it is installed.

    RE2 runs the alternation as a DFA, about 450 MB/s here against 35 MB/s for one bytes.find per
    anchor and 60 MB/s for the same alternation in the standard ``re`` (see benchmarks/README.md).
    """
    pattern = b"|".join(re.escape(a) for a in anchors)
    try:
        import re2

        return re2.compile(pattern)
    except ImportError:  # pragma: no cover - exercised where google-re2 has no wheel
        return re.compile(pattern)


def _anchor_line_starts(chunk: bytes, anchors: tuple[bytes, ...], before: frozenset[bytes] = frozenset()) -> tuple[list[int], list[int]]:
    """Starts of the anchored lines, and of those whose preceding lines are wanted as context."""
    starts: list[int] = []
    wants_before: list[int] = []
    last_end = -1
    rfind, find = chunk.rfind, chunk.find
    for m in _compiled(anchors).finditer(chunk):
        pos = m.start()
        if pos <= last_end:
            continue  # another anchor on a line already taken
        start = rfind(b"\n", 0, pos) + 1
        starts.append(start)
        if before and m.group() in before:
            wants_before.append(start)
        last_end = find(b"\n", pos)
    return starts, wants_before


def _cr_segments(physical: bytes, anchors: tuple[bytes, ...]) -> list[bytes]:
    """The parts of a line that carriage returns split (ranks sharing a stderr, progress bars redrawn).

    A terminal shows only the last part, but an OOM printed before a progress bar's ``\\r`` is in an
    earlier one: every part holding an anchor is read, in order, and the last part as the line shown.
    """
    parts = [s for s in physical.rstrip(b"\r").split(b"\r") if s.strip()]
    if not parts:
        return [b""]
    pattern = _compiled(anchors)
    out = [s for s in parts[:-1] if pattern.search(s)]
    out.append(parts[-1])
    return out


def scan_lines(
    chunks: Iterable[bytes], path: str, anchors: tuple[bytes, ...], counter: list[int], before_anchors: tuple[bytes, ...] = ()
) -> Iterator[Line]:
    """Yield the anchored lines (and their context lines) of a stream of whole-line chunks.

    Lines holding one of ``before_anchors`` (failure lines) also bring the BEFORE_LINES lines above
    them (within the chunk): what the server printed just before a failure says which phase it was in.
    ``counter[0]`` is set to the total number of lines seen, for the input report.
    """
    before_set = frozenset(before_anchors)
    base = 0  # lines before this chunk
    pending_context = 0
    last_rank: str | None = None
    for chunk in chunks:
        hits, wants_before = _anchor_line_starts(chunk, anchors, before_set)
        wanted: set[int] = set(hits)
        for start in wants_before:
            pos = start
            for _ in range(BEFORE_LINES):
                if pos <= 0:
                    break
                pos = chunk.rfind(b"\n", 0, pos - 1) + 1
                wanted.add(pos)
        pos = 0
        for _ in range(pending_context):
            if pos >= len(chunk):
                break
            wanted.add(pos)
            pos = chunk.find(b"\n", pos) + 1
        pending_context = 0
        for start in hits:
            pos = chunk.find(b"\n", start) + 1
            for k in range(CONTEXT_LINES):
                if pos >= len(chunk):
                    pending_context = max(pending_context, CONTEXT_LINES - k)
                    break
                wanted.add(pos)
                pos = chunk.find(b"\n", pos) + 1
        hit_set = set(hits)
        prev = 0
        lineno = base + 1  # number of the line that starts at offset `prev`
        for start in sorted(wanted):
            lineno += chunk.count(b"\n", prev, start)
            prev = start
            end = chunk.find(b"\n", start)
            physical = chunk[start:end]
            segments = _cr_segments(physical, anchors) if b"\r" in physical.rstrip(b"\r") else (physical,)
            for segment in segments:
                raw = segment.decode("utf-8", "replace")
                stripped = split_prefix(raw)
                rank = stripped.rank
                if rank is None and stripped.ts is None:
                    # Traceback and message continuation lines carry no prefix of their own; they belong
                    # to the record (and rank) of the last prefixed line.
                    rank = last_rank
                elif stripped.ts is not None or rank is not None:
                    last_rank = rank
                text = strip_ansi(raw).rstrip()
                if len(text) > MAX_TEXT_CHARS:
                    text = text[:MAX_TEXT_CHARS] + "…"
                yield Line(ref=LineRef(path=path, line=lineno, rank=rank, text=text, ts=stripped.ts), msg=stripped.msg, ts=stripped.ts, anchored=start in hit_set, system=stripped.system)
        base += chunk.count(b"\n")
        counter[0] = base

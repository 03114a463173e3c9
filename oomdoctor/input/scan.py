"""The scanner: byte chunks to the few lines worth parsing, each with its number and prefixes split.

Most of a large server log is batch statistics. Each chunk is searched once for every anchor at once
(one multi-literal search); only lines holding an anchor, plus a few lines after each for messages
that wrap, are decoded and handed to the parsers.

The multi-literal search is one of the matchers of ``scan_backends`` (Hyperscan, RE2, ``re`` or
``bytes.find``), chosen per chunk by its size.
"""

from __future__ import annotations

import functools
from collections import deque
from typing import TYPE_CHECKING

from oomdoctor.base.evidence import Line, LineRef
from oomdoctor.input.prefixes import split_prefix, strip_ansi
from oomdoctor.input.scan_backends import ALL, choose, first_per_line

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from typing import Protocol

    # A second reader of the same input (the node step): its own anchors, fed its anchored lines.
    class Side(Protocol):
        @property
        def anchors(self) -> tuple[bytes, ...]: ...

        def feed(self, line: Line) -> None: ...

# Lines after an anchor that are also read: wrapped OOM messages, the multi-line KV allocator
# error ("Try to allocate N tokens." / "Available full tokens: ..."), hard-wrapped server_args.
CONTEXT_LINES = 3

MAX_TEXT_CHARS = 4000

# Of the lines not read, the last ones whose prefixes are read when an unprefixed line needs its rank.
UNREAD_KEPT = 4

# Lines above a failure line that are also read, for the phase step's context (serving traffic,
# loader or capture progress). Twelve covers a traceback header block and a few log lines.
BEFORE_LINES = 12

def _cr_segments(physical: bytes, anchors: tuple[bytes, ...]) -> list[bytes]:
    """The parts of a line that carriage returns split (ranks sharing a stderr, progress bars redrawn).

    A terminal shows only the last part, but an OOM printed before a progress bar's ``\\r`` is in an
    earlier one: every part holding an anchor is read, in order, and the last part as the line shown.
    """
    parts = [s for s in physical.rstrip(b"\r").split(b"\r") if s.strip()]
    if not parts:
        return [b""]
    out = [s for s in parts[:-1] if any(a in s for a in anchors)]
    out.append(parts[-1])
    return out


@functools.cache
def _repeat_bits(anchors: tuple[bytes, ...], repeating: tuple[bytes, ...]) -> tuple[dict[int, int], int]:
    """Each repeating anchor's bit mapped to its index, and their mask: once per process, not once per input
    (the index of every anchor was built for each of 128 rank files)."""
    index = {a: i for i, a in enumerate(anchors)}
    single = {1 << index[a]: index[a] for a in repeating if a in index}
    return single, sum(single)


@functools.cache
def _companions(anchors: tuple[bytes, ...], anchor: int, texts: Callable[[], tuple[bytes, ...]]) -> int:
    """The bits of the anchors that lie in a fixed text holding ``anchor``: built when a line first shows
    one beside it, once per process."""
    # NUL between the texts: no literal holds one, so none is found across two of them.
    own = b"\0".join(text for text in texts() if anchors[anchor] in text)
    return sum(1 << i for i, other in enumerate(anchors) if other in own) if own else 0


class Reading:
    """What the reader of the scanned lines needs of them, so that the scanner reads no more.

    - ``busy()``: whether the reader holds a pending record (a wrapped message, an open traceback): then
      every line after an anchored line is read, as it may continue the record;
    - ``worth(line)``: whether a line after an anchored line (it holds no anchor) may say something by
      itself (a phase's words, a parser's text that needs no anchor); only those are read otherwise;
    - ``repeating``: anchors whose lines repeat for as long as a server runs (a retraction, a
      preemption). A line holding only such anchors is read while fewer than ``keep_first``
      of its anchor were, and the last ``keep_last`` of them before each failure line (one whose first
      anchor is a before-anchor) and at the end of the input (``replayed``: after the lines that follow
      them); the others are only counted (``dropped``), and their following lines are not read. ``texts``
      gives the fixed texts of the repeating messages (asked once a line shows another anchor beside a
      repeating one): an anchor inside one beside its repeating anchor is the message's own word (vLLM's
      preemption warning says "not enough"), so the line still repeats.
    """

    def __init__(
        self,
        anchors: tuple[bytes, ...],
        busy: Callable[[], bool],
        worth: Callable[[bytes], bool],
        repeating: Iterable[bytes] = (),
        keep_first: int = 16,
        keep_last: int = 64,
        texts: Callable[[], tuple[bytes, ...]] = tuple,
    ) -> None:
        self.busy = busy
        self.known_busy: bool | None = None  # busy() since the last line handed over (only a line read changes it)
        self.worth = worth
        self.single, self.repeat_mask = _repeat_bits(anchors, tuple(repeating))
        self.texts = texts
        self.keep_first = keep_first
        self.keep_last = keep_last
        self.seen: dict[int, int] = {}
        self.held: dict[int, deque[tuple[int, bytes]]] = {}
        self.dropped: dict[bytes, int] = {}
        self.anchors = anchors
        # The last lines not read (held or not asked for): their prefixes still name the rank of the
        # unprefixed lines after them, which the scanner reads from them when such a line comes.
        self.unread: deque[bytes] = deque(maxlen=UNREAD_KEPT)
        # Set by the reader on an anchored line it did not read (the repeat of a line that said nothing, every
        # parser idle): the lines after it are not read for it.
        self.said_nothing = False

    def repeat_of(self, first: int, mask: int, physical: bytes) -> int | None:
        """The repeating anchor of a line that holds repeating anchors only (the first of them), or None;
        the anchors of its message's own fixed text are allowed beside it.

        A retraction line holds the SGLang parser's literal and the catalogue's for the same message:
        both repeat, so the line does."""
        if mask == ALL:
            if first not in self.single.values():
                return None
            mask = sum(1 << i for i, a in enumerate(self.anchors) if a in physical)
        ours = mask & self.repeat_mask
        if not ours:
            return None
        anchor = self.single[ours & -ours]
        others = mask & ~self.repeat_mask
        if others and others & ~_companions(self.anchors, anchor, self.texts):
            return None
        return anchor

    def is_busy(self) -> bool:
        """busy(), asked once between two lines handed over: a run of counted lines asks it once."""
        if self.known_busy is None:
            self.known_busy = self.busy()
        return self.known_busy

    def hold(self, anchor: int, lineno: int, physical: bytes) -> bool:
        """Count one line of a repeating anchor; True when it is held (not read now)."""
        n = self.seen.get(anchor, 0) + 1
        self.seen[anchor] = n
        if n <= self.keep_first or self.is_busy():
            return False
        held = self.held.setdefault(anchor, deque())
        if len(held) == self.keep_last:
            held.popleft()
            literal = self.anchors[anchor]
            self.dropped[literal] = self.dropped.get(literal, 0) + 1
        held.append((lineno, physical))
        self.unread.append(physical)
        return True

    def holds_next(self, anchor: int) -> bool:
        """Whether the next line of ``anchor`` would be held by ``hold``; if so it is counted as seen here."""
        n = self.seen.get(anchor, 0)
        if n < self.keep_first or self.is_busy():
            return False
        self.seen[anchor] = n + 1
        return True

    def held_run(self, anchor: int, lines: list[tuple[int, bytes]], skipped: int) -> None:
        """Hold a run of lines of ``anchor`` already counted by holds_next: ``lines``, the run's last ones, after
        ``skipped`` earlier ones (as many calls of ``hold`` would, less the lines it would drop again)."""
        held = self.held.setdefault(anchor, deque())
        evicted = skipped + max(0, len(held) + len(lines) - self.keep_last)
        for _ in range(max(0, len(held) + len(lines) - self.keep_last)):
            held.popleft()
        held.extend(lines)
        if evicted:
            literal = self.anchors[anchor]
            self.dropped[literal] = self.dropped.get(literal, 0) + evicted

    def release(self, anchor: int | None = None) -> list[tuple[int, bytes, int]]:
        """The held lines (of one anchor, or of all), in line order, as (line number, text, anchor bit)."""
        keys = [anchor] if anchor is not None else list(self.held)
        out = [(n, text, 1 << a) for a in keys for n, text in self.held.pop(a, ())]
        out.sort(key=lambda item: item[0])
        return out


@functools.cache
def _before_ids(anchors: tuple[bytes, ...], before_anchors: tuple[bytes, ...]) -> tuple[frozenset[int], int | None]:
    """The indexes of the failure anchors, and their bits (None unless every one is an anchor that cannot hold a
    newline: then a line holds one exactly when its bit is in the line's mask)."""
    ids = frozenset(i for i, a in enumerate(anchors) if a in before_anchors)
    complete = all(a in anchors and b"\n" not in a for a in before_anchors)
    return ids, (sum(1 << i for i in ids) if complete else None)


@functools.cache
def _joined(anchors: tuple[bytes, ...], side: tuple[bytes, ...]) -> tuple[tuple[bytes, ...], dict[int, int]]:
    """Our anchors and then the side's others, for one search; and, of each side anchor's position in it, its index in ``side``."""
    own = set(anchors)
    both = anchors + tuple(a for a in dict.fromkeys(side) if a not in own)
    position = {a: i for i, a in reversed(list(enumerate(both)))}
    return both, {position[a]: j for j, a in reversed(list(enumerate(side)))}


class _Scan:
    """One input's scan: its line numbers, the ranks its prefixes name, and the lines after an anchor still to read."""

    def __init__(
        self, path: str, anchors: tuple[bytes, ...], before_anchors: tuple[bytes, ...], reading: Reading | None, side: Side | None = None
    ) -> None:
        self.path = path
        self.anchors = anchors
        self.before_ids, self.before_mask = _before_ids(anchors, before_anchors)
        self.before_anchors = before_anchors
        self.reading = reading
        self.base = 0  # lines before this chunk
        self.pending_context = 0  # lines after the last chunk's last anchored line, read at this chunk's start
        self.last_rank: dict[str | None, str | None] = {}  # per node (kubectl --prefix, srun -l, Ray ip=)
        self.side = side
        if side is not None:
            # The side's lines as a scan of their own would read them (every anchored line and the
            # CONTEXT_LINES after it, ranks from its own lines), found in the same pass as ours and
            # numbered by the same newline count: the input is read once.
            self.side_scan = _Scan(path, side.anchors, (), None)
            self.side_feed = side.feed
            self.both, self.side_of = _joined(anchors, side.anchors)

    def _segments(self, physical: bytes) -> list[bytes] | tuple[bytes]:
        return _cr_segments(physical, self.anchors) if b"\r" in physical.rstrip(b"\r") else (physical,)

    def _note_rank(self, physical: bytes) -> None:
        for segment in self._segments(physical):
            stripped = split_prefix(segment.decode("utf-8", "replace"))
            if stripped.rank is not None or stripped.program:
                self.last_rank[stripped.node] = stripped.rank

    def lines(self, physical: bytes, lineno: int, anchored: bool, mask: int, replayed: bool = False) -> Iterator[Line]:
        """The Lines of one physical line (one per carriage-return part that matters)."""
        reading = self.reading
        for segment in self._segments(physical):
            raw = segment.decode("utf-8", "replace")
            stripped = split_prefix(raw)
            rank = stripped.rank
            if rank is None and not stripped.program:
                # Traceback and message continuation lines carry no prefix of their own (a collector's
                # timestamp or pod stamps every line); they belong to the record (and rank) of the
                # last line the program prefixed on the same node (pods interleave in one stream).
                if reading is not None and reading.unread and not replayed:
                    while reading.unread:
                        self._note_rank(reading.unread.popleft())
                rank = self.last_rank.get(stripped.node)
            elif not replayed:
                if reading is not None:
                    reading.unread.clear()  # this line's prefix is the last one
                self.last_rank[stripped.node] = rank
            text = strip_ansi(raw).rstrip()
            if len(text) > MAX_TEXT_CHARS:
                text = text[:MAX_TEXT_CHARS] + "…"
            ref = LineRef(path=self.path, line=lineno, rank=rank, text=text, ts=stripped.ts, node=stripped.node)
            yield Line(ref, stripped.msg, stripped.ts, anchored, stripped.system, stripped.node, mask if anchored else 0, replayed)

    def replay(self, held: list[tuple[int, bytes, int]]) -> Iterator[Line]:
        for lineno, physical, mask in held:
            yield from self.lines(physical, lineno, True, mask, replayed=True)
        if held and self.reading is not None:
            self.reading.known_busy = None

    def _holds_before_anchor(self, chunk: bytes, start: int) -> bool:
        """Whether the line at ``start`` holds a failure word after another anchor came first on it
        ("allocating 4514.05 MiB on device 0: cudaMalloc failed: out of memory"): the backends report
        only a line's first anchor, and a failure line is one whatever it names before the words."""
        end = chunk.find(b"\n", start)
        line = chunk[start : end if end >= 0 else len(chunk)]
        return any(a in line for a in self.before_anchors)

    def _before(self, chunk: bytes, found: list[tuple[int, int, int]]) -> set[int]:
        """The starts of the BEFORE_LINES lines above each failure line of ``chunk``."""
        before: set[int] = set()
        before_ids, before_mask = self.before_ids, self.before_mask
        for start, first, mask in found:
            if first not in before_ids:
                # A backend that reports every anchor of a line has its failure words' bits already.
                if mask == ALL or before_mask is None:
                    if not self._holds_before_anchor(chunk, start):
                        continue
                elif not mask & before_mask:
                    continue
            pos = start
            for _ in range(BEFORE_LINES):
                if pos <= 0:
                    break
                pos = chunk.rfind(b"\n", 0, pos - 1) + 1
                before.add(pos)
        return before

    def _after(self, chunk: bytes, pos: int, n: int, context: deque[int], carry: bool = True) -> None:
        """Queue the starts of up to ``n`` lines from ``pos``; with ``carry``, those past the chunk are read
        at the next one's start."""
        for k in range(n):
            if pos >= len(chunk):
                if carry:
                    self.pending_context = max(self.pending_context, n - k)
                return
            context.append(pos)
            nl = chunk.find(b"\n", pos)
            if nl < 0:
                return
            pos = nl + 1

    def _anchored(self, physical: bytes, lineno: int, first: int, mask: int) -> tuple[bool, list[tuple[int, bytes, int]]]:
        """Whether an anchored line is read now, and the held lines to read before it."""
        reading = self.reading
        if reading is None:
            return True, []
        repeat = reading.repeat_of(first, mask, physical) if reading.single else None
        if repeat is not None and reading.hold(repeat, lineno, physical):
            return False, []
        if repeat is not None or first in self.before_ids:
            # Held lines are read before a failure (the phase step reads what came just before it) and
            # before a read line of their own anchor (its occurrences stay in line order).
            return True, reading.release(repeat if first not in self.before_ids else None)
        return True, []

    def _found(self, chunk: bytes) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]]:
        """Our anchored lines of ``chunk``, and the side's (empty without a side)."""
        if self.side is None:
            return choose(self.anchors, len(chunk)).anchored_lines(chunk), []
        matcher = choose(self.both, len(chunk))
        hits = getattr(matcher, "hits", None)
        if hits is None:
            # A regex backend reports a line's first anchor only, which may be the other reader's: a pass each.
            return choose(self.anchors, len(chunk)).anchored_lines(chunk), choose(self.side_scan.anchors, len(chunk)).anchored_lines(chunk)
        every = hits(chunk)
        n, side_of = len(self.anchors), self.side_of
        ours = [h for h in every if h[1] < n]
        theirs = [(start, side_of[i]) for start, i in every if i in side_of]
        return first_per_line(chunk, ours), first_per_line(chunk, theirs)

    def _side_starts(self, chunk: bytes, found: list[tuple[int, int, int]]) -> list[int]:
        """The starts of the side's lines in ``chunk``: its anchored lines and the CONTEXT_LINES after each."""
        side = self.side_scan
        starts: deque[int] = deque()
        carried, side.pending_context = side.pending_context, 0
        side._after(chunk, 0, carried, starts, carry=False)
        for start, _, _ in found:
            starts.append(start)
            end = chunk.find(b"\n", start)
            side._after(chunk, end + 1 if end >= 0 else len(chunk), CONTEXT_LINES, starts)
        return sorted(set(starts))

    def _side_line(self, chunk: bytes, start: int, lineno: int, masks: dict[int, int]) -> None:
        side = self.side_scan
        end = chunk.find(b"\n", start)
        mask = masks.get(start)
        lines = side.lines(chunk[start:end], lineno, mask is not None, mask or 0)
        if mask is None:
            for _ in lines:  # a line after an anchored one: only its prefix's rank is kept
                pass
            return
        for line in lines:
            self.side_feed(line)

    def _flush_held(self, chunk: bytes, run: list[tuple[int, int]], prev: int, lineno: int) -> tuple[int, int]:
        """Hold a run of counted lines ((anchor, start), in order, none read between them): only the ones kept
        are cut out and numbered (the last keep_last of each anchor, the last UNREAD_KEPT of all); the
        line count goes on from ``prev`` (numbered ``lineno``) to the last one kept."""
        reading = self.reading
        assert reading is not None
        by_anchor: dict[int, list[int]] = {}
        for anchor, start in run:
            by_anchor.setdefault(anchor, []).append(start)
        keep = reading.keep_last
        wanted = {start for starts in by_anchor.values() for start in starts[-keep:]} if keep else set()
        wanted.update(start for _, start in run[-UNREAD_KEPT:])
        cut: dict[int, tuple[int, bytes]] = {}
        for start in sorted(wanted):
            lineno += chunk.count(b"\n", prev, start)
            prev = start
            cut[start] = (lineno, chunk[start : chunk.find(b"\n", start)])
        for anchor, starts in by_anchor.items():
            kept = starts[-keep:] if keep else []
            reading.held_run(anchor, [cut[s] for s in kept], len(starts) - len(kept))
        reading.unread.extend(cut[start][1] for _, start in run[-UNREAD_KEPT:])
        return prev, lineno

    def chunk(self, chunk: bytes) -> Iterator[Line]:
        """The lines of one chunk to read, in order (and the side's lines fed on the way)."""
        found, side_found = self._found(chunk)
        hits = {start: (first, mask) for start, first, mask in found}
        before = self._before(chunk, found)
        fixed = sorted(hits.keys() | before)
        context: deque[int] = deque()  # starts of the lines after a read anchored line
        carried, self.pending_context = self.pending_context, 0
        self._after(chunk, 0, carried, context, carry=False)
        side_at = self._side_starts(chunk, side_found) if self.side is not None else []
        side_masks = {start: mask for start, _, mask in side_found}
        reading = self.reading
        # A line holding only repeating anchors that will be held is not cut out or numbered as it comes: the
        # run of them up to the next line read is held at once (_flush_held).
        single, repeat_mask = (reading.single, reading.repeat_mask) if reading is not None and reading.single else ({}, 0)
        run: list[tuple[int, int]] = []
        prev, lineno = 0, self.base + 1  # the number of the line that starts at offset `prev`
        k, last, j = 0, -1, 0
        while k < len(fixed) or context:
            if context and (k >= len(fixed) or context[0] < fixed[k]):
                start = context.popleft()
            else:
                start, k = fixed[k], k + 1
            if start <= last:
                continue
            last = start
            hit = hits.get(start)
            if hit is not None and single and hit[1] != ALL and not hit[1] & ~repeat_mask:
                anchor = single.get(hit[1] & -hit[1])
                if anchor is not None and reading is not None and reading.holds_next(anchor):
                    run.append((anchor, start))
                    continue
            if run:
                prev, lineno = self._flush_held(chunk, run, prev, lineno)
                run = []
            while j < len(side_at) and side_at[j] < start:
                # The side's lines before this one, in the same count of newlines.
                lineno += chunk.count(b"\n", prev, side_at[j]) if side_at[j] >= prev else -chunk.count(b"\n", side_at[j], prev)
                prev = side_at[j]
                self._side_line(chunk, prev, lineno, side_masks)
                j += 1
            lineno += chunk.count(b"\n", prev, start)
            prev = start
            end = chunk.find(b"\n", start)
            physical = chunk[start:end]
            if hit is None:
                if start not in before and reading is not None and not reading.is_busy() and not reading.worth(physical):
                    reading.unread.append(physical)
                    continue
                yield from self.lines(physical, lineno, False, 0)
                if reading is not None:
                    reading.known_busy = None
                continue
            read, held = self._anchored(physical, lineno, *hit)
            yield from self.replay(held)
            if read:
                yield from self.lines(physical, lineno, True, hit[1])
                if reading is not None:
                    reading.known_busy = None
                    if reading.said_nothing:
                        reading.said_nothing = False
                        continue
                self._after(chunk, end + 1 if end >= 0 else len(chunk), CONTEXT_LINES, context)
        if run:
            prev, lineno = self._flush_held(chunk, run, prev, lineno)
        for at in side_at[j:]:
            lineno += chunk.count(b"\n", prev, at) if at >= prev else -chunk.count(b"\n", at, prev)
            prev = at
            self._side_line(chunk, at, lineno, side_masks)
        # lineno - 1 lines end before `prev`; the rest of the chunk's newlines come after it.
        self.base = lineno - 1 + chunk.count(b"\n", prev)


def scan_lines(
    chunks: Iterable[bytes],
    path: str,
    anchors: tuple[bytes, ...],
    counter: list[int],
    before_anchors: tuple[bytes, ...] = (),
    reading: Reading | None = None,
    side: Side | None = None,
) -> Iterator[Line]:
    """Yield the anchored lines (and their context lines) of a stream of whole-line chunks.

    Lines whose first anchor is one of ``before_anchors`` (failure lines) also bring the BEFORE_LINES
    lines above them (within the chunk): what the server printed just before a failure says which
    phase it was in. The CONTEXT_LINES lines after an anchored line are read too (all of them without
    ``reading``; with it, those it asks for). ``counter[0]`` is set to the total number of lines seen,
    for the input report. Newlines are counted once per chunk: up to each line read as it is reached,
    the rest after it.

    A ``side`` (the node step of a multi-input incident) is fed its own anchored lines on the same
    pass: found by the same multi-literal search where the backend reports every anchor of a line
    (hyperscan, find; a regex backend makes a pass of its own), numbered by the same newline count.
    """
    scan = _Scan(path, anchors, before_anchors, reading, side)
    for chunk in chunks:
        yield from scan.chunk(chunk)
        counter[0] = scan.base
    if reading is not None:
        yield from scan.replay(reading.release())

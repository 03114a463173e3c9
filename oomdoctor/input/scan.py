"""The scanner: byte chunks to the few lines worth parsing, each with its number and prefixes split.

Most of a large server log is batch statistics. Each chunk is searched once for every anchor at once
(one multi-literal search); only lines holding an anchor, plus a few lines after each for messages
that wrap, are decoded and handed to the parsers.

One interface, several backends (``Backend.anchored_lines``), chosen at run time:

- ``hyperscan`` (Intel's multi-literal matcher, about 3.5 GB/s here) where its wheel installs;
- ``re2`` (one alternation run as a DFA, about 800 MB/s) otherwise;
- ``re`` (the standard library's alternation, about 60 MB/s) when neither is installed;
- ``find`` (one ``bytes.find`` pass per anchor; nothing to import or compile) for small chunks.

By default a chunk under ``SMALL_CHUNK`` bytes (a small log is one such chunk) goes to ``find`` so
that a small log never imports or compiles a matcher, and larger chunks go to the best installed
one. ``OOMDOCTOR_SCANNER=hyperscan|re2|re|find`` forces one backend for every chunk (tests run every
fixture through each and compare the JSON byte for byte). Every backend reports, per anchored line,
the anchor a leftmost-first alternation finds first on it (the leftmost start, ties to the anchor
listed first): that is what decides whether the lines above a failure are read too.
"""

from __future__ import annotations

import functools
import os
import re
from typing import TYPE_CHECKING

from oomdoctor.base.evidence import Line, LineRef
from oomdoctor.input.prefixes import split_prefix, strip_ansi

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from typing import Protocol

    # The interface every backend below has; only annotations name it.
    class Backend(Protocol):
        name: str

        def anchored_lines(self, chunk: bytes) -> list[tuple[int, int]]:
            """(line start, index of the first anchor on it) for every line holding an anchor, in order."""
            ...

# Lines after an anchor that are also read: wrapped OOM messages, the multi-line KV allocator
# error ("Try to allocate N tokens." / "Available full tokens: ..."), hard-wrapped server_args.
CONTEXT_LINES = 3

MAX_TEXT_CHARS = 4000

# Lines above a failure line that are also read, for the phase step's context (serving traffic,
# loader or capture progress). Twelve covers a traceback header block and a few log lines.
BEFORE_LINES = 12

ENV_SCANNER = "OOMDOCTOR_SCANNER"
BACKENDS = ("hyperscan", "re2", "re", "find")
# Chunks smaller than this are scanned with ``find`` in the default mode: 80 anchors over 32 KiB take
# about 1 ms, less than importing and compiling a matcher.
SMALL_CHUNK = 32 << 10


def _hex(anchor: bytes) -> bytes:
    """An anchor as a regex every backend reads the same way: each byte as ``\\xHH``."""
    return b"".join(b"\\x%02x" % c for c in anchor)


class _RegexBackend:
    """An alternation of every anchor (RE2 or ``re``): finditer, leftmost-first, non-overlapping."""

    def __init__(self, name: str, anchors: tuple[bytes, ...]) -> None:
        self.name = name
        pattern = b"|".join(_hex(a) for a in anchors)
        if name == "re2":
            import re2

            self._re = re2.compile(pattern)
        else:

            self._re = re.compile(pattern)
        self._index = {a: i for i, a in reversed(list(enumerate(anchors)))}

    def anchored_lines(self, chunk: bytes) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        last_end = -1
        rfind, find, index = chunk.rfind, chunk.find, self._index
        for m in self._re.finditer(chunk):
            pos = m.start()
            if pos <= last_end:
                continue  # another anchor on a line already taken
            out.append((rfind(b"\n", 0, pos) + 1, index[m.group()]))
            last_end = find(b"\n", pos)
            if last_end < 0:
                last_end = len(chunk)
        return out


def _first_per_line(chunk: bytes, hits: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(line start, anchor) per line from (match start, anchor index) pairs in any order."""
    best: dict[int, tuple[int, int]] = {}
    rfind = chunk.rfind
    for start, i in hits:
        line = rfind(b"\n", 0, start) + 1
        old = best.get(line)
        if old is None or (start, i) < old:
            best[line] = (start, i)
    return [(line, best[line][1]) for line in sorted(best)]


class _HyperscanBackend:
    """Hyperscan block mode over the anchors as literals; every match (overlapping too) is reported."""

    name = "hyperscan"

    def __init__(self, anchors: tuple[bytes, ...]) -> None:
        import hyperscan

        self._db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        self._db.compile(expressions=[_hex(a) for a in anchors], ids=list(range(len(anchors))), elements=len(anchors))
        self._lengths = [len(a) for a in anchors]

    def anchored_lines(self, chunk: bytes) -> list[tuple[int, int]]:
        hits: list[tuple[int, int]] = []
        lengths = self._lengths

        def on_match(i: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
            hits.append((to - lengths[i], i))

        self._db.scan(chunk, match_event_handler=on_match)
        return _first_per_line(chunk, hits)


class _FindBackend:
    """One ``bytes.find`` pass per anchor: no import, no compilation; for small chunks."""

    name = "find"

    def __init__(self, anchors: tuple[bytes, ...]) -> None:
        self._anchors = anchors

    def anchored_lines(self, chunk: bytes) -> list[tuple[int, int]]:
        hits: list[tuple[int, int]] = []
        find = chunk.find
        for i, anchor in enumerate(self._anchors):
            pos = find(anchor)
            while pos >= 0:
                hits.append((pos, i))
                pos = find(anchor, pos + 1)
        return _first_per_line(chunk, hits)


@functools.lru_cache(maxsize=16)
def backend(anchors: tuple[bytes, ...], name: str) -> Backend:
    """The backend ``name`` for ``anchors`` (compiled once per process); ImportError when not installed."""
    if name == "hyperscan":
        return _HyperscanBackend(anchors)
    if name in ("re2", "re"):
        return _RegexBackend(name, anchors)
    if name == "find":
        return _FindBackend(anchors)
    raise ValueError(f"{ENV_SCANNER}={name!r}: not one of {', '.join(BACKENDS)}")


@functools.lru_cache(maxsize=16)
def _best(anchors: tuple[bytes, ...]) -> Backend:
    """The fastest installed backend for large chunks."""
    for name in ("hyperscan", "re2"):
        try:
            return backend(anchors, name)
        except ImportError:
            continue
        except Exception:  # noqa: BLE001 - a wheel that imports but cannot compile (CPU without SSSE3): use the next
            continue
    return backend(anchors, "re")


def choose(anchors: tuple[bytes, ...], chunk_len: int) -> Backend:
    """The backend for one chunk: the forced one (``OOMDOCTOR_SCANNER``), else by the chunk's size."""
    forced = os.environ.get(ENV_SCANNER, "").strip().lower()
    if forced and forced != "auto":
        return backend(anchors, forced)
    if chunk_len < SMALL_CHUNK:
        return backend(anchors, "find")
    return _best(anchors)


def scanner_name(anchors: tuple[bytes, ...], chunk_len: int = SMALL_CHUNK) -> str:
    """The backend a chunk of ``chunk_len`` bytes would get (for reports and benchmarks)."""
    return choose(anchors, chunk_len).name


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


def scan_lines(
    chunks: Iterable[bytes], path: str, anchors: tuple[bytes, ...], counter: list[int], before_anchors: tuple[bytes, ...] = ()
) -> Iterator[Line]:
    """Yield the anchored lines (and their context lines) of a stream of whole-line chunks.

    Lines whose first anchor is one of ``before_anchors`` (failure lines) also bring the BEFORE_LINES
    lines above them (within the chunk): what the server printed just before a failure says which
    phase it was in. ``counter[0]`` is set to the total number of lines seen, for the input report.
    Newlines are counted once per chunk: up to each wanted line as it is reached, the rest after it.
    """
    before_ids = frozenset(i for i, a in enumerate(anchors) if a in before_anchors)
    base = 0  # lines before this chunk
    pending_context = 0
    last_rank: dict[str | None, str | None] = {}  # per node (kubectl --prefix, srun -l, Ray ip=)
    for chunk in chunks:
        found = choose(anchors, len(chunk)).anchored_lines(chunk)
        hits = [start for start, _ in found]
        hit_set = set(hits)
        wanted: set[int] = set(hit_set)
        for start, i in found:
            if i not in before_ids:
                continue
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
                if rank is None and not stripped.program:
                    # Traceback and message continuation lines carry no prefix of their own (a collector's
                    # timestamp or pod stamps every line); they belong to the record (and rank) of the
                    # last line the program prefixed on the same node (pods interleave in one stream).
                    rank = last_rank.get(stripped.node)
                elif stripped.program or rank is not None:
                    last_rank[stripped.node] = rank
                text = strip_ansi(raw).rstrip()
                if len(text) > MAX_TEXT_CHARS:
                    text = text[:MAX_TEXT_CHARS] + "…"
                yield Line(ref=LineRef(path=path, line=lineno, rank=rank, text=text, ts=stripped.ts, node=stripped.node), msg=stripped.msg, ts=stripped.ts, anchored=start in hit_set, system=stripped.system, node=stripped.node)
        # lineno - 1 lines end before `prev`; the rest of the chunk's newlines come after it.
        base = lineno - 1 + chunk.count(b"\n", prev)
        counter[0] = base

"""The scanner's matchers: every line of a byte chunk that holds one of the anchors, by one of four backends.

One interface (``Backend.anchored_lines``), chosen at run time:

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

if TYPE_CHECKING:
    from typing import Protocol

    # The interface every backend below has; only annotations name it.
    class Backend(Protocol):
        name: str

        def anchored_lines(self, chunk: bytes) -> list[tuple[int, int, int]]:
            """(line start, index of the first anchor on it, the bit set of every anchor on it, or ALL
            when the backend does not know them) for every line holding an anchor, in order."""
            ...


# The anchor bits of a line whose backend reported only its first anchor (re, RE2): every bit.
ALL = -1

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

    def anchored_lines(self, chunk: bytes) -> list[tuple[int, int, int]]:
        out: list[tuple[int, int, int]] = []
        last_end = -1
        rfind, find, index = chunk.rfind, chunk.find, self._index
        for m in self._re.finditer(chunk):
            pos = m.start()
            if pos <= last_end:
                continue  # another anchor on a line already taken
            out.append((rfind(b"\n", 0, pos) + 1, index[m.group()], ALL))
            last_end = find(b"\n", pos)
            if last_end < 0:
                last_end = len(chunk)
        return out


def first_per_line(chunk: bytes, hits: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """(line start, first anchor, every anchor's bit) per line from (match start, anchor index) pairs in any order."""
    # In (start, index) order a line's first hit is its leftmost anchor (ties to the one listed first), and the
    # line's start and end are looked up once per line, not once per hit (a retraction line holds two anchors).
    hits.sort()
    out: list[tuple[int, int, int]] = []
    rfind, find = chunk.rfind, chunk.find
    line, first, mask, line_end = -1, 0, 0, -1
    for start, i in hits:
        if start > line_end:
            if line >= 0:
                out.append((line, first, mask))
            line, first, mask = rfind(b"\n", 0, start) + 1, i, 1 << i
            line_end = find(b"\n", start)
            if line_end < 0:
                line_end = len(chunk)
        else:
            mask |= 1 << i
    if line >= 0:
        out.append((line, first, mask))
    return out


def _held_anchors(anchors: tuple[bytes, ...]) -> list[list[int]]:
    """For each anchor, the other anchors it holds, in index order: one search of each in all of them joined
    (NUL between them: no anchor holds one), not a test of every pair (177,000 tests: ~0.2 s)."""
    joined = b"\0".join(anchors)
    owner: list[int] = []  # the anchor each byte of ``joined`` belongs to
    for i, a in enumerate(anchors):
        owner.extend([i] * (len(a) + 1))
    held: list[list[int]] = [[] for _ in anchors]
    for i, a in enumerate(anchors):
        pos = joined.find(a)
        while pos >= 0:
            j = owner[pos]
            if j != i and anchors[j] != a and (not held[j] or held[j][-1] != i):
                held[j].append(i)
            pos = joined.find(a, pos + 1)
    return held


class _HyperscanBackend:
    """Hyperscan block mode over the anchors as literals; every match (overlapping too) is reported.

    What is compiled is fewer and cheaper literals than the anchors, each hit checked against the anchors it
    stands for:
    - only the anchors that hold no other anchor: one that holds one ("CUDA out of memory" holds "out of
      memory") is compared where that one matched (315 literals scan about a quarter faster than 421);
    - an anchor ending in a run of one byte (nvidia-smi -q's ``Driver Version    :``) is compiled without the
      run: such a literal costs Hyperscan's compiler ~10 ms each (four of them: 50 ms of a 60 ms compile)."""

    name = "hyperscan"

    def __init__(self, anchors: tuple[bytes, ...]) -> None:
        import hyperscan

        held = _held_anchors(anchors)
        literals: dict[bytes, int] = {}  # what is compiled, by its id
        # For each compiled literal, the anchors a hit of it may be: (their start before the hit's, index, bytes,
        # whether the hit is that anchor without a comparison).
        self._targets: list[list[tuple[int, int, bytes, bool]]] = []
        inner_literal: dict[int, int] = {}
        for i, a in enumerate(anchors):
            if held[i]:
                continue
            literal = _without_end_run(a)
            k = literals.setdefault(literal, len(literals))
            if k == len(self._targets):
                self._targets.append([])
            self._targets[k].append((0, i, a, literal == a))
            inner_literal[i] = k
        for j, a in enumerate(anchors):
            if held[j]:
                # Looked for at the first place its first inner anchor sits in it: every occurrence of it holds
                # that one there, and is found once.
                i = next(i for i in held[j] if i in inner_literal)
                self._targets[inner_literal[i]].append((a.find(anchors[i]), j, a, False))
        self._lengths = [len(literal) for literal in literals]
        self._db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        # The pure-literal compiler (Hyperscan >= 5.2): the anchors are literals, and it compiles them faster than
        # the same bytes escaped as regular expressions, once per process.
        self._db.compile(expressions=list(literals), ids=list(range(len(literals))), elements=len(literals), literal=True)

    def hits(self, chunk: bytes) -> list[tuple[int, int]]:
        """(match start, anchor index) of every match, overlapping ones too."""
        hits: list[tuple[int, int]] = []
        lengths, targets = self._lengths, self._targets

        def on_match(k: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
            start = to - lengths[k]
            for offset, i, anchor, exact in targets[k]:
                if exact or (start >= offset and chunk.startswith(anchor, start - offset)):
                    hits.append((start - offset, i))

        self._db.scan(chunk, match_event_handler=on_match)
        return hits

    def anchored_lines(self, chunk: bytes) -> list[tuple[int, int, int]]:
        return first_per_line(chunk, self.hits(chunk))


def _without_end_run(anchor: bytes) -> bytes:
    """An anchor without the run of one byte (3 or more) it ends in, if 4 bytes or more are left."""
    last = anchor[-1:]
    trimmed = anchor.rstrip(last)
    return trimmed if len(anchor) - len(trimmed) >= 3 and len(trimmed) >= 4 else anchor


class _FindBackend:
    """One ``bytes.find`` pass per anchor: no import, no compilation; for small chunks."""

    name = "find"

    def __init__(self, anchors: tuple[bytes, ...]) -> None:
        self._anchors = anchors

    def hits(self, chunk: bytes) -> list[tuple[int, int]]:
        """(match start, anchor index) of every match, overlapping ones too."""
        hits: list[tuple[int, int]] = []
        find = chunk.find
        for i, anchor in enumerate(self._anchors):
            pos = find(anchor)
            while pos >= 0:
                hits.append((pos, i))
                pos = find(anchor, pos + 1)
        return hits

    def anchored_lines(self, chunk: bytes) -> list[tuple[int, int, int]]:
        return first_per_line(chunk, self.hits(chunk))


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

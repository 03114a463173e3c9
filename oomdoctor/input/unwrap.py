"""Pastes hard-wrapped by a terminal: long lines cut at a fixed column, read as the program printed them.

A terminal (or a copy from one) cuts every line longer than its width into pieces of exactly that
width; the pieces land in the paste as separate lines, and a message split that way is lost to the
parsers (an OOM message whose numbers run onto the next line, a "Load weight end ... avail mem="
line cut before its figure). The width shows itself: it is the length of the longest lines, and
several lines have exactly that length. Each such line is joined with the line after it, unless
that line starts something of its own (a log prefix, a traceback line, a table row, a blank line).

A markdown quote ("> ") added when the paste was posted is on every piece; it is set aside while the
pieces are joined. Line numbers stay those of the file: a joined line keeps the number of its first piece and the
pieces after it become blank lines, so every citation still points at the line a reader will find;
the pieces' line numbers are reported, and the completeness step does not count them as log.
Only small inputs (pastes) are read this way (oomdoctor/input/paste.py); large logs stream as they are.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import TYPE_CHECKING

from oomdoctor.input.patterns import LazyRegex
from oomdoctor.input.prefixes import split_prefix, strip_ansi

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

# Narrower than any terminal a server log is read in; shorter "widths" are ordinary short lines.
MIN_WIDTH = 40
# The width must show at least this many times: one line of maximal length is just the longest line.
MIN_PIECES = 2
_STARTS_OF_THEIR_OWN = ('File "', "Traceback", "During handling", "The above exception", "|", "+", "[... cut", "```")


# (Both compiled when a paste is first unwrapped.)
# A traceback's exception line ("torch.OutOfMemoryError: ...", "RuntimeError: ...").
_EXCEPTION_LINE = LazyRegex(None, r"[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)(?::|$)")
# Machine output whose lines are records of their own, of equal widths because they are aligned, not
# cut: an indented JSON pair ('    "name": "NVIDIA H100 80GB HBM3",', json.dump's indent, gpustat
# --json) and a padded "Key<spaces>: value" line (nvidia-smi -q, collect_env since vLLM 0.9). A cut
# piece starts wherever the cut fell, so it starts with a key and its colon only by chance.
_RECORD_LINE = LazyRegex(None, r'\s*"[\w.-]+"\s*:\s|\s*[A-Za-z][\w ./()-]*?\s{2,}:(?:\s|$)')


def _starts_a_line(text: str) -> bool:
    """Whether a physical line begins a line of its own (not the rest of the line above it).

    A line exactly as long as the wrap width looks like a cut one; what follows it decides.
    """
    if not text.strip():
        return True
    if text.lstrip().startswith(_STARTS_OF_THEIR_OWN) or _EXCEPTION_LINE.match(text) or _RECORD_LINE.match(text):
        return True
    # Any prefix a program or collector puts at a line's start (a timestamp, a rank tag, a docker
    # service, kubectl's pod) starts a line: a cut piece starts wherever the cut fell.
    return split_prefix(text).msg.strip() != strip_ansi(text).strip()


def padded(lines: list[str]) -> bool:
    """Whether most lines end in a run of blanks: a console that pads every line to its width (tmux,
    Windows terminals). Then a line's length is its text without them, or every line would look cut.
    In any other paste a trailing blank is text: a cut that falls just after a space leaves one."""
    filled = [line for line in lines if line.strip()]
    return bool(filled) and sum(1 for line in filled if line.endswith(("  ", "\t"))) * 2 > len(filled)


def _length(line: str, pad: bool) -> int:
    # Columns: colour codes a terminal copy kept take none.
    line = strip_ansi(line)
    return len(line.rstrip(" \t")) if pad else len(line)


def _cut_at(line: str, width: int, pad: bool) -> bool:
    return _length(line, pad) == width and not line.endswith("|")  # a table row ends in its border


def _chains(lines: list[str], width: int, pad: bool) -> Iterator[tuple[int, int]]:
    """(first line, pieces) of each cut line: full-width pieces, then a shorter last piece.

    A run of full-width lines that ends at a line of its own, or at the end, is not taken for one:
    equal-length complete lines (an assertion repeated by every CUDA thread) look the same, while a
    cut line ends in what is left of it (a line exactly a multiple of the width stays cut: rare).
    """
    i = 0
    while i < len(lines):
        n = 1
        while _cut_at(lines[i + n - 1], width, pad) and i + n < len(lines) and not _starts_a_line(lines[i + n]):
            n += 1
        if n > 1 and 0 < _length(lines[i + n - 1], pad) < width:
            yield i, n
        # A run not taken is skipped whole: a chain from inside it ends where it ends (linear time).
        i += n


def wrap_width(lines: list[str]) -> int | None:
    """The column a terminal cut these lines at, or None when they do not look cut."""
    pad = padded(lines)
    lengths = Counter(_length(line, pad) for line in lines)
    if not lengths:
        return None
    width = max(lengths)
    if width < MIN_WIDTH or lengths[width] < MIN_PIECES:
        return None
    joinable = sum(n - 1 for _, n in _chains(lines, width, pad))
    return width if joinable >= MIN_PIECES else None


def unwrap_lines(lines: list[str], width: int) -> list[str]:
    """The lines with each cut piece joined to the one before it; as many lines as before.

    A joined line keeps the number of its first piece and blank lines take the others' (the
    completeness step is told which lines they are, so they do not count as log after a record).
    """
    out = list(lines)
    pad = padded(lines)
    for start, n in _chains(lines, width, pad):
        # A padded console's blanks after each piece are not the line's text.
        out[start] = "".join(piece.rstrip(" \t") if pad else piece for piece in lines[start : start + n])
        out[start + 1 : start + n] = [""] * (n - 1)
    return out


def quote_marker(lines: list[str]) -> str:
    """The markdown quote ("> ", "> > ") every line with content starts with: added after the wrap, so
    each cut piece carries it too. "" when there is none. A quoted blank line ("> >") has no content."""
    marks = [line[: len(line) - len(line.lstrip("> "))] for line in lines if line.strip(" >")]
    if not marks or not all(m.startswith(">") for m in marks):
        return ""
    return os.path.commonprefix(marks)  # noqa: RUF071 - character by character is the point


def _may_be_wrapped(data: bytes) -> bool:
    """Quick test on ASCII bytes (a byte is a column): do several lines share the longest length?

    A quote marker adds the same to every line, so it cannot hide a wrap from this test. Lengths are
    taken with and without trailing blanks, as the full test may take either (``padded``).
    """
    lines = data.split(b"\n")
    for lengths in ([len(line.rstrip(b"\r")) for line in lines], [len(line.rstrip(b" \t\r")) for line in lines]):
        width = max(lengths, default=0)
        if width >= MIN_WIDTH and lengths.count(width) >= MIN_PIECES:
            return True
    return False


def unwrap(data: bytes, on_unwrap: Callable[[int, tuple[int, ...]], None]) -> bytes:
    """``data`` as it is, or with its hard-wrapped lines joined (as many lines as before).

    ``on_unwrap(width, pieces)``: the wrap column and the (1-based) numbers of the lines that were
    pieces and are now blank.
    """
    if data.isascii() and b"\x1b" not in data and b"^[" not in data and not _may_be_wrapped(data):
        return data
    text = data.decode("utf-8", "surrogateescape")
    ends_cr = "\r\n" in text
    lines = text.replace("\r\n", "\n").split("\n")
    marker = quote_marker(lines)
    bodies = [line[len(marker) :] if line.startswith(marker) else "" if not line.strip(" >") else line for line in lines] if marker else lines
    width = wrap_width(bodies)
    if width is None:
        return data
    joined = unwrap_lines(bodies, width)
    on_unwrap(width, tuple(n for n, (before, after) in enumerate(zip(bodies, joined, strict=True), 1) if before and not after))
    if marker:
        joined = [marker + body if body else original if not original.startswith(marker) else "" for body, original in zip(joined, lines, strict=True)]
    return ("\r\n" if ends_cr else "\n").join(joined).encode("utf-8", "surrogateescape")

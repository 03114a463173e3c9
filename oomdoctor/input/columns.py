"""Console handlers that lay a log record out in columns (rich's RichHandler), read one logical line at a time.

rich prints a record as ``[time] LEVEL  message  path.py:line``: the message wrapped inside a column of its own,
each continuation line indented to that column and padded with blanks to the console's width, a word longer than
the rest of the column folded at its edge. An OOM message laid out so reaches the parsers in pieces ("CUDA" on
the first line, "out of memory. Tried to allocate 3.88 GiB. GPU 0" on the next), and so does a traceback printed
inside the record ('File' on one line, the quoted path on the next, folded mid-word).

Such a record is put back: its pieces are joined into the lines the program logged, a folded word without a
blank, and a traceback's lines (the ones rich shows indented, and its header, frames and exception) each start a
line of their own. Line numbers stay those of the paste: a logical line keeps the number of its first piece and
the pieces after it become blank lines, as for a terminal's hard wrap (unwrap.py). Only small inputs (pastes) are
read this way (paste.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomdoctor.input.patterns import LazyRegex

if TYPE_CHECKING:
    from collections.abc import Callable

# The first line of a record: an optional time column, the level column, the message, and the path column at the
# right edge ("ERROR    2024-11-28 13:24:44,248 infinity_emb ERROR: CUDA   batch_handler.py:574").
_HEAD = LazyRegex(
    ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
    # (The message column and the path column are one blank apart when the message fills its column.)
    r"^(?P<lead>(?:\[[^\]]{4,40}\] +)?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) +)(?P<msg>\S.*?) +(?P<where>[\w.<>-]+\.py:\d+) *$",
)
# What starts a line of its own inside a record: a traceback's header, frame, chain header or exception line.
_OWN_LINE = LazyRegex(None, r"(?:Traceback \(most recent call last\)|File\b|During handling|The above exception|[A-Za-z_][\w.]*(?:Error|Exception)\b)")


def _folded(line: str, piece: str, edge: int) -> bool:
    # A word exactly as wide as the column is not folded, and cannot be told from a fold by its length; one that
    # ends with punctuation that closes a word ("host_pool:", "(x)") is taken as whole.
    text = piece.strip()
    return len(line.rstrip()) >= edge and " " not in text and not text.endswith((":", ";", ",", ")", "]", "}", ".", "!", "?"))


def _record(lines: list[str], start: int) -> tuple[list[tuple[int, str]], int] | None:
    """The logical lines of the record whose head is ``lines[start]`` (each with its first piece's index), and the
    index after its last piece; None when the line is no column layout's head."""
    head = _HEAD.match(lines[start])
    if head is None:
        return None
    indent = len(head.group("lead"))
    # rich moves a word that does not fit to the next line and folds only a word longer than the whole column: a
    # piece that is one word reaching the column's right edge was folded there, and its word goes on in the next.
    edge = head.start("where") - 1
    margin = " " * indent
    logical: list[tuple[int, str]] = [(start, head.group("msg").rstrip())]
    folded = _folded(lines[start][: head.end("msg")], head.group("msg"), edge)
    end = start + 1
    while end < len(lines):
        line = lines[end]
        if not line.startswith(margin) or not line[indent:].strip():
            break
        piece = line[indent:].rstrip()
        if piece.startswith(" ") or _OWN_LINE.match(piece):
            logical.append((end, piece))
        else:
            i, text = logical[-1]
            logical[-1] = (i, text + piece if folded else f"{text} {piece}")
        folded = _folded(line, piece, edge)
        end += 1
    # A record of one line is still one: its level and path columns are not the program's words.
    return logical, end


def join_columns(data: bytes, on_join: Callable[[int, tuple[int, ...]], None]) -> bytes:
    """``data`` with every column-laid record joined into its logical lines; ``on_join`` gets the number of records
    and the (1-based) numbers of the lines left blank, which the completeness step does not count as log."""
    if b"    " not in data or b".py:" not in data:
        return data
    lines = data.decode("utf-8", "surrogateescape").split("\n")
    records = 0
    blanked: list[int] = []
    i = 0
    while i < len(lines):
        found = _record(lines, i) if ".py:" in lines[i] else None
        if found is None:
            i += 1
            continue
        logical, end = found
        for k in range(i, end):
            lines[k] = ""
        for k, text in logical:
            lines[k] = text
        kept = {k for k, _ in logical}
        blanked.extend(k + 1 for k in range(i, end) if k not in kept)
        records += 1
        i = end
    if not records:
        return data
    on_join(records, tuple(blanked))
    return "\n".join(lines).encode("utf-8", "surrogateescape")

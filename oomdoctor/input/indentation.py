"""Pastes indented as a whole: a markdown code block by indentation, a list item's block, a quoted mail.

Every later step reads a line's own layout: a traceback's frames two spaces in and their source lines
four, a log prefix at the start of the line. A small input whose every non-blank line starts with the
same whitespace (oomdoctor/input/paste.py) is read with that whitespace removed, and the input says so. Only when something
then starts at the margin other than a frame: a paste of traceback frames alone (frames at two
spaces, source lines at four) is already as the interpreter printed it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

_BLANK = b" \t\r"


def common_indent(lines: list[bytes]) -> bytes:
    """The whitespace every non-blank line starts with (b"" when none, or when there are no lines)."""
    indents = [line[: len(line) - len(line.lstrip(b" \t"))] for line in lines if line.strip(_BLANK)]
    prefix = os.path.commonprefix(indents)  # noqa: RUF071 - character by character is the point
    return prefix if isinstance(prefix, bytes) else b""  # "" for an empty list


def _worth_removing(lines: list[bytes], indent: bytes) -> bool:
    # Something other than a traceback frame must reach the margin once the indent is gone.
    for line in lines:
        rest = line[len(indent) :]
        if rest.strip(_BLANK) and rest[:1] not in (b" ", b"\t") and not rest.startswith(b'File "'):
            return True
    return False


def _first_content_line(data: bytes) -> bytes:
    """The first line of ``data`` that is not blank (b"" when there is none)."""
    pos = 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        end = len(data) if end < 0 else end
        if data[pos:end].strip(_BLANK):
            return data[pos:end]
        pos = end + 1
    return b""


def dedent(data: bytes, on_dedent: Callable[[int], None]) -> bytes:
    """``data`` as it is, or with the indent every non-blank line shares removed."""
    if not _first_content_line(data).startswith((b" ", b"\t")):
        return data  # a line at the margin: no indent is common to every line
    lines = data.split(b"\n")
    indent = common_indent(lines)
    if not indent or not _worth_removing(lines, indent):
        return data
    on_dedent(len(indent))
    return b"\n".join(line[len(indent) :] if line.startswith(indent) else line.lstrip(b" \t") for line in lines)

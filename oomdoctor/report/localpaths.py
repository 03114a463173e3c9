"""Local paths taken out of an attachment: input files by their base name, home directories as ``~``.

A bug report is read by strangers: ``/home/alice/runs/2026-03/server.log`` says who ran it and how their
disk is laid out, and tells a maintainer nothing the name ``server.log`` does not. The JSON contract keeps
the paths as given (a script needs them); the Markdown attachment uses these names.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable

# A home directory at the start of a path (not inside a URL or a longer path): Linux, macOS, root's, Windows.
_HOME = re.compile(r"(?<![\w.:/\\-])(?:/home/[^/.\s'\"<>][^/\s'\"<>]*|/Users/[^/\s'\"<>]+|/root(?=/)|[A-Za-z]:\\Users\\[^\\\s'\"<>]+)")


def without_home(text: str) -> str:
    """``text`` with each home directory written ``~`` (``/home/alice/.cache`` -> ``~/.cache``)."""
    return _HOME.sub("~", text)


def display_names(paths: Iterable[str]) -> dict[str, str]:
    """Each input path -> its base name; where two inputs share a base name, the shortest tails that differ."""
    unique = list(dict.fromkeys(p for p in paths if p))
    parts = {p: [s for s in re.split(r"[/\\]", p) if s] or [p] for p in unique}
    names: dict[str, str] = {}
    for p in unique:
        depth = 1
        while True:
            tail = "/".join(parts[p][-depth:])
            clash = [q for q in unique if q != p and "/".join(parts[q][-depth:]) == tail]
            if not clash or depth >= len(parts[p]):
                break
            depth += 1
        names[p] = without_home(tail) if depth > 1 else os.path.basename(tail) or tail
    return names


def local_free(text: str, paths: Iterable[str], escape: Callable[[str], str] | None = None) -> str:
    """``text`` with every input path (as given, or made absolute) replaced by its display name, and no home directory.

    ``escape``: how the text spells a path in prose (Markdown writes ``pos_a.log`` as ``pos\\_a.log``), so a
    path quoted in a sentence is found too, not only one in a code block.
    """
    names = display_names(paths)
    spelled: dict[str, str] = {}
    for path, name in names.items():
        for given in (path, os.path.abspath(path)):
            spelled.setdefault(given, name)
            if escape is not None:
                spelled.setdefault(escape(given), escape(name))
    # Longest first, so /a/b/server.log is not half-replaced by a shorter path that prefixes it.
    for path in sorted(spelled, key=len, reverse=True):
        if path != spelled[path]:
            text = text.replace(path, spelled[path])
    return without_home(text)

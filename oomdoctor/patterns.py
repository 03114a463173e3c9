"""Regexes compiled on first use behind a literal needle.

The parsers hold about 150 patterns; compiling them all at import cost most of a small log's run
time, and trying each on every anchored line cost most of a large one's. A pattern here is compiled
only the first time its needle (a substring every match contains) is in the text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any


class LazyRegex:
    __slots__ = ("_compiled", "flags", "needle", "source")

    def __init__(self, needle: str | None, source: str, flags: int = 0) -> None:
        self.needle = needle
        self.source = source
        self.flags = flags
        self._compiled: re.Pattern[str] | None = None

    @property
    def compiled(self) -> re.Pattern[str]:
        if self._compiled is None:
            self._compiled = re.compile(self.source, self.flags)
        return self._compiled

    def _absent(self, text: str) -> bool:
        return self.needle is not None and self.needle not in text

    def search(self, text: str) -> re.Match[str] | None:
        return None if self._absent(text) else self.compiled.search(text)

    def match(self, text: str) -> re.Match[str] | None:
        return None if self._absent(text) else self.compiled.match(text)

    def finditer(self, text: str) -> Iterator[re.Match[str]]:
        return iter(()) if self._absent(text) else self.compiled.finditer(text)

    def findall(self, text: str) -> list[Any]:
        return [] if self._absent(text) else self.compiled.findall(text)

    def sub(self, repl: str | Callable[[re.Match[str]], str], text: str) -> str:
        return text if self._absent(text) else self.compiled.sub(repl, text)


def lazy(needle: str | None, source: str, flags: int = 0) -> LazyRegex:
    """A regex compiled on first use, skipped on text without ``needle`` (None: always tried)."""
    return LazyRegex(needle, source, flags)

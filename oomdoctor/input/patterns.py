"""Regexes compiled on first use behind a literal needle, and dispatch of a line to the few that can match.

The parsers hold about 150 patterns; compiling them all at import cost most of a small log's run
time, and trying each on every anchored line cost most of a large one's. A pattern here is compiled
only the first time its needle (a substring every match contains; or a tuple of them, one of which
every match contains) is in the text. ``Dispatch`` goes one step further for a parser's ordered
table: each distinct needle is looked for once per line, and only the patterns registered under the
needles found (plus those without a needle) are tried, in table order, so the first match is the
one trying every pattern in order would have found.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any


Needle = str | tuple[str, ...] | None
T = TypeVar("T")


class LazyRegex:
    __slots__ = ("_compiled", "flags", "needle", "source")

    def __init__(self, needle: Needle, source: str, flags: int = 0) -> None:
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
        needle = self.needle
        if needle is None:
            return False
        if isinstance(needle, str):
            return needle not in text
        return not any(n in text for n in needle)

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


def lazy(needle: Needle, source: str, flags: int = 0) -> LazyRegex:
    """A regex compiled on first use, skipped on text without ``needle`` (a tuple: without any of them; None: always tried)."""
    return LazyRegex(needle, source, flags)


class Dispatch(Generic[T]):
    """An ordered table of ``(pattern, payload)`` rows, tried only where the line holds their needle.

    ``candidates(text)`` is the rows, in table order, whose needle (any of a tuple) is in ``text`` or
    that have none: exactly the rows whose ``pattern.search`` could return a match. Each distinct
    needle is looked for once, however many rows share it.
    """

    __slots__ = ("_always", "_by_needle", "_rows")

    def __init__(self, rows: tuple[tuple[LazyRegex, T], ...]) -> None:
        self._rows = rows
        by_needle: dict[str, list[int]] = {}
        always: list[int] = []
        for i, (pattern, _) in enumerate(rows):
            needle = pattern.needle
            if needle is None:
                always.append(i)
                continue
            for n in (needle,) if isinstance(needle, str) else needle:
                by_needle.setdefault(n, []).append(i)
        self._always = tuple(always)
        self._by_needle = tuple((n, tuple(ids)) for n, ids in by_needle.items())

    def candidates(self, text: str) -> list[tuple[LazyRegex, T]]:
        found = [i for n, ids in self._by_needle if n in text for i in ids]
        if not found:
            return [self._rows[i] for i in self._always]
        rows = self._rows
        return [rows[i] for i in sorted({*found, *self._always})]

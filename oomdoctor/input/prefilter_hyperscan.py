"""The secret prefilter's pieces as one hyperscan database, where hyperscan is installed.

Hyperscan runs the pieces at 650-780 MB/s on this project's 2-core machine (plain lines), against
~430 MB/s for RE2's one alternation (~150 MB/s on a request log), and reports every match of every
piece, overlapping ones too. Compiling them costs it 0.3-0.5 s of CPU, so a log stream switches to it
only once it has shown itself long (secret_prefilter.HYPERSCAN_AFTER_BYTES); nothing is kept on disk.
"""

from __future__ import annotations

import threading
from typing import Any

_databases: dict[tuple[tuple[str, bytes], ...], Database | None] = {}


class Database:
    """The pieces compiled, one id each; ``kv_id`` is the kv piece's."""

    def __init__(self, hyperscan: Any, db: Any, kv_id: int) -> None:
        self._hs, self._db, self.kv_id = hyperscan, db, kv_id
        self._local = threading.local()  # a scratch space per thread: hyperscan's is for one scan at a time

    def reports(self, data: bytes) -> list[tuple[int, int]]:
        """(end, piece id) of every match in ``data``, in order of their ends."""
        found: list[tuple[int, int]] = []
        append = found.append

        def on_match(piece: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
            append((to, piece))

        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = self._hs.Scratch(self._db)
        self._db.scan(data, match_event_handler=on_match, scratch=scratch)
        found.sort()
        return found


def database(pieces: tuple[tuple[str, bytes], ...], required: bool = False) -> Database | None:
    """The pieces as one database (compiled once per process), or None without hyperscan (the error itself when ``required``)."""
    if pieces not in _databases:
        try:
            _databases[pieces] = _build(pieces)
        except Exception:  # ImportError, or a wheel that imports but cannot compile (a CPU without SSSE3): RE2 does the pass
            if required:
                raise
            _databases[pieces] = None
    return _databases[pieces]


def _build(pieces: tuple[tuple[str, bytes], ...]) -> Database:
    import hyperscan

    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    flags = hyperscan.HS_FLAG_MULTILINE  # the kv piece's `^`: any line's start
    db.compile(expressions=[piece for _, piece in pieces], ids=list(range(len(pieces))), elements=len(pieces), flags=[flags] * len(pieces))
    return Database(hyperscan, db, [name for name, _ in pieces].index("kv"))

"""The secret prefilter's pieces as one hyperscan database (where hyperscan is installed), and its compiled form kept on disk.

Hyperscan runs the pieces at 1-1.5 GB/s on this project's 2-core machine, against ~400 MB/s for RE2's
one alternation (~150 MB/s on a request log), and reports every match of every piece, overlapping ones
too. Compiling the pieces takes it 0.3-0.5 s of CPU, as much as the pass saves on 100 MB, and `oomdoctor
run` would pay it on every start on the server's cores: so the database is serialized once into the user's
cache directory (``OOMDOCTOR_CACHE_DIR``, else ``$XDG_CACHE_HOME/oomdoctor``, else ``~/.cache/oomdoctor``)
under a name that hashes the pieces, the flags and hyperscan's version, and loaded from there (~50 us).
A file that is not ours, that others could write, or that hyperscan refuses is not used; a cache that
cannot be written only costs the compilation.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tempfile
import threading
from pathlib import Path
from typing import Any

ENV_CACHE = "OOMDOCTOR_CACHE_DIR"

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


def cache_dir() -> Path:
    explicit = os.environ.get(ENV_CACHE)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "oomdoctor"


def database(pieces: tuple[tuple[str, bytes], ...], required: bool = False) -> Database | None:
    """The pieces as one database (compiled once per process), or None without hyperscan (ImportError when ``required``)."""
    if pieces not in _databases:
        try:
            _databases[pieces] = _build(pieces)
        except ImportError:
            if required:
                raise
            _databases[pieces] = None
        except Exception:  # a wheel that imports but cannot compile (a CPU without SSSE3): RE2 does the pass (re-raised when required)
            if required:
                raise
            _databases[pieces] = None
    return _databases[pieces]


def _build(pieces: tuple[tuple[str, bytes], ...]) -> Database:
    import hyperscan

    names = [name for name, _ in pieces]
    flags = hyperscan.HS_FLAG_MULTILINE  # the kv piece's `^`: any line's start
    digest = hashlib.sha256(repr((getattr(hyperscan, "__version__", "?"), flags, pieces)).encode()).hexdigest()[:24]
    path = cache_dir() / f"prefilter-{digest}.hsdb"
    db = _load(hyperscan, path)
    if db is None:
        db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        db.compile(expressions=[piece for _, piece in pieces], ids=list(range(len(pieces))), elements=len(pieces), flags=[flags] * len(pieces))
        _store(hyperscan, db, path)
    return Database(hyperscan, db, names.index("kv"))


def _load(hyperscan: Any, path: Path) -> Any:
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022 or st.st_size > 16 << 20:
                return None
            blob = f.read()
        return hyperscan.loadb(blob, hyperscan.HS_MODE_BLOCK)
    except Exception:  # noqa: BLE001 - missing, unreadable, or refused by hyperscan (another build, another CPU): compiled again
        return None


def _store(hyperscan: Any, db: Any, path: Path) -> None:
    with contextlib.suppress(Exception):
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".prefilter-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(hyperscan.dumpb(db))
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

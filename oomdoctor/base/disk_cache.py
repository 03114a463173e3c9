"""A private directory of ``marshal`` entries that save work a start would otherwise repeat.

Three users: parsed TOML (``_toml.loads``: the rules, the fact catalogue, the phase and GPU tables),
compiled regular expressions (``regex_cache``) and the records' compiled ``__init__`` methods
(``records``). Each names its entries by a hash of everything an entry depends on (the text parsed;
the interpreter build), so an edit or an upgrade is simply a new name and a stale entry cannot be
served. Entries are read with ``marshal``: plain data (dicts, lists, tuples, strings, numbers) and,
in the records' entry, code objects compiled by this same interpreter build, which is what a
``__pycache__`` file holds; the directory's checks below are what keeps others from writing them.

A ``Table`` is one entry that grows across runs (a pattern or a method per key): it is read once,
and what a run adds is written back once, at exit (``write_back``; the console entry point calls it
before its fast exit, ``atexit`` covers everything else).

The place: ``$OOMDOCTOR_CACHE_DIR`` (``off`` or empty turns caching off), else
``$XDG_CACHE_HOME/oomdoctor``, else ``~/.cache/oomdoctor``. The directory is created 0700 and used
only when it belongs to this user and no one else can write to it; any failure (read-only home, full
disk, a damaged entry) means no entry, so the cache can change timings, never results.

The cache prunes itself: an entry served is touched (at most once a day), and whenever an entry is
written, entries untouched for ``PRUNE_AFTER_DAYS`` are removed, so upgrades and edited rules do not
pile up in a home directory forever; a pruned entry in use is simply built and stored again.
"""

from __future__ import annotations

import marshal
import os
import time

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost); mypy reads this as True
if TYPE_CHECKING:
    from typing import Any

PRUNE_AFTER_DAYS = 30
_DAY_S = 86400
ENTRY_SUFFIX = ".marshal"
_cache_dir: str | bool | None = False  # False: not looked up yet; None: no usable cache


def cache_dir() -> str | None:
    """The cache directory, or None when caching is off or the place is unsafe."""
    global _cache_dir
    if _cache_dir is False:
        _cache_dir = _find_cache_dir()
    return _cache_dir  # type: ignore[return-value]


def _find_cache_dir() -> str | None:
    configured = os.environ.get("OOMDOCTOR_CACHE_DIR")
    if configured is not None:
        if configured.strip() in ("", "off", "0", "none"):
            return None
        path = configured
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        path = os.path.join(base, "oomdoctor")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    # Someone else's directory, or one others can write to, could hand us their data: not used.
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        return None
    if st.st_mode & 0o022:
        return None
    return path


def interpreter_build() -> bytes:
    """What names an entry only this interpreter build may read (compiled code, regex opcodes):
    its full version string (build date and compiler included) and its bytecode cache tag."""
    import sys

    return f"{sys.version}|{sys.implementation.cache_tag}".encode()


def key(*parts: bytes) -> str:
    """An entry name (40 hex digits) for what an entry depends on."""
    try:
        from _blake2 import blake2b  # the builtin module: importing hashlib (OpenSSL) would cost more than it saves
    except ImportError:  # pragma: no cover - an interpreter built without it
        from hashlib import blake2b
    return blake2b(b"\0".join(parts), digest_size=20).hexdigest()


def read(name: str) -> Any:
    """The data of entry ``name``, or None (no cache, no entry, a damaged one)."""
    directory = cache_dir()
    if directory is None:
        return None
    path = os.path.join(directory, name + ENTRY_SUFFIX)
    try:
        with open(path, "rb") as fh:
            data = marshal.loads(fh.read())
            age_s = time.time() - os.fstat(fh.fileno()).st_mtime
    except (OSError, ValueError, EOFError, TypeError):
        return None
    if age_s > _DAY_S:  # in use: keep it clear of pruning (a day's grain costs one utime a day)
        try:  # noqa: SIM105 - contextlib stays off the start path (~0.4 ms)
            os.utime(path)
        except OSError:
            pass
    return data


def write(name: str, data: Any) -> bool:
    """Store ``data`` (marshal data only) as entry ``name``, atomically, then prune; False if it was not stored."""
    directory = cache_dir()
    if directory is None:
        return False
    try:
        blob = marshal.dumps(data)
    except ValueError:  # not marshal data (a TOML date, say): built every time instead
        return False
    path = os.path.join(directory, name + ENTRY_SUFFIX)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
        os.replace(tmp, path)  # readers see the whole entry or none
    except OSError:
        try:  # noqa: SIM105 - contextlib stays off the start path (~0.4 ms)
            os.unlink(tmp)
        except OSError:
            pass
        return False
    prune(directory)
    return True


def prune(directory: str, now: float | None = None) -> int:
    """Remove this cache's entries (and leftover temp files) untouched for PRUNE_AFTER_DAYS; the count.

    Only names this module writes are considered, so a mistaken OOMDOCTOR_CACHE_DIR pointing at a
    folder with other files loses nothing else.
    """
    cutoff = (time.time() if now is None else now) - PRUNE_AFTER_DAYS * _DAY_S
    removed = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names:
        stem = name.split(".", 1)[0]
        if not (len(stem) == 40 and all(c in "0123456789abcdef" for c in stem)):
            continue
        if not (name.endswith(ENTRY_SUFFIX) or name.endswith(".tmp")):
            continue
        path = os.path.join(directory, name)
        try:
            if os.lstat(path).st_mtime < cutoff:
                os.unlink(path)
                removed += 1
        except OSError:
            continue
    return removed


class Table:
    """One entry holding a dict that runs add to: key -> what was built for it (marshal data)."""

    def __init__(self, *name_parts: bytes, limit: int) -> None:
        self._name_parts = name_parts
        self.limit = limit  # past this many keys, new ones are built every run instead of growing the entry
        self._name: str | None = None
        self._data: dict[Any, Any] | None = None
        self.added: dict[Any, Any] = {}

    @property
    def name(self) -> str:
        if self._name is None:
            self._name = key(*self._name_parts)
        return self._name

    def data(self) -> dict[Any, Any]:
        """What the entry held when first read (plus what this run wrote back since)."""
        if self._data is None:
            loaded = read(self.name)
            self._data = loaded if isinstance(loaded, dict) else {}
        return self._data

    def get(self, k: Any) -> Any:
        return self.data().get(k)

    def add(self, k: Any, value: Any) -> None:
        """Keep ``value`` for ``k``, to be written back at exit (within ``limit``)."""
        if len(self.data()) + len(self.added) >= self.limit:
            return
        if not _pending:
            import atexit

            atexit.register(write_back)
        if self not in _pending:
            _pending.append(self)
        self.added[k] = value

    def save(self) -> None:
        """Write back what this run added, merged with what the entry holds now (another run may have written)."""
        if not self.added:
            return
        current = read(self.name)
        merged = dict(current) if isinstance(current, dict) else {}
        merged.update(self.added)
        if len(merged) <= self.limit and write(self.name, merged):
            self.data().update(self.added)
        self.added = {}


_pending: list[Table] = []


def write_back() -> None:
    """Write every table's additions; never raises (a cache can change timings, never the outcome)."""
    while _pending:
        table = _pending.pop()
        try:  # noqa: SIM105 - contextlib stays off the start path (~0.4 ms)
            table.save()
        except Exception:  # noqa: BLE001 - a cache that cannot be written is no cache, never an error
            pass

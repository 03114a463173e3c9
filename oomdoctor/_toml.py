"""TOML parsing on every supported Python, and a content-keyed cache of what was parsed.

tomllib is the standard library's from 3.11; tomli (its origin: same API, same TOMLDecodeError) on
3.10, where setup.cfg requires it. Import ``tomllib`` from here, never directly (tests/test_py310.py
checks); the module itself is imported only when a text has to be parsed.

Why a cache: a small log's diagnosis parses about 35 TOML files (the rules, the fact catalogue, the
phase and GPU tables), which cost ~25 ms of a ~90 ms run, more than reading and diagnosing the log.
``loads`` keys each parsed document by a hash of its text (and this module's format version), so an
edited rule is simply a new key; a stale entry cannot be returned. Entries are ``marshal`` data
(dicts, lists, strings, numbers only: a document holding a TOML date is parsed every time) in
``$OOMDOCTOR_CACHE_DIR`` (``off`` or empty turns the cache off), else ``$XDG_CACHE_HOME/oomdoctor``,
else ``~/.cache/oomdoctor``. The directory is created 0700 and used only when it belongs to this
user and no one else can write to it; any failure (read-only home, full disk, a damaged entry) falls
back to parsing, so the cache can change timings, never results.

The cache prunes itself: an entry served is touched (at most once a day), and whenever a new entry
is written, entries untouched for ``PRUNE_AFTER_DAYS`` are removed, so upgrades and edited rules do
not pile up in a home directory forever; a pruned entry in use is simply parsed and stored again.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import sys
import time
from typing import Any

__all__ = ["cache_dir", "data_text", "loads", "prune"]  # and ``tomllib``, through __getattr__

# Bump when the cached form changes (it is part of every key).
_FORMAT = b"oomdoctor-toml-cache-1"
_cache_dir: str | bool | None = False  # False: not looked up yet; None: no usable cache
PRUNE_AFTER_DAYS = 30
_DAY_S = 86400
_ENTRY_SUFFIX = ".marshal"


def __getattr__(name: str) -> Any:
    # ``from oomdoctor._toml import tomllib`` still works, but the parser is imported only by the
    # code that parses (a cached start never needs it).
    if name == "tomllib":
        return _tomllib()
    raise AttributeError(name)


def _tomllib() -> Any:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    return tomllib


def data_text(name: str) -> str:
    """A file of oomdoctor/data/ as text, read from the package folder directly.

    importlib.resources would cost the diagnose path ~8 ms of imports; the data files ship beside the
    modules (setup.cfg package_data), so a path is enough.
    """
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", name), encoding="utf-8") as fh:
        return fh.read()


def cache_dir() -> str | None:
    """The directory of parsed-TOML entries, or None when caching is off or the place is unsafe."""
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


def _key(text: str) -> str:
    try:
        from _blake2 import blake2b  # the builtin module: importing hashlib (OpenSSL) would cost more than it saves
    except ImportError:  # pragma: no cover - an interpreter built without it
        from hashlib import blake2b
    return blake2b(_FORMAT + b"\0" + text.encode("utf-8", "surrogatepass"), digest_size=20).hexdigest()


def loads(text: str) -> dict[str, Any]:
    """``tomllib.loads(text)``, served from the cache when the same text was parsed before.

    Raises what tomllib raises (TOMLDecodeError, RecursionError) for a text that does not parse;
    such a text is never cached.
    """
    directory = cache_dir()
    if directory is None:
        return _tomllib().loads(text)  # type: ignore[no-any-return,unused-ignore]
    entry = os.path.join(directory, _key(text) + _ENTRY_SUFFIX)
    try:
        with open(entry, "rb") as fh:
            data = marshal.loads(fh.read())
            age_s = time.time() - os.fstat(fh.fileno()).st_mtime
        if isinstance(data, dict):
            if age_s > _DAY_S:  # in use: keep it clear of pruning (a day's grain costs one utime a day)
                with contextlib.suppress(OSError):
                    os.utime(entry)
            return data
    except (OSError, ValueError, EOFError, TypeError):
        pass
    data = _tomllib().loads(text)
    _store(directory, entry, data)
    prune(directory)
    return data


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
        if not (name.endswith(_ENTRY_SUFFIX) or name.endswith(".tmp")):
            continue
        path = os.path.join(directory, name)
        try:
            if os.lstat(path).st_mtime < cutoff:
                os.unlink(path)
                removed += 1
        except OSError:
            continue
    return removed


def _store(directory: str, entry: str, data: dict[str, Any]) -> None:
    try:
        blob = marshal.dumps(data)
    except ValueError:  # a TOML date or time: not marshal data; parsed every time instead
        return
    tmp = f"{entry}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
        os.replace(tmp, entry)  # readers see the whole entry or none
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)

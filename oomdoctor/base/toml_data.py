"""TOML parsing on every supported Python, and a content-keyed cache of what was parsed.

tomllib is the standard library's from 3.11; tomli (its origin: same API, same TOMLDecodeError) on
3.10, where setup.cfg requires it. Import ``tomllib`` from here, never directly (tests/test_py310.py
checks); the module itself is imported only when a text has to be parsed.

Why a cache: a small log's diagnosis parses about 35 TOML files (the rules, the fact catalogue, the
phase and GPU tables), which cost ~25 ms of a ~90 ms run, more than reading and diagnosing the log.
``loads`` keys each parsed document by a hash of its text (and this module's format version) in
``disk_cache`` (where it lives, why it is safe, how it prunes itself), so an edited rule is simply a
new key; a stale entry cannot be returned. A document holding a TOML date is not marshal data and is
parsed every time.
"""

from __future__ import annotations

import os
import sys

from oomdoctor.base import disk_cache

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost); mypy reads this as True
if TYPE_CHECKING:
    from typing import Any

__all__ = ["data_text", "loads"]  # and ``tomllib``, through __getattr__

# Bump when the cached form changes (it is part of every key).
_FORMAT = b"oomdoctor-toml-cache-1"


def __getattr__(name: str) -> Any:
    # ``from oomdoctor.base.toml_data import tomllib`` still works, but the parser is imported only by the
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
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(package, "data", name), encoding="utf-8") as fh:
        return fh.read()


def loads(text: str) -> dict[str, Any]:
    """``tomllib.loads(text)``, served from the cache when the same text was parsed before.

    Raises what tomllib raises (TOMLDecodeError, RecursionError) for a text that does not parse;
    such a text is never cached.
    """
    name = disk_cache.key(_FORMAT, text.encode("utf-8", "surrogatepass"))
    data = disk_cache.read(name)
    if isinstance(data, dict):
        return data
    data = _tomllib().loads(text)
    disk_cache.write(name, data)
    return data  # type: ignore[no-any-return,unused-ignore]

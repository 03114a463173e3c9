"""TOML parsing on every supported Python: the standard library's tomllib from 3.11, tomli on 3.10.

tomli is tomllib's origin (same API, same TOMLDecodeError); setup.cfg requires it only where
tomllib is missing. Import ``tomllib`` from here, never directly (tests/test_py310.py checks).
"""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["tomllib"]


def data_text(name: str) -> str:
    """A file of oomdoctor/data/ as text, read from the package folder directly.

    importlib.resources would cost the diagnose path ~8 ms of imports; the data files ship beside the
    modules (setup.cfg package_data), so a path is enough.
    """
    import os

    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", name), encoding="utf-8") as fh:
        return fh.read()

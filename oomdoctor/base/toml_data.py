"""TOML on every supported Python, and the package's own data files (oomdoctor/data/).

tomllib is the standard library's from 3.11; on 3.10 its origin tomli, with the same API and the same
TOMLDecodeError (setup.cfg requires it there). Import ``tomllib`` from here (tests/test_py310.py checks).
"""

from __future__ import annotations

import sys
from importlib.resources import files

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["data_text", "tomllib"]


def data_text(name: str) -> str:
    """A file of oomdoctor/data/ as text."""
    return (files("oomdoctor") / "data" / name).read_text(encoding="utf-8")

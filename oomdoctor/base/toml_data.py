"""TOML on every supported Python, and the package's own data files (oomdoctor/data/).

tomllib is the standard library's from 3.11; on 3.10 its origin tomli, with the same API and the same
TOMLDecodeError (setup.cfg requires it there). Import ``tomllib`` from here (tests/test_py310.py checks).
"""

from __future__ import annotations

import os
import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["data_text", "tomllib"]


# The package's data files ship beside its modules (setup.cfg package_data). A path is enough, and
# importlib.resources would cost every start ~25 ms of imports (pathlib, urllib, string, ipaddress).
DATA_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")


def data_text(name: str) -> str:
    """A file of oomdoctor/data/ as text."""
    with open(os.path.join(DATA_DIR, name), encoding="utf-8") as fh:
        return fh.read()

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

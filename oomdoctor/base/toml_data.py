"""TOML on every supported Python, and the parse of the package's TOML sources.

tomllib is the standard library's from 3.11; on 3.10 its origin tomli, with the same API and the same
TOMLDecodeError (setup.cfg requires it there). Import ``tomllib`` from here (tests/test_py310.py checks).
A diagnosis reads no TOML of its own (oomdoctor.base.built_in reads the JSON made from it), so this
module is imported only to read a user's rule files or to rebuild that JSON.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from oomdoctor.base.built_in import DATA_DIR, DATA_TABLES, rules_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["parse_sources", "tomllib"]


def parse_sources(data_dir: str = DATA_DIR, rules: str | None = None) -> dict[str, Any]:
    """What data/built_in.json must hold: every data table and every shipped rule, parsed from its TOML."""
    rules = rules or rules_dir()
    with os.scandir(rules) as entries:
        names = sorted(e.name for e in entries if e.name.endswith(".toml") and e.is_file())
    parsed: dict[str, Any] = {"data": {}, "rules": {}}
    for folder, part, files in ((data_dir, "data", DATA_TABLES), (rules, "rules", names)):
        for name in files:
            with open(os.path.join(folder, name), encoding="utf-8") as fh:
                parsed[part][name] = tomllib.loads(fh.read())
    return parsed

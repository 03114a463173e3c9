"""The package's own data at run time: the data tables of oomdoctor/data/ and the shipped rules.

They are written as TOML (``data/*.toml`` and one file per rule under ``rules/``) and read here from
``data/built_in.json``, the same tables parsed once by ``tools/built_in_data.py``: parsing the ~40 TOML
files cost every start ~30 ms, one ``json`` load costs ~1 ms. tests/test_data_built_in.py fails,
naming that command, when the JSON is not what the TOML says.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any

# The package's data files ship beside its modules (setup.cfg package_data). A path is enough, and
# importlib.resources would cost every start ~25 ms of imports (pathlib, urllib, string, ipaddress).
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA_DIR = os.path.join(PACKAGE_DIR, "data")
BUILT_IN = os.path.join(DATA_DIR, "built_in.json")
# The data tables of data/ that built_in.json carries (the rules are every *.toml of rules_dir()).
DATA_TABLES = ("classes.toml", "differential.toml", "facts.toml", "gpus.toml", "phases.toml")


def rules_dir() -> str:
    """The folder of the shipped rule files.

    Installed, ``rules/`` is the package ``oomdoctor.rules`` inside the package; in a source checkout
    it is the ``rules/`` folder beside ``oomdoctor/``.
    """
    installed = os.path.join(PACKAGE_DIR, "rules")
    if os.path.isfile(os.path.join(installed, "__init__.py")):
        return installed
    return os.path.join(os.path.dirname(PACKAGE_DIR), "rules")


@functools.cache
def _built_in() -> dict[str, Any]:
    with open(BUILT_IN, encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def table(name: str) -> dict[str, Any]:
    """One data table of oomdoctor/data/ (``"facts.toml"``), as its TOML parses."""
    found: dict[str, Any] = _built_in()["data"][name]
    return found


def rules() -> dict[str, dict[str, Any]]:
    """The shipped rules by file name (``"startup-kv.toml"``), each as its TOML parses."""
    found: dict[str, dict[str, Any]] = _built_in()["rules"]
    return found

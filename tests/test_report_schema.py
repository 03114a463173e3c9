"""The JSON contract's schema (oomdoctor/data/diagnosis.schema.json): every fixture's output validates, and it refuses what the contract does not allow."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest

from oomdoctor.inference import classes

from conftest import FIXTURES, REPO

SCHEMA = json.loads((REPO / "oomdoctor" / "data" / "diagnosis.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
# The fixtures with expectations are validated in test_fixtures.py as they are checked; these are the rest.
CASES = sorted([*(FIXTURES / "field").glob("*.log"), *(FIXTURES / "issues").glob("*.md")])


def test_the_schema_is_valid_and_names_the_catalogued_classes() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$defs"]["class"]["enum"] == list(classes.load().names())


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.name)
def test_each_field_and_issue_case_validates(path: Path, run_cli) -> None:
    res = run_cli("diagnose", str(path), "--format", "json")
    assert res.code in (0, 3, 4), res.err
    errors = [f"{e.json_path}: {e.message}" for e in VALIDATOR.iter_errors(res.json)]
    assert errors == []


def test_the_schema_refuses_what_the_contract_does_not_allow(run_cli) -> None:
    good = run_cli("diagnose", str(FIXTURES / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log"), "--format", "json").json
    assert not list(VALIDATOR.iter_errors(good))
    for change in (
        lambda d: d["verdict"].__setitem__("class", "oom"),
        lambda d: d.pop("inputs"),
        lambda d: d["findings"][0].__setitem__("surprise", 1),
        lambda d: d["findings"][0]["recommendations"][0].pop("flag"),
        lambda d: d.__setitem__("schema_version", 2),
        lambda d: d["verdict"].__setitem__("confidence", 1.5),
    ):
        bad = copy.deepcopy(good)
        change(bad)
        assert list(VALIDATOR.iter_errors(bad)), change

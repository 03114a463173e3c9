"""The rule loader (validation messages), the three-valued evaluator, and the rules CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from oomdoctor.advice.registry import known_advice
from oomdoctor.base.errors import RuleError
from oomdoctor.inference.rule_engine import evaluate, load_rule_file, load_rules

from conftest import REPO

GOOD = (REPO / "rules" / "sglang-startup-kv.toml").read_text()


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_shipped_catalogue_validates() -> None:
    rules = load_rules(known_advice=known_advice())
    assert {r.id for r in rules} == {p.stem for p in (REPO / "rules").glob("*.toml")}


@pytest.mark.parametrize(
    "mutate, needle",
    [
        (lambda t: t.replace('class = "startup_kv"', 'class = "startup"'), "field 'class'"),
        (lambda t: t.replace('id = "sglang-startup-kv"', 'id = "other"'), "must equal the file name"),
        (lambda t: t.replace('confidence = 0.95', 'confidence = 3'), "field 'confidence'"),
        (lambda t: t.replace('advice = ["raise-mem-fraction-static"]', 'advice = ["os.system"]'), "unknown advice id"),
        (lambda t: t.replace('{ fact = "startup_kv_error", eq = true }', '{ fact = "startup_kv_error", eval = "__import__(\'os\')" }'), "exactly one operator"),
        (lambda t: t.replace('{ fact = "startup_kv_error", eq = true }', '{ fact = "x", gt = "big" }'), "compares numbers"),
        (lambda t: t.replace("[docs]", "[docz]"), "field 'docs'"),
        (lambda t: t.replace('severity = "error"', 'severity = "error"\nextra = 1'), "unknown field"),
        (lambda t: t + "\n[[[", "not valid TOML"),
    ],
)
def test_bad_rules_name_file_field_and_fix(tmp_path: Path, mutate, needle: str) -> None:
    p = write(tmp_path, "sglang-startup-kv.toml", mutate(GOOD))
    with pytest.raises(RuleError) as exc:
        load_rule_file(p, known_advice())
    assert needle in str(exc.value)
    assert str(p) in str(exc.value)


def test_three_valued_logic() -> None:
    node = {"all": [{"fact": "a", "eq": True}, {"fact": "b", "gt": 1}]}
    assert evaluate(node, {"a": True, "b": 2}).result is True
    assert evaluate(node, {"a": False}).result is False  # false beats unknown
    ev = evaluate(node, {"a": True})
    assert ev.result is None and ev.missing == {"b"}
    anyn = {"any": [{"fact": "a", "eq": True}, {"fact": "b", "gt": 1}]}
    assert evaluate(anyn, {"a": True}).result is True  # true beats unknown
    assert evaluate({"not": {"fact": "a", "eq": True}}, {"a": False}).result is True
    assert evaluate({"fact": "a", "present": False}, {}).result is True
    assert evaluate({"fact": "r", "ge": {"fact": "q"}}, {"r": 5, "q": 4}).result is True
    assert evaluate({"fact": "r", "ge": {"fact": "q"}}, {"r": 5}).missing == {"q"}


def test_rules_cli(run_cli, tmp_path: Path) -> None:
    listed = run_cli("rules", "list")
    assert listed.code == 0 and "sglang-startup-kv" in listed.out
    explained = run_cli("rules", "explain", "sglang-startup-kv")
    assert "Why:" in explained.out and "raise" in explained.out.lower()
    assert run_cli("rules", "explain", "nope").code == 2
    assert run_cli("rules", "check").code == 0
    bad = tmp_path / "bad"
    bad.mkdir()
    write(bad, "x.toml", 'id = "x"\n')
    res = run_cli("rules", "check", "--rules", str(bad))
    assert res.code == 5 and "x.toml" in res.err and "missing" in res.err


def test_user_rule_dir_adds_a_rule(run_cli, tmp_path: Path) -> None:
    d = tmp_path / "mine"
    d.mkdir()
    write(d, "my-retract-storm.toml", GOOD.replace('id = "sglang-startup-kv"', 'id = "my-retract-storm"'))
    assert "my-retract-storm" in run_cli("rules", "list", "--rules", str(d)).out
    dup = tmp_path / "dup"
    dup.mkdir()
    write(dup, "sglang-startup-kv.toml", GOOD)
    res = run_cli("rules", "check", "--rules", str(dup))
    assert res.code == 5 and "already defined" in res.err


def test_rules_list_from_installed_package_outside_repo(tmp_path: Path) -> None:
    # The suite runs against a non-editable install: the rules must come from inside the wheel.
    r = subprocess.run([sys.executable, "-m", "oomdoctor", "rules", "list"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for p in (REPO / "rules").glob("*.toml"):
        assert p.stem in r.stdout

"""The class catalogue (data/classes.toml): the one list of classes the rules, the README and the pipeline share."""

from __future__ import annotations

import re

import pytest

from oomdoctor.inference import classes
from oomdoctor.inference.rule_engine import load_rules

from conftest import REPO


def test_the_catalogue_is_the_readme_s_class_table() -> None:
    section = (REPO / "README.md").read_text().split("### Classes", 1)[1].split("\n### ", 1)[0]
    table = re.findall(r"^\| `([a-z_]+)` \|", section, re.M)
    assert set(table) == set(classes.load().names()) - {"unknown_oom", "none"}


def test_every_shipped_rule_names_a_catalogued_class() -> None:
    names = set(classes.load().names())
    assert {r.klass for r in load_rules()} <= names


def test_a_rule_naming_an_unknown_class_is_refused_with_the_list(tmp_path) -> None:
    from oomdoctor.base.errors import RuleError

    rule = (REPO / "rules" / "sglang-startup-kv.toml").read_text().replace('class = "startup_kv"', 'class = "startup_kvv"')
    (tmp_path / "sglang-startup-kv.toml").write_text(rule)
    with pytest.raises(RuleError, match="is not a class; write one of: startup_kv, weights_dont_fit"):
        load_rules([str(tmp_path)], builtin=False)


def test_behaviour_comes_from_the_catalogue() -> None:
    cat = classes.load()
    assert cat.classes["foreign_process"].phase_decides_sufficiency and not cat.classes["startup_kv"].phase_decides_sufficiency
    assert [s.fact for s in cat.host_steps] == ["host_oom_kill", "host_journal", "cgroup_memory_events"]
    assert cat.classes["host_oom"].host_steps and "startup_kv" in cat.classes["foreign_process"].companions

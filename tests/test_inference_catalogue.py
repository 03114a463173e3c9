"""The fact catalogue (oomdoctor/data/facts.toml): every fact is declared, documented and produced."""

from __future__ import annotations

import pytest

from oomdoctor.api import diagnose, load_rules
from oomdoctor.inference import catalogue
from oomdoctor.inference import facts as facts_module

from conftest import FIXTURES

CAT = catalogue.load()


def test_every_fact_has_type_source_and_doc() -> None:
    for spec in CAT.facts.values():
        assert spec.type in catalogue.TYPES and spec.doc.strip() and spec.source in CAT.sources, spec.name
        if spec.type == "bytes":
            assert spec.name.endswith("_bytes")


def test_every_declared_fact_is_produced_by_a_fixture_or_is_collected_only(monkeypatch) -> None:
    seen: set[str] = set()
    original = facts_module.Facts.set

    def spy(self, name, value, *refs, derivation=None):
        if value is not None:
            seen.add(name)
        return original(self, name, value, *refs, derivation=derivation)

    monkeypatch.setattr(facts_module.Facts, "set", spy)
    rules = load_rules()
    cases = [
        p
        for p in FIXTURES.glob("*/*")
        if p.name.endswith((".log", ".log.gz")) or (p.is_dir() and p.name.startswith(("pos_", "neg_"))) or (p.parent.name == "issue-body" and p.suffix == ".md")
    ]
    for case in cases:
        diagnose([str(case)], rules=rules)
    unproduced = sorted(n for n, s in CAT.facts.items() if n not in seen and "collected" not in s.systems)
    assert not unproduced, f"declared but produced by no fixture (add one, or mark it collected-only): {unproduced}"


def test_the_store_refuses_an_undeclared_fact() -> None:
    f = facts_module.Facts()
    with pytest.raises(facts_module.UndeclaredFact):
        f.set("startup_kv_eror", True)


def test_suggestion_for_a_misspelled_fact() -> None:
    assert CAT.suggest("startup_kv_eror") == "startup_kv_error"
    assert CAT.suggest("zzzz") is None


def test_rules_check_rejects_a_misspelled_fact_with_did_you_mean(run_cli, tmp_path) -> None:
    rule = (FIXTURES.parent.parent / "rules" / "sglang-startup-kv.toml").read_text()
    bad = rule.replace('"startup_kv_error"', '"startup_kv_eror"').replace('id = "sglang-startup-kv"', 'id = "typo"')
    (tmp_path / "typo.toml").write_text(bad)
    res = run_cli("rules", "check", "--rules", str(tmp_path))
    assert res.code == 5
    assert "unknown fact 'startup_kv_eror'; did you mean 'startup_kv_error'?" in res.err


def test_rules_check_rejects_an_unknown_placeholder(run_cli, tmp_path) -> None:
    rule = (FIXTURES.parent.parent / "rules" / "sglang-startup-kv.toml").read_text()
    bad = rule.replace('id = "sglang-startup-kv"', 'id = "ph"').replace('message = "', 'message = "{pre_byts} ', 1)
    (tmp_path / "ph.toml").write_text(bad)
    res = run_cli("rules", "check", "--rules", str(tmp_path))
    assert res.code == 5 and "field 'message'" in res.err and "did you mean 'pre_bytes'" in res.err


def test_facts_list_and_explain(run_cli) -> None:
    out = run_cli("facts", "list").out
    line = next(ln for ln in out.splitlines() if ln.startswith("pre_bytes "))
    assert "bytes" in line and "sglang" in line and "Load weight begin" in line
    assert "_window" not in out
    res = run_cli("facts", "explain", "reserved_unallocated_bytes")
    assert res.code == 0
    assert "produced for: any" in res.out and "keep the whole 'CUDA out of memory" in res.out
    assert "allocator-fragmentation" in res.out
    bad = run_cli("facts", "explain", "pre_byte")
    assert bad.code == 2 and "did you mean 'pre_bytes'" in bad.err


def test_the_name_set_is_exactly_the_declared_facts() -> None:
    assert catalogue.names() == frozenset(CAT.facts)

"""Every log fixture against its expectation: class, rule, cited lines, flag values, exit code.

A fixture under tests/fixtures/<rule-id>/ is a positive case (pos_*) or a near-miss negative (neg_*)
for that rule; the rule is also run alone on it, and the whole catalogue must parse it fully.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from oomdoctor.advice.registry import known_advice
from oomdoctor.base.toml_data import tomllib
from oomdoctor.inference.rule_engine import load_rules
from oomdoctor.pipeline.diagnosis import diagnose

from conftest import FIXTURES, REPO
from test_report_schema import VALIDATOR as SCHEMA_VALIDATOR

# A case is a log (plain or gzip) or a bundle directory (pos_*/neg_*) that `collect` or `capture` wrote.
# The field corpus (tests/fixtures/field/) has labels, not expectations: benchmarks/field.py scores it.
CASES = sorted(
    p
    for p in FIXTURES.glob("*/*")
    if p.parent.name != "field" and (p.name.endswith((".log", ".log.gz")) or (p.is_dir() and p.name.startswith(("pos_", "neg_"))))
)


def _text(path: Path) -> str:
    files = [path] if path.is_file() else sorted(f for f in path.rglob("*") if f.is_file())
    return "".join(f.read_bytes()[:4000].decode("latin-1") for f in files)
ALL_RULES = load_rules(known_advice=known_advice())


def _expect(path: Path) -> dict:
    stem = path.name.split(".log")[0]
    return tomllib.loads((path.parent / f"{stem}.expect.toml").read_text())


@pytest.mark.parametrize("path", CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixture_diagnosis(path: Path, run_cli) -> None:
    exp = _expect(path)
    res = run_cli("diagnose", str(path), "--format", "json")
    assert res.code == exp["exit_code"], res.err
    data = res.json
    assert [e.message for e in SCHEMA_VALIDATOR.iter_errors(data)] == []  # the JSON contract's schema
    assert data["verdict"]["class"] == exp["class"]
    assert (data["verdict"]["rule"] or "") == exp["rule"]
    assert data["budget"]["system"] == exp["system"]
    cited = [e["line"] for e in data["findings"][0]["evidence"]] if data["findings"] else []
    assert cited == exp["cited_lines"]
    if exp.get("parses_fully"):
        assert all(i["unparsed_lines"] == 0 for i in data["inputs"])
    recs = data["findings"][0]["recommendations"] if data["findings"] else []
    expected_recs = exp.get("recommendations", [])
    assert [(r["flag"], r["direction"]) for r in recs] == [(r["flag"], r["direction"]) for r in expected_recs]
    for got, want in zip(recs, expected_recs, strict=True):
        if "value" in want:
            if isinstance(want["value"], float):
                assert got["value"] == pytest.approx(want["value"], abs=1e-9)
            else:
                assert got["value"] == want["value"]
        else:
            assert got["value"] is None


@pytest.mark.parametrize("path", [p for p in CASES if "fires" in _expect(p) or "silent" in _expect(p)], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_rule_alone(path: Path) -> None:
    exp = _expect(path)
    rule_id = exp.get("fires") or exp.get("silent")
    alone = [r for r in ALL_RULES if r.id == rule_id]
    assert alone, f"no rule {rule_id}"
    result = diagnose([str(path)], alone)
    fired = {f.rule_id for f in result.findings}
    if "fires" in exp:
        assert rule_id in fired
    else:
        assert rule_id not in fired


def test_every_rule_has_positive_and_negative_fixture() -> None:
    for rule in ALL_RULES:
        folder = FIXTURES / rule.id
        names = [p.name for p in folder.iterdir() if not p.name.endswith(".toml")]
        assert any(n.startswith("pos_") for n in names), f"{rule.id}: no positive fixture"
        assert any(n.startswith("neg_") for n in names), f"{rule.id}: no near-miss negative fixture"
        assert (REPO / rule.docs["example"]).exists(), f"{rule.id}: docs.example does not exist"


def test_sglang_classes_have_three_positives_over_two_eras() -> None:
    by_class: dict[str, list[Path]] = {}
    for path in CASES:
        exp = _expect(path)
        if path.name.startswith("pos_") and exp["class"] not in ("none", "unknown_oom", "host_oom"):
            by_class.setdefault(exp["class"], []).append(path)
    for klass in ("startup_kv", "weights_dont_fit", "cuda_graph", "runtime_activation", "encoder_starvation", "foreign_process", "fragmentation", "kv_exhaustion"):
        cases = by_class.get(klass, [])
        assert len(cases) >= 3, f"{klass}: {len(cases)} positive fixtures"
        years = {y for p in cases for y in ("2023", "2024", "2025", "2026") if y in _text(p) or y in p.name}
        assert len(years) >= 2, f"{klass}: eras {years}"


def _positives(system: str) -> dict[str, list[Path]]:
    by_class: dict[str, list[Path]] = {}
    for path in CASES:
        exp = _expect(path)
        if path.name.startswith("pos_") and exp["system"] == system:
            by_class.setdefault(exp["class"], []).append(path)
    return by_class


def test_vllm_classes_have_three_positives_over_v0_and_v1_and_a_negative() -> None:
    by_class = _positives("vllm")
    negatives = {_expect(p)["system"] for p in CASES if p.name.startswith("neg_")}
    assert "vllm" in negatives
    for klass in ("startup_kv", "weights_dont_fit", "foreign_process", "cuda_graph", "runtime_activation", "encoder_starvation", "fragmentation", "host_oom"):
        cases = by_class.get(klass, [])
        assert len(cases) >= 3, f"vllm {klass}: {len(cases)} positive fixtures"
        text = "".join(_text(p) for p in cases)
        v1 = "V1 LLM engine" in text or "(EngineCore" in text or "(APIServer" in text or "(Worker_" in text or "(VllmWorker rank=" in text
        v0 = "Initializing an LLM engine" in text or "VllmWorkerProcess" in text or " llm_engine.py:" in text or "[rank0]:" in text
        assert v1 and v0, f"vllm {klass}: formats V1={v1} V0={v0}"
    neg_dirs = {p.parent.name for p in CASES if p.name.startswith("neg_") and _expect(p)["system"] == "vllm"}
    assert {"vllm-startup-kv", "vllm-cuda-graph-oom", "vllm-runtime-activation", "vllm-encoder-oom"} <= neg_dirs


def test_at_least_eight_plain_pytorch_fixtures() -> None:
    torch_cases = [p for p in CASES if _expect(p)["system"] == "torch"]
    assert len(torch_cases) >= 8
    classes = {_expect(p)["class"] for p in torch_cases}
    assert {"fragmentation", "foreign_process", "runtime_activation", "host_oom"} <= classes


def test_system_override(run_cli) -> None:
    path = FIXTURES / "vllm-runtime-activation" / "pos_v1_execute_model.log"
    auto = run_cli("diagnose", str(path), "--format", "json").json
    forced = run_cli("diagnose", str(path), "--format", "json", "--system", "torch").json
    assert auto["budget"]["system"] == "vllm" and auto["verdict"]["rule"] == "vllm-runtime-activation"
    assert forced["budget"]["system"] == "torch" and forced["verdict"]["rule"] == "torch-activation-oom"

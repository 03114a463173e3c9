"""The rules listed as not evaluated are those whose missing evidence could change the verdict."""

from __future__ import annotations

from oomdoctor.advice.registry import known_advice
from oomdoctor.inference import differential
from oomdoctor.inference.rule_engine import load_rules
from oomdoctor.pipeline.diagnosis import diagnose

from conftest import FIXTURES

RULES = load_rules(known_advice=known_advice())
BY_ID = {r.id: r for r in RULES}


def test_a_decided_verdict_lists_only_rules_that_would_outrank_it() -> None:
    d = diagnose([str(FIXTURES / "smi-foreign-process" / "pos_sglang_table_after_cut_oom.log")], RULES)
    assert d.verdict_class == "foreign_process"
    # The other foreign-process rules (collected, OOM-message, unplaced) would only confirm it.
    assert d.not_evaluated == []
    d = diagnose([str(FIXTURES / "vllm-runtime-activation" / "pos_v1_execute_model.log")], RULES)
    verdict = BY_ID[d.verdict_rule or ""]
    for item in d.not_evaluated:
        rule = BY_ID[item["rule"]]
        assert rule.klass != d.verdict_class and item["class"] == rule.klass
        assert rule.priority < verdict.priority or (rule.priority == verdict.priority and rule.confidence > d.verdict_confidence)
        assert item["commands"] and item["missing"]


def test_an_undecided_oom_lists_the_rules_of_the_classes_still_open() -> None:
    d = diagnose([str(FIXTURES / "unknown-oom" / "vllm_oom_no_metrics.log")], RULES)
    # No rule decides it: the differential's lead is named as a hypothesis, and what would decide it is listed.
    assert d.verdict_rule is None and d.findings[0].extra["hypothesis"] is True and d.facts is not None
    listed = {item["rule"]: item for item in d.not_evaluated}
    open_classes = differential.possible(d.facts.values)
    assert listed and all(item["class"] in open_classes for item in listed.values())
    # The pasted process list would decide between them: its command is named.
    assert "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv (or: oomdoctor collect -o bundle)" in listed["smi-foreign-process"]["commands"]
    # Fragmentation is ruled out by the OOM message's own figures (120 MiB reserved-unallocated and
    # 1.02 GiB free against a 1.53 GiB request): the rule that would need a memory snapshot is not listed.
    assert "fragmentation" not in open_classes and "allocator-stats-fragmentation" not in listed


def test_no_oom_lists_nothing(run_cli) -> None:
    data = run_cli("diagnose", str(FIXTURES / "none" / "healthy_2026.log"), "--format", "json").json
    assert data["verdict"]["class"] == "none" and data["not_evaluated"] == []


def test_the_text_report_groups_them_by_the_command_that_collects_them(run_cli) -> None:
    out = run_cli("diagnose", str(FIXTURES / "unknown-oom" / "vllm_oom_no_metrics.log")).out
    head = "not evaluated (missing evidence), by what would collect it:"
    assert head in out
    block = out.split(head, 1)[1].splitlines()
    smi = [line for line in block if line.startswith("  nvidia-smi --query-compute-apps")]
    assert len(smi) == 1 and "smi-foreign-process (foreign_process)" in smi[0] and "smi-foreign-process-unplaced (foreign_process)" in smi[0]

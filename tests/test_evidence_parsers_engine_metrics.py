"""The engines' own metrics beside a log: vLLM's and SGLang's KV use, preemptions and queues, and what they change.

A /metrics scrape pasted beside the OOM, inside an issue body, given as a .prom file, and a Prometheus
query result given as JSON; positives (the KV pool at its end) and near misses (an idle scrape, a
series of another name). Names from vllm/v1/metrics/loggers.py and sglang/srt/metrics/collector.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from oomdoctor.advice.registry import known_advice
from oomdoctor.base.evidence import Line, LineRef
from oomdoctor.evidence.parsers import engine_metrics as em
from oomdoctor.inference.rule_engine import load_rules
from oomdoctor.pipeline.diagnosis import diagnose

from conftest import FIXTURES

RULES = load_rules(known_advice=known_advice())
UNKNOWN = FIXTURES / "unknown-oom"


def _feed(text: str) -> list:
    parser = em.EngineMetricsParser()
    return [e for n, raw in enumerate(text.splitlines(), 1) for e in parser.feed(Line(LineRef("m", n, None, raw), raw))]


def test_the_scrape_lines_of_both_engines_are_read_with_their_labels() -> None:
    got = _feed((UNKNOWN / "vllm_oom_metrics_preempting.log").read_text())
    assert sorted((e.get("metric"), e.get("name"), e.get("value")) for e in got) == [
        ("kv_usage", "vllm:gpu_cache_usage_perc", 0.99),
        ("kv_usage", "vllm:kv_cache_usage_perc", 0.99),
        ("preemptions", "vllm:num_preemptions_total", 37.0),
        ("running", "vllm:num_requests_running", 64.0),
        ("waiting", "vllm:num_requests_waiting", 12.0),
    ]
    assert got[0].get("labels") == {"engine": "0", "model_name": "Qwen/Qwen2.5-32B-Instruct"}
    sg = _feed((UNKNOWN / "sglang_driver_oom_metrics_full_pool.log").read_text())
    # The HELP and TYPE comments and sglang:cache_hit_rate are not read.
    assert sorted((e.get("engine"), e.get("metric"), e.get("value")) for e in sg) == [("sglang", "kv_usage", 0.97), ("sglang", "running", 212.0), ("sglang", "waiting", 41.0)]


def test_near_misses_other_series_comments_and_bad_values_are_not_read() -> None:
    text = "\n".join([
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
        'vllm:kv_cache_usage_perc_extra{engine="0"} 0.5',
        'vllm:prompt_tokens_total{engine="0"} 7.0',
        'vllm:kv_cache_usage_perc{engine="0"} 12.5',
        'vllm:num_requests_running{engine="0"} NaN',
        'vllm:num_requests_waiting{engine="0 3',
        'DCGM_FI_DEV_FB_USED{gpu="0"} 70210',
    ])
    assert _feed(text) == []


def test_a_prometheus_query_result_is_read_per_point() -> None:
    data = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "vllm:kv_cache_usage_perc", "engine": "0"}, "values": [[1717000000, "0.41"], [1717000015, "1.0"]]},
        {"metric": {"__name__": "vllm:num_preemptions_total", "engine": "0"}, "values": [[1717000000, "0"], [1717000015, "NaN"], [1717000030, "5"]]},
        {"metric": {"__name__": "DCGM_FI_DEV_FB_USED", "gpu": "0"}, "values": [[1717000000, "70210"]]},
    ]}}
    got = em.query_events(data, LineRef("q.json", 1, None, ""))
    assert [(e.get("metric"), e.get("value")) for e in got] == [("kv_usage", 0.41), ("kv_usage", 1.0), ("preemptions", 0.0), ("preemptions", 5.0)]
    assert [(e.get("metric"), e.get("value")) for e in _feed(json.dumps(data))] == [(e.get("metric"), e.get("value")) for e in got]  # pasted on one line


def _diff(paths: list[Path]) -> tuple[str, list[tuple[str, float]], dict]:
    d = diagnose([str(p) for p in paths], RULES)
    diff = d.findings[0].extra.get("differential", [])
    assert d.facts is not None
    return d.verdict_class, [(c["class"], c["likelihood"]) for c in diff], d.facts.values


def test_preemptions_before_the_failure_move_the_differential_to_activations() -> None:
    klass, before, _ = _diff([UNKNOWN / "vllm_oom_no_metrics.log"])
    # The OOM message alone: PyTorch held 95% of the card with nothing freed, as while weights or the KV pool
    # load; an allocator failure in a vLLM server is not its KV budget check, so the weights lead (a hypothesis).
    assert klass == "weights_dont_fit" and before[0][0] == "weights_dont_fit" and "startup_kv" not in dict(before)
    klass, after, facts = _diff([UNKNOWN / "vllm_oom_metrics_preempting.log"])
    assert (facts["metrics_kv_usage"], facts["metrics_preemptions"], facts["metrics_waiting"], facts["metrics_running"]) == (0.99, 37, 12, 64)
    assert facts["metrics_kv_pressure"] is True and facts["server_ready"] is True
    # A step ahead of the next: named as a hypothesis (no rule holds), not decided.
    assert klass == "runtime_activation" and after[0][0] == "runtime_activation" and 0.5 < after[0][1] < 0.7
    assert "weights_dont_fit" not in dict(after)  # running requests: the weights had loaded


def test_an_idle_scrape_says_nothing_about_the_failure() -> None:
    _, before, _ = _diff([UNKNOWN / "vllm_oom_no_metrics.log"])
    _, idle, facts = _diff([UNKNOWN / "vllm_oom_metrics_idle.log"])
    assert facts["metrics_kv_pressure"] is False and "metrics_serving" not in facts
    assert idle == before


def test_sglang_full_token_pool_with_a_queue_is_pressure(tmp_path: Path) -> None:
    _, before, _ = _diff([UNKNOWN / "sglang_driver_oom_no_context.log"])
    _, after, facts = _diff([UNKNOWN / "sglang_driver_oom_metrics_full_pool.log"])
    assert facts["metrics_engine"] == "sglang" and facts["metrics_kv_pressure"] is True
    assert before[0][1] == before[1][1]  # a tie without the metrics
    assert after[0] == ("runtime_activation", max(p for _, p in after)) and after[0][1] > after[1][1]


def test_the_scrape_given_as_a_file_or_in_an_issue_body_is_the_same_evidence(tmp_path: Path) -> None:
    lines = (UNKNOWN / "vllm_oom_metrics_preempting.log").read_text().splitlines()
    scrape, oom = [line for line in lines if line.startswith("vllm:")], [line for line in lines if "pid=2211" in line]
    (tmp_path / "vllm.log").write_text("\n".join(oom) + "\n")
    (tmp_path / "metrics.prom").write_text("\n".join(scrape) + "\n")
    (tmp_path / "metrics.txt").write_text("\n".join(scrape) + "\n")
    want = _diff([UNKNOWN / "vllm_oom_metrics_preempting.log"])[1]
    assert _diff([tmp_path / "vllm.log", tmp_path / "metrics.prom"])[1] == want
    assert _diff([tmp_path / "vllm.log", tmp_path / "metrics.txt"])[1] == want
    query = {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {"__name__": n.split("{")[0], "engine": "0"}, "value": [1717000000, n.split()[-1]]} for n in scrape]}}
    (tmp_path / "query.json").write_text(json.dumps(query))
    assert _diff([tmp_path / "vllm.log", tmp_path / "query.json"])[1] == want
    body = tmp_path / "issue.md"
    body.write_text("### Describe the bug\n\nThe engine died under load.\n\n```\n" + "\n".join(oom) + "\n```\n\nMetrics just before:\n\n```\n" + "\n".join(scrape) + "\n```\n")
    assert _diff([body])[1] == want


def test_a_scrape_pasted_alone_is_read_and_is_no_oom(tmp_path: Path) -> None:
    scrape = tmp_path / "metrics.txt"
    scrape.write_text("\n".join(line for line in (UNKNOWN / "vllm_oom_metrics_preempting.log").read_text().splitlines() if not line.startswith("(EngineCore")) + "\n")
    d = diagnose([str(scrape)], RULES)
    assert d.verdict_class == "none" and d.facts is not None
    assert (d.facts.get("metrics_engine"), d.facts.get("metrics_preemptions"), d.facts.get("metrics_kv_pressure")) == ("vllm", 37, True)

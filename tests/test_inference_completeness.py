"""Evidence completeness, phase and the confidence model on constructed cut / damaged pastes (DESIGN §2.1)."""

from __future__ import annotations

import pytest

from conftest import FIXTURES

INC = FIXTURES / "incomplete"


@pytest.mark.parametrize(
    ("name", "klass", "phase", "source", "max_conf", "code"),
    [
        # A traceback cut inside graph capture: the capture class, as a hypothesis.
        ("pos_cut_in_capture_traceback_2025.log", "cuda_graph", "graph_capture", "frames", 0.45, 4),
        # "hit an exception:" with nothing after it, after serving traffic: runtime, weaker (context only).
        ("pos_hit_exception_nothing_after_2026.log", "runtime_activation", "prefill", "context", 0.35, 4),
        # A cut mark but no failure record: nothing to hypothesise about.
        ("pos_cut_marker_no_failure.log", "none", None, None, 0.35, 4),
    ],
)
def test_incomplete_pastes_are_inconclusive(run_cli, name, klass, phase, source, max_conf, code) -> None:
    res = run_cli("diagnose", str(INC / name), "--format", "json")
    v = res.json["verdict"]
    assert res.code == code
    assert v["evidence"] == "incomplete" and v["inconclusive"] is True
    assert v["class"] == klass
    assert v["confidence"] <= max_conf
    if phase:
        assert v["phase"] == {"name": phase, "source": source}
    assert v["confidence_factors"], "an incomplete verdict names what lowered it"
    text = run_cli("diagnose", str(INC / name)).out
    assert text.splitlines()[0].startswith("INCONCLUSIVE: evidence incomplete - ")


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("neg_capture_traceback_ends_in_other_error.log", "RuntimeError"),
        ("neg_serving_then_clean_shutdown_2026.log", "shut down cleanly"),
    ],
)
def test_none_is_confident_only_with_positive_evidence(run_cli, name, reason) -> None:
    res = run_cli("diagnose", str(INC / name), "--format", "json")
    v = res.json["verdict"]
    assert res.code == 0
    assert (v["class"], v["evidence"], v["inconclusive"]) == ("none", "complete", False)
    assert v["confidence"] == 0.9
    assert reason in v["summary"]


def test_none_without_an_end_is_medium(run_cli, tmp_path) -> None:
    log = tmp_path / "s.log"
    log.write_text("[2026-02-03 17:40:11 TP0] Decode batch, #running-req: 64, #token: 91233, token usage: 0.88, cuda graph: True, gen throughput (token/s): 2210.45, #queue-req: 12\n")
    v = run_cli("diagnose", str(log), "--format", "json").json["verdict"]
    assert (v["class"], v["confidence"]) == ("none", 0.6)


def test_bare_message_without_phase_is_unknown_not_runtime(run_cli) -> None:
    res = run_cli("diagnose", str(FIXTURES / "unknown-oom" / "bare_message_no_phase.log"), "--format", "json")
    v = res.json["verdict"]
    assert (res.code, v["class"], v["evidence"]) == (3, "unknown_oom", "fragment")
    assert "where the allocation failed" in v["summary"]
    assert res.json["findings"][0]["recommendations"] == []


def test_phase_from_frames_beats_context_and_moves_confidence(run_cli) -> None:
    framed = run_cli("diagnose", str(FIXTURES / "runtime-activation-oom" / "pos_decode_oom_2025_tp2.log"), "--format", "json").json["verdict"]
    context = run_cli("diagnose", str(FIXTURES / "runtime-oom-after-startup" / "pos_serving_traffic_no_frames.log"), "--format", "json").json["verdict"]
    assert framed["phase"]["source"] == "frames" and not any("phase" in f["factor"] for f in framed["confidence_factors"])
    assert context["phase"] == {"name": "prefill", "source": "context"}
    assert any(f["delta"] == -0.1 and "phase" in f["factor"] for f in context["confidence_factors"])


def test_engine_verdict_lines_stay_high(run_cli) -> None:
    v = run_cli("diagnose", str(FIXTURES / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log"), "--format", "json").json["verdict"]
    assert v["class"] == "startup_kv" and v["confidence"] >= 0.9 and v["evidence"] == "complete"

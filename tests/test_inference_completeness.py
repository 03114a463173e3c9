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


# SGLang 0.4's scheduler traceback as a user pastes it above the log it belongs to (sgl-project/sglang#4895's layout):
# the first frames, a blank line, then the launch command and the server's own lines.
_CUT_ABOVE_LOG = """[2025-03-29 18:18:34 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1999, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 249, in __init__
    self.tp_worker = TpWorkerClass(
{exception}
python3 -m sglang.launch_server --model-path /models/gemma-3-27b-it --port 30000
[2025-03-29 18:12:40] server_args=ServerArgs(model_path='/models/gemma-3-27b-it', mem_fraction_static=0.88, tp_size=1)
[2025-03-29 18:18:34 TP0] Load weight end. type=Gemma3ForConditionalGeneration, dtype=torch.bfloat16, avail mem=3.64 GB, mem usage=18.82 GB.
"""


def test_a_traceback_cut_above_more_pasted_log_is_incomplete(run_cli, tmp_path) -> None:
    """Python always ends a traceback with its exception line: the last one of a paste that never reached it was cut,
    though the paste goes on below it. Near miss: the same traceback with its exception line is a whole record."""
    cut = tmp_path / "cut.log"
    cut.write_text(_CUT_ABOVE_LOG.format(exception=""))
    v = run_cli("diagnose", str(cut), "--format", "json").json["verdict"]
    assert (v["evidence"], v["inconclusive"]) == ("incomplete", True)
    assert "the traceback from line 1 (its last frame at line 4) has no exception line" in v["evidence_reason"]
    assert v["confidence"] <= 0.35
    whole = tmp_path / "whole.log"
    whole.write_text(_CUT_ABOVE_LOG.format(exception="ValueError: unsupported rope scaling type 'yarn2'"))
    v = run_cli("diagnose", str(whole), "--format", "json").json["verdict"]
    assert (v["class"], v["evidence"]) == ("none", "complete")

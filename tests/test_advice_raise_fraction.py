"""raise-mem-fraction-static when the log lacks the server_args line, and for SGLang's 2026 sliding-window
(SWA) pool error, whose KV budget is positive: a value only where it is known to be a raise."""

from __future__ import annotations

from pathlib import Path

LOAD = (
    "[2026-07-01 10:00:00 TP0] Load weight begin. avail mem=78.50 GB\n"
    "[2026-07-01 10:00:30 TP0] Load weight end. elapsed=30.00 s, type=GptOssForCausalLM, avail mem=20.10 GB, mem usage=58.40 GB.\n"
)
NOT_ENOUGH = "[2026-07-01 10:00:31 TP0] RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n"
SWA = (
    "RuntimeError: SWA pool cap (65536 tokens, 12.50 GiB) leaves no room for the full KV pool within the available 10.25 GiB. "
    "Reduce --max-running-requests, lower SGLANG_SWA_EVICTION_INTERVAL, or increase --mem-fraction-static.\n"
)
ARGS = "[2026-07-01 09:59:00] server_args=ServerArgs(model_path='m', mem_fraction_static={y}, tp_size=1)\n"


def _raise(run_cli, tmp_path: Path, text: str) -> dict:
    log = tmp_path / "server.log"
    log.write_text(text)
    res = run_cli("diagnose", str(log), "--format", "json")
    assert res.json["verdict"]["class"] == "startup_kv"
    [rec] = [r for r in res.json["findings"][0]["recommendations"] if r["flag"] == "--mem-fraction-static"]
    return rec


def test_a_kv_budget_at_or_below_zero_gets_its_value_without_server_args(run_cli, tmp_path: Path) -> None:
    rec = _raise(run_cli, tmp_path, LOAD + NOT_ENOUGH)
    # Weights 58.40 of 78.50 GiB: any y that fits them is above the y that left no KV, whatever it was.
    assert rec["direction"] == "raise" and rec["current"] is None
    assert 58.40 / 78.50 < rec["value"] <= 1 - 10 / 78.50
    assert "the y in use" in rec["why"]


def test_the_swa_error_without_server_args_gets_no_value(run_cli, tmp_path: Path) -> None:
    rec = _raise(run_cli, tmp_path, LOAD + SWA)
    assert rec["value"] is None
    assert "--max-running-requests" in rec["why"] and "server_args" in rec["why"]


def test_the_swa_error_at_the_top_of_the_window_gets_no_lower_value(run_cli, tmp_path: Path) -> None:
    rec = _raise(run_cli, tmp_path, ARGS.format(y=0.88) + LOAD + SWA)
    assert (rec["value"], rec["current"]) == (None, 0.88)
    assert "no raise is left" in rec["why"]
    below = _raise(run_cli, tmp_path, ARGS.format(y=0.78) + LOAD + SWA)
    assert below["current"] == 0.78 and below["value"] > 0.78


def test_a_finer_step_is_a_raise_when_the_round_one_is_not(run_cli, tmp_path: Path) -> None:
    # Window 0.7567..0.8726: 0.85 is no raise from 0.86, 0.87 is.
    rec = _raise(run_cli, tmp_path, ARGS.format(y=0.86) + LOAD + SWA)
    assert (rec["current"], rec["value"]) == (0.86, 0.87)
    assert any("above 0.86" in step["formula"] for step in rec["derivation"])
    top = _raise(run_cli, tmp_path, ARGS.format(y=0.8726) + LOAD + SWA)
    assert top["value"] is None and "no raise is left" in top["why"]


def test_a_positive_kv_budget_is_not_called_smaller_than_the_weights(run_cli, tmp_path: Path) -> None:
    """At y=0.78, y*pre = 61.23 GiB is above the 58.40 GiB of weights: the budget is 2.83 GiB, positive but too small."""
    rec = _raise(run_cli, tmp_path, ARGS.format(y=0.78) + LOAD + SWA)
    assert rec["current"] == 0.78 and rec["value"] > 0.78
    assert "than the weights" not in rec["why"]
    assert "At y=0.78 the KV budget y*pre - W is 2.83 GiB, positive but too small" in rec["why"]
    # Below zero the static share really is smaller than the weights, and the words say so.
    none_left = _raise(run_cli, tmp_path, ARGS.format(y=0.7) + LOAD + NOT_ENOUGH)
    assert "At y=0.7 the static share y*pre is smaller than the weights, so the KV budget is -3.45 GiB" in none_left["why"]

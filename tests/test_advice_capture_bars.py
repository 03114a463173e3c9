"""A piecewise (token) capture bar is not the decode batch size that --cuda-graph-max-bs halves."""

from __future__ import annotations

from pathlib import Path

from conftest import FIXTURES

BASE = FIXTURES / "sglang-cuda-graph-oom" / "pos_capture_failed_2025.log"


def _max_bs(run_cli, log: Path) -> dict:
    res = run_cli("diagnose", str(log), "--format", "json")
    assert res.json["verdict"]["class"] == "cuda_graph"
    [rec] = [r for f in res.json["findings"] for r in f["recommendations"] if r["flag"] == "--cuda-graph-max-bs"]
    return rec


def test_a_token_bar_leaves_the_batch_size_to_the_configured_maximum(run_cli, tmp_path: Path) -> None:
    lines = BASE.read_text().splitlines(keepends=True)
    [i] = [n for n, line in enumerate(lines) if line.startswith("Capturing batches (bs=")]
    lines[i] = "Capturing num tokens (num_tokens=8192 avail_mem=0.21 GB):  43%|####      | 15/35 [00:09<00:12,  1.60it/s]\n"
    log = tmp_path / "piecewise.log"
    log.write_text("".join(lines))
    rec = _max_bs(run_cli, log)
    assert rec["direction"] == "lower" and rec["current"] == 256
    assert rec["value"] == 128  # half the configured 256, not half of 8192 tokens


def test_the_decode_bar_still_decides(run_cli) -> None:
    rec = _max_bs(run_cli, BASE)
    bar = next(line for line in BASE.read_text().splitlines() if line.startswith("Capturing batches (bs="))
    failing = int(bar.split("bs=")[1].split()[0])
    assert rec["value"] < rec["current"] and rec["value"] <= failing // 2

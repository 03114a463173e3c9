"""vLLM's one-line startup accounting (0.10.2, 0.26+) gives the budget facts when no profiling line is logged."""

from __future__ import annotations

from pathlib import Path

from oomdoctor.base.units import GIB

LOG = (
    "(APIServer pid=1) INFO 06-20 09:12:40 [utils.py:233] non-default args: {'model': 'Qwen/Qwen3-14B', 'gpu_memory_utilization': 0.9, 'max_model_len': 32768}\n"
    "(EngineCore_DP0 pid=2211) INFO 06-20 09:13:31 [gpu_worker.py:298] Free memory on device (78.5/79.19 GiB) on startup. Desired GPU memory utilization "
    "is (0.9, 71.27 GiB). Actual usage is 27.52 GiB for weight, 1.24 GiB for peak activation, 0.35 GiB for non-torch memory, and 0.93 GiB for CUDAGraph "
    "memory. Replace gpu_memory_utilization config with `--kv-cache-memory=44520000000` (41.46 GiB) to fit into requested memory, or "
    "`--kv-cache-memory=51880000000` (48.32 GiB) to fully utilize gpu memory. Current kv cache memory in use is 41.23 GiB.\n"
    "(APIServer pid=1) INFO 06-20 09:13:40 [launcher.py:37] Application startup complete.\n"
)


def test_the_accounting_line_fills_the_budget(run_cli, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(LOG)
    res = run_cli("diagnose", str(log), "--format", "json")
    b = res.json["budget"]
    assert res.json["verdict"]["class"] == "none"
    assert (b["weights_bytes"], b["kv_budget_bytes"], b["capacity_bytes"]) == (round(27.52 * GIB), round(41.23 * GIB), round(79.19 * GIB))
    assert b["cuda_graph_bytes"] == round(0.93 * GIB)
    [non_kv] = b["derivations"]["non_kv_bytes"]
    assert non_kv["value"] == round(27.52 * GIB) + round(1.24 * GIB) + round(0.35 * GIB)  # weights + activation peak + non-torch

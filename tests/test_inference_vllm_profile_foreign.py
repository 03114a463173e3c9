"""vLLM 0.6.4's initial_memory_usage less what this process loaded: another tenant's memory, only when its own
non_torch_memory holds it (0.6.4 counts a tenant there), every model's weights counted (a speculative decoder
loads a draft after the target) and NCCL's buffers allowed for with tensor parallelism."""

from __future__ import annotations

from pathlib import Path

from oomdoctor.api import diagnose
from oomdoctor.base.units import GIB

from conftest import FIXTURES

POS = FIXTURES / "vllm-profile-foreign-memory" / "pos_second_instance_0_6_4.log"


def _log(tmp_path: Path, weights: list[str], initial: str, non_torch: str, tp: int = 1) -> Path:
    lines = [f"INFO 11-22 10:14:31 api_server.py:586] args: Namespace(model='m', tensor_parallel_size={tp}, gpu_memory_utilization=0.9)"]
    lines += [f"INFO 11-22 10:14:48 model_runner.py:1077] Loading model weights took {w} GB" for w in weights]
    lines.append(
        f"INFO 11-22 10:14:51 worker.py:232] Memory profiling results: total_gpu_memory=79.15GiB initial_memory_usage={initial}GiB "
        f"peak_torch_memory=18.10GiB memory_usage_post_profile=18.20GiB non_torch_memory={non_torch}GiB kv_cache_size=52.30GiB gpu_memory_utilization=0.90"
    )
    p = tmp_path / "v064.log"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_the_second_instance_is_found_and_its_size_derived() -> None:
    d = diagnose([str(POS)])
    assert d.verdict_rule == "vllm-profile-foreign-memory"
    # 68.01 - 9.4617 - 0.59 (context) GiB
    assert abs(d.facts.values["startup_foreign_bytes"] / GIB - (68.01 - 9.4617 - 600 / 1024)) < 0.01


def test_a_draft_model_is_this_processs_own_weights(tmp_path: Path) -> None:
    """Target 14.99 GB and draft 2.32 GB: initial usage 17.93 GiB is both and a context, no tenant."""
    d = diagnose([str(_log(tmp_path, ["14.9888", "2.3214"], "17.93", "0.38"))])
    assert d.facts.values.get("startup_foreign_bytes", 0) < 0.1 * GIB and d.verdict_rule != "vllm-profile-foreign-memory"


def test_a_tenant_not_in_non_torch_memory_is_no_tenant(tmp_path: Path) -> None:
    """Near miss: 15 GiB over the weights while non_torch_memory says 0.38 GiB: the premise fails, no figure."""
    d = diagnose([str(_log(tmp_path, ["2.3214"], "17.93", "0.38"))])
    assert "startup_foreign_bytes" not in d.facts.values


def test_tensor_parallel_buffers_are_allowed_for(tmp_path: Path) -> None:
    """TP=4: 3.2 GiB over the weights with 2.9 GiB of non-torch memory is NCCL's, not another process's."""
    d = diagnose([str(_log(tmp_path, ["16.0000"], "19.20", "2.90", tp=4))])
    assert d.facts.values.get("startup_foreign_bytes", 0) < 2 * GIB and d.verdict_rule != "vllm-profile-foreign-memory"


def test_one_listed_process_holding_all_used_memory_is_the_server_not_a_tenant(tmp_path: Path) -> None:
    """vllm#13067 (container, TP=8): "Process 2377657 has 79.19 GiB memory in use" is all the card's used memory
    while PyTorch accounts for 69 GiB of it: the one process is the server under its host PID, and the other 10 GiB
    are its own non-PyTorch memory (NVML counts them in its figure), not another tenant (foreign_process 0.65
    before). Near miss: the listed process holding only part of it leaves the tenant reading in place."""
    def message(process_gib: str) -> str:
        return (
            "ERROR 02-10 18:06:30 engine.py:139] OutOfMemoryError('CUDA out of memory. Tried to allocate 1.27 GiB. GPU 0 has a total capacity of "
            f"79.33 GiB of which 109.81 MiB is free. Process 2377657 has {process_gib} GiB memory in use. Of the allocated memory 67.68 GiB is "
            "allocated by PyTorch, with 76.00 MiB allocated in private pools (e.g., CUDA Graphs), and 1.47 GiB is reserved by PyTorch but unallocated.')\n"
        )

    whole = tmp_path / "whole.log"
    whole.write_text(message("79.19"))
    assert diagnose([str(whole)]).facts.values["unaccounted_tenant"] is False
    part = tmp_path / "part.log"
    part.write_text(message("40.00"))
    assert diagnose([str(part)]).facts.values["unaccounted_tenant"] is True

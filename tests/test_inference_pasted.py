"""Machine state pasted or given beside a log, as facts and verdicts: the card, the versions, the server's family."""

from __future__ import annotations

from pathlib import Path

from oomdoctor.advice.registry import known_advice
from oomdoctor.base.units import MIB
from oomdoctor.inference.facts.pasted import physical_gpu
from oomdoctor.inference.facts.store import Facts
from oomdoctor.inference.rule_engine import load_rules
from oomdoctor.memory.gpus import find_gpu
from oomdoctor.pipeline.diagnosis import diagnose

from conftest import FIXTURES

RULES = load_rules(known_advice=known_advice())
PASTED = FIXTURES / "pasted"
VLLM_OOM = FIXTURES / "vllm-runtime-activation" / "pos_v1_execute_model.log"
# A driver-level OOM names no card and no figure: the capacity comes from elsewhere or not at all.
SGLANG_DRIVER_OOM = "[2025-05-01 08:00:31 TP0] Scheduler hit an exception: RuntimeError: CUDA error: out of memory\n[2025-05-01 08:00:31] Received sigquit from a child process. It usually means the child failed.\n"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_an_environment_report_names_the_card_and_the_versions(tmp_path: Path) -> None:
    alone = diagnose([str(_write(tmp_path, "oom.log", SGLANG_DRIVER_OOM))], RULES)
    assert alone.facts.get("capacity_bytes") is None
    both = diagnose([str(_write(tmp_path, "both.log", (PASTED / "check_env_sglang.txt").read_text() + SGLANG_DRIVER_OOM))], RULES)
    f = both.facts
    # The named card's total as CUDA reports it (the GPU table), not nvidia-smi's 97871 MiB.
    assert f.get("capacity_bytes") == find_gpu("H20").capacity_bytes < 97871 * MIB and f.origins["capacity_bytes"] == "environment"
    assert f.get("likely_gpu") == "H20 96GB" and both.budget["likely_gpu"] == "H20 96GB"
    assert (f.get("gpu_count"), f.get("gpu_names"), f.get("sglang_version"), f.get("torch_version"), f.get("driver_version")) == (8, ("NVIDIA H20",), "0.4.3.post2", "2.5.1+cu124", "550.127.08")


def test_the_oom_messages_own_capacity_outranks_a_pasted_table(tmp_path: Path) -> None:
    table = (PASTED / "smi_535_sglang_tp2_tenant.txt").read_text()
    d = diagnose([str(_write(tmp_path, "x.log", VLLM_OOM.read_text() + table))], RULES)
    assert d.facts.origins["capacity_bytes"] == "oom_message"  # 79.19 GiB, not the table's 81559 MiB
    assert d.facts.get("gpu_names") == ("NVIDIA H100 80GB HBM3",) and d.facts.get("cuda_version") == "12.2"


def test_cuda_visible_devices_maps_pytorchs_index_to_nvidia_smis() -> None:
    f = Facts()
    f.set("device", 0)
    assert physical_gpu(f) == 0
    f.set("cuda_visible_devices", "2,3")
    assert physical_gpu(f) == 2
    f.set("device", 5)
    assert physical_gpu(f) is None
    f.set("cuda_visible_devices", "GPU-6b1b1d2c")  # UUIDs: the index is not known
    assert physical_gpu(f) is None


def test_a_compute_apps_csv_given_as_a_file_changes_the_verdict(tmp_path: Path) -> None:
    before = diagnose([str(VLLM_OOM)], RULES)
    assert before.verdict_class == "runtime_activation"
    csv = _write(
        tmp_path,
        "apps.csv",
        "pid, process_name, gpu_bus_id, used_gpu_memory [MiB]\n2211, VLLM::EngineCore, 00000000:18:00.0, 612 MiB\n2290, VLLM::Worker_TP0, 00000000:18:00.0, 70210 MiB\n9913, /opt/conda/bin/python3, 00000000:18:00.0, 9120 MiB\n",
    )
    after = diagnose([str(VLLM_OOM), str(csv)], RULES)
    assert (after.verdict_class, after.verdict_rule) == ("foreign_process", "smi-foreign-process")
    assert after.facts.get("smi_foreign_pids") == (9913,) and after.facts.get("smi_server_pids") == (2211, 2290)
    assert {r.path for r in after.findings[0].evidence} == {str(csv)}  # the rows it rests on, in the CSV


def test_one_process_n_entry_accounts_for_pytorch_and_its_launch_is_not_foreign(tmp_path: Path) -> None:
    # In a container (no "this process"): 402113 covers PyTorch's 74.90 + 0.80 GiB; 402050, 63 PIDs
    # before it, is the launching process's CUDA context: one launch, no other tenant.
    log = (
        "[2025-03-04 09:10:45 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 1050, in forward_extend\n'
        "    return self.model.forward(\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.25 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.02 GiB is free. "
        "Process 402050 has 1.50 GiB memory in use. Process 402113 has 76.60 GiB memory in use. Of the allocated memory 74.90 GiB is allocated by PyTorch, "
        "and 800.00 MiB is reserved by PyTorch but unallocated. See documentation for Memory Management\n"
    )
    d = diagnose([str(_write(tmp_path, "c.log", log))], RULES)
    f = d.facts
    assert (f.get("process_identity_known"), f.get("process_identity_source"), f.get("process_family_pids")) == (True, "arithmetic", (402050, 402113))
    assert f.get("foreign_process_count") == 0 and d.verdict_class != "foreign_process"


def test_a_pid_the_log_names_is_the_servers_own(tmp_path: Path) -> None:
    # vLLM's engine core holds a context on the worker's GPU; the log's own tag names its PID.
    log = (
        "(EngineCore_DP0 pid=3318) INFO 03-14 09:00:05 [core.py:71] Initializing a V1 LLM engine (v0.10.1) with config: model='m', tensor_parallel_size=1\n"
        "(EngineCore_DP0 pid=3318) ERROR 03-14 13:40:02 [core.py:710] Traceback (most recent call last):\n"
        '(EngineCore_DP0 pid=3318) ERROR 03-14 13:40:02 [core.py:710]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line 2210, in execute_model\n'
        "(EngineCore_DP0 pid=3318) ERROR 03-14 13:40:02 [core.py:710] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 79.19 GiB "
        "of which 512.00 MiB is free. Process 3318 has 1.20 GiB memory in use. Including non-PyTorch memory, this process has 77.40 GiB memory in use. "
        "Of the allocated memory 74.90 GiB is allocated by PyTorch, and 1.10 GiB is reserved by PyTorch but unallocated.\n"
    )
    d = diagnose([str(_write(tmp_path, "v.log", log))], RULES)
    assert d.facts.get("process_family_pids") == (3318,) and d.facts.get("foreign_process_count") == 0
    assert d.verdict_class != "foreign_process"


def test_a_collect_env_paste_changes_the_gpu_and_the_release_in_the_report(tmp_path: Path, run_cli) -> None:
    # A vLLM driver-level OOM names no card and no release; collect_env says four A100 40GB, and
    # CUDA_VISIBLE_DEVICES=2,3 makes PyTorch's GPU 0 the third card.
    oom = "(EngineCore_DP0 pid=3170) ERROR 05-02 11:21:37 [core.py:708] RuntimeError: CUDA error: out of memory\n"
    alone = run_cli("diagnose", str(_write(tmp_path, "oom.log", oom)), "--format", "markdown").out
    assert "| engine | vLLM (version not in the inputs) |" in alone and "A100" not in alone
    both = _write(tmp_path, "both.log", (PASTED / "collect_env_vllm_0_7.txt").read_text() + oom)
    md = run_cli("diagnose", str(both), "--format", "markdown").out
    assert "| engine | vLLM 0.7.2 |" in md and "| GPU | 4 x NVIDIA A100-SXM4-40GB, 39.39 GiB |" in md and "| NVIDIA driver | 550.90.07 |" in md
    data = run_cli("diagnose", str(both), "--format", "json").json
    assert data["budget"]["capacity_bytes"] == find_gpu("A100-40GB").capacity_bytes < 40960 * MIB and data["budget"]["likely_gpu"] == "A100 40GB"

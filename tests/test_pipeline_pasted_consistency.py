"""Property of issue 25: machine state that agrees with a log never makes its verdict less sure or changes it.

For every positive rule fixture, an nvidia-smi table (or the same state as ``nvidia-smi -q`` text or
``gpustat --json``) and an environment report consistent with what
the log itself says (the card its capacity or free memory points to, the processes its OOM message
lists, the failing one under the engine's own process title) are put before the log, as a bug report's
environment section comes first; the verdict's class must stay and its confidence must not drop.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oomdoctor.advice.registry import known_advice
from oomdoctor.base.toml_data import tomllib
from oomdoctor.base.units import GIB, MIB
from oomdoctor.evidence import family
from oomdoctor.inference.rule_engine import load_rules
from oomdoctor.memory.gpus import gpu_table, smallest_card_holding
from oomdoctor.pipeline.diagnosis import diagnose

from conftest import FIXTURES

RULES = load_rules(known_advice=known_advice())
# The smi-* fixtures hold their own nvidia-smi output already: the machine state is given.
def _has_incident(log: Path) -> bool:
    """Positive fixtures whose expected verdict is an incident (a few positives pin a 'none' verdict)."""
    expect = log.with_name(log.name[: -len(".log")] + ".expect.toml")
    return not expect.exists() or tomllib.loads(expect.read_text(encoding="utf-8")).get("class") != "none"


CASES = sorted(
    p for p in FIXTURES.glob("*/pos_*.log") if p.parent.name not in ("field", "issues") and not p.parent.name.startswith("smi-") and _has_incident(p)
)
_TITLES = {"sglang": "sglang::scheduler_TP0", "vllm": "VLLM::Worker_TP0"}
_MARKETING = {"H100-80GB": "NVIDIA H100 80GB HBM3", "H200": "NVIDIA H200", "H20": "NVIDIA H20", "A100-80GB": "NVIDIA A100-SXM4-80GB", "A100-40GB": "NVIDIA A100-SXM4-40GB", "L40S": "NVIDIA L40S", "L4": "NVIDIA L4", "A10": "NVIDIA A10G", "RTX-4090": "NVIDIA GeForce RTX 4090", "B200": "NVIDIA B200"}


def _card(capacity: int | None, pre: int | None) -> tuple[str, int] | None:
    """The card the log's own figures point to: the table's card within 4% of the capacity, else the smallest above pre."""
    if capacity:
        near = [g for g in gpu_table() if abs(g.capacity_bytes - capacity) <= 0.04 * capacity and g.name in _MARKETING]
        return (_MARKETING[near[0].name], near[0].capacity_bytes) if near else None
    if pre:
        held = smallest_card_holding(pre)
        near = [g for g in gpu_table() if held and g.capacity_bytes == held[1] and g.name in _MARKETING]
        return (_MARKETING[near[0].name], near[0].capacity_bytes) if near else None
    return None


def _rows(d) -> list[tuple[int, str, int]]:
    """(pid, name, MiB) of the processes the log shows: its OOM message's list, the failing one titled."""
    f = d.facts
    system = f.get("system")
    title = _TITLES.get(system, "python3")
    listed = list(f.get("process_list") or ())
    if not listed:
        capacity, free = f.get("capacity_bytes"), f.get("free_bytes")
        used = (capacity - free) if capacity and free is not None else 4 * GIB
        return [(4242, title, max(used // MIB, 1))]
    server = set(f.get("process_family_pids") or ()) | {f.get("assumed_self_pid")}
    failing = family.failing_pid_of(listed, f.get("allocated_bytes"), f.get("reserved_unallocated_bytes"))
    server.add(failing)
    pids = [p.pid for p in listed if p.pid is not None]
    own = max(pids, default=1000) + 100_000  # the "this process" entry has no PID: a new one, far from the others
    out = []
    for p in listed:
        pid = own if p.is_self or p.pid is None else p.pid
        out.append((pid, title if (p.is_self or p.pid in server) else "/usr/bin/python3", max(p.used_bytes // MIB, 1)))
    return out


def _paste(d, log: Path, parts: str) -> str:
    f = d.facts
    card = _card(f.get("capacity_bytes"), f.get("pre_bytes"))
    device = f.get("device") or 0
    lines = ["", "$ nvidia-smi", "+---------------------------------------------------------------------------------------+", "| NVIDIA-SMI 535.54.03              Driver Version: 535.54.03    CUDA Version: 12.2     |"]
    if card is not None:
        name, total = card
        used = sum(mib for _, _, mib in _rows(d))
        lines += [
            "|=========================================+======================+======================|",
            f"|   {device}  {name:<28}  On  | 00000000:18:00.0 Off |                    0 |",
            f"| N/A   41C    P0             132W / 700W |  {min(used, total // MIB):>6}MiB / {total // MIB:>6}MiB |      0%      Default |",
        ]
    lines += ["| Processes:                                                                            |", "|=======================================================================================|"]
    lines += [f"|  {device:>3}   N/A  N/A  {pid:>8}      C   {name:<38} {mib:>8}MiB |" for pid, name, mib in _rows(d)]
    lines += ["+---------------------------------------------------------------------------------------+", ""]
    query = ["$ nvidia-smi -q", "", "==============NVSMI LOG==============", "", "Driver Version                            : 535.54.03", "CUDA Version                              : 12.2", ""]
    # -q lists every GPU in index order: the ones before the failing one, by their names only.
    for i in range(device):
        query += [f"GPU 00000000:{0x18 + i:02X}:00.0", f"    Product Name                          : {card[0] if card else 'NVIDIA GPU'}"]
    query += [f"GPU 00000000:{0x18 + device:02X}:00.0"]
    if card is not None:
        name, total = card
        used = min(sum(mib for _, _, mib in _rows(d)), total // MIB)
        query += [f"    Product Name                          : {name}", "    FB Memory Usage", f"        Total                             : {total // MIB} MiB",
                  f"        Used                              : {used} MiB", f"        Free                              : {total // MIB - used} MiB"]
    query += ["    Processes"]
    for pid, name, mib in _rows(d):
        query += ["        GPU instance ID                   : N/A", "        Compute instance ID               : N/A", f"        Process ID                        : {pid}",
                  "            Type                          : C", f"            Name                          : {name}", f"            Used GPU Memory               : {mib} MiB"]
    query += [""]
    gpu: dict = {"index": device, "uuid": "GPU-5c1e7a0b-93d2-4f6e-8a41-0d2b9c7e3f18", "name": card[0] if card else "NVIDIA GPU"}
    if card is not None:
        gpu.update({"memory.used": min(sum(mib for _, _, mib in _rows(d)), card[1] // MIB), "memory.total": card[1] // MIB})
    gpu["processes"] = [{"username": "root", "command": name, "full_command": [name], "gpu_memory_usage": mib, "cpu_percent": 99.0, "cpu_memory_usage": 1 << 30, "pid": pid} for pid, name, mib in _rows(d)]
    stat = ["$ gpustat --json", *json.dumps({"hostname": "node-1", "driver_version": "535.54.03", "query_time": "2025-03-04T09:12:51.204817", "gpus": [gpu]}, indent=4, separators=(",", ": ")).splitlines(), ""]
    env = ["PyTorch version: 2.5.1+cu124", "CUDA runtime version: 12.4.131"]
    if card is not None:
        env += ["GPU models and configuration:", f"GPU {device}: {card[0]}"]
    lines = {"table": lines, "environment": ["", *env], "both": lines + env, "query": ["", *query], "gpustat": ["", *stat]}[parts]
    # Before the log, as a bug report's environment section comes first: after it, it would hide
    # where a cut log stops.
    return "\n".join(lines[1:]) + "\n" + log.read_text(errors="replace")


@pytest.mark.parametrize("parts", ["table", "environment", "both", "query", "gpustat"])
@pytest.mark.parametrize("log", CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_consistent_machine_state_keeps_the_class_and_does_not_lower_confidence(log: Path, parts: str, tmp_path: Path) -> None:
    before = diagnose([str(log)], RULES)
    assert before.facts is not None and before.verdict_class != "none"
    pasted = tmp_path / log.name
    pasted.write_text(_paste(before, log, parts))
    after = diagnose([str(pasted)], RULES)
    assert after.verdict_class == before.verdict_class
    assert after.verdict_confidence >= before.verdict_confidence
    assert after.facts is not None
    if parts != "environment":
        # The process list was read (whichever form), not passed over.
        assert after.facts.get("smi_identity") is not None and after.facts.get("smi_server_pids")

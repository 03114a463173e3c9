"""Facts of the machine state a user pasted beside the log: nvidia-smi output and environment reports.

The GPU's name and total replace the capacity guess (a card's name from an environment report is
looked up in data/gpus.toml; nvidia-smi's total is the card's own figure); the versions say which
engine release ran; the process table says which processes on the server's GPUs are the server's
own family (oomdoctor.evidence.family) and which are another tenant's. Imported only when a run
holds such events.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomdoctor.base.units import GIB
from oomdoctor.evidence import family as fam
from oomdoctor.evidence.parsers import engine_metrics as metrics
from oomdoctor.evidence.parsers import environment as env
from oomdoctor.evidence.parsers import nvidia_smi as smi
from oomdoctor.memory import log_figures
from oomdoctor.memory.gpus import gpu_of_name

if TYPE_CHECKING:
    from oomdoctor.base.evidence import Event, LineRef
    from oomdoctor.inference.facts.store import Facts

KINDS = smi.KINDS | env.KINDS | metrics.KINDS
# A GPU is one the server uses when one of its processes holds more than a CUDA context there (a rank's
# weights are many GiB); a worker's stray context on every card (vLLM 0.4's TP workers) is not use.
SERVER_GPU_BYTES = GIB
# Memory a tenant must hold on the server's GPU to be a cause worth naming (as collected-foreign-process).
FOREIGN_MATERIAL_BYTES = GIB


def has_pasted(events: list[Event]) -> bool:
    return any(e.kind in KINDS for e in events)


def _snapshot(events: list[Event]) -> list[Event]:
    """The events of the last nvidia-smi snapshot that lists processes, else of the last one."""
    table = [e for e in events if e.kind in smi.KINDS]
    if not table:
        return []
    with_processes = [e.get("snapshot") for e in table if e.kind == smi.KIND_SMI_PROCESS]
    chosen = with_processes[-1] if with_processes else table[-1].get("snapshot")
    return [e for e in table if e.get("snapshot") == chosen]


def table_processes(events: list[Event]) -> list[fam.GpuProcess]:
    """The processes of the chosen snapshot (a figure cut to "11242..." counts at its lower bound)."""
    return [
        fam.GpuProcess(e.get("pid"), e.get("name"), e.get("used_bytes") if e.get("used_bytes") is not None else e.get("used_at_least_bytes"), _gpu_key(e))
        for e in _snapshot(events)
        if e.kind == smi.KIND_SMI_PROCESS
    ]


def _gpu_key(e: Event) -> int | str | None:
    """Which GPU a process row is on: the table's index, a CSV's bus id or UUID, or None (a CSV that names none)."""
    gpu = e.get("gpu")
    return gpu if gpu is not None else e.get("gpu_bus_id") or e.get("gpu_uuid")


def physical_gpu(f: Facts) -> int | None:
    """The physical index (nvidia-smi's) of the GPU the OOM names (PyTorch's, after CUDA_VISIBLE_DEVICES)."""
    device = f.get("device")
    if device is None:
        return None
    visible = [d.strip() for d in str(f.get("cuda_visible_devices") or "").split(",") if d.strip()]
    if visible and all(d.isdigit() for d in visible):
        return int(visible[device]) if device < len(visible) else None
    return None if visible else device


def oom_failing_pid(f: Facts) -> int | None:
    """The OOM message's entry that is the failing process, by PyTorch's own figures (evidence.family)."""
    return fam.failing_pid_of(f.get("process_list") or (), f.get("allocated_bytes"), f.get("reserved_unallocated_bytes"))


def pasted_facts(f: Facts, events: list[Event]) -> None:
    """The environment report's facts, then the nvidia-smi snapshot's (its GPU figures are the stronger)."""
    _environment_facts(f, events)
    _metric_facts(f, events)
    snapshot = _snapshot(events)
    if snapshot:
        _smi_gpu_facts(f, snapshot)
        _smi_process_facts(f, events, snapshot)


def _environment_facts(f: Facts, events: list[Event]) -> None:
    seen: dict[str, tuple[str, LineRef]] = {}
    for e in events:
        if e.kind == env.KIND_ENV:
            name = e.get("name")
            if name == "cuda_build_version" or e.get("value") is None:
                continue
            seen.setdefault(name, (e.get("value"), e.ref))
    builds = [e for e in events if e.kind == env.KIND_ENV and e.get("name") == "cuda_build_version"]
    if "cuda_version" not in seen and builds:
        seen["cuda_version"] = (builds[0].get("value"), builds[0].ref)
    for name, (value, ref) in seen.items():
        if name == "vllm_version" and f.get("vllm_version"):
            continue  # the engine's own config line says which release ran
        f.set(name, value, ref)
    gpus = [e for e in events if e.kind == env.KIND_ENV_GPU]
    if not gpus:
        return
    indices = {i for e in gpus for i in e.get("indices")}
    names = sorted({e.get("name") for e in gpus})
    refs = [e.ref for e in gpus[:8]]
    f.set("gpu_count", len(indices), *refs)
    f.set("gpu_names", tuple(names), *refs)
    device = physical_gpu(f)
    named = next((e.get("name") for e in gpus if device in e.get("indices")), None) if device is not None else (names[0] if len(names) == 1 else None)
    card = gpu_of_name(named) if named else None
    if card is not None:
        f.offer("capacity_bytes", card.capacity_bytes, *refs[:1], source="environment")


def _smi_gpu_facts(f: Facts, snapshot: list[Event]) -> None:
    driver = next((e for e in snapshot if e.kind == smi.KIND_SMI_DRIVER), None)
    if driver is not None:
        f.set("driver_version", driver.get("driver_version"), driver.ref)
        f.set("cuda_version", driver.get("cuda_version") or f.get("cuda_version"), driver.ref)
    gpus = [e for e in snapshot if e.kind == smi.KIND_SMI_GPU]
    if not gpus:
        return
    driver_csv = next((e.get("driver_version") for e in gpus if e.get("driver_version")), None)
    if driver_csv:
        f.set("driver_version", driver_csv, gpus[0].ref)
    f.set("smi_gpus", len(gpus), *(e.ref for e in gpus[:8]))
    names = sorted({e.get("name") for e in gpus if e.get("name")})
    if names:
        f.set("gpu_names", tuple(names), *(e.ref for e in gpus[:8]))
    device = physical_gpu(f)
    totals = {e.get("total_bytes") for e in gpus if e.get("total_bytes")}
    failing = next((e for e in gpus if e.get("index") is not None and e.get("index") == device and e.get("total_bytes")), None)
    if failing is not None:
        f.offer("capacity_bytes", failing.get("total_bytes"), *failing.refs, source="nvidia_smi")
    elif len(totals) == 1:
        f.offer("capacity_bytes", totals.pop(), gpus[0].ref, source="nvidia_smi")


def _smi_process_facts(f: Facts, events: list[Event], snapshot: list[Event]) -> None:
    procs = table_processes(events)
    if not procs:
        if any(e.kind == smi.KIND_SMI_NO_PROCESSES for e in snapshot):
            # Taken when nothing held a compute context (before the start, or after the crash):
            # no tenant then. Inside a container the list is empty whatever runs (PID namespaces).
            f.set("smi_no_processes", True, next(e.ref for e in snapshot if e.kind == smi.KIND_SMI_NO_PROCESSES))
        return
    refs = [e.ref for e in snapshot if e.kind == smi.KIND_SMI_PROCESS]
    known = fam.log_pids(e for e in events if e.kind not in KINDS)
    failing = oom_failing_pid(f)
    if failing is not None:
        known.add(failing)
    device = physical_gpu(f)
    found = fam.family(procs, known, device)
    server = sorted(found.pids)
    f.set("smi_server_pids", tuple(server), *refs[:8])
    f.set("smi_identity", found.how, *refs[:8])
    server_gpus: set[int | str | None] = {p.gpu for p in procs if p.pid in found.pids and (p.used_bytes or 0) >= SERVER_GPU_BYTES}
    if device is not None:
        server_gpus.add(device)
    others = [p for p in procs if p.pid not in found.pids]
    # A CSV without a GPU column (the plain --query-compute-apps=pid,process_name,used_memory) says
    # which processes hold memory on the machine, not on which GPU: those are counted apart.
    placed = [p for p in others if p.gpu is not None and p.gpu in server_gpus]
    unplaced = [p for p in others if p.gpu is None]
    shortfall = f.get("shortfall_bytes")
    for prefix, group in (("smi_foreign", placed), ("smi_unplaced_foreign", unplaced)):
        held = log_figures.processes_bytes([p.used_bytes for p in group])
        f.set(f"{prefix}_process_bytes", held, *refs[:8])
        f.set(f"{prefix}_pids", tuple(sorted({p.pid for p in group if p.pid is not None})), *refs[:8])
        f.set(f"{prefix}_covers_shortfall", held >= FOREIGN_MATERIAL_BYTES and (shortfall is None or held >= shortfall))


# A KV pool this full with requests still waiting: the scheduler stopped admitting them for want of KV
# (vLLM preempts, SGLang retracts, at the pool's end; a pool nine tenths full is at it, block by block).
KV_NEARLY_FULL = 0.9


def _metric_facts(f: Facts, events: list[Event]) -> None:
    """The engine's own metrics before the failure: its peak KV use, preemptions and queues (the most of each)."""
    samples = [e for e in events if e.kind == metrics.KIND_ENGINE_METRIC]
    if not samples:
        return
    for what in ("kv_usage", "preemptions", "waiting", "running"):
        of = [e for e in samples if e.get("metric") == what]
        if of:
            top = max(of, key=lambda e: e.get("value"))
            value = top.get("value")
            f.set(f"metrics_{what}", value if what == "kv_usage" else int(value), top.ref)
    f.set("metrics_engine", samples[0].get("engine"), samples[0].ref)
    running, preempted = f.get("metrics_running"), f.get("metrics_preemptions")
    refs = [e.ref for e in samples[:8]]
    if (running or 0) > 0 or (preempted or 0) > 0:
        # Requests ran (or were preempted): the server had started and was serving. A scrape is taken
        # from a live server, so before the failure.
        f.set("metrics_serving", True, *refs)
        if f.get("server_ready") is not True:
            f.set("server_ready", True, *refs)
    usage, waiting = f.get("metrics_kv_usage"), f.get("metrics_waiting")
    if (preempted or 0) > 0 or (usage is not None and usage >= KV_NEARLY_FULL and (waiting or 0) > 0):
        f.set("metrics_kv_pressure", True, *refs)
    elif usage is not None and usage < KV_NEARLY_FULL and not preempted:
        f.set("metrics_kv_pressure", False, *refs)

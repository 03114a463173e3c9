"""Facts of PyTorch's own messages: the allocator's OOM figures, driver OOMs, host OOM kills, and the stage."""

from __future__ import annotations

from oomdoctor.base.evidence import Event
from oomdoctor.evidence.parsers import torch_oom as tt
from oomdoctor.inference.facts.derived import allocator_facts
from oomdoctor.inference.facts.store import PRECEDENCE, Facts
from oomdoctor.input.scan import BEFORE_LINES
from oomdoctor.memory import oom_arithmetic

# = evidence.parsers.host.KIND_HOST_DETAIL, spelled out so that a log without kubectl's lines does not import it.
KIND_HOST_DETAIL = "host_detail"

# The message's figures, in the order they are set; those that other sources give too are ranked in PRECEDENCE.
_MESSAGE_FIGURES = (
    "requested_bytes",
    "buffer_limit_bytes",
    "free_bytes",
    "capacity_bytes",
    "allocated_bytes",
    "reserved_unallocated_bytes",
    "private_pool_bytes",
    "allowed_bytes",
    "device",
)


def torch_facts(f: Facts, events: list[Event], oom_idx: list[int]) -> None:
    ooms = [events[i] for i in oom_idx if events[i].kind == tt.KIND_OOM]
    drivers = [events[i] for i in oom_idx if events[i].kind == tt.KIND_DRIVER_OOM]
    hosts = [e for e in events if e.kind == tt.KIND_HOST_OOM]
    # Every rank reports its own OOM; cite them all (a few), the first one decides the numbers.
    f.set("torch_oom", bool(ooms), *[e.ref for e in ooms[:8]])
    if ooms:
        f.set("oom_rank", ooms[0].rank or "GPU")
    f.set("driver_oom", bool(drivers), drivers[-1].ref if drivers else None)
    if drivers:
        f.set("driver_oom_source", drivers[0].get("source"), drivers[0].ref)
        if drivers[0].get("call"):
            f.set("driver_oom_call", drivers[0].get("call"), drivers[0].ref)
        _ggml_buffer_facts(f, events, drivers[0])
    _host_facts(f, hosts)
    _host_detail_facts(f, [e for e in events if e.kind == KIND_HOST_DETAIL])
    f.set("oom_count", len(ooms) + len(drivers))
    if ooms or drivers:
        # The first allocator OOM of the run is the one that broke it; later ones are fallout.
        _message_facts(f, ooms[0] if ooms else drivers[0])
    elif hosts:
        f.set("oom_stage", f.get("timeline_stage"))


# ggml prints the allocator's line right after the backend's failed cudaMalloc: a later one is another failure's.
_GGML_BUFFER_WITHIN_LINES = 3


def _ggml_buffer_facts(f: Facts, events: list[Event], driver: Event) -> None:
    """What the buffer whose cudaMalloc failed was for, by the ggml allocator that asked (compute or tensors)."""
    line = driver.ref.line
    buffer = next((e for e in events if e.kind == tt.KIND_GGML_BUFFER and e.ref.path == driver.ref.path and line <= e.ref.line <= line + _GGML_BUFFER_WITHIN_LINES), None)
    if buffer is not None:
        f.set("ggml_buffer_usage", buffer.get("usage"), buffer.ref)


# A host kill report's lines (Ray's: its sentence, then its table of its ten largest processes) within the scanner's
# window around a failure line are one report, cited by its first line.
_REPORT_LINES = BEFORE_LINES


def _host_facts(f: Facts, hosts: list[Event]) -> None:
    strong_host = [e for e in hosts if e.get("strength") == "strong"]
    cited = None
    if strong_host:
        last = strong_host[-1]
        cited = next(e for e in strong_host if e.get("source") == last.get("source") and e.ref.path == last.ref.path and 0 <= last.ref.line - e.ref.line <= _REPORT_LINES).ref
    f.set("host_oom", bool(strong_host), cited)
    weak_host = [e for e in hosts if e.get("strength") == "weak"]
    f.set("host_kill_weak", bool(weak_host), weak_host[-1].ref if weak_host else None)
    if hosts:
        f.set("host_kill_signal", True, hosts[-1].ref)
    if strong_host:
        f.set("host_kill_source", strong_host[-1].get("source"), strong_host[-1].ref)
        f.set("host_kill_sources", list(dict.fromkeys(e.get("source") for e in strong_host)), *(e.ref for e in strong_host[-8:]))
    killed = [e for e in hosts if e.get("rss_bytes")]
    if killed:
        f.set("host_killed_rss_bytes", killed[-1].get("rss_bytes"), killed[-1].ref)


def _host_detail_facts(f: Facts, details: list[Event]) -> None:
    """kubectl's figures around a killed container: its memory limit, restarts and exit code (the last of each)."""
    for key, fact in (("memory_limit_bytes", "host_memory_limit_bytes"), ("restart_count", "host_restart_count"), ("exit_code", "container_exit_code"), ("cgroup_oom_kills", "cgroup_oom_kills")):
        found = [e for e in details if e.get(key) is not None]
        if found:
            f.set(fact, found[-1].get(key), found[-1].ref)


def _message_facts(f: Facts, oom: Event) -> None:
    """The figures of the allocator message that broke the run, and the stage it happened in."""
    ref = oom.ref
    refs = oom.refs
    for key in _MESSAGE_FIGURES:
        if key in PRECEDENCE:
            f.offer(key, oom.get(key), *refs, source="oom_message")
        else:
            f.set(key, oom.get(key), *refs)
    f.set("oom_backend", oom.get("backend"))
    if oom.get("implausible"):
        f.set("implausible_values", oom.get("implausible"), *refs)
    f.set("oom_wrapper", oom.get("wrapper"), ref)
    f.set("oom_exception", oom.get("exception"))
    f.set("oom_message_complete", oom.get("complete"))
    processes = oom.get("processes") or ()
    if processes:
        f.set("process_list", processes, *refs)
        f.set("process_list_has_self", any(p.is_self for p in processes), *refs)
        selfs = [p for p in processes if p.is_self]
        if selfs:
            f.set("this_process_bytes", selfs[0].used_bytes, *refs)
    requested, free, unalloc = f.get("requested_bytes"), f.get("free_bytes"), f.get("reserved_unallocated_bytes")
    if free is not None:
        # Under a per-process cap the card's free memory is not this process's: what it could have had is the cap's.
        free = oom_arithmetic.free_to_process_bytes(free, f.get("allowed_bytes"), f.get("allocated_bytes"), unalloc)
        f.set("free_to_process_bytes", free, *refs)
    if requested is not None and free is not None:
        shortfall = oom_arithmetic.shortfall_bytes(requested, free)
        f.set("shortfall_bytes", shortfall.value, *refs, derivation=shortfall)
    if free is not None and unalloc is not None:
        f.set("reclaimable_bytes", oom_arithmetic.reclaimable_bytes(free, unalloc), *refs)
    allocator_facts(f, refs)
    frame_stage = oom.get("stage", "unknown")
    timeline = f.get("timeline_stage", "unknown")
    # The frames name the stage; without them, the startup milestones before the message do.
    # A message that names its own stage (llama.cpp's loader buffer) says where it failed as a traceback would.
    stage, stage_source = (frame_stage, oom.get("stage_source", "traceback")) if frame_stage != "unknown" else (timeline, "timeline")
    f.set("oom_stage", stage, ref)
    f.set("oom_stage_source", stage_source)
    f.set("oom_phase", oom.get("phase"))
    f.set("oom_line", ref.line, ref)

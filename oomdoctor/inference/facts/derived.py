"""Facts computed from other facts with oomdoctor.memory.budget: SGLang's weights, KV budget and feasible window,
memory held by others (at startup and at the OOM), the allocator's arithmetic, and vLLM's window."""

from __future__ import annotations

from oomdoctor.base.evidence import Event, LineRef
from oomdoctor.base.units import GIB, gib_text
from oomdoctor.evidence import family
from oomdoctor.evidence.parsers import sglang as sg
from oomdoctor.inference.facts.common import first
from oomdoctor.inference.facts.store import Facts
from oomdoctor.memory import budget, log_figures, oom_arithmetic
from oomdoctor.memory.derivation import Derived, Step
from oomdoctor.memory.gpus import likely_gpu

# Memory on the GPU before SGLang loaded weights, beyond its own context and NCCL, that points to
# another process (DESIGN: "other processes present at startup shrink both parts").
FOREIGN_AT_START_THRESHOLD_BYTES = 2 * GIB
# vLLM's startup check refuses u above this, whatever the free memory.
VLLM_UTIL_CEILING = 0.98


def allocator_facts(f: Facts, refs: tuple[LineRef, ...]) -> None:
    """Fragmentation and unaccounted memory from the allocator message's own figures."""
    requested, unalloc, capacity, free = f.get("requested_bytes"), f.get("reserved_unallocated_bytes"), f.get("capacity_bytes"), f.get("free_bytes")
    plausible = False
    if requested is not None and unalloc is not None:
        material = oom_arithmetic.fragmentation_material_bytes(capacity)
        plausible = unalloc >= requested and unalloc >= material
        f.set("fragmentation_material_bytes", material)
        if requested > 0:
            f.set("fragmentation_coverage", round(unalloc / requested, 2), *refs)
    f.set("fragmentation_plausible", plausible, *refs)
    limit = f.get("buffer_limit_bytes")
    if requested is not None and capacity:
        f.set("request_exceeds_card", requested > capacity, *refs)
    elif requested is not None and limit:
        # The device's largest single buffer (Metal's): a request above it is one no memory on the card would serve.
        f.set("request_exceeds_card", requested > limit, *refs)
    elif requested is not None and requested < oom_arithmetic.SMALLEST_SERVING_GPU_BYTES:
        # The message was cut before the card's size, but no GPU a server runs on is this small.
        f.set("request_exceeds_card", False, *refs)
    allocated = f.get("allocated_bytes")
    if capacity and free is not None and (allocated is not None or f.get("this_process_bytes")):
        unaccounted, others, threshold = oom_arithmetic.unaccounted_derivation(capacity, free, allocated, unalloc, f.get("this_process_bytes"))
        f.set("unaccounted_bytes", unaccounted.value, *refs, derivation=unaccounted)
        f.set("unaccounted_threshold_bytes", threshold)
        # One listed process holding all the card's used memory is the server itself (under its host PID in a
        # container: it holds PyTorch's allocations, so no other process can hold the rest): NVML counts a
        # process's own non-PyTorch memory (NCCL, all-to-all buffers, workspaces) in its figure, so what the
        # allocator's figures leave unexplained is the server's, not a tenant's.
        whole = any(p.used_bytes is not None and p.used_bytes >= (capacity - free) - oom_arithmetic.fragmentation_material_bytes(capacity) for p in f.get("process_list") or ())
        f.set("unaccounted_tenant", others > threshold and (f.get("shortfall_bytes") or 0) <= others and not whole, *refs)


def budget_facts(f: Facts) -> None:
    """SGLang's split of pre-load free memory: weights, KV budget, and the feasible mem_fraction_static window."""
    pre, post, mfs = f.get("pre_bytes"), f.get("post_bytes"), f.get("mem_fraction_static")
    refs = tuple(r for r in (f.ref("pre_bytes"), f.ref("post_bytes"), f.ref("mem_fraction_static")) if r)
    if pre and post is not None:
        weights = log_figures.sglang_weights_derivation(pre, post)
        f.offer("weights_bytes", weights.value, *refs[:2], source="sglang_budget", derivation=weights)
        f.set("weights_share_of_pre", round(weights.value / pre, 4), *refs[:2])
        if mfs is not None:
            kv = budget.sglang_kv_derivation(pre, post, mfs)
            f.offer("kv_budget_bytes", kv.value, *refs, source="sglang_budget", derivation=kv)
            f.set("dynamic_region_bytes", budget.sglang_dynamic_region_bytes(pre, mfs), *refs)
    capacity = f.get("capacity_bytes")
    if capacity:
        f.set("likely_gpu", likely_gpu(capacity))
    if pre:
        _window_facts(f, pre, max(capacity or 0, pre), refs)


def _window_facts(f: Facts, pre: int, capacity_hint: int, refs: tuple[LineRef, ...]) -> None:
    reserve = budget.sglang_min_activation_reserve_bytes(capacity_hint, f.get("tp_size", 1) or 1, f.get("pp_size", 1) or 1)
    f.set("activation_reserve_bytes", reserve.value, derivation=reserve)
    if "weights_bytes" not in f.values:
        return
    kv_floor = budget.kv_floor(f.get("context_len"), f.get("cell_bytes"))
    floor = kv_floor.value
    f.set("kv_floor_bytes", floor, derivation=kv_floor)
    window = budget.sglang_feasible_window(pre, f.get("weights_bytes"), floor, reserve.value)
    undecided = False
    if not window.feasible and budget.kv_floor_assumed(f.get("context_len"), f.get("cell_bytes")):
        without_kv = budget.sglang_feasible_window(pre, f.get("weights_bytes"), 0, reserve.value)
        if without_kv.feasible:
            # Only the assumed KV closes the window: keep the window the log proves (weights, reserve).
            window, undecided = without_kv, True
    f.set("max_safe_mfs", round(window.high, 4), derivation=Derived(window.high, window.steps))
    f.set("min_viable_mfs", round(window.low, 4), derivation=Derived(window.low, window.steps))
    f.set("_window", window)
    if undecided:
        f.set("kv_floor_bytes", 0, derivation=Derived(0, (Step("one request's KV", "not counted: the log gives no per-token KV size, and the assumed 1 GiB would close the window", 0, "bytes"),)))
        _weights_fit_undecided(f)
    else:
        f.set("weights_fit", window.feasible, *refs[:2])


def _weights_fit_undecided(f: Facts) -> None:
    """The weights fit with no KV and do not with the assumed one-request KV: the log cannot decide.

    Whether the KV of one request fits beside the weights is then a question of the per-token KV size
    the log did not give; saying "weights don't fit" (shard the model) or "raise the fraction" would
    rest on the assumed figure alone. ``weights_fit`` stays unset and the finding says what decides it.
    """
    f.set("weights_fit_undecided", True)


def foreign_facts(f: Facts, events: list[Event]) -> None:
    """Memory of other processes: in the OOM message's process list, across ranks, and before the weights."""
    _process_list_facts(f, events)
    unbalanced = first(events, sg.KIND_UNBALANCED)
    f.set("unbalanced_memory", unbalanced is not None, unbalanced.ref if unbalanced else None)
    if unbalanced is not None and unbalanced.get("local_free_bytes") and unbalanced.get("min_free_bytes") is not None:
        f.set("unbalanced_gap_bytes", log_figures.unbalanced_gap_bytes(unbalanced.get("local_free_bytes"), unbalanced.get("min_free_bytes")), unbalanced.ref)
    capacity, pre = f.get("capacity_bytes"), f.get("pre_bytes")
    if capacity and pre and pre > capacity:
        # Free memory above the card's total: one of the two figures is wrong (another card's line,
        # a misprint). Say so in implausible_values rather than let the bars clamp it silently.
        listed = tuple(f.get("implausible_values") or ())
        note = f"pre {gib_text(pre)} > capacity {gib_text(capacity)}"
        f.set("implausible_values", (*listed, note), f.ref("pre_bytes"), f.ref("capacity_bytes"))
    if capacity and pre:
        foreign = log_figures.sglang_startup_foreign_bytes(capacity, pre, f.get("init_mem_usage_bytes") or 0)
        f.set("startup_foreign_bytes", foreign.value, f.ref("capacity_bytes"), f.ref("pre_bytes"), derivation=foreign)


def _process_list_facts(f: Facts, events: list[Event]) -> None:
    """Which of the OOM message's processes are others: not the failing process, nor of its launch (evidence.family)."""
    processes = f.get("process_list") or ()
    if not processes:
        return
    listed = {p.pid for p in processes if p.pid is not None}
    failing = family.failing_pid_of(processes, f.get("allocated_bytes"), f.get("reserved_unallocated_bytes"))
    # The server's PIDs a pasted nvidia-smi table (when it names them: an assumed largest process is
    # no identity) or the log's own process tags name.
    table = set(f.get("smi_server_pids") or ()) if f.get("smi_identity") == "named" else set()
    named = family.launch_members(table | family.log_pids(events), listed)
    if f.get("process_list_has_self") or failing is not None or named:
        seeds = named | ({failing} if failing is not None else set())
        # "this process" carries no PID: PIDs near it cannot be told; near a named or failing PID they can.
        server = family.family((family.GpuProcess(p.pid, None, p.used_bytes) for p in processes), seeds).pids if seeds else frozenset()
        others = [p for p in processes if not p.is_self and p.pid not in server]
        f.set("process_identity_known", True)
        f.set("process_identity_source", "message" if f.get("process_list_has_self") else ("named" if named else "arithmetic"))
        if server:
            f.set("process_family_pids", tuple(sorted(server)))
    elif len(processes) >= 2:
        # In a container NVML reports host PIDs, so the server shows up as "Process N" too; the
        # largest entry is taken to be the server itself and the rest as other processes.
        largest = max(processes, key=lambda p: p.used_bytes)
        others = [p for p in processes if p is not largest]
        f.set("process_identity_known", False)
        f.set("assumed_self_pid", largest.pid)
    else:
        others = []
        f.set("process_identity_known", False)
        f.set("assumed_self_pid", processes[0].pid)
    f.set("foreign_process_count", len(others), f.ref("process_list"))
    f.set("foreign_process_bytes", log_figures.processes_bytes([p.used_bytes for p in others]), f.ref("process_list"))
    f.set("foreign_pids", tuple(p.pid for p in others if p.pid is not None))


def vllm_window(f: Facts) -> None:
    """The --gpu-memory-utilization window: enough for non-KV memory and one request, within free memory."""
    total, non_kv, need = f.get("capacity_bytes"), f.get("non_kv_bytes"), f.get("kv_needed_bytes")
    if not total or non_kv is None:
        return
    assumed = budget.kv_floor_assumed(f.get("max_model_len"), f.get("cell_bytes"), need)
    need = budget.kv_floor(f.get("max_model_len"), f.get("cell_bytes"), need, system="vllm").value
    needed = budget.vllm_util_for_kv(total, non_kv, need)
    free = f.get("free_at_start_bytes")
    cap = budget.vllm_max_safe_util(free, total) if free else Derived(0.95, (Step("largest u (free memory at start unknown)", "vLLM's usual ceiling", 0.95, "fraction"),))
    ceiling = min(cap.value, VLLM_UTIL_CEILING)
    f.set("max_safe_util", ceiling, derivation=cap)
    if needed.value > ceiling and assumed:
        without_kv = budget.vllm_util_for_kv(total, non_kv, 0)
        if without_kv.value <= ceiling:
            # Only the assumed KV puts the least u above the ceiling: keep the bound the log proves.
            f.set("min_viable_util", without_kv.value, derivation=without_kv)
            _weights_fit_undecided(f)
            return
    f.set("min_viable_util", needed.value, derivation=needed)
    f.set("weights_fit", needed.value <= ceiling)

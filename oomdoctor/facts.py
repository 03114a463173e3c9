"""Named facts: the typed evidence of one run turned into the flat values rules are written over.

Each fact may cite the lines it came from; a rule's finding cites the lines of the facts it used.
Facts that cannot be had are simply absent (a rule that needs them is reported as not evaluated).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from oomdoctor import budget, catalogue, completeness, phase
from oomdoctor.budget import Derived, Step
from oomdoctor.evidence import KIND_REPEATS, Event, LineRef
from oomdoctor.gpus import likely_gpu
from oomdoctor.parsers import records as rc
from oomdoctor.parsers import sglang as sg
from oomdoctor.parsers import torch_oom as tt
from oomdoctor.parsers import vllm as vl
from oomdoctor.runs import Run, dedupe_ooms, is_oom_event
from oomdoctor.units import GIB, gib_text

# Memory on the GPU before SGLang loaded weights, beyond its own context and NCCL, that points to
# another process (DESIGN: "other processes present at startup shrink both parts").
FOREIGN_AT_START_THRESHOLD_BYTES = 2 * GIB

_MM_HINTS = ("VL", "Omni", "Vision", "Llava", "LLaVA", "Qwen2_5_VL", "Gemma3ForConditional", "Mllama", "InternVL", "MiniCPMV")


class UndeclaredFact(KeyError):
    """A builder set a fact the catalogue does not declare (a programming error, never user input)."""


@dataclass
class Facts:
    """Facts of one incident: values, the lines each came from, and derivations of computed ones."""

    values: dict[str, Any] = field(default_factory=dict)
    refs: dict[str, tuple[LineRef, ...]] = field(default_factory=dict)
    derivations: dict[str, Derived] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    run: int = 0
    first_line: LineRef | None = None
    time: str | None = None

    def set(self, name: str, value: Any, *refs: LineRef | None, derivation: Derived | None = None) -> None:
        if not catalogue.declared(name):
            # A fact outside the vocabulary could never be named by a rule: a typo or a missing entry.
            raise UndeclaredFact(f"fact {name!r} is not declared in oomdoctor/data/facts.toml")
        if value is None:
            return
        self.values[name] = value
        kept = tuple(r for r in refs if r is not None)
        if kept:
            self.refs[name] = kept
        if derivation is not None:
            self.derivations[name] = derivation

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def ref(self, name: str) -> LineRef | None:
        refs = self.refs.get(name)
        return refs[0] if refs else None


def _min_event(events: list[Event], key: str) -> Event | None:
    """The worst rank's reading: SGLang takes the minimum free memory across ranks."""
    with_value = [e for e in events if e.get(key) is not None]
    return min(with_value, key=lambda e: e.get(key)) if with_value else None


def _occurrences(events: list[Event], kind: str) -> int:
    """How many events of a kind the log held, counting those the event store left out."""
    kept = sum(1 for e in events if e.kind == kind)
    return kept + sum(e.get("dropped", 0) for e in events if e.kind == KIND_REPEATS and e.get("kind") == kind)


def _timeline_stage(events: list[Event], index: int) -> str:
    """Where the server was when event ``index`` happened, from the startup milestones before it."""
    stage = "unknown"
    for event in events[:index]:
        kind = event.kind
        if kind == sg.KIND_LOAD_BEGIN:
            stage = "weight_loading"
        elif kind == sg.KIND_LOAD_END:
            stage = "kv_pool"
        elif kind in (sg.KIND_KV_ALLOCATED, sg.KIND_POOL_END, sg.KIND_GRAPH_END):
            stage = "startup"
        elif kind in (sg.KIND_GRAPH_BEGIN, sg.KIND_GRAPH_BAR):
            stage = "cuda_graph"
        elif kind in (sg.KIND_SUMMARY, sg.KIND_READY, vl.KIND_READY):
            stage = "forward"
        elif kind == vl.KIND_LOAD_START:
            stage = "weight_loading"
        elif kind == vl.KIND_WEIGHTS:
            stage = "profile"
        elif kind == vl.KIND_MM_PROFILE:
            stage = "encoder"
        elif kind in (vl.KIND_KV_AVAILABLE, vl.KIND_KV_TOKENS, vl.KIND_GPU_BLOCKS, vl.KIND_GRAPH_DONE, vl.KIND_PROFILE_BREAKDOWN, vl.KIND_PROFILE_V1):
            stage = "startup"
        elif kind == vl.KIND_GRAPH_BEGIN:
            stage = "cuda_graph"
    return stage


_VLLM_KINDS = {v for k, v in vars(vl).items() if k.startswith("KIND_")}
_SGLANG_KINDS = {v for k, v in vars(sg).items() if k.startswith("KIND_")}
_TORCH_KINDS = {tt.KIND_OOM, tt.KIND_DRIVER_OOM, tt.KIND_HOST_OOM}


_FRAME_SYSTEMS = (("vllm", ("/vllm/", "vllm_ascend", "/vllm_omni/")), ("sglang", ("/sglang/", "sglang_omni")))


def _system_from_frames(events: list[Event]) -> str | None:
    counts = {name: 0 for name, _ in _FRAME_SYSTEMS}
    for e in events:
        for path, _func in e.get("frames") or ():
            for name, needles in _FRAME_SYSTEMS:
                if any(n in path for n in needles):
                    counts[name] += 1
    best = max(counts, key=lambda k: counts[k])
    return best if counts[best] else None


def detect_system(events: list[Event]) -> str:
    """The serving system a run's log came from; the workers' torch tracebacks do not make it 'torch'."""
    vllm = sum(1 for e in events if e.kind in _VLLM_KINDS)
    sglang = sum(1 for e in events if e.kind in _SGLANG_KINDS)
    if vllm or sglang:
        return "vllm" if vllm > sglang else "sglang"
    if any(e.kind in _TORCH_KINDS for e in events):
        return "torch"
    return "unknown"


def build_facts(
    run: Run,
    force: bool = False,
    system: str | None = None,
    hint: str | None = None,
    collected: Any = (),
    line_counts: dict[str, int] | None = None,
) -> Facts | None:
    """Facts for the incident of one run, or None when the run shows no OOM (unless ``force``).

    ``system`` overrides the system detected from the log (the --system option); ``hint`` is the
    system the line prefixes point to, used when no event names one.
    """
    events = dedupe_ooms(run.events)
    detected = system or detect_system(events)
    # "fallback": no engine line; the engine may still be one (a plain torch traceback from a server).
    source = "option" if system else ("events" if detected != "unknown" else "fallback")
    if detected in ("torch", "unknown") and hint and system is None:
        detected, source = hint, "prefix"
    if detected in ("torch", "unknown") and system is None:
        # No engine line and no prefix style: the traceback's file paths still name the engine.
        from_frames = _system_from_frames(events)
        if from_frames:
            detected, source = from_frames, "frames"
    oom_idx = [
        i
        for i, e in enumerate(events)
        # A bare "Killed" or exit 137 is weak alone, but in a plain script's log it is the only trace.
        if is_oom_event(e) or (detected == "torch" and e.kind == tt.KIND_HOST_OOM)
    ]
    unbalanced = [e for e in events if e.kind == sg.KIND_UNBALANCED]
    ready_before = any(e.kind in (sg.KIND_READY, sg.KIND_SUMMARY) for e in events)
    if not oom_idx and not (unbalanced and not ready_before) and not force:
        return None
    if not events:
        return None
    f = Facts(events=events, run=run.number)
    first_i = oom_idx[0] if oom_idx else (events.index(unbalanced[0]) if unbalanced else len(events) - 1)
    first = events[first_i]
    f.first_line = first.ref
    f.time = first.ref.ts
    f.set("system", detected)
    f.set("system_source", source)
    f.set("oom_evident", bool(oom_idx), first.ref)
    _server_args_facts(f, events)
    _startup_facts(f, events, first_i)
    _torch_facts(f, events, oom_idx)
    _sglang_error_facts(f, events, oom_idx)
    _budget_facts(f)
    _foreign_facts(f, events)
    if detected == "vllm":
        _vllm_facts(f, events, first_i)
    if collected:
        _collected_facts(f, list(collected))
    _phase_facts(f, events, oom_idx, first_i, line_counts or {})
    return f


_SERVING_PHASES = ("serving", "prefill", "decode", "sampling")
# A traceback through a training loop (not an inference script or server): only then is training advice given.
_TRAINING_RE = re.compile(r"(?i)\btrain\w*|finetun|fine_tun|backward|optimizer|trainer|training_step")


def _phase_facts(f: Facts, events: list[Event], oom_idx: list[int], first_i: int, line_counts: dict[str, int]) -> None:
    """The phase step and evidence completeness (DESIGN §2.1), as facts rules and the verdict read."""
    records = [e for e in events if e.kind == rc.KIND_RECORD]
    cuts = [e for e in events if e.kind == rc.KIND_CUT]
    ooms = [events[i] for i in oom_idx if events[i].kind in (tt.KIND_OOM, tt.KIND_DRIVER_OOM)]
    oom = ooms[0] if ooms else None
    if oom_idx:
        failure_i = oom_idx[0]
    else:
        # No OOM evident: the failure is the last record (cut or not) of the run, if any.
        last = records[-1] if records else None
        failure_i = events.index(last) if last is not None else len(events) - 1
    found = phase.infer(events, failure_i, oom, records)
    f.set("phase", found.name, found.ref)
    f.set("phase_source", found.source, found.ref)
    # Serving traffic or a forward frame before the failure means the server was up.
    if found.name in _SERVING_PHASES and not f.get("server_ready"):
        f.set("server_ready", True, found.ref)
    # The phase step decides the v1 stage where its own sources said nothing (no milestones, frames
    # after the message), and wherever it read frames or an engine line (a profiling pass over the
    # multimodal encoder is an encoder failure, whatever the v1 frame markers said).
    stage_of_phase = "forward" if found.stage == "profile" else found.stage
    decisive = found.source in ("engine", "frames") and stage_of_phase != f.get("oom_stage") and found.stage not in ("startup", "unknown")
    if (f.get("oom_stage") in (None, "unknown") or decisive) and found.name != "unknown" and (f.get("torch_oom") or f.get("driver_oom")):
        # A profiling pass is a forward pass sized by the engine's batch limits (v1: stage forward, phase profile).
        stage = "forward" if found.stage == "profile" else found.stage
        f.set("oom_stage", stage, found.ref)
        f.set("oom_stage_source", "traceback" if found.source in ("frames", "engine") else "timeline")
        if found.name in ("prefill", "decode"):
            f.set("oom_phase", found.name)
        elif found.stage == "profile":
            f.set("oom_phase", "profile")
        if found.stage == "weight_loading":
            f.set("weight_load_oom", True, found.ref)
        if found.stage == "cuda_graph":
            f.set("capture_oom", True, found.ref)
        if found.stage == "encoder":
            f.set("encoder_oom", True, found.ref)
    path = (events[failure_i].ref.path if events else None) or ""
    in_path = [r for r in records if r.ref.path == path]
    whole_oom = any(e.get("complete", True) for e in ooms) or bool(f.get("startup_kv_error") or f.get("capture_oom") or f.get("kv_alloc_failed") or f.get("req_slots_failed"))
    context = sum(1 for e in events if e.kind not in (tt.KIND_OOM, tt.KIND_DRIVER_OOM, rc.KIND_RECORD, rc.KIND_CUT))
    done = completeness.assess(events, in_path, [c for c in cuts if c.ref.path == path], line_counts.get(path, 0), whole_oom, context)
    f.set("evidence_status", done.status, done.ref)
    if done.reason:
        f.set("evidence_reason", done.reason)
    f.set("failure_record_open", done.record_open)
    frames = [fr for e in events if e.kind in (tt.KIND_OOM, tt.KIND_DRIVER_OOM, rc.KIND_RECORD) for fr in (e.get("frames") or ())]
    f.set("training_script", any(_TRAINING_RE.search(f"{path} {func}") for path, func in frames))
    terminal = next((r for r in reversed(records) if r.get("complete") and not r.get("chain_has_oom")), None)
    if terminal is not None and not oom_idx:
        f.set("terminal_exception", terminal.get("exception"), terminal.ref)
        f.set("terminal_exception_message", terminal.get("exception_message"), terminal.ref)
    if any(e.kind == rc.KIND_CLEAN_END for e in events):
        f.set("clean_end", True)


def _server_args_facts(f: Facts, events: list[Event]) -> None:
    args_event = next((e for e in events if e.kind == sg.KIND_SERVER_ARGS), None)
    if args_event is None:
        return
    args = args_event.values
    ref = args_event.ref
    for key in ("mem_fraction_static", "chunked_prefill_size", "max_running_requests", "context_length", "max_prefill_tokens"):
        value = args.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            f.set(key, value, ref)
    for key in ("tp_size", "pp_size", "dp_size"):
        value = args.get(key)
        f.set(key, value if isinstance(value, int) else None, ref)
    graph_bs = args.get("cuda_graph_max_bs_decode", args.get("cuda_graph_max_bs"))
    if isinstance(graph_bs, int):
        f.set("cuda_graph_max_bs", graph_bs, ref)
    f.set("cuda_graph_flag", "--cuda-graph-max-bs-decode" if args.get("_has_cuda_graph_max_bs_decode") else "--cuda-graph-max-bs")
    if isinstance(args.get("model_path"), str):
        f.set("model_path", args["model_path"], ref)
    if args.get("disable_cuda_graph") is True:
        f.set("cuda_graph_disabled", True, ref)
    if isinstance(args.get("kv_cache_dtype"), str):
        f.set("kv_cache_dtype", args["kv_cache_dtype"], ref)


def _startup_facts(f: Facts, events: list[Event], first_i: int) -> None:
    begin = _min_event([e for e in events if e.kind == sg.KIND_LOAD_BEGIN], "avail_bytes")
    end = _min_event([e for e in events if e.kind == sg.KIND_LOAD_END], "avail_bytes")
    legacy = next((e for e in events if e.kind == sg.KIND_LEGACY_PROFILE), None)
    if begin is not None:
        f.set("pre_bytes", begin.get("avail_bytes"), begin.ref)
    elif end is not None and end.get("mem_usage_bytes") is not None:
        # "Load weight end ... avail mem=A, mem usage=U" with U = before - A: the begin line is implied.
        pre = end.get("avail_bytes") + end.get("mem_usage_bytes")
        f.set("pre_bytes", pre, end.ref, derivation=Derived(pre, (Step("pre from the load-end line", "avail mem + mem usage", pre),)))
    elif legacy is not None:
        f.set("pre_bytes", legacy.get("pre_bytes"), legacy.ref)
    if end is not None:
        f.set("post_bytes", end.get("avail_bytes"), end.ref)
        f.set("model_type", end.get("model_type"), end.ref)
        f.set("load_end_era", end.get("era"))
    elif legacy is not None:
        f.set("post_bytes", legacy.get("post_bytes"), legacy.ref)
    if "mem_fraction_static" not in f.values and legacy is not None:
        f.set("mem_fraction_static", legacy.get("mem_fraction_static"), legacy.ref)
    omni = [e for e in events if e.kind == sg.KIND_OMNI_STAGE]
    for e in omni:
        f.set("omni", True, e.ref)
        if e.get("encoder_mem_reserve") is not None:
            f.set("encoder_mem_reserve", e.get("encoder_mem_reserve"), e.ref)
        if "mem_fraction_static" not in f.values and e.get("mem_fraction_static") is not None:
            f.set("mem_fraction_static", e.get("mem_fraction_static"), e.ref)
    init_end = next((e for e in events if e.kind == sg.KIND_INIT_DIST_END), None)
    if init_end is not None:
        f.set("init_mem_usage_bytes", init_end.get("mem_usage_bytes"), init_end.ref)
    kv = [e for e in events if e.kind == sg.KIND_KV_ALLOCATED]
    if kv:
        target = kv[0]
        f.set("kv_pool_bytes", target.get("kv_bytes"), target.ref)
        tokens = target.get("tokens")
        if tokens:
            f.set("kv_pool_tokens", tokens, target.ref)
            if target.get("kv_bytes"):
                f.set("cell_bytes", target.get("kv_bytes") // tokens, target.ref)
    summary = next((e for e in events if e.kind == sg.KIND_SUMMARY), None)
    if summary is not None:
        f.set("context_len", summary.get("context_len"), summary.ref)
        f.set("available_gpu_mem_bytes", summary.get("available_gpu_mem_bytes"), summary.ref)
        if "max_running_requests" not in f.values:
            f.set("max_running_requests", summary.get("max_running_requests"), summary.ref)
        if "chunked_prefill_size" not in f.values and summary.get("chunked_prefill_size") is not None:
            f.set("chunked_prefill_size", summary.get("chunked_prefill_size"), summary.ref)
    elif isinstance(f.get("context_length"), int):
        f.set("context_len", f.get("context_length"), f.ref("context_length"))
    ready = next((e for e in events[:first_i] if e.kind in (sg.KIND_READY, sg.KIND_SUMMARY)), None)
    f.set("server_ready", ready is not None, ready.ref if ready else None)
    graph_end = [e for e in events if e.kind == sg.KIND_GRAPH_END and e.get("mem_usage_bytes") is not None]
    if graph_end:
        f.set("cuda_graph_bytes", sum(e.get("mem_usage_bytes") for e in graph_end[:1]), graph_end[0].ref)
    bars = [e for e in events[: first_i + 1] if e.kind == sg.KIND_GRAPH_BAR]
    if bars:
        f.set("capture_last_bs", bars[-1].get("bs"), bars[-1].ref)
    f.set("timeline_stage", _timeline_stage(events, first_i))
    retracts = [e for e in events if e.kind == sg.KIND_RETRACT]
    if retracts:
        f.set("retraction_events", _occurrences(events, sg.KIND_RETRACT), retracts[-1].ref)
    multimodal = bool(omni) or any(h in str(f.get("model_type", "")) for h in _MM_HINTS)
    f.set("is_multimodal", multimodal)
    mm_reserve = next((e for e in events if e.kind == sg.KIND_MM_RESERVE), None)
    if mm_reserve is not None:
        f.set("mm_reserve_bytes", mm_reserve.get("reserve_bytes"), mm_reserve.ref)


def _torch_facts(f: Facts, events: list[Event], oom_idx: list[int]) -> None:
    ooms = [events[i] for i in oom_idx if events[i].kind == tt.KIND_OOM]
    drivers = [events[i] for i in oom_idx if events[i].kind == tt.KIND_DRIVER_OOM]
    hosts = [e for e in events if e.kind == tt.KIND_HOST_OOM]
    # Every rank reports its own OOM; cite them all (a few), the first one decides the numbers.
    f.set("torch_oom", bool(ooms), *[e.ref for e in ooms[:8]])
    if ooms:
        f.set("oom_rank", ooms[0].rank or "GPU")
    f.set("driver_oom", bool(drivers), drivers[-1].ref if drivers else None)
    strong_host = [e for e in hosts if e.get("strength") == "strong"]
    f.set("host_oom", bool(strong_host), strong_host[-1].ref if strong_host else None)
    weak_host = [e for e in hosts if e.get("strength") == "weak"]
    f.set("host_kill_weak", bool(weak_host), weak_host[-1].ref if weak_host else None)
    if hosts:
        f.set("host_kill_signal", True, hosts[-1].ref)
    f.set("oom_count", len(ooms) + len(drivers))
    stage_source = None
    if ooms or drivers:
        # The first allocator OOM of the run is the one that broke it; later ones are fallout.
        oom = ooms[0] if ooms else drivers[0]
        ref = oom.ref
        refs = oom.refs
        for key in ("requested_bytes", "free_bytes", "capacity_bytes", "allocated_bytes", "reserved_unallocated_bytes", "private_pool_bytes", "allowed_bytes", "device"):
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
        if f.get("requested_bytes") is not None and f.get("free_bytes") is not None:
            shortfall = f.get("requested_bytes") - f.get("free_bytes")
            f.set(
                "shortfall_bytes",
                max(shortfall, 0),
                *refs,
                derivation=Derived(max(shortfall, 0), (Step("shortfall", "requested - free", shortfall),)),
            )
        if f.get("free_bytes") is not None and f.get("reserved_unallocated_bytes") is not None:
            f.set("reclaimable_bytes", f.get("free_bytes") + f.get("reserved_unallocated_bytes"), *refs)
        _allocator_facts(f, refs)
        frame_stage = oom.get("stage", "unknown")
        timeline = f.get("timeline_stage", "unknown")
        if frame_stage != "unknown":
            stage, stage_source = frame_stage, "traceback"
        else:
            stage, stage_source = timeline, "timeline"
        if stage == "forward" and timeline in ("weight_loading", "kv_pool", "cuda_graph") and frame_stage == "unknown":
            stage = timeline
        f.set("oom_stage", stage, ref)
        f.set("oom_stage_source", stage_source)
        f.set("oom_phase", oom.get("phase"))
        f.set("oom_line", ref.line, ref)
    if hosts and not (ooms or drivers):
        f.set("oom_stage", f.get("timeline_stage"))


def _allocator_facts(f: Facts, refs: tuple[LineRef, ...]) -> None:
    """Fragmentation and unaccounted memory from the allocator message's own figures."""
    requested, unalloc, capacity, free = f.get("requested_bytes"), f.get("reserved_unallocated_bytes"), f.get("capacity_bytes"), f.get("free_bytes")
    plausible = False
    if requested is not None and unalloc is not None:
        material = budget.fragmentation_material_bytes(capacity)
        plausible = unalloc >= requested and unalloc >= material
        f.set("fragmentation_material_bytes", material)
    f.set("fragmentation_plausible", plausible, *refs)
    if requested is not None and capacity:
        f.set("request_exceeds_card", requested > capacity, *refs)
    allocated = f.get("allocated_bytes")
    if capacity and free is not None and (allocated is not None or f.get("this_process_bytes")):
        reserved = (allocated or 0) + (unalloc or 0)
        others, threshold = budget.unaccounted_bytes(capacity, free, reserved, f.get("this_process_bytes"))
        f.set(
            "unaccounted_bytes",
            max(others, 0),
            *refs,
            derivation=Derived(
                max(others, 0),
                (Step("memory no figure of the message accounts for", "capacity - free - (this process, else PyTorch allocated + reserved-unallocated)", others),),
            ),
        )
        f.set("unaccounted_threshold_bytes", threshold)
        f.set("unaccounted_tenant", others > threshold and (f.get("shortfall_bytes") or 0) <= others, *refs)


def _sglang_error_facts(f: Facts, events: list[Event], oom_idx: list[int]) -> None:
    for e in events:
        if e.kind in (sg.KIND_NOT_ENOUGH, sg.KIND_NO_KV, sg.KIND_HYBRID_NOT_ENOUGH, sg.KIND_PROFILED_NEGATIVE, sg.KIND_LEGACY_PROFILE) and "startup_kv_error" in f.values:
            continue  # every rank reports it; the first report is the one to cite
        if e.kind == sg.KIND_NOT_ENOUGH:
            f.set("startup_kv_error", True, e.ref)
            f.set("startup_kv_error_kind", "not_enough_memory")
            if "mem_fraction_static" not in f.values:
                f.set("mem_fraction_static", e.get("mem_fraction_static"), e.ref)
        elif e.kind == sg.KIND_NO_KV:
            f.set("startup_kv_error", True, e.ref)
            f.set("startup_kv_error_kind", "weights_leave_no_kv")
            if "mem_fraction_static" not in f.values:
                f.set("mem_fraction_static", e.get("mem_fraction_static"), e.ref)
            f.set("sglang_suggested_mfs", e.get("suggested_mem_fraction_static"), e.ref)
            f.set("sglang_minimum_viable_mfs", e.get("minimum_viable"), e.ref)
        elif e.kind == sg.KIND_HYBRID_NOT_ENOUGH:
            f.set("startup_kv_error", True, e.ref)
            f.set("startup_kv_error_kind", "hybrid_state")
        elif e.kind == sg.KIND_PROFILED_NEGATIVE and e.get("profiled_tokens", 1) <= 0:
            f.set("startup_kv_error", True, e.ref)
            f.set("startup_kv_error_kind", "profiled_negative")
        elif e.kind == sg.KIND_LEGACY_PROFILE and e.get("rest_bytes", 1) <= 0:
            f.set("startup_kv_error", True, e.ref)
            f.set("startup_kv_error_kind", "legacy_profile_negative")
        elif e.kind == sg.KIND_CAPTURE_FAILED:
            f.set("capture_failed", True, e.ref)
            f.set("capture_error_is_oom", bool(e.get("is_oom")), e.ref)
            f.set("capture_custom_all_reduce", bool(e.get("custom_all_reduce")))
        elif e.kind == sg.KIND_KV_ALLOC_FAIL and "kv_alloc_failed" not in f.values:
            f.set("kv_alloc_failed", True, e.ref)
            f.set("kv_alloc_phase", e.get("which"))
        elif e.kind == sg.KIND_KV_ALLOC_DETAIL:
            if e.get("requested_tokens") is not None and "kv_requested_tokens" not in f.values:
                f.set("kv_requested_tokens", e.get("requested_tokens"), e.ref)
            if e.get("available_tokens") is not None and "kv_available_tokens" not in f.values:
                f.set("kv_available_tokens", e.get("available_tokens"), e.ref)
        elif e.kind == sg.KIND_REQ_SLOTS_FAIL and "req_slots_failed" not in f.values:
            f.set("req_slots_failed", True, e.ref)
            f.set("req_slots_available", e.get("available_slots"), e.ref)
            f.set("req_slots_requested", e.get("requested_slots"), e.ref)
        elif e.kind == sg.KIND_OMNI_ENCODER_FAIL and "encoder_request_failed" not in f.values:
            f.set("encoder_request_failed", True, e.ref)
            f.set("encoder_failures", _occurrences(events, sg.KIND_OMNI_ENCODER_FAIL))
        elif e.kind == sg.KIND_CAPTURE_ADVICE and e.get("decode_flag"):
            f.set("cuda_graph_flag", "--cuda-graph-max-bs-decode", e.ref)
        elif e.kind == sg.KIND_STRAGGLER:
            f.set("load_straggler", True, e.ref)
        elif e.kind == sg.KIND_MM_CACHE_FULL:
            f.set("mm_cache_full", True, e.ref)
    # An encoder OOM is a torch OOM in an encoder frame, or a caught per-request encoder failure
    # that coincides with an OOM message.
    encoder = f.get("oom_stage") == "encoder" or (f.get("encoder_request_failed") and (f.get("torch_oom") or f.get("driver_oom")))
    f.set("encoder_oom", bool(encoder), f.ref("encoder_request_failed"), f.ref("oom_line") or f.ref("oom_stage"))
    if f.get("capture_failed") and f.get("capture_error_is_oom"):
        f.set("capture_oom", True, f.ref("capture_failed"), f.ref("torch_oom"))
    elif f.get("oom_stage") == "cuda_graph":
        f.set("capture_oom", True, f.ref("oom_stage"))
    else:
        f.set("capture_oom", False)
    f.set("weight_load_oom", f.get("oom_stage") == "weight_loading" and bool(f.get("torch_oom") or f.get("driver_oom")), f.ref("oom_stage"))
    f.set("startup_kv_error", bool(f.get("startup_kv_error", False)), f.ref("startup_kv_error"))
    f.set("kv_alloc_failed", bool(f.get("kv_alloc_failed", False)), f.ref("kv_alloc_failed"))
    f.set("req_slots_failed", bool(f.get("req_slots_failed", False)), f.ref("req_slots_failed"))


def _budget_facts(f: Facts) -> None:
    pre, post, mfs = f.get("pre_bytes"), f.get("post_bytes"), f.get("mem_fraction_static")
    refs = tuple(r for r in (f.ref("pre_bytes"), f.ref("post_bytes"), f.ref("mem_fraction_static")) if r)
    if pre and post is not None:
        weights = budget.sglang_weights_bytes(pre, post)
        f.set(
            "weights_bytes",
            weights,
            *refs[:2],
            derivation=Derived(weights, (Step("weights W = pre - post", f"{gib_text(pre)} - {gib_text(post)}", weights),)),
        )
        f.set("weights_share_of_pre", round(weights / pre, 4), *refs[:2])
        if mfs is not None:
            kv = budget.sglang_kv_derivation(pre, post, mfs)
            f.set("kv_budget_bytes", kv.value, *refs, derivation=kv)
            f.set("dynamic_region_bytes", budget.sglang_dynamic_region_bytes(pre, mfs), *refs)
    capacity = f.get("capacity_bytes")
    if capacity:
        f.set("likely_gpu", likely_gpu(capacity))
    if pre:
        hint = max(capacity or 0, pre)
        reserve = budget.sglang_min_activation_reserve_bytes(hint, f.get("tp_size", 1) or 1, f.get("pp_size", 1) or 1)
        f.set("activation_reserve_bytes", reserve.value, derivation=reserve)
        if "weights_bytes" in f.values:
            kv_floor = budget.kv_floor(f.get("context_len"), f.get("cell_bytes"))
            floor = kv_floor.value
            f.set("kv_floor_bytes", floor, derivation=kv_floor)
            window = budget.sglang_feasible_window(pre, f.get("weights_bytes"), floor, reserve.value)
            f.set("max_safe_mfs", round(window.high, 4), derivation=Derived(window.high, window.steps))
            f.set("min_viable_mfs", round(window.low, 4), derivation=Derived(window.low, window.steps))
            f.set("weights_fit", window.feasible, *refs[:2])
            f.set("_window", window)


def _foreign_facts(f: Facts, events: list[Event]) -> None:
    processes = f.get("process_list") or ()
    if processes:
        has_self = f.get("process_list_has_self")
        if has_self:
            others = [p for p in processes if not p.is_self]
            f.set("process_identity_known", True)
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
        f.set("foreign_process_bytes", sum(p.used_bytes for p in others), f.ref("process_list"))
        f.set("foreign_pids", tuple(p.pid for p in others if p.pid is not None))
    unbalanced = next((e for e in events if e.kind == sg.KIND_UNBALANCED), None)
    f.set("unbalanced_memory", unbalanced is not None, unbalanced.ref if unbalanced else None)
    if unbalanced is not None and unbalanced.get("local_free_bytes") and unbalanced.get("min_free_bytes") is not None:
        f.set("unbalanced_gap_bytes", unbalanced.get("local_free_bytes") - unbalanced.get("min_free_bytes"), unbalanced.ref)
    capacity, pre = f.get("capacity_bytes"), f.get("pre_bytes")
    if capacity and pre:
        init = f.get("init_mem_usage_bytes") or 0
        foreign = capacity - pre - init - budget.CUDA_CONTEXT_BYTES
        f.set(
            "startup_foreign_bytes",
            max(foreign, 0),
            f.ref("capacity_bytes"),
            f.ref("pre_bytes"),
            derivation=Derived(
                max(foreign, 0),
                (Step("memory held before weights by others", f"capacity {capacity / GIB:.2f} - pre {pre / GIB:.2f} - init {init / GIB:.2f} - context {gib_text(budget.CUDA_CONTEXT_BYTES)}", foreign),),
            ),
        )


def _last_value(events: list[Event], kind: str, key: str) -> tuple[Any, LineRef | None]:
    for e in reversed(events):
        if e.kind == kind and e.get(key) is not None:
            return e.get(key), e.ref
    return None, None


def _vllm_facts(f: Facts, events: list[Event], first_i: int) -> None:
    """vLLM's budget: u*total = weights + activation peak + non-torch [+ graphs] + KV."""
    for kind in (vl.KIND_ARGS, vl.KIND_ENGINE_CONFIG):
        for e in events:
            if e.kind != kind:
                continue
            for key, fact in (
                ("gpu_memory_utilization", "gpu_memory_utilization"),
                ("max_model_len", "max_model_len"),
                ("max_seq_len", "max_model_len"),
                ("max_num_seqs", "max_num_seqs"),
                ("max_num_batched_tokens", "max_num_batched_tokens"),
                ("tensor_parallel_size", "tp_size"),
                ("pipeline_parallel_size", "pp_size"),
                ("enforce_eager", "enforce_eager"),
                ("kv_cache_dtype", "kv_cache_dtype"),
                ("max_capture_size", "max_capture_size"),
                ("model", "model_path"),
                ("block_size", "block_size"),
            ):
                value = e.get(key)
                if value is not None and fact not in f.values:
                    f.set(fact, value, e.ref)
            if e.get("version"):
                f.set("vllm_version", e.get("version"))
            if kind == vl.KIND_ENGINE_CONFIG:
                f.set("vllm_v1", bool(e.get("v1")))
    for kind, key, fact in (
        (vl.KIND_FREE_LESS, "total_bytes", "capacity_bytes"),
        (vl.KIND_PROFILE_TOTAL, "total_bytes", "capacity_bytes"),
        (vl.KIND_PROFILE_V0_RESULTS, "total_bytes", "capacity_bytes"),
        (vl.KIND_PROFILE_V0_RESULTS, "gpu_memory_utilization", "gpu_memory_utilization"),
        (vl.KIND_PROFILE_V0_RESULTS, "non_kv_bytes", "non_kv_bytes"),
        (vl.KIND_PROFILE_V0_RESULTS, "kv_bytes", "kv_budget_bytes"),
        (vl.KIND_FREE_LESS, "gpu_memory_utilization", "gpu_memory_utilization"),
        (vl.KIND_PROFILE_TOTAL, "gpu_memory_utilization", "gpu_memory_utilization"),
        (vl.KIND_INITIAL_FREE, "gpu_memory_utilization", "gpu_memory_utilization"),
        (vl.KIND_FREE_LESS, "free_at_start_bytes", "free_at_start_bytes"),
        (vl.KIND_INITIAL_FREE, "free_at_start_bytes", "free_at_start_bytes"),
        (vl.KIND_FREE_LESS, "requested_bytes", "requested_budget_bytes"),
        (vl.KIND_PROFILE_TOTAL, "requested_bytes", "requested_budget_bytes"),
        (vl.KIND_INITIAL_FREE, "requested_bytes", "requested_budget_bytes"),
        (vl.KIND_PROFILE_BREAKDOWN, "weights_bytes", "weights_bytes"),
        (vl.KIND_PROFILE_V1, "weights_bytes", "weights_bytes"),
        (vl.KIND_WEIGHTS, "weights_bytes", "weights_bytes"),
        (vl.KIND_PROFILE_BREAKDOWN, "activation_peak_bytes", "activation_peak_bytes"),
        (vl.KIND_PROFILE_V1, "activation_peak_bytes", "activation_peak_bytes"),
        (vl.KIND_PROFILE_BREAKDOWN, "non_torch_bytes", "non_torch_bytes"),
        (vl.KIND_PROFILE_V1, "non_torch_bytes", "non_torch_bytes"),
        (vl.KIND_PROFILE_V1, "non_kv_bytes", "non_kv_bytes"),
        (vl.KIND_KV_AVAILABLE, "kv_bytes", "kv_budget_bytes"),
        (vl.KIND_PROFILE_BREAKDOWN, "kv_bytes", "kv_budget_bytes"),
        (vl.KIND_ONE_REQUEST, "available_bytes", "kv_budget_bytes"),
        (vl.KIND_ONE_REQUEST, "needed_bytes", "kv_needed_bytes"),
        (vl.KIND_ONE_REQUEST, "max_model_len", "max_model_len"),
        (vl.KIND_ONE_REQUEST, "estimated_max_len", "estimated_max_len"),
        (vl.KIND_ONE_REQUEST, "kv_capacity_tokens", "kv_capacity_tokens"),
        (vl.KIND_KV_TOKENS, "kv_tokens", "kv_capacity_tokens"),
        (vl.KIND_CONCURRENCY, "max_model_len", "max_model_len"),
        (vl.KIND_CONCURRENCY, "concurrency", "max_concurrency"),
        (vl.KIND_KV_TOKENS, "concurrency", "max_concurrency"),
        (vl.KIND_CHUNKED, "max_num_batched_tokens", "max_num_batched_tokens"),
        (vl.KIND_GRAPH_DONE, "graph_bytes", "cuda_graph_bytes"),
        (vl.KIND_GRAPH_ESTIMATE, "graph_bytes", "cuda_graph_bytes"),
    ):
        if fact in f.values and kind not in (vl.KIND_KV_AVAILABLE,):
            continue
        value, ref = _last_value(events, kind, key)
        if value is not None:
            f.set(fact, value, ref)
    gpu_blocks, _ = _last_value(events, vl.KIND_GPU_BLOCKS, "gpu_blocks")
    if gpu_blocks is not None and "kv_capacity_tokens" not in f.values:
        f.set("kv_capacity_tokens", gpu_blocks * (f.get("block_size") or 16))
    if "capacity_bytes" not in f.values and f.get("requested_budget_bytes") and f.get("gpu_memory_utilization"):
        total = round(f.get("requested_budget_bytes") / f.get("gpu_memory_utilization"))
        f.set(
            "capacity_bytes",
            total,
            f.ref("requested_budget_bytes"),
            derivation=Derived(total, (Step("total GPU memory", "requested u*total / u", total),)),
        )
    if "non_kv_bytes" not in f.values and all(k in f.values for k in ("weights_bytes", "activation_peak_bytes", "non_torch_bytes")):
        non_kv = f.get("weights_bytes") + f.get("activation_peak_bytes") + f.get("non_torch_bytes")
        f.set(
            "non_kv_bytes",
            non_kv,
            f.ref("weights_bytes"),
            derivation=Derived(non_kv, (Step("non-KV memory", "weights + activation peak + non-torch", non_kv),)),
        )
    total, util = f.get("capacity_bytes"), f.get("gpu_memory_utilization")
    if "non_kv_bytes" not in f.values and total and util is not None and f.get("kv_budget_bytes") is not None:
        non_kv = round(total * util) - f.get("kv_budget_bytes")
        f.set("non_kv_bytes", non_kv, f.ref("kv_budget_bytes"), derivation=Derived(non_kv, (Step("non-KV memory", "u*total - available KV", non_kv),)))
    if f.get("kv_needed_bytes") and f.get("max_model_len"):
        f.set("cell_bytes", f.get("kv_needed_bytes") // f.get("max_model_len"), f.ref("kv_needed_bytes"))
    elif f.get("kv_budget_bytes") and f.get("kv_capacity_tokens") and f.get("kv_budget_bytes") > 0:
        f.set("cell_bytes", f.get("kv_budget_bytes") // f.get("kv_capacity_tokens"), f.ref("kv_capacity_tokens"))
    free_less = next((e for e in events if e.kind == vl.KIND_FREE_LESS), None)
    if free_less is not None:
        deficit = free_less.get("requested_bytes") - free_less.get("free_at_start_bytes")
        f.set("free_less_than_requested", True, free_less.ref)
        f.set(
            "startup_free_deficit_bytes",
            deficit,
            free_less.ref,
            derivation=Derived(deficit, (Step("requested u*total minus free at start", "requested - free", deficit),)),
        )
    else:
        f.set("free_less_than_requested", False)
    profile_assert = next((e for e in events if e.kind == vl.KIND_PROFILE_ASSERT), None)
    f.set("profile_memory_changed", profile_assert is not None, profile_assert.ref if profile_assert else None)
    no_blocks = next((e for e in events if e.kind == vl.KIND_NO_CACHE_BLOCKS), None)
    one_req = next((e for e in events if e.kind == vl.KIND_ONE_REQUEST), None)
    negative_kv = next((e for e in events if e.kind == vl.KIND_KV_AVAILABLE and (e.get("kv_bytes") or 0) <= 0), None)
    cause = no_blocks or one_req
    if cause is None and negative_kv is not None:
        # A negative "Available KV cache memory" is the engine's own arithmetic: no room for KV.
        cause = negative_kv
    f.set("startup_kv_error", cause is not None, *(cause.refs if cause else ()))
    if cause is not None:
        f.set("startup_kv_error_kind", cause.kind)
    preempts = [e for e in events if e.kind == vl.KIND_PREEMPT]
    if preempts:
        f.set("preemptions", max(e.get("cumulative", 0) for e in preempts), preempts[-1].ref)
    mm = next((e for e in events[: first_i + 1] if e.kind == vl.KIND_MM_PROFILE), None)
    if mm is not None:
        f.set("is_multimodal", True, mm.ref)
    if f.get("oom_stage") == "profile":
        f.set("oom_stage", "forward", f.ref("oom_stage"))
        f.set("oom_phase", "profile")
    if f.get("oom_stage") == "encoder" and (f.get("torch_oom") or f.get("driver_oom")):
        f.set("encoder_oom", True, f.ref("oom_stage"))
    if f.get("oom_stage") == "cuda_graph":
        f.set("capture_oom", True, f.ref("oom_stage"))
    if f.get("oom_stage") == "weight_loading":
        f.set("weight_load_oom", bool(f.get("torch_oom") or f.get("driver_oom")), f.ref("oom_stage"))
    _vllm_window(f)


def _vllm_window(f: Facts) -> None:
    total, non_kv, need = f.get("capacity_bytes"), f.get("non_kv_bytes"), f.get("kv_needed_bytes")
    if not total or non_kv is None:
        return
    need = budget.kv_floor(f.get("max_model_len"), f.get("cell_bytes"), need, system="vllm").value
    needed = budget.vllm_util_for_kv(total, non_kv, need)
    f.set("min_viable_util", needed.value, derivation=needed)
    free = f.get("free_at_start_bytes")
    cap = budget.vllm_max_safe_util(free, total) if free else budget.Derived(0.95, (Step("largest u (free memory at start unknown)", "vLLM's usual ceiling", 0.95),))
    f.set("max_safe_util", min(cap.value, 0.98), derivation=cap)
    f.set("weights_fit", needed.value <= min(cap.value, 0.98))


def _collected_facts(f: Facts, items: list[dict[str, Any]]) -> None:
    """GPU snapshots (collect / nvidia-smi) and allocator dumps (capture), merged into the incident."""
    for item in items:
        ref = LineRef(path=item["path"], line=0, text=f"{item['kind']} evidence")
        if item["kind"] == "memory_stats":
            for key, value in item.items():
                if key not in ("kind", "path"):
                    f.set(key, value, ref)
        elif item["kind"] == "snapshot":
            for key, value in item.items():
                if key in ("kind", "path"):
                    continue
                f.set(key, tuple(value) if isinstance(value, list) else value, ref)
            ooms = item.get("snapshot_ooms") or []
            if ooms and "requested_bytes" not in f.values and ooms[-1].get("size"):
                f.set("requested_bytes", int(ooms[-1]["size"]), ref)
        elif item["kind"] == "gpus":
            _collected_gpus(f, item, ref)
        elif item["kind"] == "samples" and item.get("samples"):
            f.set("_samples", item["samples"], ref)


def _collected_gpus(f: Facts, item: dict[str, Any], ref: LineRef) -> None:
    gpus = item.get("gpus") or []
    f.set("collected_gpus", len(gpus), ref)
    f.set("driver_version", item.get("driver_version"), ref)
    names = sorted({g.get("name") for g in gpus if g.get("name")})
    if names:
        f.set("gpu_names", tuple(names), ref)
    foreign_bytes, foreign_pids, occupied = 0, [], 0
    identity_known = True
    for g in gpus:
        procs = g.get("processes")
        if not isinstance(procs, list):
            identity_known = False
            continue
        servers = [p for p in procs if p.get("is_server")]
        unknown = [p for p in procs if p.get("status") not in (None, "ok")]
        if unknown:
            identity_known = False
        if not servers and procs and any(p.get("status") == "ok" for p in procs):
            continue  # no server on this GPU: its tenants are not this incident's
        others = [p for p in procs if not p.get("is_server") and p.get("status") == "ok"]
        foreign_bytes += sum(p.get("used_bytes") or 0 for p in others)
        foreign_pids += [p["pid"] for p in others]
        if g.get("used_bytes") is not None and servers:
            occupied = max(occupied, g["used_bytes"] - sum(p.get("used_bytes") or 0 for p in servers))
        if "capacity_bytes" not in f.values and g.get("total_bytes") and servers:
            f.set("capacity_bytes", g["total_bytes"], ref)
    f.set("collected_foreign_process_bytes", foreign_bytes, ref)
    f.set("collected_foreign_pids", tuple(foreign_pids), ref)
    f.set("collected_process_identity_known", identity_known, ref)
    f.set("collected_other_used_bytes", occupied, ref)

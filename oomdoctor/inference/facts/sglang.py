"""SGLang's facts: its server_args, the startup lines (load, KV pool, summary, CUDA graphs) and its error lines."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomdoctor.base.evidence import Event, LineRef
from oomdoctor.evidence.parsers import sglang as sg
from oomdoctor.inference.facts.common import first, min_event, occurrences, timeline_stage
from oomdoctor.inference.facts.store import PRECEDENCE, Facts
from oomdoctor.memory import log_figures

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_MM_HINTS = ("VL", "Omni", "Vision", "Llava", "LLaVA", "Qwen2_5_VL", "Gemma3ForConditional", "Mllama", "InternVL", "MiniCPMV")

_NUMERIC_ARGS = ("mem_fraction_static", "chunked_prefill_size", "max_running_requests", "context_length", "max_prefill_tokens")


def _arg(f: Facts, key: str, value: Any, ref: LineRef) -> None:
    """A server argument: offered where other lines give the same fact (PRECEDENCE ranks server_args first)."""
    if key in PRECEDENCE:
        f.offer(key, value, ref, source=sg.KIND_SERVER_ARGS)
    else:
        f.set(key, value, ref)


def server_args_facts(f: Facts, events: list[Event]) -> None:
    args_event = first(events, sg.KIND_SERVER_ARGS)
    if args_event is None:
        return
    args = args_event.values
    ref = args_event.ref
    for key in _NUMERIC_ARGS:
        value = args.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            _arg(f, key, value, ref)
    for key in ("tp_size", "pp_size", "dp_size"):
        value = args.get(key)
        _arg(f, key, value if isinstance(value, int) else None, ref)
    graph_bs = args.get("cuda_graph_max_bs_decode", args.get("cuda_graph_max_bs"))
    if isinstance(graph_bs, int):
        f.set("cuda_graph_max_bs", graph_bs, ref)
    f.set("cuda_graph_flag", "--cuda-graph-max-bs-decode" if args.get("_has_cuda_graph_max_bs_decode") else "--cuda-graph-max-bs")
    if isinstance(args.get("model_path"), str):
        _arg(f, "model_path", args["model_path"], ref)
    if args.get("disable_cuda_graph") is True:
        f.set("cuda_graph_disabled", True, ref)
    if isinstance(args.get("kv_cache_dtype"), str):
        _arg(f, "kv_cache_dtype", args["kv_cache_dtype"], ref)


def startup_facts(f: Facts, events: list[Event], first_i: int) -> None:
    """The startup milestones: free memory around the weight load, the KV pool, the summary, graphs."""
    omni = _load_facts(f, events)
    _pool_facts(f, events)
    _summary_facts(f, events, first_i)
    _graph_facts(f, events, first_i)
    retracts = [e for e in events if e.kind == sg.KIND_RETRACT]
    if retracts:
        f.set("retraction_events", occurrences(events, sg.KIND_RETRACT), retracts[-1].ref)
    multimodal = bool(omni) or any(h in str(f.get("model_type", "")) for h in _MM_HINTS)
    f.set("is_multimodal", multimodal)
    mm_reserve = first(events, sg.KIND_MM_RESERVE)
    if mm_reserve is not None:
        f.set("mm_reserve_bytes", mm_reserve.get("reserve_bytes"), mm_reserve.ref)


def _load_facts(f: Facts, events: list[Event]) -> list[Event]:
    """pre and post (free memory before and after the weights), and the Omni stage lines (returned)."""
    begin = min_event([e for e in events if e.kind == sg.KIND_LOAD_BEGIN], "avail_bytes")
    end = min_event([e for e in events if e.kind == sg.KIND_LOAD_END], "avail_bytes")
    legacy = first(events, sg.KIND_LEGACY_PROFILE)
    if begin is not None:
        f.set("pre_bytes", begin.get("avail_bytes"), begin.ref)
    elif end is not None and end.get("mem_usage_bytes") is not None:
        # "Load weight end ... avail mem=A, mem usage=U" with U = before - A: the begin line is implied.
        pre = log_figures.sglang_pre_bytes_from_load_end(end.get("avail_bytes"), end.get("mem_usage_bytes"))
        f.set("pre_bytes", pre.value, end.ref, derivation=pre)
    elif legacy is not None:
        f.set("pre_bytes", legacy.get("pre_bytes"), legacy.ref)
    if end is not None:
        f.set("post_bytes", end.get("avail_bytes"), end.ref)
        f.set("model_type", end.get("model_type"), end.ref)
        f.set("load_end_era", end.get("era"))
    elif legacy is not None:
        f.set("post_bytes", legacy.get("post_bytes"), legacy.ref)
    if legacy is not None:
        f.offer("mem_fraction_static", legacy.get("mem_fraction_static"), legacy.ref, source=sg.KIND_LEGACY_PROFILE)
    omni = _omni_facts(f, events)
    init_end = first(events, sg.KIND_INIT_DIST_END)
    if init_end is not None:
        f.set("init_mem_usage_bytes", init_end.get("mem_usage_bytes"), init_end.ref)
    return omni


def _omni_facts(f: Facts, events: list[Event]) -> list[Event]:
    omni = [e for e in events if e.kind == sg.KIND_OMNI_STAGE]
    for e in omni:
        f.set("omni", True, e.ref)
        if e.get("encoder_mem_reserve") is not None:
            f.set("encoder_mem_reserve", e.get("encoder_mem_reserve"), e.ref)
        f.offer("mem_fraction_static", e.get("mem_fraction_static"), e.ref, source=sg.KIND_OMNI_STAGE)
    return omni


def _pool_facts(f: Facts, events: list[Event]) -> None:
    target = first(events, sg.KIND_KV_ALLOCATED)
    if target is None:
        return
    f.set("kv_pool_bytes", target.get("kv_bytes"), target.ref)
    tokens = target.get("tokens")
    if tokens:
        f.set("kv_pool_tokens", tokens, target.ref)
        if target.get("kv_bytes"):
            f.offer("cell_bytes", log_figures.kv_cell_bytes(target.get("kv_bytes"), tokens), target.ref, source=sg.KIND_KV_ALLOCATED)


def _summary_facts(f: Facts, events: list[Event], first_i: int) -> None:
    summary = first(events, sg.KIND_SUMMARY)
    if summary is not None:
        f.set("context_len", summary.get("context_len"), summary.ref)
        f.set("available_gpu_mem_bytes", summary.get("available_gpu_mem_bytes"), summary.ref)
        f.offer("max_running_requests", summary.get("max_running_requests"), summary.ref, source=sg.KIND_SUMMARY)
        f.offer("chunked_prefill_size", summary.get("chunked_prefill_size"), summary.ref, source=sg.KIND_SUMMARY)
    elif isinstance(f.get("context_length"), int):
        f.set("context_len", f.get("context_length"), f.ref("context_length"))
    ready = next((e for e in events[:first_i] if e.kind in (sg.KIND_READY, sg.KIND_SUMMARY)), None)
    f.set("server_ready", ready is not None, ready.ref if ready else None)


def _graph_facts(f: Facts, events: list[Event], first_i: int) -> None:
    graph_end = next((e for e in events if e.kind == sg.KIND_GRAPH_END and e.get("mem_usage_bytes") is not None), None)
    if graph_end is not None:
        f.offer("cuda_graph_bytes", graph_end.get("mem_usage_bytes"), graph_end.ref, source=sg.KIND_GRAPH_END)
    bars = [e for e in events[: first_i + 1] if e.kind == sg.KIND_GRAPH_BAR]
    # Only a decode bar's bs= is a batch size; a piecewise bar counts tokens.
    sized = [e for e in bars if e.get("bs") is not None]
    if sized:
        f.set("capture_last_bs", sized[-1].get("bs"), sized[-1].ref)
    # Each bar step (decode or piecewise) prints the free memory as the capture goes on.
    shown = [e for e in bars if e.get("avail_bytes") is not None]
    if shown:
        f.set("capture_avail_bytes", shown[-1].get("avail_bytes"), shown[-1].ref)
    f.set("timeline_stage", timeline_stage(events, first_i))


# --- Error lines --------------------------------------------------------------------------------------

# Every rank reports a startup KV error: only the first report is read (and cited).
_STARTUP_KV_KINDS = (sg.KIND_NOT_ENOUGH, sg.KIND_NO_KV, sg.KIND_HYBRID_NOT_ENOUGH, sg.KIND_PROFILED_NEGATIVE, sg.KIND_LEGACY_PROFILE)
# Lines whose first report alone is read.
_FIRST_REPORT_ONLY = (sg.KIND_KV_ALLOC_FAIL, sg.KIND_REQ_SLOTS_FAIL, sg.KIND_OMNI_ENCODER_FAIL)


def _startup_kv_error(f: Facts, e: Event, kind: str) -> None:
    f.offer("startup_kv_error", True, e.ref, source="sglang_errors")
    f.offer("startup_kv_error_kind", kind, source="sglang_errors")


def _not_enough(f: Facts, e: Event, events: list[Event]) -> None:
    # A sliding-window pool's error says the KV budget is positive but too small for the SWA cap.
    _startup_kv_error(f, e, "swa_pool" if e.get("source") == "swa_pool" else "not_enough_memory")
    f.offer("mem_fraction_static", e.get("mem_fraction_static"), e.ref, source="sglang_kv_error")


def _no_kv(f: Facts, e: Event, events: list[Event]) -> None:
    _startup_kv_error(f, e, "weights_leave_no_kv")
    f.offer("mem_fraction_static", e.get("mem_fraction_static"), e.ref, source="sglang_kv_error")
    f.set("sglang_suggested_mfs", e.get("suggested_mem_fraction_static"), e.ref)
    f.set("sglang_minimum_viable_mfs", e.get("minimum_viable"), e.ref)


def _hybrid(f: Facts, e: Event, events: list[Event]) -> None:
    _startup_kv_error(f, e, "hybrid_state")


def _profiled_negative(f: Facts, e: Event, events: list[Event]) -> None:
    if e.get("profiled_tokens", 1) <= 0:
        _startup_kv_error(f, e, "profiled_negative")


def _legacy_negative(f: Facts, e: Event, events: list[Event]) -> None:
    if e.get("rest_bytes", 1) <= 0:
        _startup_kv_error(f, e, "legacy_profile_negative")


def _capture_failed(f: Facts, e: Event, events: list[Event]) -> None:
    f.set("capture_failed", True, e.ref)
    f.set("capture_error_is_oom", bool(e.get("is_oom")), e.ref)
    f.set("capture_custom_all_reduce", bool(e.get("custom_all_reduce")))


def _kv_alloc_fail(f: Facts, e: Event, events: list[Event]) -> None:
    f.set("kv_alloc_failed", True, e.ref)
    f.set("kv_alloc_phase", e.get("which"))


def _kv_alloc_detail(f: Facts, e: Event, events: list[Event]) -> None:
    f.offer("kv_requested_tokens", e.get("requested_tokens"), e.ref, source=sg.KIND_KV_ALLOC_DETAIL)
    f.offer("kv_available_tokens", e.get("available_tokens"), e.ref, source=sg.KIND_KV_ALLOC_DETAIL)


def _req_slots_fail(f: Facts, e: Event, events: list[Event]) -> None:
    f.set("req_slots_failed", True, e.ref)
    f.set("req_slots_available", e.get("available_slots"), e.ref)
    f.set("req_slots_requested", e.get("requested_slots"), e.ref)


def _encoder_fail(f: Facts, e: Event, events: list[Event]) -> None:
    f.set("encoder_request_failed", True, e.ref)
    f.set("encoder_failures", occurrences(events, sg.KIND_OMNI_ENCODER_FAIL))


def _capture_advice(f: Facts, e: Event, events: list[Event]) -> None:
    if e.get("decode_flag"):
        # The engine's own advice names the flag its version reads (the last such line is cited).
        f.set("cuda_graph_flag", "--cuda-graph-max-bs-decode", e.ref)


def _straggler(f: Facts, e: Event, events: list[Event]) -> None:
    f.set("load_straggler", True, e.ref)


def _mm_cache_full(f: Facts, e: Event, events: list[Event]) -> None:
    f.set("mm_cache_full", True, e.ref)


_ERROR_HANDLERS: dict[str, Callable[[Facts, Event, list[Event]], None]] = {
    sg.KIND_NOT_ENOUGH: _not_enough,
    sg.KIND_NO_KV: _no_kv,
    sg.KIND_HYBRID_NOT_ENOUGH: _hybrid,
    sg.KIND_PROFILED_NEGATIVE: _profiled_negative,
    sg.KIND_LEGACY_PROFILE: _legacy_negative,
    sg.KIND_CAPTURE_FAILED: _capture_failed,
    sg.KIND_KV_ALLOC_FAIL: _kv_alloc_fail,
    sg.KIND_KV_ALLOC_DETAIL: _kv_alloc_detail,
    sg.KIND_REQ_SLOTS_FAIL: _req_slots_fail,
    sg.KIND_OMNI_ENCODER_FAIL: _encoder_fail,
    sg.KIND_CAPTURE_ADVICE: _capture_advice,
    sg.KIND_STRAGGLER: _straggler,
    sg.KIND_MM_CACHE_FULL: _mm_cache_full,
}


def error_facts(f: Facts, events: list[Event]) -> None:
    """SGLang's error lines, in log order: startup KV errors, capture failures, allocation failures."""
    seen: set[str] = set()
    for e in events:
        handler = _ERROR_HANDLERS.get(e.kind)
        if handler is None:
            continue
        if e.kind in _STARTUP_KV_KINDS and "startup_kv_error" in f.values:
            continue
        if e.kind in _FIRST_REPORT_ONLY:
            if e.kind in seen:
                continue
            seen.add(e.kind)
        handler(f, e, events)

"""vLLM's facts: its arguments, its memory profile, its startup errors.

vLLM's budget: u*total = weights + activation peak + non-torch [+ graphs] + KV. Most figures are read
from a table of (event kind, value key, fact); the kind is the source PRECEDENCE ranks.
"""

from __future__ import annotations

from oomdoctor.base.evidence import Event
from oomdoctor.evidence.parsers import vllm as vl
from oomdoctor.inference.facts.common import allocator_failed, first, last_value, occurrences
from oomdoctor.inference.facts.derived import vllm_window
from oomdoctor.inference.facts.store import Facts
from oomdoctor.memory import log_figures

# (value key, fact) of the argument and engine-config lines.
_CONFIG_FACTS = (
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
)

# The facts of _CONFIG_FACTS that are numbers (the others are a model name, a dtype, a flag).
_NUMBER_FACTS = frozenset({"gpu_memory_utilization", "max_model_len", "max_num_seqs", "max_num_batched_tokens", "tp_size", "pp_size", "max_capture_size", "block_size"})

# (event kind, value key, fact): the last line of the kind that has the value gives it.
_PROFILE_FACTS = (
    (vl.KIND_FREE_LESS, "total_bytes", "capacity_bytes"),
    (vl.KIND_PROFILE_TOTAL, "total_bytes", "capacity_bytes"),
    (vl.KIND_PROFILE_V0_RESULTS, "total_bytes", "capacity_bytes"),
    (vl.KIND_PROFILE_V0_RESULTS, "gpu_memory_utilization", "gpu_memory_utilization"),
    (vl.KIND_PROFILE_V0_RESULTS, "non_kv_bytes", "non_kv_bytes"),
    (vl.KIND_PROFILE_V0_RESULTS, "kv_bytes", "kv_budget_bytes"),
    (vl.KIND_FREE_LESS, "gpu_memory_utilization", "gpu_memory_utilization"),
    (vl.KIND_STARTUP_SUMMARY, "gpu_memory_utilization", "gpu_memory_utilization"),
    (vl.KIND_STARTUP_SUMMARY, "total_bytes", "capacity_bytes"),
    (vl.KIND_STARTUP_SUMMARY, "free_at_start_bytes", "free_at_start_bytes"),
    (vl.KIND_STARTUP_SUMMARY, "requested_bytes", "requested_budget_bytes"),
    (vl.KIND_STARTUP_SUMMARY, "weights_bytes", "weights_bytes"),
    (vl.KIND_STARTUP_SUMMARY, "activation_peak_bytes", "activation_peak_bytes"),
    (vl.KIND_STARTUP_SUMMARY, "non_torch_bytes", "non_torch_bytes"),
    (vl.KIND_STARTUP_SUMMARY, "kv_bytes", "kv_budget_bytes"),
    (vl.KIND_STARTUP_SUMMARY, "graph_bytes", "cuda_graph_bytes"),
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
)

DEFAULT_BLOCK_SIZE = 16


def vllm_facts(f: Facts, events: list[Event], first_i: int) -> None:
    _config_facts(f, events)
    for kind, key, fact in _PROFILE_FACTS:
        value, ref = last_value(events, kind, key)
        f.offer(fact, value, ref, source=kind)
    _derived_profile_facts(f, events)
    _startup_error_facts(f, events)
    preempts = [e for e in events if e.kind == vl.KIND_PREEMPT]
    if preempts:
        # The engine's own running count where the lines carry it, else the lines the log holds.
        seen = occurrences(events, vl.KIND_PREEMPT)
        f.set("preemptions", max(seen, *(e.get("cumulative") or 0 for e in preempts)), preempts[-1].ref)
    mm = next((e for e in events[: first_i + 1] if e.kind == vl.KIND_MM_PROFILE), None)
    if mm is not None:
        f.set("is_multimodal", True, mm.ref)
    _stage_facts(f)
    vllm_window(f)


def _config_facts(f: Facts, events: list[Event]) -> None:
    for kind in (vl.KIND_ARGS, vl.KIND_ENGINE_CONFIG):
        for e in events:
            if e.kind != kind:
                continue
            for key, fact in _CONFIG_FACTS:
                value = e.get(key)
                if fact in _NUMBER_FACTS and (isinstance(value, bool) or not isinstance(value, (int, float))):
                    continue  # a word where the args print a number ('gpu_memory_utilization': abc): no fact, not u*total of a string
                f.offer(fact, value, e.ref, source=kind)
            if e.get("version"):
                f.set("vllm_version", e.get("version"))
            if kind == vl.KIND_ENGINE_CONFIG:
                f.set("vllm_v1", bool(e.get("v1")))


def _derived_profile_facts(f: Facts, events: list[Event]) -> None:
    """What the profile lines imply: KV tokens from blocks, the card from u*total, non-KV memory, per-token KV."""
    gpu_blocks, _ = last_value(events, vl.KIND_GPU_BLOCKS, "gpu_blocks")
    if gpu_blocks is not None:
        f.offer("kv_capacity_tokens", gpu_blocks * (f.get("block_size") or DEFAULT_BLOCK_SIZE), source=vl.KIND_GPU_BLOCKS)
    if f.get("requested_budget_bytes") and f.get("gpu_memory_utilization"):
        total = log_figures.vllm_total_bytes_from_budget(f.get("requested_budget_bytes"), f.get("gpu_memory_utilization"))
        f.offer("capacity_bytes", total.value, f.ref("requested_budget_bytes"), source="vllm_budget_over_util", derivation=total)
    if all(k in f.values for k in ("weights_bytes", "activation_peak_bytes", "non_torch_bytes")):
        non_kv = log_figures.vllm_non_kv_bytes_from_profile(f.get("weights_bytes"), f.get("activation_peak_bytes"), f.get("non_torch_bytes"))
        f.offer("non_kv_bytes", non_kv.value, f.ref("weights_bytes"), source="vllm_profile_sum", derivation=non_kv)
    total, util, kv = f.get("capacity_bytes"), f.get("gpu_memory_utilization"), f.get("kv_budget_bytes")
    if total and util is not None and kv is not None:
        non_kv = log_figures.vllm_non_kv_bytes_from_kv(total, util, kv)
        f.offer("non_kv_bytes", non_kv.value, f.ref("kv_budget_bytes"), source="vllm_budget_minus_kv", derivation=non_kv)
    _profile_foreign_facts(f, events)
    if f.get("kv_needed_bytes") and f.get("max_model_len"):
        cell = log_figures.kv_cell_bytes(f.get("kv_needed_bytes"), f.get("max_model_len"))
        f.offer("cell_bytes", cell, f.ref("kv_needed_bytes"), source="vllm_kv_needed")
    elif kv and f.get("kv_capacity_tokens") and kv > 0:
        cell = log_figures.kv_cell_bytes(kv, f.get("kv_capacity_tokens"))
        f.offer("cell_bytes", cell, f.ref("kv_capacity_tokens"), source="vllm_kv_budget")


def _profile_foreign_facts(f: Facts, events: list[Event]) -> None:
    """Memory another process held when vLLM 0.6.4 profiled: its initial usage less every model it loaded (a
    speculative decoder's draft too), a CUDA context and, with TP > 1, NCCL's buffers. Only when the same line's
    non_torch_memory holds that much: 0.6.4 counts another tenant's memory there, so a smaller figure rules it out."""
    profile = next((e for e in reversed(events) if e.kind == vl.KIND_PROFILE_V0_RESULTS and e.get("initial_used_bytes") is not None), None)
    if profile is None:
        return
    f.set("profile_initial_used_bytes", profile.get("initial_used_bytes"), profile.ref)
    loads = [e for e in events if e.kind == vl.KIND_WEIGHTS and e.get("weights_bytes") is not None and e.ref.line < profile.ref.line]
    if not loads:
        return
    tp = f.get("tp_size") or 1
    foreign = log_figures.vllm_profile_foreign_bytes(profile.get("initial_used_bytes"), [e.get("weights_bytes") for e in loads], tp > 1)
    non_torch = profile.get("non_torch_bytes")
    if non_torch is not None and non_torch < foreign.value:
        return
    f.set("startup_foreign_bytes", foreign.value, profile.ref, *(e.ref for e in loads), derivation=foreign)


def _startup_error_facts(f: Facts, events: list[Event]) -> None:
    free_less = first(events, vl.KIND_FREE_LESS)
    if free_less is not None:
        deficit = log_figures.vllm_startup_free_deficit_bytes(free_less.get("requested_bytes"), free_less.get("free_at_start_bytes"))
        f.set("free_less_than_requested", True, free_less.ref)
        f.set("startup_free_deficit_bytes", deficit.value, free_less.ref, derivation=deficit)
    else:
        f.set("free_less_than_requested", False)
    profile_assert = first(events, vl.KIND_PROFILE_ASSERT)
    f.set("profile_memory_changed", profile_assert is not None, profile_assert.ref if profile_assert else None)
    # A negative "Available KV cache memory" is the engine's own arithmetic: no room for KV. V0 printed
    # the same arithmetic in its profile lines ("the rest of the memory reserved for KV Cache is -1.05GiB",
    # "kv_cache_size=-1.05GiB") and then "# GPU blocks: 0", and its raise_if_cache_size_invalid raises
    # "No available memory for the cache blocks" for zero blocks: each of these lines decides the class
    # when a paste stops before that error.
    negative_kv = next((e for e in events if e.kind == vl.KIND_KV_AVAILABLE and (e.get("kv_bytes") or 0) <= 0), None)
    negative_profile = next(
        (e for e in events if e.kind in (vl.KIND_PROFILE_BREAKDOWN, vl.KIND_PROFILE_V0_RESULTS) and e.get("kv_bytes") is not None and e.get("kv_bytes") < 0), None
    )
    zero_blocks = next((e for e in events if e.kind == vl.KIND_GPU_BLOCKS and e.get("gpu_blocks") == 0), None)
    cause = first(events, vl.KIND_NO_CACHE_BLOCKS) or first(events, vl.KIND_ONE_REQUEST) or negative_kv or negative_profile or zero_blocks
    f.offer("startup_kv_error", cause is not None, *(cause.refs if cause else ()), source="vllm_errors")
    if cause is not None:
        f.offer("startup_kv_error_kind", cause.kind, source="vllm_errors")


def _stage_facts(f: Facts) -> None:
    """vLLM's stages as the classes name them: its profiling pass is a forward pass sized by its batch limits."""
    stage = f.get("oom_stage")
    if stage == "profile":
        f.set("oom_stage", "forward", f.ref("oom_stage"))
        f.set("oom_phase", "profile")
    elif stage == "encoder" and allocator_failed(f):
        f.set("encoder_oom", True, f.ref("oom_stage"))
    elif stage == "cuda_graph":
        f.set("capture_oom", True, f.ref("oom_stage"))
    elif stage == "weight_loading":
        f.set("weight_load_oom", allocator_failed(f), f.ref("oom_stage"))

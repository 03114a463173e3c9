"""Named recommenders: from the facts and budget of an incident to flag changes with values.

Rules name these by id; each returns zero or more recommendations, every value carrying the steps
that produced it. A recommender that lacks the numbers it needs returns a recommendation without a
value rather than guessing one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from oomdoctor import budget
from oomdoctor.budget import Step
from oomdoctor.facts import Facts
from oomdoctor.units import GIB, ceil_to, floor_to, format_bytes


@dataclass(frozen=True, slots=True)
class Recommendation:
    """Change ``flag`` in ``direction`` to ``value``; ``why`` says why, ``derivation`` shows how."""

    flag: str
    value: Any
    direction: str
    why: str
    current: Any = None
    derivation: tuple[Step, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        return {
            "flag": self.flag,
            "value": self.value,
            "direction": self.direction,
            "current": self.current,
            "why": self.why,
            "derivation": [s.to_json() for s in self.derivation],
        }


Recommender = Callable[[Facts], list[Recommendation]]
_REGISTRY: dict[str, Recommender] = {}


def recommender(name: str) -> Callable[[Recommender], Recommender]:
    def register(fn: Recommender) -> Recommender:
        _REGISTRY[name] = fn
        return fn

    return register


def known_advice() -> tuple[str, ...]:
    return tuple(sorted(_REGISTRY))


def recommend(advice_ids: tuple[str, ...], facts: Facts) -> list[Recommendation]:
    out: list[Recommendation] = []
    for advice_id in advice_ids:
        out.extend(_REGISTRY[advice_id](facts))
    return out


def _g(n: float | None) -> str:
    return format_bytes(n)


@recommender("raise-mem-fraction-static")
def raise_mem_fraction_static(f: Facts) -> list[Recommendation]:
    """startup_kv: the y that fits one request's KV and keeps SGLang's activation reserve."""
    mfs, pre, post = f.get("mem_fraction_static"), f.get("pre_bytes"), f.get("post_bytes")
    window = f.get("_window")
    if mfs is None or not pre or post is None or window is None:
        suggested = f.get("sglang_suggested_mfs")
        if suggested is not None:
            return [
                Recommendation(
                    "--mem-fraction-static",
                    round(suggested + 0.05, 2) if suggested + 0.05 < 0.96 else suggested,
                    "raise",
                    "SGLang's own message gives the minimum viable value; the log lacks the avail mem lines to size the KV pool above it.",
                    current=mfs,
                    derivation=(Step("SGLang's suggested minimum", "from 'Raise --mem-fraction-static above X'", suggested),),
                )
            ]
        return [
            Recommendation(
                "--mem-fraction-static",
                None,
                "raise",
                "The KV budget y*pre - weights was not positive; raise y. The log lacks 'Load weight begin/end ... avail mem=' lines to compute the value.",
                current=mfs,
            )
        ]
    steps: list[Step] = [
        Step("pre: free before weights (worst rank)", "Load weight begin. avail mem", pre),
        Step("post: free after weights (worst rank)", "Load weight end. avail mem", post),
        *f.derivations["weights_bytes"].steps,
        *budget.sglang_kv_derivation(pre, post, mfs).steps,
        *f.derivations["kv_floor_bytes"].steps,
        *f.derivations["activation_reserve_bytes"].steps,
        *window.steps,
    ]
    choice = budget.choose_in_window(window)
    if choice is None:
        return [
            Recommendation(
                "--mem-fraction-static",
                None,
                "raise",
                (
                    f"No y works: weights {_g(f.get('weights_bytes'))} plus one request's KV {_g(f.get('kv_floor_bytes'))} "
                    f"need y >= {window.low:.3f}, but keeping SGLang's {_g(f.get('activation_reserve_bytes'))} activation reserve "
                    f"needs y <= {window.high:.3f}. Shard or shrink the model instead (see the other recommendations)."
                ),
                current=mfs,
                derivation=tuple(steps),
            )
        ]
    at_choice = budget.sglang_kv_derivation(pre, post, choice)
    steps.extend(at_choice.steps)
    steps.append(Step("recommended y", "largest multiple of 0.05 (else 0.01) inside the window", choice))
    why = (
        f"At y={mfs:g} the static share y*pre is smaller than the weights, so the KV budget is "
        f"{_g(f.get('kv_budget_bytes'))}; raising y (not lowering it) grows the KV pool: at y={choice:g} it is "
        f"{_g(at_choice.value)}, and (1-y)*pre = {_g(budget.sglang_dynamic_region_bytes(pre, choice))} stays for activations."
    )
    return [Recommendation("--mem-fraction-static", choice, "raise", why, current=mfs, derivation=tuple(steps))]


@recommender("scale-out-weights")
def scale_out_weights(f: Facts) -> list[Recommendation]:
    """weights_dont_fit: more tensor parallelism, or quantized weights."""
    tp = f.get("tp_size") or 1
    weights, pre = f.get("weights_bytes"), f.get("pre_bytes")
    steps: tuple[Step, ...] = ()
    why = "The weights alone leave no room for KV cache and activations on this GPU; shard them over more GPUs."
    if weights and pre:
        share = weights / pre
        steps = (Step("weights' share of pre-load free memory", f"{_g(weights)} / {_g(pre)}", round(share, 4)),)
        why = f"The weights take {share:.0%} of the memory free before loading ({_g(weights)} of {_g(pre)}); doubling TP halves the per-GPU share."
    return [
        Recommendation("--tp-size", tp * 2, "raise", why, current=tp, derivation=steps),
        Recommendation(
            "--quantization",
            "fp8",
            "set",
            "FP8 weights take about half the memory of BF16 (on GPUs with FP8 support); or serve a pre-quantized checkpoint.",
        ),
    ]


@recommender("kv-cache-fp8")
def kv_cache_fp8(f: Facts) -> list[Recommendation]:
    if f.get("kv_cache_dtype") not in (None, "auto", "bfloat16", "float16"):
        return []
    return [
        Recommendation(
            "--kv-cache-dtype",
            "fp8_e4m3",
            "set",
            "An FP8 KV cache holds twice the tokens in the same memory, so a smaller KV budget still serves full-length requests.",
            current=f.get("kv_cache_dtype"),
        )
    ]


@recommender("lower-mem-fraction-static")
def lower_mem_fraction_static(f: Facts) -> list[Recommendation]:
    """runtime OOMs: lower y so (1-y)*pre grows by the shortfall plus room for one more such allocation."""
    mfs, pre = f.get("mem_fraction_static"), f.get("pre_bytes")
    requested, free = f.get("requested_bytes"), f.get("free_bytes")
    if mfs is None or not pre or requested is None or free is None:
        missing = [n for n, v in (("mem_fraction_static", mfs), ("pre_bytes", pre), ("requested_bytes", requested), ("free_bytes", free)) if v is None]
        return [
            Recommendation(
                "--mem-fraction-static",
                None,
                "lower",
                f"Give activations more room by lowering y; to compute by how much, the log would need: {', '.join(missing)}.",
                current=mfs,
            )
        ]
    shortfall = max(requested - free, 0)
    margin = budget.runtime_margin_bytes(requested)
    lowered = budget.sglang_lowered_mfs(mfs, pre, shortfall, margin)
    steps = [
        Step("requested by the failed allocation", "Tried to allocate", requested),
        Step("free on the GPU at the failure", "of which ... is free", free),
        Step("shortfall", f"{_g(requested)} - {_g(free)}", shortfall),
        Step("margin: one more allocation of that size (at least 512 MiB)", f"max({_g(requested)}, 512 MiB)", margin),
        *lowered.steps,
    ]
    value = lowered.value
    floor = f.get("min_viable_mfs")
    why = (
        f"The forward pass needed {_g(requested)} with {_g(free)} free: the dynamic region (1-y)*pre was too small. "
        f"Lowering y from {mfs:g} to {value:g} moves {_g(shortfall + margin)} from the KV pool to activations."
    )
    if floor is not None and value < floor:
        why += f" That is below the {floor:.3f} the weights plus one request need, so prefer the chunked-prefill / running-request limits."
        steps.append(Step("lowest workable y (weights + one request)", "see the window", floor))
    if value <= 0:
        return []
    return [Recommendation("--mem-fraction-static", value, "lower", why, current=mfs, derivation=tuple(steps))]


@recommender("lower-chunked-prefill-size")
def lower_chunked_prefill_size(f: Facts) -> list[Recommendation]:
    """Prefill activations scale with the chunk; halve it (SGLang docs suggest 4096 or 2048)."""
    if f.get("oom_phase") == "decode":
        return []
    chunk = f.get("chunked_prefill_size")
    if chunk is None or chunk <= 0:
        return [
            Recommendation(
                "--chunked-prefill-size",
                4096,
                "set",
                "Prefill activations grow with the tokens prefilled at once; chunking them at 4096 bounds that peak.",
                current=chunk,
            )
        ]
    value = max(budget.pow2_floor(chunk // 2), 512)
    if value >= chunk:
        return []
    return [
        Recommendation(
            "--chunked-prefill-size",
            value,
            "lower",
            f"Prefill activation memory grows about linearly with the chunk; halving {chunk} to {value} halves that peak at some cost in prefill throughput.",
            current=chunk,
            derivation=(Step("halved chunk, a power of two", f"{chunk} / 2", value),),
        )
    ]


@recommender("lower-max-running-requests")
def lower_max_running_requests(f: Facts) -> list[Recommendation]:
    current = f.get("max_running_requests")
    if f.get("oom_phase") == "prefill" and not (f.get("kv_alloc_failed") or f.get("req_slots_failed")):
        return []
    if current is None:
        return [Recommendation("--max-running-requests", None, "lower", "Fewer concurrent requests need less memory per decode step.")]
    value = max(current // 2, 1)
    return [
        Recommendation(
            "--max-running-requests",
            value,
            "lower",
            f"Halving the concurrent requests from {current} to {value} halves the per-step demand on the KV pool and decode activations.",
            current=current,
            derivation=(Step("halved", f"{current} // 2", value),),
        )
    ]


@recommender("lower-cuda-graph-max-bs")
def lower_cuda_graph_max_bs(f: Facts) -> list[Recommendation]:
    """cuda_graph: capture fewer batch sizes, under the flag name this SGLang version uses."""
    flag = f.get("cuda_graph_flag", "--cuda-graph-max-bs")
    current = f.get("cuda_graph_max_bs")
    failing = f.get("capture_last_bs")
    steps: list[Step] = []
    if failing:
        value = budget.round_down_multiple(failing / 2, 8) if failing >= 16 else max(failing // 2, 1)
        steps.append(Step("batch size being captured when memory ran out", "Capturing batches (bs=N ...)", failing))
        steps.append(Step("half of it (multiple of 8)", f"{failing} / 2", value))
    elif current:
        value = budget.round_down_multiple(current / 2, 8) if current >= 16 else max(current // 2, 1)
        steps.append(Step("half the configured maximum (multiple of 8)", f"{current} / 2", value))
    else:
        value = 16
        steps.append(Step("SGLang's own example value", "e.g. 16", value))
    why = (
        f"Graph capture ran out of memory; each captured batch size keeps its own buffers in the dynamic region. "
        f"Capturing up to {value} instead of {current if current else 'the default'} needs less of it. "
        f"({flag} is this version's spelling.)"
    )
    return [Recommendation(flag, value, "lower", why, current=current, derivation=tuple(steps))]


@recommender("expandable-segments")
def expandable_segments(f: Facts) -> list[Recommendation]:
    """fragmentation: free + reserved-unallocated would have served the request."""
    requested, unalloc, free = f.get("requested_bytes"), f.get("reserved_unallocated_bytes"), f.get("free_bytes")
    steps: tuple[Step, ...] = ()
    if requested is not None and unalloc is not None:
        steps = (
            Step("requested", "Tried to allocate", requested),
            Step("reserved by PyTorch but unallocated", "free pieces of partly used segments", unalloc),
            Step("free on the device", "of which ... is free", free if free is not None else "n/a"),
        )
    why = (
        f"PyTorch held {_g(unalloc)} reserved but unallocated, at least the {_g(requested)} requested, yet in pieces too small "
        "to serve it. Expandable segments let the allocator grow segments instead of splitting them."
    )
    return [Recommendation("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", "set", why, derivation=steps)]


@recommender("reserve-encoder-memory")
def reserve_encoder_memory(f: Facts) -> list[Recommendation]:
    """encoder_starvation: reserve room for the encoder (Omni) or shrink the static share (SGLang VLM)."""
    requested, free, capacity = f.get("requested_bytes"), f.get("free_bytes"), f.get("capacity_bytes")
    if f.get("omni"):
        current = f.get("encoder_mem_reserve", 0.05)
        if requested is None or free is None or not capacity:
            return [
                Recommendation(
                    "--encoder-mem-reserve",
                    ceil_to(current + 0.05, 0.01),
                    "raise",
                    "The encoder stage ran out of memory; reserve more of the GPU for it (the OOM numbers were not in the log, so this is one 0.05 step).",
                    current=current,
                )
            ]
        need = max(requested - free, 0) + budget.runtime_margin_bytes(requested)
        value = ceil_to(current + need / capacity, 0.01)
        steps = (
            Step("encoder shortfall plus one more such allocation", f"{_g(requested)} - {_g(free)} + margin", need),
            Step("as a fraction of the card", f"{_g(need)} / {_g(capacity)}", round(need / capacity, 4)),
            Step("new reserve", f"{current:g} + {need / capacity:.4f}, rounded up to 0.01", value),
        )
        why = (
            f"The encoder needed {_g(requested)} with {_g(free)} free: the thinker's static share left it too little. "
            f"Raising encoder_mem_reserve from {current:g} to {value:g} lowers the thinker's mem_fraction_static by the same amount."
        )
        return [Recommendation("--encoder-mem-reserve", value, "raise", why, current=current, derivation=steps)]
    recs = lower_mem_fraction_static(f)
    recs = [
        Recommendation(
            r.flag,
            r.value,
            r.direction,
            "SGLang keeps no explicit reserve for the vision/audio encoder; its activations come out of (1-y)*pre. " + r.why,
            current=r.current,
            derivation=r.derivation,
        )
        for r in recs
    ]
    recs.append(
        Recommendation(
            "SGLANG_VLM_CACHE_SIZE_MB",
            None,
            "lower",
            "Cap image/video size per request (fewer pixels or frames) so one encoder batch fits; a smaller embedding cache frees room too.",
        )
    )
    return recs


def format_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


__all__ = ["Recommendation", "recommend", "known_advice", "GIB", "floor_to"]

"""SGLang's recommenders: --mem-fraction-static both ways, prefill chunks, running requests, CUDA graphs, encoder room, memory held before startup."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomdoctor.advice.generic import halve_flag
from oomdoctor.advice.recommendation import Recommendation
from oomdoctor.base.units import ceil_to, format_bytes
from oomdoctor.memory import budget
from oomdoctor.memory.budget import Step

if TYPE_CHECKING:
    from oomdoctor.inference.facts import Facts


def raise_mem_fraction_static(f: Facts) -> list[Recommendation]:
    """startup_kv: the y that fits one request's KV and keeps SGLang's activation reserve."""
    mfs, pre, post = f.get("mem_fraction_static"), f.get("pre_bytes"), f.get("post_bytes")
    window = f.get("_window")
    # The value needs pre, post and the window they give. The y in use only explains it where the engine's
    # message means a KV budget <= 0 (then every y in the window is above it); a sliding-window pool's or a
    # hybrid state pool's error leaves a positive budget, so there the y in use is needed to know a value is a raise.
    kind = f.get("startup_kv_error_kind")
    swa = kind == "swa_pool"
    budget_at_most_zero = kind in ("not_enough_memory", "weights_leave_no_kv", "profiled_negative", "legacy_profile_negative")
    if not pre or post is None or window is None or (mfs is None and not budget_at_most_zero):
        suggested = f.get("sglang_suggested_mfs")
        if suggested is not None:
            return [
                Recommendation(
                    "--mem-fraction-static",
                    round(suggested + 0.05, 2) if suggested + 0.05 < 0.96 else suggested,
                    "raise",
                    "SGLang's own message gives the minimum viable value; the log lacks the avail mem lines to size the KV pool above it.",
                    current=mfs,
                    derivation=(Step("SGLang's suggested minimum", "from 'Raise --mem-fraction-static above X'", suggested, "fraction"),),
                )
            ]
        return [
            Recommendation(
                "--mem-fraction-static",
                None,
                "raise",
                _no_value_why(swa, have_window=bool(pre) and post is not None and window is not None, have_mfs=mfs is not None),
                current=mfs,
            )
        ]
    steps: list[Step] = [
        Step("pre: free before weights (worst rank)", "Load weight begin. avail mem", pre, "bytes"),
        Step("post: free after weights (worst rank)", "Load weight end. avail mem", post, "bytes"),
        *f.derivations["weights_bytes"].steps,
        *(budget.sglang_kv_derivation(pre, post, mfs).steps if mfs is not None else ()),
        *f.derivations["kv_floor_bytes"].steps,
        *f.derivations["activation_reserve_bytes"].steps,
        *window.steps,
    ]
    choice = budget.choose_in_window(window)
    if choice is not None and f.get("weights_fit_undecided"):
        return [_sglang_undecided_mfs(f, mfs, pre, post, choice, steps)]
    if choice is None:
        return [
            Recommendation(
                "--mem-fraction-static",
                None,
                "raise",
                (
                    f"No y works: weights {format_bytes(f.get('weights_bytes'))} plus one request's KV {format_bytes(f.get('kv_floor_bytes'))} "
                    f"need y >= {window.low:.3f}, but keeping SGLang's {format_bytes(f.get('activation_reserve_bytes'))} activation reserve "
                    f"needs y <= {window.high:.3f}. Shard or shrink the model instead (see the other recommendations)."
                ),
                current=mfs,
                derivation=tuple(steps),
            )
        ]
    finer = False
    if mfs is not None and choice <= mfs:
        # The round value is no raise (a sliding-window pool's error at a y already near the top): a finer
        # step above the y in use, if the window's top leaves one.
        above = budget.raise_in_window(window, mfs)
        if above is not None:
            choice, finer = above, True
    if mfs is not None and choice <= mfs:
        return [
            Recommendation(
                "--mem-fraction-static",
                None,
                "raise",
                (
                    f"y={mfs:g} leaves no step of 0.001 below {window.high:.4f}, the most that keeps SGLang's "
                    f"{format_bytes(f.get('activation_reserve_bytes'))} activation reserve, so no raise is left; "
                    + ("reduce --max-running-requests or lower SGLANG_SWA_EVICTION_INTERVAL (SGLang's advice), or shard the model." if swa else "shard or shrink the model instead.")
                ),
                current=mfs,
                derivation=tuple(steps),
            )
        ]
    at_choice = budget.sglang_kv_derivation(pre, post, choice)
    steps.extend(at_choice.steps)
    rule = "largest multiple of 0.05 (else 0.01, else 0.001) inside the window" + (f" and above {mfs:g}" if finer else "")
    steps.append(Step("recommended y", rule, choice, "fraction"))
    at_current = _at_current_y(f, mfs, swa)
    why = (
        f"{at_current}; raising y (not lowering it) grows the KV pool: at y={choice:g} it is "
        f"{format_bytes(at_choice.value)}, and (1-y)*pre = {format_bytes(budget.sglang_dynamic_region_bytes(pre, choice))} stays for activations."
    )
    return [Recommendation("--mem-fraction-static", choice, "raise", why, current=mfs, derivation=tuple(steps))]


def _at_current_y(f: Facts, mfs: float | None, swa: bool) -> str:
    """What the KV budget y*pre - W is at the y in use, in the words its sign allows."""
    if mfs is None:
        return "At the y in use (the log has no server_args line) the engine found no room for the KV cache"
    kv = f.get("kv_budget_bytes")
    if kv is None or kv <= 0:
        than = "smaller than" if kv is None or kv < 0 else "equal to"
        return f"At y={mfs:g} the static share y*pre is {than} the weights, so the KV budget is {format_bytes(kv)}"
    if swa:
        return (
            f"At y={mfs:g} the KV budget y*pre - W is {format_bytes(kv)}, positive but too small for the sliding-window pool's "
            "fixed share and the full KV pool together"
        )
    floor = f.get("kv_floor_bytes")
    less = f", less than one request's {format_bytes(floor)}" if floor else ""
    return f"At y={mfs:g} the KV budget y*pre - W is {format_bytes(kv)}, positive but too small{less}"


def _no_value_why(swa: bool, have_window: bool, have_mfs: bool) -> str:
    """Why raise-mem-fraction-static gives no value: what the log lacks for one."""
    if have_window and swa:
        return (
            "The sliding-window (SWA) pool's fixed share left no room for the full KV pool; raise y, or as SGLang says reduce "
            "--max-running-requests or lower SGLANG_SWA_EVICTION_INTERVAL. The log lacks the server_args line (the y in use) to compute a value."
        )
    if have_window:
        return "The engine's message leaves the KV budget positive but too small; raise y. The log lacks the server_args line (the y in use) to compute a value."
    lacks = ", and the server_args line that gives the y in use." if not have_mfs else "."
    return "The KV budget y*pre - weights was not positive; raise y. The log lacks 'Load weight begin/end ... avail mem=' lines to compute the value" + lacks


def _sglang_undecided_mfs(f: Facts, mfs: float | None, pre: int, post: int, choice: float, steps: list[Step]) -> Recommendation:
    """The y for a startup KV failure when one request's KV size is only assumed.

    The window then counts no KV for the request (what the log proves: weights and the activation
    reserve), and the choice is its top, the largest KV pool the GPU allows; the text names the
    per-token KV size as what decides whether one request fits in it.
    """
    at_choice = budget.sglang_kv_derivation(pre, post, choice)
    steps = [*steps, *at_choice.steps, Step("recommended y", "largest multiple of 0.05 (else 0.01, else 0.001) inside the window", choice, "fraction")]
    at_current = f"At y={mfs:g} the KV budget is {format_bytes(f.get('kv_budget_bytes'))}" if mfs is not None else "At the y in use (not in the log) the KV cache did not fit"
    why = (
        f"{at_current}; raising y (not lowering it) grows the KV pool: at y={choice:g}, "
        f"near the most this GPU allows while keeping SGLang's {format_bytes(f.get('activation_reserve_bytes'))} activation reserve, it is "
        f"{format_bytes(at_choice.value)}. Whether one request's KV fits in it depends on the model's per-token KV size, which the log does not give "
        "(the check assumed 1 GiB): if it does not, shard or shrink the model instead."
    )
    return Recommendation("--mem-fraction-static", choice, "raise", why, current=mfs, derivation=tuple(steps))


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
        Step("requested by the failed allocation", "Tried to allocate", requested, "bytes"),
        Step("free on the GPU at the failure", "of which ... is free", free, "bytes"),
        Step("shortfall", f"{format_bytes(requested)} - {format_bytes(free)}", shortfall, "bytes"),
        Step("margin: one more allocation of that size (at least 512 MiB)", f"max({format_bytes(requested)}, 512 MiB)", margin, "bytes"),
        *lowered.steps,
    ]
    value = lowered.value
    # Whether the value is workable (not below what the weights plus one request need) is settle()'s check.
    why = (
        f"The forward pass needed {format_bytes(requested)} with {format_bytes(free)} free: the dynamic region (1-y)*pre was too small. "
        f"Lowering y from {mfs:g} to {value:g} moves {format_bytes(shortfall + margin)} from the KV pool to activations."
    )
    if value <= 0:
        return []
    return [Recommendation("--mem-fraction-static", value, "lower", why, current=mfs, derivation=tuple(steps))]


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
            derivation=(Step("halved chunk, a power of two", f"{chunk} / 2", value, "tokens"),),
        )
    ]


def lower_max_running_requests(f: Facts) -> list[Recommendation]:
    if f.get("oom_phase") == "prefill" and not (f.get("kv_alloc_failed") or f.get("req_slots_failed")):
        return []
    return halve_flag(f, "max_running_requests", "--max-running-requests", "Fewer concurrent requests halve the per-step demand on the KV pool and on decode activations.", "count")


def lower_cuda_graph_max_bs(f: Facts) -> list[Recommendation]:
    """cuda_graph: capture fewer batch sizes, under the flag name this SGLang version uses."""
    flag = f.get("cuda_graph_flag", "--cuda-graph-max-bs")
    current = f.get("cuda_graph_max_bs")
    failing = f.get("capture_last_bs")
    steps: list[Step] = []
    if failing and (not current or failing <= current):
        value = budget.halved_batch_size(failing)
        steps.append(Step("batch size being captured when memory ran out", "Capturing batches (bs=N ...)", failing, "count"))
        steps.append(Step("half of it (multiple of 8)", f"{failing} / 2", value, "count"))
    elif current:
        value = budget.halved_batch_size(current)
        steps.append(Step("half the configured maximum (multiple of 8)", f"{current} / 2", value, "count"))
    else:
        value = 16
        steps.append(Step("SGLang's own example value", "e.g. 16", value, "count"))
    why = (
        f"Graph capture ran out of memory; each captured batch size keeps its own buffers in the dynamic region. "
        f"Capturing up to {value} instead of {current if current else 'the default'} needs less of it. "
        f"({flag} is this version's spelling.)"
    )
    if current and value >= current:
        return [Recommendation(flag, None, "lower", f"Graph capture ran out of memory; capture fewer batch sizes than {current} with {flag}.", current=current)]
    return [Recommendation(flag, value, "lower", why, current=current, derivation=tuple(steps))]


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
            Step("encoder shortfall plus one more such allocation", f"{format_bytes(requested)} - {format_bytes(free)} + margin", need, "bytes"),
            Step("as a fraction of the card", f"{format_bytes(need)} / {format_bytes(capacity)}", round(need / capacity, 4), "ratio"),
            Step("new reserve", f"{current:g} + {need / capacity:.4f}, rounded up to 0.01", value, "fraction"),
        )
        why = (
            f"The encoder needed {format_bytes(requested)} with {format_bytes(free)} free: the thinker's static share left it too little. "
            f"Raising encoder_mem_reserve from {current:g} to {value:g} lowers the thinker's mem_fraction_static by the same amount."
        )
        return [Recommendation("--encoder-mem-reserve", value, "raise", why, current=current, derivation=steps)]
    recs = [
        r._replace(why="SGLang keeps no explicit reserve for the vision/audio encoder; its activations come out of (1-y)*pre. " + r.why)
        for r in lower_mem_fraction_static(f)
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

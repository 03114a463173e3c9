"""Settling a finding's recommendations against the incident's budget: each set checked, completed, costed and given its role."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomdoctor.advice.recommendation import ALTERNATIVE, COMPANION, NOT_WORKABLE, PRIMARY, Recommendation, format_value, tensor_parallel_flag
from oomdoctor.base.units import floor_to, format_bytes
from oomdoctor.memory import budget, margins
from oomdoctor.memory.derivation import Step

if TYPE_CHECKING:
    from typing import Any

    from oomdoctor.inference.facts import Facts


# What each change gives up, by flag (and direction where it matters): shown next to every "or".
_COSTS: dict[str, str] = {
    "--tp-size": "hardware: twice the GPUs per replica",
    "--tensor-parallel-size": "hardware: twice the GPUs per replica",
    "--quantization": "quality: FP8 weights",
    "--kv-cache-dtype": "quality: FP8 KV cache",
    "--context-length": "capability: shorter longest request",
    "--max-model-len": "capability: shorter longest request",
    "--chunked-prefill-size": "throughput: slower prefill",
    "--max-num-batched-tokens": "throughput: slower prefill",
    "--max-running-requests": "throughput: fewer concurrent requests",
    "--max-num-seqs": "throughput: fewer concurrent requests",
    "--cuda-graph-max-bs": "throughput: larger decode batches run without CUDA graphs",
    "--cuda-graph-max-bs-decode": "throughput: larger decode batches run without CUDA graphs",
    "--enforce-eager": "throughput: no CUDA graphs, slower decode",
    "--encoder-mem-reserve": "throughput: a smaller KV pool for the thinker",
    "--limit-mm-per-prompt": "capability: fewer images per prompt",
    "--mm-processor-kwargs": "quality: fewer pixels per image",
    "SGLANG_VLM_CACHE_SIZE_MB": "capability: smaller images or fewer frames",
    "PYTORCH_CUDA_ALLOC_CONF": "none",
    "batch_size": "throughput: smaller batches",
    "gradient_checkpointing": "throughput: activations are recomputed",
    "torch_dtype": "quality: lower precision",
}


def cost_of(flag: str, direction: str) -> str:
    if flag in budget.FRACTION_FLAGS.values():
        return "throughput: a smaller KV pool (fewer tokens at once)" if direction == "lower" else "none: inside the window"
    return _COSTS.get(flag, "none" if direction == "run" else "")


def fraction_budget(f: Facts) -> budget.FractionBudget | None:
    """The incident's window as a budget a set of changes can be re-evaluated in (None when the log lacks it).

    When whether one request's KV fits rests on the assumed 1 GiB alone (weights_fit_undecided), the
    window is checked without it: what the log proves (weights, activations, reserve) still bounds
    it, and the recommendation's text names the per-token KV size as what would decide the rest.
    """
    system = f.get("system")
    tp, pp = f.get("tp_size") or 1, f.get("pp_size") or 1
    undecided = bool(f.get("weights_fit_undecided"))
    if system == "sglang":
        pre, weights, floor, reserve = f.get("pre_bytes"), f.get("weights_bytes"), f.get("kv_floor_bytes"), f.get("activation_reserve_bytes")
        floor = 0 if undecided and floor is not None else floor
        if not pre or weights is None or floor is None or reserve is None:
            return None
        return budget.FractionBudget(
            "sglang", f.get("mem_fraction_static"), pre, weights, floor, reserve_bytes=reserve, tp=tp, pp=pp,
            capacity_hint_bytes=max(f.get("capacity_bytes") or 0, pre), cell_bytes=f.get("cell_bytes"), context_len=f.get("context_len"),
            encoder_reserve=f.get("encoder_mem_reserve", 0.05) if f.get("omni") else None, kv_floor_unknown=undecided,
        )
    if system == "vllm":
        total, non_kv, cap = f.get("capacity_bytes"), f.get("non_kv_bytes"), f.get("max_safe_util")
        if not total or non_kv is None or cap is None:
            return None
        need = 0 if undecided else budget.kv_floor(f.get("max_model_len"), f.get("cell_bytes"), f.get("kv_needed_bytes"), system="vllm").value
        return budget.FractionBudget(
            "vllm", f.get("gpu_memory_utilization"), total, f.get("weights_bytes"), need, non_kv_bytes=non_kv, max_util=cap, tp=tp, pp=pp,
            cell_bytes=f.get("cell_bytes"), context_len=f.get("max_model_len"), kv_floor_unknown=undecided,
        )
    return None


def changes_of(r: Recommendation) -> tuple[tuple[str, Any], ...]:
    """The flag changes a recommendation makes, its companions included."""
    return ((r.flag, r.value), *((c.flag, c.value) for c in r.companions))


def _moves_fraction(r: Recommendation, b: budget.FractionBudget) -> bool:
    return r.flag == b.flag or r.flag == "--encoder-mem-reserve"


def _cap_lowered(r: Recommendation, b: budget.FractionBudget) -> Recommendation:
    """A lowered fraction above the window's top is lowered to the top instead (more room, never less)."""
    if r.flag != b.flag or r.direction != "lower" or not isinstance(r.value, float):
        return r
    low, high = budget.fraction_window(b)
    if r.value <= high + budget.WINDOW_EPSILON:
        return r
    capped = floor_to(high, 0.01)
    if capped < low - budget.WINDOW_EPSILON or capped <= 0:
        return r
    step = Step("capped at the window's top (SGLang's own activation reserve)" if b.system == "sglang" else "capped at the largest u the free memory allows",
                f"min({r.value:g}, {high:.4f}) rounded down to 0.01", capped, "fraction")
    why = r.why + f" {r.value:g} would still be above the highest workable value {high:.3f}, so the recommendation is {capped:g}, which leaves more room than needed."
    return r._replace(value=capped, why=why, derivation=(*r.derivation, step))


def _completed(r: Recommendation, b: budget.FractionBudget) -> Recommendation:
    """Check a recommendation as a set; a set that leaves the fraction outside its window gets the fraction that brings it back."""
    check = budget.check_set(b, changes_of(r))
    if check.feasible is not False or _moves_fraction(r, b) or check.fraction is None or check.low is None or check.high is None:
        return r._replace(feasible=check.feasible, derivation=(*r.derivation, *check.steps))
    target = budget.completing_fraction(b.system, check.fraction, check.low, check.high)
    if target is None:
        return r._replace(feasible=False, derivation=(*r.derivation, *check.steps))
    direction = "lower" if target < check.fraction else "raise"
    companion = Recommendation(
        b.flag,
        target,
        direction,
        f"With {r.flag} {format_value(r.value)} the workable {b.flag} is {check.low:.3f} to {check.high:.3f}; {format_value(b.fraction)} is outside it, {target:g} is inside.",
        current=b.fraction,
        derivation=check.steps,
        role=COMPANION,
        cost=cost_of(b.flag, direction),
        feasible=True,
    )
    recheck = budget.check_set(b, changes_of(r._replace(companions=(*r.companions, companion))))
    return r._replace(companions=(*r.companions, companion), feasible=recheck.feasible, derivation=(*r.derivation, *recheck.steps))


def _structural(blocked: Recommendation, b: budget.FractionBudget, f: Facts, present: set[str]) -> list[Recommendation]:
    """When no value of the flag works alone: TP, FP8 weights, FP8 KV, a shorter context, each checked *with* it."""
    base = blocked._replace(role=COMPANION, companions=(), feasible=None, derivation=())
    tp_flag = tensor_parallel_flag(f)
    fraction_after = budget.check_set(b, changes_of(base)).fraction
    candidates: list[tuple[str, Any, str, str]] = [
        (tp_flag, b.tp * 2, "raise", f"Sharding the weights over {b.tp * 2} GPUs halves their share of each GPU."),
        ("--quantization", "fp8", "set", "FP8 weights take about half the memory of 16-bit ones."),
    ]
    if str(f.get("kv_cache_dtype") or "auto") in ("auto", "bfloat16", "float16"):
        candidates.append(("--kv-cache-dtype", "fp8" if b.system == "vllm" else "fp8_e4m3", "set", "An FP8 KV cache halves one request's KV."))
    shorter = budget.longest_context(b, fraction_after) if fraction_after is not None else None
    ctx_flag = "--max-model-len" if b.system == "vllm" else "--context-length"
    if shorter is not None and (b.context_len is None or shorter < b.context_len):
        candidates.append((ctx_flag, shorter, "lower" if b.context_len else "set", f"At most {shorter} tokens per request: one request's KV then fits beside the weights."))
    out = []
    for flag, value, direction, why in candidates:
        if flag in present:
            continue
        check = budget.check_set(b, ((flag, value), *changes_of(base)))
        verdict = "works" if check.feasible else "is not enough" if check.feasible is False else "cannot be checked from the log"
        out.append(
            Recommendation(
                flag,
                value,
                direction,
                f"{why} Together with {base.flag} {format_value(base.value)} it {verdict} on this budget"
                + (f" (workable {b.flag} {check.low:.3f} to {check.high:.3f})." if check.low is not None and check.high is not None else "."),
                current=b.tp if flag == tp_flag else (b.context_len if flag == ctx_flag else None),
                derivation=check.steps,
                cost=cost_of(flag, direction),
                feasible=check.feasible,
                companions=(base,),
            )
        )
    return out


def _no_single_value(r: Recommendation, b: budget.FractionBudget) -> Recommendation:
    low, high = budget.fraction_window(b)
    check = budget.check_set(b, changes_of(r))
    at = check.fraction if check.fraction is not None else r.value
    why = r.why + (
        f" No single {r.flag} value works on this budget: it would leave {b.flag} at {at:g}, outside the workable {low:.3f} to {high:.3f}"
        " (weights plus one request below, SGLang's activation reserve above); see the alternatives."
        if b.system == "sglang"
        else f" No single {r.flag} value works on this budget: {at:g} is outside the workable {low:.3f} to {high:.3f}; see the alternatives."
    )
    return r._replace(why=why, feasible=False, derivation=(*r.derivation, *check.steps))


# The facts of the batch limits a runtime allocation grows with, by flag (memory.margins.SCALING_FLAGS).
_LIMIT_FACTS = {
    "--chunked-prefill-size": "chunked_prefill_size",
    "--max-num-batched-tokens": "max_num_batched_tokens",
    "--max-running-requests": "max_running_requests",
    "--max-num-seqs": "max_num_seqs",
}
# Stages of an OOM that come before the server serves: a failed allocation there is no runtime gap
# (the weights or the KV pool did not fit; the window is the check).
_STARTUP_STAGES = ("weight_loading", "weight_creation", "kv_pool", "startup")


def runtime_gap(f: Facts) -> margins.Gap | None:
    """The failed allocation and the memory free beside it, with what the flags stood at (None: no runtime OOM figures)."""
    requested, free = f.get("requested_bytes"), f.get("free_bytes")
    if requested is None or free is None or f.get("oom_stage") in _STARTUP_STAGES:
        return None
    system = f.get("system")
    base = f.get("pre_bytes") if system == "sglang" else f.get("capacity_bytes") if system == "vllm" else None
    fraction = f.get("mem_fraction_static") if system == "sglang" else f.get("gpu_memory_utilization") if system == "vllm" else None
    limits = {flag: int(f.get(fact)) for flag, fact in _LIMIT_FACTS.items() if isinstance(f.get(fact), int) and f.get(fact) > 0}
    return margins.Gap(
        requested,
        free,
        fraction_flag=budget.FRACTION_FLAGS.get(system or ""),
        fraction=fraction,
        fraction_base_bytes=base,
        phase=f.get("oom_phase"),
        stage=f.get("oom_stage"),
        limits=limits,
        reserved_unallocated_bytes=f.get("reserved_unallocated_bytes"),
        encoder_reserve=f.get("encoder_mem_reserve", 0.05) if f.get("omni") else None,
        encoder_base_bytes=f.get("capacity_bytes"),
        # vLLM prints its KV budget and pool size only once profiling is over; SGLang its pool once built.
        kv_pool_built=any(f.get(k) is not None for k in ("kv_capacity_tokens", "kv_pool_tokens")) or (system == "vllm" and f.get("kv_budget_bytes") is not None),
    )


def _close_gap(r: Recommendation, gap: margins.Gap, b: budget.FractionBudget | None) -> Recommendation:
    """A set that leaves the runtime gap open, with the fraction that closes it as its companion, when the window allows."""
    if b is None or _moves_fraction(r, b) or gap.fraction_flag != b.flag or b.fraction is None:
        return r
    closing = margins.closing_fraction(gap, changes_of(r))
    in_set = next((c.value for c in r.companions if c.flag == b.flag and isinstance(c.value, float)), b.fraction)
    if closing is None or closing.value <= 0 or closing.value >= in_set:
        return r
    kept = tuple(c for c in r.companions if c.flag != b.flag)
    companion = Recommendation(
        b.flag,
        closing.value,
        "lower",
        f"With {r.flag} {format_value(r.value)} the failed allocation still does not fit; {b.flag} {closing.value:g} frees enough for it and one more of its size.",
        current=b.fraction,
        derivation=closing.steps,
        role=COMPANION,
        cost=cost_of(b.flag, "lower"),
        feasible=True,
    )
    check = budget.check_set(b, changes_of(r._replace(companions=(*kept, companion))))
    if check.feasible is False:
        return r
    # The window check of the fraction this companion replaces no longer describes the set.
    stale = (f"{b.flag} in this set", "inside its window with these changes")
    own = tuple(s for s in r.derivation if not (s.step == stale[0] or s.step.endswith(stale[1])))
    return r._replace(companions=(*kept, companion), feasible=check.feasible, derivation=(*own, *check.steps))


def _margin_of(r: Recommendation, gap: margins.Gap | None, b: budget.FractionBudget | None) -> margins.Margin | None:
    """What a set leaves: the runtime gap's margin where the OOM gives one, else how far inside its window the fraction sits."""
    if r.direction == "run" or r.value is None:
        return None
    if gap is not None:
        return margins.gap_margin(gap, changes_of(r))
    if b is not None:
        check = budget.check_set(b, changes_of(r))
        if check.fraction is not None and check.budget is not None and check.feasible is not None:
            return margins.window_margin(check.budget, check.fraction)
    return margins.Margin(None, "", unknown="the log gives neither a runtime OOM's figures nor the budget's window to measure it against")


def _margin_words(m: margins.Margin) -> str:
    """Why a set that leaves no margin is not the one to paste, in the numbers that show it."""
    if m.free_bytes is not None and m.allocation_bytes is not None:
        return (
            f"By the same arithmetic this set leaves {format_bytes(m.free_bytes)} free against the failed allocation's "
            f"{format_bytes(m.allocation_bytes)} (as the set leaves it): a margin of {format_bytes(m.bytes)}, so it does not close the gap."
        )
    return f"By the same arithmetic this set leaves the fraction {format_bytes(m.bytes)} inside its window: no room to spare."


def _measured(r: Recommendation, gap: margins.Gap | None, b: budget.FractionBudget | None) -> Recommendation:
    """The set with its margin; one that leaves the runtime gap open first gets the fraction that closes it, if any."""
    m = _margin_of(r, gap, b)
    if gap is not None and m is not None and m.leaves_some is False:
        closed = _close_gap(r, gap, b)
        if closed is not r:
            r, m = closed, margins.gap_margin(gap, changes_of(closed))
    if m is not None and m.leaves_some is False and (gap is not None or r.feasible is not False):
        # (A set outside its window already says so; its negative margin is in the JSON.)
        return r._replace(margin=m, why=f"{r.why} {_margin_words(m)}")
    return r._replace(margin=m)


def settle(recs: list[Recommendation], f: Facts) -> list[Recommendation]:
    """Every recommendation re-evaluated by the budget that produced the window, then given its role.

    The primary is the first workable recommendation with a value (with the companions that make it a
    consistent set); a set the budget rejects is never primary, nor one that by the same arithmetic leaves
    no margin (memory.margins: on a runtime OOM, the failed allocation against what the set frees). When
    a fraction change cannot work on its own, the structural alternatives (TP, FP8 weights, FP8 KV, a
    shorter context) are added, checked with it.
    """
    b = fraction_budget(f)
    if b is None:
        out = [r._replace(cost=r.cost or cost_of(r.flag, r.direction)) for r in recs]
    else:
        out = []
        blocked: Recommendation | None = None
        for r in recs:
            r = _cap_lowered(r, b)._replace(cost=r.cost or cost_of(r.flag, r.direction))
            if r.value is None:
                out.append(r)
                continue
            checked = _completed(r, b)
            if checked.feasible is False and _moves_fraction(r, b):
                blocked = blocked or r
                checked = _no_single_value(r, b)
            out.append(checked)
        if blocked is not None:
            out.extend(_structural(blocked, b, f, {r.flag for r in out}))
    gap = runtime_gap(f)
    out = [_measured(r, gap, b) for r in out]
    # The first workable change with a value (a command to run is its own value) that leaves a margin (or
    # one the model cannot measure); one that costs nothing (an allocator setting, a value inside the
    # window, a command) before one that gives something up.
    workable = [i for i, r in enumerate(out) if (r.value is not None or r.direction == "run") and r.feasible is not False and not _leaves_none(r)]
    primary = next((i for i in workable if out[i].cost.startswith("none")), workable[0] if workable else None)
    return [
        r._replace(role=PRIMARY if i == primary else NOT_WORKABLE if r.feasible is False or _leaves_none(r) else ALTERNATIVE)
        for i, r in enumerate(out)
    ]


def _leaves_none(r: Recommendation) -> bool:
    return r.margin is not None and r.margin.leaves_some is False

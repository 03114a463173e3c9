"""The GPU bars' data: each GPU's memory as segments in drawing order, each with its legend label.

Shared by the diagnose view (every format) and the plan page; render/svg.py draws them. The budget
formulas are memory.budget's; a text or JSON report never imports the drawing code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomdoctor.base.units import GIB, gib_text
from oomdoctor.memory import budget

if TYPE_CHECKING:
    from typing import Any

# Segment kinds of a GPU bar, in drawing order, with their legend labels.
SEGMENTS = (
    ("context", "CUDA context / NCCL / before start"),
    ("weights", "weights"),
    ("unsplit", "weights, KV pool and activations, not split (the log has no memory profile)"),
    ("kv", "KV cache pool"),
    ("graphs", "CUDA graphs"),
    ("dynamic", "dynamic reserve (activations)"),
    ("torch_other", "PyTorch, other"),
    ("beyond", "in use past the budget at the failure"),
    ("other", "other processes"),
    ("outside", "free but outside u*total (vLLM leaves it unused)"),
    ("free", "free"),
)
# Labels a bar gives a kind where the kind's own would be wrong for it.
_LABELS = {
    "vllm_activation": "activation peak (vLLM's profile)",
    "vllm_non_torch": "non-PyTorch memory (vLLM's profile)",
    "free_at_failure": "free at the failure (the OOM message)",
    "allocated": "allocated by PyTorch: weights, KV pool and activations, not split (the log has no memory profile)",
    "budget_unsplit": "rest of u*total: KV pool and activations, not split (the log has no memory profile)",
}


def _segments(order: tuple[str, ...] | None = None, labels: dict[str, str] | None = None, **values: int | None) -> list[dict[str, Any]]:
    """The segments with bytes, in SEGMENTS' drawing order (or ``order``), with their legend labels (``labels`` overrides)."""
    kept = {k: v for k, v in values.items() if v is not None and v > 0}
    names = {**dict(SEGMENTS), **(labels or {})}
    return [{"kind": k, "label": names[k], "bytes": int(kept[k])} for k in (order or tuple(dict(SEGMENTS))) if k in kept]


def sglang_bar(
    name: str,
    total: int,
    pre: int,
    weights: int,
    y: float,
    kv: int | None = None,
    graphs: int = 0,
    other: int = 0,
    total_assumed: bool = False,
    pool_end: int | None = None,
    other_label: str | None = None,
    lines: str = "",
) -> dict[str, Any]:
    """One SGLang GPU at --mem-fraction-static y: context, weights, KV pool, the (1-y)*pre reserve, other processes, free.

    With a KV pool the log measured (``kv``, and ``pool_end``, the free memory after the pools), the bar
    draws what the log measured: the pool, the other pools' buffers, and what was left for activations;
    when the measured pool is larger than y*pre - W, ``note`` says the pool line and the avail-mem lines
    disagree (``lines`` names them). Without one it draws the formula's split. When the weights and the
    reserve need more than the card (a startup KV failure) the segments run past the total; ``note`` says
    by how much and why.
    """
    dynamic = budget.sglang_dynamic_region_bytes(pre, y)
    kv_budget = budget.sglang_kv_budget_bytes(pre, pre - weights, y)
    post = pre - weights
    pools = 0
    measured = kv is not None
    if kv is None:
        kv = max(kv_budget, 0)
    else:
        after = pool_end if pool_end is not None else post - kv
        pools = max(post - kv - after, 0)
        dynamic = max(after, 0)
    context = max(total - pre - other, 0)
    graphs = min(graphs, dynamic)
    used = context + weights + kv + pools + dynamic + other
    labels = {"torch_other": "other pools (request-to-token, ...)", **({"other": other_label} if other_label else {})}
    bar: dict[str, Any] = {
        "name": name,
        "total_bytes": total,
        "total_assumed": total_assumed,
        "segments": _segments(
            None, labels, context=context, weights=weights, kv=kv, torch_other=pools, graphs=graphs, dynamic=dynamic - graphs, other=other, free=max(total - used, 0)
        ),
        "kv_budget_bytes": kv_budget,
        "mfs": y,
    }
    if measured and kv - kv_budget > GIB // 200:
        bar["note"] = (
            f"The KV pool the log reports ({gib_text(kv)}) is {gib_text(kv - kv_budget)} more than y*pre - W = {y:g} * {gib_text(pre)} - {gib_text(weights)} = "
            f"{gib_text(kv_budget)}: the log's 'KV Cache is allocated' line and its 'Load weight begin/end ... avail mem' lines{lines} disagree "
            "about the split (is the y or the pool from another run?). The bar draws what the log measured, "
            f"{gib_text(dynamic)} left for activations, not (1-y)*pre = {gib_text(budget.sglang_dynamic_region_bytes(pre, y))}."
        )
    if used > total and kv_budget < 0 and not measured:
        bar["note"] = (
            f"At --mem-fraction-static {y:g} the weights ({gib_text(weights)}) and the reserve (1-y)*pre ({gib_text(dynamic)}) need more than the "
            f"{gib_text(pre)} free before loading, so no KV pool fits: the bar runs {gib_text(used - total)} past the card's {gib_text(total)} (red line)."
        )
    elif used > total:
        bar["note"] = (
            f"The segments add up to {gib_text(used - total)} more than the card's {gib_text(total)} (red line): the card's total and the log's "
            f"free-memory readings{lines} disagree."
        )
    return bar


# vLLM draws what its budget u*total holds first (weights, activation peak, KV), then the dashed u*total
# line, then what lies outside it.
_VLLM_ORDER = ("weights", "dynamic", "kv", "graphs", "other", "outside", "free")


def vllm_bar(name: str, total: int, u: float, weights: int, non_kv: int | None, graphs: int = 0, other: int = 0) -> dict[str, Any]:
    """One vLLM GPU at --gpu-memory-utilization u: what u*total holds, the u*total line, and the rest of the card.

    The memory past u*total is free on the card but not vLLM's to use; when the weights and activation
    peak alone exceed u*total the bar says "over u*total by ..." and ``note`` explains that raising u,
    not freeing memory, is what gives the KV cache room. Without vLLM's memory profile (``non_kv``
    None) the rest of u*total after the weights is one segment: how it splits into KV and activations is unknown.
    """
    limit = budget.vllm_instance_budget_bytes(total, u)
    if non_kv is None:
        rest = max(limit - weights, 0)
        outside = max(total - max(limit, weights) - other - graphs, 0)
        segments = _segments(("weights", "unsplit", "graphs", "other", "outside"), {"unsplit": _LABELS["budget_unsplit"]}, weights=weights, unsplit=rest, graphs=graphs, other=other, outside=outside)
        return {
            "name": name, "total_bytes": total, "total_assumed": False, "segments": segments, "kv_budget_bytes": None, "mfs": u,
            "limit_bytes": limit, "limit_name": "u*total", "over_limit_bytes": max(weights - limit, 0),
            "note": f"vLLM may use u*total = {u:g} * {gib_text(total)} = {gib_text(limit)} (dashed line); the log has no memory profile, so how much of it is KV pool is not known.",
        }
    act = max(non_kv - weights, 0)
    kv = max(limit - non_kv, 0)
    outside = max(total - max(limit, non_kv) - other - graphs, 0)
    over_limit = max(non_kv - limit, 0)
    bar: dict[str, Any] = {
        "name": name,
        "total_bytes": total,
        "total_assumed": False,
        "segments": _segments(_VLLM_ORDER, {"dynamic": "activation peak and non-PyTorch memory"}, weights=weights, dynamic=act, kv=kv, graphs=graphs, other=other, outside=outside),
        "kv_budget_bytes": budget.vllm_kv_budget_bytes(total, u, non_kv),
        "mfs": u,
        "limit_bytes": limit,
        "limit_name": "u*total",
        "over_limit_bytes": over_limit,
    }
    used = sum(s["bytes"] for s in bar["segments"])
    head = f"vLLM may use u*total = {u:g} * {gib_text(total)} = {gib_text(limit)} (dashed line)"
    if used > total:
        held = f"with {gib_text(other)} held by other processes " if other else ""
        bar["note"] = f"{head}; {held}the segments run {gib_text(used - total)} past the card's {gib_text(total)} (red line)."
    elif over_limit:
        bar["note"] = (
            f"{head}; the weights and activation peak ({gib_text(non_kv)}) are over it by {gib_text(over_limit)}, so no KV cache fits. "
            f"The {gib_text(outside)} past the line is free on the card but outside vLLM's budget at this u: raise u to use it."
        )
    else:
        bar["note"] = f"{head}; the KV pool is what is left of it after the weights and activation peak. The {gib_text(outside)} past the line is free but left unused at this u."
    return bar


# What the card held at a vLLM runtime failure: the budget's parts inside u*total, then what lies outside it.
_VLLM_FAILURE_ORDER = ("weights", "dynamic", "context", "kv", "graphs", "beyond", "other", "free")
_FAILURE_ONLY_ORDER = ("unsplit", "graphs", "torch_other", "context", "other", "free")


def vllm_failure_bar(
    name: str, total: int, u: float, free: int, profile: dict[str, Any] | None, failure: dict[str, Any], other: int = 0, other_label: str | None = None, lines: str = ""
) -> dict[str, Any]:
    """One vLLM GPU at a runtime OOM: the budget's parts from vLLM's memory profile, free memory from the failure.

    ``profile``: weights, activation peak and non-torch bytes (and the CUDA graphs, ``graphs_in_budget``
    when vLLM counted them inside u*total), or None when the log has no profile; ``failure``: the OOM
    message's allocated, reserved-unallocated, private-pool (graphs) and this-process figures. What the
    card held beyond the budget at the failure is the rest of the card; when the parts add up to more than
    the card, ``note`` says which inputs disagree (``lines`` names them) and the red line marks the card.
    """
    limit = budget.vllm_instance_budget_bytes(total, u)
    labels = {"free": _LABELS["free_at_failure"], **({"other": other_label} if other_label else {})}
    head = f"vLLM may use u*total = {u:g} * {gib_text(total)} = {gib_text(limit)} (dashed line)"
    if profile is None:
        return _failure_only_bar(name, total, u, free, failure, other, labels, head)
    graphs = profile.get("graphs") or 0
    inside = profile["weights"] + profile["activation"] + profile["non_torch"] + (graphs if profile.get("graphs_in_budget") else 0)
    kv = budget.vllm_kv_budget_bytes(total, u, inside)
    outside_graphs = 0 if profile.get("graphs_in_budget") else graphs
    beyond = total - limit - outside_graphs - other - free
    labels.update({"dynamic": profile.get("activation_label") or _LABELS["vllm_activation"], "context": _LABELS["vllm_non_torch"]})
    order = _VLLM_FAILURE_ORDER if not profile.get("graphs_in_budget") else ("weights", "dynamic", "context", "graphs", "kv", "beyond", "other", "free")
    segments = _segments(
        order, labels, weights=profile["weights"], dynamic=profile["activation"], context=profile["non_torch"], kv=max(kv, 0),
        graphs=graphs, beyond=max(beyond, 0), other=other, free=free,
    )
    bar: dict[str, Any] = {
        "name": name, "total_bytes": total, "total_assumed": False, "segments": segments, "kv_budget_bytes": kv, "mfs": u,
        "limit_bytes": limit, "limit_name": "u*total", "over_limit_bytes": max(inside - limit, 0),
    }
    if beyond < -GIB // 200:
        bar["note"] = (
            f"{head}; the profile's budget, {'the CUDA graphs outside it, ' if outside_graphs else ''}{'other processes, ' if other else ''}"
            f"and the free memory at the failure add up to {gib_text(-beyond)} more than the card's {gib_text(total)} (red line): "
            f"the memory profile and the OOM message{lines} disagree (a profile from another run or another card?)."
        )
    else:
        bar["note"] = (
            f"{head}: weights, activation peak and non-PyTorch memory from vLLM's profile, the KV pool the rest of it; "
            f"free memory from the OOM message; {gib_text(max(beyond, 0))} was in use past the budget when the allocation failed."
        )
    return bar


def _failure_only_bar(name: str, total: int, u: float, free: int, failure: dict[str, Any], other: int, labels: dict[str, str], head: str) -> dict[str, Any]:
    """A vLLM runtime OOM without a memory profile: the OOM message's own split of the card, with the u*total line."""
    allocated, unalloc, graphs, this = (failure.get(k) for k in ("allocated", "unallocated", "graphs", "this_process"))
    graphs = graphs or 0
    if allocated is None:
        held = max(total - free - other, 0)
        parts: dict[str, int] = {"unsplit": held}
    else:
        non_torch = max((this or 0) - allocated - (unalloc or 0), 0)
        parts = {"unsplit": max(allocated - graphs, 0), "graphs": graphs, "torch_other": unalloc or 0, "context": non_torch}
    rest = total - sum(parts.values()) - other - free
    parts["context"] = parts.get("context", 0) + max(rest, 0)
    labels = {
        **labels,
        "unsplit": _LABELS["allocated"] if allocated is not None else "in use by the server, not split (the OOM message gives no breakdown)",
        "torch_other": "reserved, unallocated (fragments)",
        "context": "non-PyTorch (CUDA context, NCCL, cuBLAS) and unaccounted",
    }
    segments = _segments(_FAILURE_ONLY_ORDER, labels, **parts, other=other, free=free)
    limit = budget.vllm_instance_budget_bytes(total, u)
    return {
        "name": name, "total_bytes": total, "total_assumed": False, "segments": segments, "kv_budget_bytes": None, "mfs": u,
        "limit_bytes": limit, "limit_name": "u*total", "over_limit_bytes": 0,
        "note": f"{head}; the log has no memory profile, so the bar is the OOM message's own split: how much of PyTorch's memory is the KV pool is not known.",
    }

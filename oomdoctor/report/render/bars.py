"""The GPU bars' data: each GPU's memory as segments in drawing order, each with its legend label.

Shared by the diagnose view (every format) and the plan page; render/svg.py draws them. The budget
formulas are memory.budget's; a text or JSON report never imports the drawing code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomdoctor.base.units import gib_text
from oomdoctor.memory import budget

if TYPE_CHECKING:
    from typing import Any

# Segment kinds of a GPU bar, in drawing order, with their legend labels.
SEGMENTS = (
    ("context", "CUDA context / NCCL / before start"),
    ("weights", "weights"),
    ("kv", "KV cache pool"),
    ("graphs", "CUDA graphs"),
    ("dynamic", "dynamic reserve (activations)"),
    ("torch_other", "PyTorch, other"),
    ("other", "other processes"),
    ("outside", "free but outside u*total (vLLM leaves it unused)"),
    ("free", "free"),
)


def _segments(order: tuple[str, ...] | None = None, **values: int | None) -> list[dict[str, Any]]:
    """The segments with bytes, in SEGMENTS' drawing order (or ``order``), with their legend labels."""
    kept = {k: v for k, v in values.items() if v is not None and v > 0}
    labels = dict(SEGMENTS)
    return [{"kind": k, "label": labels[k], "bytes": int(kept[k])} for k in (order or tuple(labels)) if k in kept]


def sglang_bar(name: str, total: int, pre: int, weights: int, y: float, kv: int | None = None, graphs: int = 0, other: int = 0, total_assumed: bool = False) -> dict[str, Any]:
    """One SGLang GPU at --mem-fraction-static y: context, weights, KV pool, the (1-y)*pre reserve, other processes, free.

    When the weights and the reserve need more than the card (a startup KV failure or weights that do not
    fit) the segments run past the total; ``note`` says by how much and why.
    """
    dynamic = budget.sglang_dynamic_region_bytes(pre, y)
    kv_budget = budget.sglang_kv_budget_bytes(pre, pre - weights, y)
    kv = max(kv_budget, 0) if kv is None else kv
    context = max(total - pre - other, 0)
    used = context + weights + kv + dynamic + other
    bar: dict[str, Any] = {
        "name": name,
        "total_bytes": total,
        "total_assumed": total_assumed,
        "segments": _segments(context=context, weights=weights, kv=kv, graphs=min(graphs, dynamic), dynamic=dynamic - min(graphs, dynamic), other=other, free=max(total - used, 0)),
        "kv_budget_bytes": kv_budget,
        "mfs": y,
    }
    if used > total and kv_budget < 0:
        bar["note"] = (
            f"At --mem-fraction-static {y:g} the weights ({gib_text(weights)}) and the reserve (1-y)*pre ({gib_text(dynamic)}) need more than the "
            f"{gib_text(pre)} free before loading, so no KV pool fits: the bar runs {gib_text(used - total)} past the card's {gib_text(total)} (red line)."
        )
    elif used > total:
        bar["note"] = f"The segments add up to {gib_text(used - total)} more than the card's {gib_text(total)} (red line)."
    return bar


# vLLM draws what its budget u*total holds first (weights, activation peak, KV), then the dashed u*total
# line, then what lies outside it.
_VLLM_ORDER = ("weights", "dynamic", "kv", "graphs", "other", "outside", "free")


def vllm_bar(name: str, total: int, u: float, weights: int, non_kv: int, graphs: int = 0, other: int = 0) -> dict[str, Any]:
    """One vLLM GPU at --gpu-memory-utilization u: what u*total holds, the u*total line, and the rest of the card.

    The memory past u*total is free on the card but not vLLM's to use; when the weights and activation
    peak alone exceed u*total the bar says "over u*total by ..." and ``note`` explains that raising u,
    not freeing memory, is what gives the KV cache room.
    """
    limit = budget.vllm_instance_budget_bytes(total, u)
    act = max(non_kv - weights, 0)
    kv = max(limit - non_kv, 0)
    outside = max(total - max(limit, non_kv) - other - graphs, 0)
    over_limit = max(non_kv - limit, 0)
    bar: dict[str, Any] = {
        "name": name,
        "total_bytes": total,
        "total_assumed": False,
        "segments": _segments(_VLLM_ORDER, weights=weights, dynamic=act, kv=kv, graphs=graphs, other=other, outside=outside),
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

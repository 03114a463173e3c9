"""The report's what-if table: the memory flag from its current value to the recommended one and beyond,
with the KV budget, tokens, headroom and feasibility at each step (memory.budget's formulas)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oomdoctor.base.units import floor_to
from oomdoctor.memory import budget

if TYPE_CHECKING:
    from oomdoctor.inference.facts import Facts
    from oomdoctor.pipeline.model import Diagnosis


def recommended_value(d: Diagnosis, flag: str) -> float | None:
    """The fraction the verdict's pasted set leaves (its own value or a companion's), never a rejected one."""
    for finding in d.findings[:1]:
        for r in finding.recommendations:
            if r.role != "primary":
                continue
            for change in (r, *r.companions):
                if change.flag == flag and isinstance(change.value, float):
                    return change.value
    return None


def what_if(d: Diagnosis, f: Facts) -> dict[str, Any] | None:
    """The flag from its current value to the recommended one and beyond: KV, tokens, headroom, feasibility."""
    system = f.get("system")
    if system == "sglang" and f.get("pre_bytes") and f.get("post_bytes") is not None and f.get("mem_fraction_static") is not None:
        pre, post = f.get("pre_bytes"), f.get("post_bytes")
        return _what_if_rows(
            d, f, "--mem-fraction-static", f.get("mem_fraction_static"), ("min_viable_mfs", "max_safe_mfs"),
            lambda y: budget.sglang_kv_budget_bytes(pre, post, y), lambda y: budget.sglang_dynamic_region_bytes(pre, y),
        )
    if system == "vllm" and f.get("capacity_bytes") and f.get("non_kv_bytes") is not None and f.get("gpu_memory_utilization") is not None:
        total, non_kv = f.get("capacity_bytes"), f.get("non_kv_bytes")
        return _what_if_rows(
            d, f, "--gpu-memory-utilization", f.get("gpu_memory_utilization"), ("min_viable_util", "max_safe_util"),
            lambda u: budget.vllm_kv_budget_bytes(total, u, non_kv), lambda u: round(total * (1 - u)),
        )
    return None


def _what_if_rows(d: Diagnosis, f: Facts, flag: str, current: float, window: tuple[str, str], kv_of: Any, headroom_of: Any) -> dict[str, Any]:
    rec = recommended_value(d, flag)
    low, high = f.get(window[0]), f.get(window[1])
    cell = f.get("cell_bytes")
    rows = []
    for value in _steps_between(current, rec):
        kv = kv_of(value)
        rows.append(
            {
                "value": value,
                "kv_bytes": kv,
                "kv_tokens": budget.kv_tokens(kv, cell) if cell else None,
                "headroom_bytes": headroom_of(value),
                "feasible": bool(low is not None and high is not None and low <= value <= high),
                "current": abs(value - current) < 1e-9,
                "recommended": rec is not None and abs(value - rec) < 1e-9,
            }
        )
    return {"flag": flag, "rows": rows, "window": [low, high]}


def _steps_between(current: float, rec: float | None) -> list[float]:
    """Current to recommended in 0.01-0.05 steps, and two steps beyond, within (0, 0.99]."""
    target = rec if rec is not None else current
    lo, hi = sorted((current, target))
    step = 0.01 if hi - lo <= 0.06 else 0.05
    values = {round(current, 3), round(target, 3)}
    v = floor_to(lo, step)
    while v <= hi + step * 2 + 1e-9:
        if 0 < v <= 0.99:
            values.add(round(v, 3))
        v = round(v + step, 6)
    v = lo - step
    if v > 0:
        values.add(round(floor_to(v, step), 3))
    return sorted(values)

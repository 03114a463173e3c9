"""The budget panel: the verdict's memory figures and how each was derived."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomdoctor.memory import budget
from oomdoctor.memory.derivation import Derived, Step
from oomdoctor.memory.gpus import assumed_card

if TYPE_CHECKING:
    from typing import Any

    from oomdoctor.inference.facts import Facts


def budget_view(facts: Facts | None) -> dict[str, Any]:
    if facts is None:
        return {"system": "unknown"}
    keys = (
        "pre_bytes",
        "post_bytes",
        "weights_bytes",
        "mem_fraction_static",
        "kv_budget_bytes",
        "dynamic_region_bytes",
        "kv_pool_bytes",
        "kv_pool_tokens",
        "cell_bytes",
        "capacity_bytes",
        "likely_gpu",
        "activation_reserve_bytes",
        "kv_floor_bytes",
        "min_viable_mfs",
        "max_safe_mfs",
        "requested_bytes",
        "free_bytes",
        "reserved_unallocated_bytes",
        "available_gpu_mem_bytes",
        "cuda_graph_bytes",
        "startup_foreign_bytes",
        "expected_weights_bytes",
    )
    view: dict[str, Any] = {"system": facts.get("system", "unknown")}
    for key in keys:
        if key in facts.values:
            view[key] = facts.values[key]
    derivations = {name: [s.to_json() for s in d.steps] for name, d in sorted(facts.derivations.items())}
    kv, cell = facts.get("kv_budget_bytes"), facts.get("cell_bytes")
    if kv is not None and cell:
        view["kv_tokens"] = budget.kv_tokens(kv, cell)
    auto = _autotune_view(facts)
    if auto is not None:
        view["sglang_autotune_mfs"] = auto.value
        derivations["sglang_autotune_mfs"] = [s.to_json() for s in auto.steps]
    view["derivations"] = derivations
    return view


def _autotune_view(facts: Facts) -> Derived | None:
    if facts.get("system") != "sglang":
        return None
    capacity = facts.get("capacity_bytes")
    assumed: list[Step] = []
    if not capacity and facts.get("pre_bytes"):
        card = assumed_card(facts.get("pre_bytes"))
        if card is None:
            return None
        # SGLang's auto-tune reads nvidia-smi's memory.total, not CUDA's figure.
        capacity = card.smi_bytes
        assumed.append(Step("card capacity (assumed from pre)", f"smallest known card above pre: {card.label}", capacity, "bytes"))
    if not capacity:
        return None
    era = "B" if facts.get("load_end_era") == "V-a/b" else "current"
    auto = budget.sglang_autotune_mfs(
        capacity,
        tp=facts.get("tp_size") or 1,
        pp=facts.get("pp_size") or 1,
        era=era,
        chunked_prefill_size=facts.get("chunked_prefill_size"),
        cuda_graph_max_bs=facts.get("cuda_graph_max_bs"),
    )
    return Derived(auto.value, (*tuple(assumed), Step("auto-tune era", "from the log's line formats", era, "text"), *auto.steps))

"""The shipped recommenders by the ids rules name them with, and running the ones a finding's rule names."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomdoctor.advice import generic, sglang, vllm
from oomdoctor.advice.feasibility import settle

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from oomdoctor.advice.recommendation import Recommendation
    from oomdoctor.inference.facts import Facts

    Recommender = Callable[[Facts], list[Recommendation]]

# Rules name these by id. Each returns zero or more recommendations, every value carrying the steps that
# produced it; one that lacks the numbers it needs returns a recommendation without a value rather than
# guessing one. A table rather than registration on import, so the registry holds every recommender
# whichever engine modules a caller imported; registry() hands them out in this order.
_RECOMMENDERS: dict[str, Recommender] = {
    "raise-mem-fraction-static": sglang.raise_mem_fraction_static,
    "scale-out-weights": generic.scale_out_weights,
    "kv-cache-fp8": generic.kv_cache_fp8,
    "lower-mem-fraction-static": sglang.lower_mem_fraction_static,
    "lower-chunked-prefill-size": sglang.lower_chunked_prefill_size,
    "lower-max-running-requests": sglang.lower_max_running_requests,
    "lower-cuda-graph-max-bs": sglang.lower_cuda_graph_max_bs,
    "expandable-segments": generic.expandable_segments,
    "reserve-encoder-memory": sglang.reserve_encoder_memory,
    "free-startup-foreign-memory": generic.startup_foreign_actions,
    "vllm-raise-gpu-memory-utilization": vllm.vllm_raise_util,
    "vllm-lower-max-model-len": vllm.vllm_lower_max_model_len,
    "vllm-util-for-free-memory": vllm.vllm_util_for_free_memory,
    "vllm-lower-gpu-memory-utilization": vllm.vllm_lower_util,
    "vllm-lower-max-num-batched-tokens": vllm.vllm_lower_batched_tokens,
    "vllm-lower-max-num-seqs": vllm.vllm_lower_max_num_seqs,
    "vllm-cuda-graph": vllm.vllm_cuda_graph,
    "vllm-encoder-limits": vllm.vllm_encoder_limits,
    "script-memory": generic.script_memory,
}


def known_advice() -> tuple[str, ...]:
    """The ids a rule's ``advice`` may name, sorted."""
    return tuple(sorted(_RECOMMENDERS))


def registry() -> Mapping[str, Recommender]:
    """The shipped recommenders by name: what the pipeline is given explicitly (oomdoctor.api.diagnose)."""
    return dict(_RECOMMENDERS)


def recommend(advice_ids: tuple[str, ...], facts: Facts, recommenders: Mapping[str, Recommender] | None = None) -> list[Recommendation]:
    """The named recommenders' advice, each checked against the incident's own budget and given its role."""
    table = _RECOMMENDERS if recommenders is None else recommenders
    out: list[Recommendation] = []
    for advice_id in advice_ids:
        out.extend(table[advice_id](facts))
    return settle(out, facts)

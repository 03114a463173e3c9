"""vLLM's recommenders: --gpu-memory-utilization both ways, --max-model-len, batched tokens and sequences, CUDA graphs, encoder limits."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomdoctor.advice.generic import halve_flag
from oomdoctor.advice.recommendation import Recommendation
from oomdoctor.base.units import floor_to, format_bytes
from oomdoctor.memory import budget
from oomdoctor.memory.derivation import Derived, Step

if TYPE_CHECKING:
    from oomdoctor.inference.facts import Facts


def _vllm_need(f: Facts) -> tuple[int | None, list[Step]]:
    need = budget.kv_floor(f.get("max_model_len"), f.get("cell_bytes"), f.get("kv_needed_bytes"), system="vllm")
    return need.value, list(need.steps)


def vllm_raise_util(f: Facts) -> list[Recommendation]:
    """startup_kv on vLLM: the u whose budget holds non-KV memory plus one max-length request."""
    util, total, non_kv = f.get("gpu_memory_utilization"), f.get("capacity_bytes"), f.get("non_kv_bytes")
    need, steps = _vllm_need(f)
    if not total or non_kv is None or need is None:
        return [
            Recommendation(
                "--gpu-memory-utilization",
                None,
                "raise",
                "The KV budget u*total - (weights + activations + non-torch) could not hold one request; raise u. The log lacks the profile numbers to compute the value.",
                current=util,
            )
        ]
    steps = [
        Step("total GPU memory", "from vLLM's profile / startup check / OOM message", total, "bytes"),
        *f.derivations.get("non_kv_bytes", Derived(non_kv, (Step("non-KV memory (weights + activation peak + non-torch)", "vLLM profile", non_kv, "bytes"),))).steps,
        *steps,
    ]
    if util is not None:
        steps.extend(budget.vllm_kv_derivation(total, util, non_kv).steps)
    needed = budget.vllm_util_for_kv(total, non_kv, need)
    steps.extend(needed.steps)
    cap = f.get("max_safe_util")
    if cap is not None:
        steps.extend(f.derivations["max_safe_util"].steps)
    if cap is not None and needed.value > cap and f.get("weights_fit_undecided"):
        # The needed u rests on the assumed 1 GiB of KV; the largest u the GPU allows does not.
        at_cap = budget.vllm_kv_budget_bytes(total, cap, non_kv)
        steps.append(Step(f"KV budget at the largest u ({cap:g})", f"{cap:g} * {format_bytes(total)} - {format_bytes(non_kv)}", at_cap, "bytes"))
        why = (
            f"The KV budget at u={util} is {format_bytes(f.get('kv_budget_bytes'))}. At u={cap:g}, the most the GPU allows, it is {format_bytes(at_cap)}. Whether "
            f"one request of {f.get('max_model_len') or 'max-model-len'} tokens fits in it depends on the model's per-token KV size, which the log "
            "does not give (the check assumed 1 GiB): if it does not, lower --max-model-len or shard the model."
        )
        return [Recommendation("--gpu-memory-utilization", cap, "raise", why, current=util, derivation=tuple(steps))]
    if cap is not None and needed.value > cap:
        return []
    at_new = budget.vllm_kv_budget_bytes(total, needed.value, non_kv)
    steps.append(Step(f"KV budget at u={needed.value:g}", f"{needed.value:g} * {format_bytes(total)} - {format_bytes(non_kv)}", at_new, "bytes"))
    why = (
        f"One request of {f.get('max_model_len')} tokens needs {format_bytes(need)} of KV but the budget at u={util} holds {format_bytes(f.get('kv_budget_bytes'))}. "
        f"u is a fraction of the whole GPU for weights, activations and KV together; at u={needed.value:g} the KV budget is {format_bytes(at_new)}."
    )
    return [Recommendation("--gpu-memory-utilization", needed.value, "raise", why, current=util, derivation=tuple(steps))]


def vllm_lower_max_model_len(f: Facts) -> list[Recommendation]:
    """startup_kv on vLLM: the longest context the current KV budget holds."""
    length, estimate, kv, cell = f.get("max_model_len"), f.get("estimated_max_len"), f.get("kv_budget_bytes"), f.get("cell_bytes")
    capacity_tokens = f.get("kv_capacity_tokens")
    steps: list[Step] = []
    if estimate:
        raw = estimate
        steps.append(Step("vLLM's estimate of the longest context that fits", "Based on the available memory ...", estimate, "tokens"))
    elif capacity_tokens and (not length or capacity_tokens < length):
        raw = capacity_tokens
        steps.append(Step("tokens the KV cache holds (vLLM's figure)", "maximum number of tokens that can be stored in KV cache", capacity_tokens, "tokens"))
    elif kv and cell and kv > 0:
        raw = budget.vllm_max_model_len(kv, cell, f.get("block_size") or 16)
        steps.append(Step("tokens the KV budget holds", f"{format_bytes(kv)} / {cell} bytes per token, whole blocks", raw, "tokens"))
    else:
        # The fact carries the engine message's name ("vllm_no_cache_blocks": no blocks at all).
        if f.get("startup_kv_error_kind") == "vllm_no_cache_blocks":
            return []
        return [Recommendation("--max-model-len", None, "lower", "A shorter maximum context needs less KV for one request.", current=length)]
    value = (raw // 1024) * 1024 if raw >= 2048 else raw
    steps.append(Step("rounded down to a multiple of 1024", f"{raw} -> {value}", value, "tokens"))
    if not value:
        return []
    why = f"Keep u and serve at most {value} tokens per request: the current KV budget holds one request of that length."
    return [Recommendation("--max-model-len", value, "lower", why, current=length, derivation=tuple(steps))]


def vllm_util_for_free_memory(f: Facts) -> list[Recommendation]:
    """The startup check refused u*total: the largest u that fits what is free, and what the gap means."""
    util, total, free, deficit = f.get("gpu_memory_utilization"), f.get("capacity_bytes"), f.get("free_at_start_bytes"), f.get("startup_free_deficit_bytes")
    if not total or free is None or util is None:
        return []
    safe = budget.vllm_max_safe_util(free, total)
    steps = [
        Step("requested u*total", f"{util:g} * {format_bytes(total)}", f.get("requested_budget_bytes"), "bytes"),
        Step("free on the device at startup", "Free memory on device (free/total)", free, "bytes"),
        Step("shortfall", "requested - free", deficit, "bytes"),
        *safe.steps,
    ]
    if deficit is not None and deficit < 256 * 1024 * 1024:
        value = floor_to(util - 0.01, 0.01)
        why = (
            f"The GPU is only {format_bytes(deficit)} short of u*total: tens of MB is what a PyTorch/vLLM accounting regression over-counts, "
            f"not a foreign process. Lowering u by one step to {value:g} passes the check."
        )
        steps.append(Step("one step lower", f"{util:g} - 0.01", value, "fraction"))
    else:
        value = safe.value
        why = (
            f"Something else holds about {format_bytes(deficit)} on this GPU. Freeing it is the fix; until then u={value:g} fits the free memory "
            "(the KV pool shrinks by the same amount, and the other process can still grow into it)."
        )
    if value <= 0:
        return []
    return [Recommendation("--gpu-memory-utilization", value, "lower", why, current=util, derivation=tuple(steps))]


def vllm_lower_util(f: Facts) -> list[Recommendation]:
    """runtime OOMs on vLLM: leave the shortfall plus one more allocation outside u*total."""
    util, total, requested, free = f.get("gpu_memory_utilization"), f.get("capacity_bytes"), f.get("requested_bytes"), f.get("free_bytes")
    if util is None or not total or requested is None or free is None:
        return [
            Recommendation(
                "--gpu-memory-utilization",
                None,
                "lower",
                "Leave more of the GPU outside vLLM's budget for activations and graphs; the log lacks the numbers to compute by how much.",
                current=util,
            )
        ]
    shortfall = max(requested - free, 0)
    margin = budget.runtime_margin_bytes(requested)
    lowered = budget.vllm_lowered_util(util, total, shortfall, margin)
    why = (
        f"An allocation of {format_bytes(requested)} failed with {format_bytes(free)} free: what vLLM leaves outside u*total was too small. "
        f"u={lowered.value:g} leaves {format_bytes(shortfall + margin)} more."
    )
    steps = (Step("requested", "Tried to allocate", requested, "bytes"), Step("free", "of which ... is free", free, "bytes"), *lowered.steps)
    return [Recommendation("--gpu-memory-utilization", lowered.value, "lower", why, current=util, derivation=steps)]


def vllm_lower_batched_tokens(f: Facts) -> list[Recommendation]:
    if f.get("oom_phase") == "decode":
        return []
    return halve_flag(f, "max_num_batched_tokens", "--max-num-batched-tokens", "Prefill (and vLLM's profile run) activations grow with the tokens batched per step.", "tokens", 2048)


def vllm_lower_max_num_seqs(f: Facts) -> list[Recommendation]:
    if f.get("oom_phase") in ("prefill", "profile"):
        return []
    return halve_flag(f, "max_num_seqs", "--max-num-seqs", "Fewer sequences per step need less decode activation memory, and fewer CUDA graph batch sizes are captured.", "count")


def vllm_cuda_graph(f: Facts) -> list[Recommendation]:
    """cuda_graph on vLLM: capture fewer sizes, or run eager."""
    recs: list[Recommendation] = []
    largest = f.get("max_capture_size")
    if largest:
        value = budget.halved_batch_size(largest)
        recs.append(
            Recommendation(
                "--max-num-seqs",
                value,
                "lower",
                f"vLLM captures graphs up to batch size {largest}; capping the batch at {value} captures half as many sizes.",
                current=f.get("max_num_seqs"),
                derivation=(Step("half the largest capture size (multiple of 8)", f"{largest} / 2", value, "count"),),
            )
        )
    else:
        recs.extend(halve_flag(f, "max_num_seqs", "--max-num-seqs", "Capture sizes follow max_num_seqs; fewer sizes need less graph memory.", "count"))
    recs.append(
        Recommendation(
            "--enforce-eager",
            True,
            "set",
            "Skips CUDA graph capture altogether (the 1-3 GiB of graph memory per GPU vLLM warns about), at a decode-speed cost.",
            current=f.get("enforce_eager"),
        )
    )
    return recs


def vllm_encoder_limits(f: Facts) -> list[Recommendation]:
    return [
        Recommendation(
            "--limit-mm-per-prompt",
            '{"image": 1}',
            "set",
            "vLLM sizes the encoder's profile run by the most images/videos a prompt may carry; fewer per prompt need less encoder memory.",
        ),
        Recommendation(
            "--mm-processor-kwargs",
            '{"max_pixels": 1003520}',
            "set",
            "Caps the pixels per image (Qwen-VL style processors), which bounds the vision tower's activations.",
        ),
        *vllm_lower_max_num_seqs(f),
    ]

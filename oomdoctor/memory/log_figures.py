"""The sums and differences the fact builders derive from a log's figures (SGLang's load lines, vLLM's profile, NVML's process list), each with its step."""

from __future__ import annotations

from oomdoctor.base.units import GIB, gib_text
from oomdoctor.memory.budget import CUDA_CONTEXT_BYTES, NCCL_BUFFERS_BYTES, sglang_weights_bytes
from oomdoctor.memory.derivation import Derived, Step

_g = gib_text


def sglang_pre_bytes_from_load_end(avail_bytes: int, mem_usage_bytes: int) -> Derived:
    """Free memory before weights, implied by "Load weight end ... avail mem=A, mem usage=U" (U = pre - A)."""
    pre = avail_bytes + mem_usage_bytes
    return Derived(pre, (Step("pre from the load-end line", "avail mem + mem usage", pre, "bytes"),))


def sglang_weights_derivation(pre_bytes: int, post_bytes: int) -> Derived:
    """Weights W = pre - post, with the step that shows it."""
    weights = sglang_weights_bytes(pre_bytes, post_bytes)
    return Derived(weights, (Step("weights W = pre - post", f"{_g(pre_bytes)} - {_g(post_bytes)}", weights, "bytes"),))


def sglang_startup_foreign_bytes(capacity_bytes: int, pre_bytes: int, init_bytes: int) -> Derived:
    """Memory held before weights by others: capacity - pre - init - CUDA context, never negative (the step keeps the raw figure)."""
    foreign = capacity_bytes - pre_bytes - init_bytes - CUDA_CONTEXT_BYTES
    formula = f"capacity {capacity_bytes / GIB:.2f} - pre {pre_bytes / GIB:.2f} - init {init_bytes / GIB:.2f} - context {_g(CUDA_CONTEXT_BYTES)}"
    return Derived(max(foreign, 0), (Step("memory held before weights by others", formula, foreign, "bytes"),))



def vllm_profile_foreign_bytes(initial_used_bytes: int, weights_bytes: list[int], tensor_parallel: bool) -> Derived:
    """Memory others held when vLLM V0 (0.6.4) began profiling: the card's used memory then (its
    initial_memory_usage, measured after the weights loaded) less every model's weights (a speculative decoder
    loads a draft too), a CUDA context and, with tensor parallelism, NCCL's and the custom all-reduce's buffers;
    never negative (the step keeps the raw figure). 0.6.4 counts that memory in its non_torch_memory and takes it
    out of the KV budget."""
    nccl = NCCL_BUFFERS_BYTES if tensor_parallel else 0
    foreign = initial_used_bytes - sum(weights_bytes) - CUDA_CONTEXT_BYTES - nccl
    weights = " - ".join(f"{w / GIB:.2f}" for w in weights_bytes)
    formula = f"initial_memory_usage {initial_used_bytes / GIB:.2f} - weights {weights} - context {_g(CUDA_CONTEXT_BYTES)}" + (f" - NCCL {_g(nccl)}" if nccl else "")
    return Derived(max(foreign, 0), (Step("memory held by others when profiling began", formula, foreign, "bytes"),))


def processes_bytes(used_bytes: list[int | None]) -> int:
    """Memory held by a set of processes: the sum of their used bytes (an unknown size counts as 0)."""
    return sum(b or 0 for b in used_bytes)


def nvml_other_used_bytes(gpu_used_bytes: int, server_used_bytes: list[int | None]) -> int:
    """Memory NVML shows in use on a GPU beyond the server's own processes."""
    return gpu_used_bytes - processes_bytes(server_used_bytes)


def unbalanced_gap_bytes(local_free_bytes: int, min_free_bytes: int) -> int:
    """How much more free memory this rank had than the emptiest one (SGLang's unbalanced-memory check)."""
    return local_free_bytes - min_free_bytes


def kv_cell_bytes(kv_bytes: int, tokens: int) -> int:
    """Per-token KV bytes of a pool or request: its bytes over its tokens, rounded down."""
    return kv_bytes // tokens


def vllm_total_bytes_from_budget(requested_bytes: int, util: float) -> Derived:
    """Total GPU memory from vLLM's requested budget u*total and u."""
    total = round(requested_bytes / util)
    return Derived(total, (Step("total GPU memory", "requested u*total / u", total, "bytes"),))


def vllm_non_kv_bytes_from_profile(weights_bytes: int, activation_peak_bytes: int, non_torch_bytes: int) -> Derived:
    """vLLM's non-KV memory from its profile: weights + activation peak + non-torch."""
    non_kv = weights_bytes + activation_peak_bytes + non_torch_bytes
    return Derived(non_kv, (Step("non-KV memory", "weights + activation peak + non-torch", non_kv, "bytes"),))


def vllm_non_kv_bytes_from_kv(total_bytes: int, util: float, kv_bytes: int) -> Derived:
    """vLLM's non-KV memory from its KV figure: u*total - available KV."""
    non_kv = round(total_bytes * util) - kv_bytes
    return Derived(non_kv, (Step("non-KV memory", "u*total - available KV", non_kv, "bytes"),))


def vllm_startup_free_deficit_bytes(requested_bytes: int, free_at_start_bytes: int) -> Derived:
    """How far free memory at startup fell short of the requested u*total."""
    deficit = requested_bytes - free_at_start_bytes
    return Derived(deficit, (Step("requested u*total minus free at start", "requested - free", deficit, "bytes"),))

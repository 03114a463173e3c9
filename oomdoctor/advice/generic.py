"""Recommenders not tied to one server (sharded or quantized weights, an FP8 KV cache, the PyTorch allocator) and those for plain PyTorch scripts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomdoctor.advice.recommendation import PRIMARY, Recommendation, tensor_parallel_flag
from oomdoctor.base.units import floor_to, format_bytes
from oomdoctor.evidence.parsers.oom_signatures import GGML_SOURCES
from oomdoctor.memory import budget
from oomdoctor.memory.derivation import Step

if TYPE_CHECKING:
    from oomdoctor.inference.facts import Facts


def is_llama_cpp(f: Facts) -> bool:
    """Whether the failure is llama.cpp's (its flags, not PyTorch's, are the levers)."""
    return f.get("driver_oom_source") in GGML_SOURCES or f.get("ggml_buffer_usage") is not None


def scale_out_weights(f: Facts) -> list[Recommendation]:
    """weights_dont_fit: more tensor parallelism, or quantized weights."""
    tp = f.get("tp_size") or 1
    weights, pre = f.get("weights_bytes"), f.get("pre_bytes")
    steps: tuple[Step, ...] = ()
    why = "The weights alone leave no room for KV cache and activations on this GPU; shard them over more GPUs."
    if weights and pre:
        share = weights / pre
        steps = (Step("weights' share of pre-load free memory", f"{format_bytes(weights)} / {format_bytes(pre)}", round(share, 4), "ratio"),)
        why = f"The weights take {share:.0%} of the memory free before loading ({format_bytes(weights)} of {format_bytes(pre)}); doubling TP halves the per-GPU share."
    if is_llama_cpp(f):
        # llama.cpp (and ollama) places as many layers on the GPU as it is told and keeps the rest on the host.
        return [
            Recommendation(
                "--n-gpu-layers",
                None,
                "lower",
                "llama.cpp was told to place more of the model's layers on this GPU than fit: offload fewer (-ngl; "
                "ollama's num_gpu), keeping the rest on the host, or use a smaller quantization of the model.",
                derivation=steps,
            )
        ]
    if f.get("system") == "torch":
        return [
            Recommendation(
                "torch_dtype",
                "bfloat16",
                "set",
                why.replace("doubling TP halves the per-GPU share", "load in bf16 or a quantized format, or shard with device_map / FSDP"),
                derivation=steps,
            )
        ]
    return [
        Recommendation(tensor_parallel_flag(f), tp * 2, "raise", why, current=tp, derivation=steps),
        Recommendation(
            "--quantization",
            "fp8",
            "set",
            "FP8 weights take about half the memory of BF16 (on GPUs with FP8 support); or serve a pre-quantized checkpoint.",
        ),
    ]


def kv_cache_fp8(f: Facts) -> list[Recommendation]:
    if f.get("kv_cache_dtype") not in (None, "auto", "bfloat16", "float16"):
        return []
    return [
        Recommendation(
            "--kv-cache-dtype",
            "fp8" if f.get("system") == "vllm" else "fp8_e4m3",
            "set",
            "An FP8 KV cache holds twice the tokens in the same memory, so a smaller KV budget still serves full-length requests.",
            current=f.get("kv_cache_dtype"),
        )
    ]


def halve_flag(f: Facts, fact: str, flag: str, why: str, unit: str, default_hint: int | None = None) -> list[Recommendation]:
    """Halve the count ``fact`` under ``flag``; without it, ``default_hint`` (or no value) to set."""
    current = f.get(fact)
    if current is None:
        return [Recommendation(flag, default_hint, "lower" if default_hint is None else "set", why, current=None)]
    value = max(current // 2, 1)
    return [Recommendation(flag, value, "lower", why, current=current, derivation=(Step("halved", f"{current} // 2", value, unit),))]


def expandable_segments(f: Facts) -> list[Recommendation]:
    """fragmentation: free + reserved-unallocated would have served the request."""
    requested, unalloc, free = f.get("requested_bytes"), f.get("reserved_unallocated_bytes"), f.get("free_bytes")
    steps: tuple[Step, ...] = ()
    if requested is not None and unalloc is not None:
        steps = (
            Step("requested", "Tried to allocate", requested, "bytes"),
            Step("reserved by PyTorch but unallocated", "free pieces of partly used segments", unalloc, "bytes"),
            Step("free on the device", "of which ... is free", free if free is not None else "n/a", "bytes"),
        )
    why = (
        f"PyTorch held {format_bytes(unalloc)} reserved but unallocated, at least the {format_bytes(requested)} requested, yet in pieces too small "
        "to serve it. Expandable segments let the allocator grow segments instead of splitting them."
    )
    return [Recommendation("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", "set", why, derivation=steps)]


def script_memory(f: Facts) -> list[Recommendation]:
    """An activation/batch OOM in a training or inference script."""
    if is_llama_cpp(f):
        # llama.cpp sizes its compute buffers for the worst-case graph of one micro-batch over the context.
        return [
            Recommendation(
                "--ubatch-size",
                None,
                "lower",
                "llama.cpp's compute buffer holds the activations of one micro-batch over the whole context: a smaller "
                "micro-batch (-ub) or context (-c; ollama's num_ctx) shrinks it. PyTorch's allocator settings do not apply.",
            )
        ]
    requested, free, allocated = f.get("requested_bytes"), f.get("free_bytes"), f.get("allocated_bytes")
    recs: list[Recommendation] = []
    if requested is not None and free is not None and allocated:
        shortfall = max(requested - free, 0)
        keep = max(0.0, 1 - (shortfall + budget.runtime_margin_bytes(requested)) / allocated)
        scale = floor_to(keep, 0.05)
        needed = shortfall + budget.runtime_margin_bytes(requested)
        why = (
            f"Activations scale with the batch; at most about {scale:.0%} of the current batch fits (the allocation lacked {format_bytes(shortfall)})."
            if scale > 0
            # Seen on a real H200 recording: "at most about 0%" is no advice. Say what the arithmetic does show.
            else f"Lowering the batch alone cannot be sized from these figures: the shortfall plus one more such allocation ({format_bytes(needed)}) "
            f"is more than all PyTorch holds ({format_bytes(allocated)}), so the {format_bytes(requested)} request itself must shrink (shorter sequences or chunks), "
            "or memory held outside this allocation must be freed."
        )
        recs.append(
            Recommendation(
                "batch_size",
                None,
                "lower",
                why,
                derivation=(
                    Step("shortfall plus one more such allocation", f"{format_bytes(requested)} - {format_bytes(free)} + margin", shortfall + budget.runtime_margin_bytes(requested), "bytes"),
                    Step("share of allocated memory to keep", f"1 - that / allocated {format_bytes(allocated)}, rounded down to 0.05", scale, "ratio"),
                ),
            )
        )
    else:
        recs.append(Recommendation("batch_size", None, "lower", "Activations scale with the batch size; halve it."))
    if f.get("training_script"):
        # Training advice only where the traceback shows training; an inference script or server has no backward pass.
        recs.append(
            Recommendation(
                "gradient_checkpointing",
                True,
                "set",
                "Activation checkpointing recomputes activations in the backward pass instead of keeping them (training only).",
            )
        )
    recs.append(
        Recommendation(
            "PYTORCH_CUDA_ALLOC_CONF",
            "expandable_segments:True",
            "set",
            "Cheap to try first: it removes the fragmentation share of the peak (PYTORCH_ALLOC_CONF in newer torch).",
        )
    )
    return recs


def startup_foreign_actions(f: Facts) -> list[Recommendation]:
    """Memory held before the server started: find the holder and free it (no flag of the server fixes it)."""
    foreign = f.get("startup_foreign_bytes")
    if not foreign:
        return []
    if f.get("system") == "vllm":
        why = (
            f"About {format_bytes(foreign)} was in use on this GPU by something else when vLLM began profiling (its initial usage less its own weights and context). "
            "List what holds it, stop it (or start the server on an empty GPU with CUDA_VISIBLE_DEVICES), then restart the server: "
            "vLLM 0.6.4 counts that memory in its non-torch memory and takes it out of the KV cache, and the other tenant can grow into the activation room."
        )
    else:
        why = (
            f"About {format_bytes(foreign)} was in use on this GPU before the server loaded its weights, and the OOM message names no process for it. "
            "List what holds it, stop it (or start the server on an empty GPU with CUDA_VISIBLE_DEVICES), then restart the server: "
            "SGLang sizes every region from the memory free at startup, and the other tenant can grow into the activation room."
        )
    return [
        Recommendation(
            "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv",
            None,
            "run",
            why,
            derivation=f.derivations["startup_foreign_bytes"].steps if "startup_foreign_bytes" in f.derivations else (),
            role=PRIMARY,
            cost="none",
        )
    ]

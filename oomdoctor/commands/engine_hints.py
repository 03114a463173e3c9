"""The engines' own errors that already name the flags to change: answered directly by triage."""

from __future__ import annotations

import re
from dataclasses import dataclass

# An engine's own error that names the fix decides the class this surely.
HINT_CONFIDENCE = 0.8


@dataclass(frozen=True)
class EngineHint:
    """An error the serving engine writes that already names the flags to change, and in which direction."""

    name: str
    engine: str
    pattern: re.Pattern[str]
    klass: str
    flags: tuple[tuple[str, str], ...]  # (flag, "lower" | "raise"), in the engine's own order


ENGINE_HINTS: tuple[EngineHint, ...] = (
    EngineHint(
        "vllm_warmup",
        "vLLM",
        re.compile(r"CUDA out of memory occurred when warming up (?:sampler|pooler)(?: \(.{0,200}?\))? with (?P<reqs>\d+) dummy requests\. Please try lowering `max_num_seqs` or `gpu_memory_utilization`"),
        "runtime_activation",
        (("--max-num-seqs", "lower"), ("--gpu-memory-utilization", "lower")),
    ),
    EngineHint(
        "vllm_max_seq_len",
        "vLLM",
        re.compile(r"max seq len \((?P<len>\d+)\) is larger than the maximum number of tokens that can be stored in KV cache \((?P<tokens>\d+)\)\. Try increasing `gpu_memory_utilization` or decreasing `max_model_len`"),
        "startup_kv",
        (("--gpu-memory-utilization", "raise"), ("--max-model-len", "lower")),
    ),
    EngineHint(
        "vllm_estimated_len",
        "vLLM",
        re.compile(r"estimated maximum model length is (?P<estimate>\d+)\. Try increasing `gpu_memory_utilization` or decreasing `max_model_len`"),
        "startup_kv",
        (("--gpu-memory-utilization", "raise"), ("--max-model-len", "lower")),
    ),
    EngineHint(
        "vllm_no_cache_blocks",
        "vLLM",
        re.compile(r"No available memory for the cache blocks\. Try increasing `gpu_memory_utilization`"),
        "startup_kv",
        (("--gpu-memory-utilization", "raise"),),
    ),
    EngineHint(
        "sglang_not_enough_memory",
        "SGLang",
        re.compile(r"Not enough memory\. Please try to increase --mem-fraction-static"),
        "startup_kv",
        (("--mem-fraction-static", "raise"),),
    ),
)


def engine_hint(log_text: str) -> tuple[EngineHint, re.Match[str]] | None:
    """The last engine-authored error in the pasted output that names its own fix, if any."""
    found: tuple[EngineHint, re.Match[str]] | None = None
    at = -1
    for hint in ENGINE_HINTS:
        for m in hint.pattern.finditer(log_text):
            if m.start() > at:
                found, at = (hint, m), m.start()
    return found

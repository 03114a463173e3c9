"""What an out-of-memory failure looks like in text: the one vocabulary of OOM words.

The torch parser anchors on these words, the record parser reads the lines before them as context,
``run``'s recorder triggers on them in the child's raw output, and triage and issue bodies read a pasted
error or a title with them. A new engine wording is added here once.
"""

from __future__ import annotations

import re

# Every allocator and runtime OOM line carries one of these: PyTorch's "CUDA out of memory" and
# OutOfMemoryError, the CUDA runtime and driver, NCCL, HIP, Ascend's NPU, cuBLAS's
# CUBLAS_STATUS_ALLOC_FAILED, the kernel driver's "NVRM: ... Out of memory"; other runtimes' title case and
# capitals ("TT_FATAL: Out of Memory: Not enough space to allocate ..."); PyTorch's caching allocator's
# own warning before it raises ("memory allocation failed with OOM on device 5 while trying to allocate ...").
ALLOCATOR_WORDS: tuple[bytes, ...] = (b"out of memory", b"Out of memory", b"Out of Memory", b"OUT OF MEMORY", b"OutOfMemory", b"ALLOC_FAILED", b"failed with OOM")
# The engines' own startup memory failures, which carry none of those words (SGLang, vLLM).
ENGINE_WORDS: tuple[bytes, ...] = (
    b"Not enough memory",
    b"Loaded weights leave no GPU memory",
    b"No available memory for the cache blocks",
    b"KV cache is needed, which is larger",
)
FAILURE_WORDS: tuple[bytes, ...] = ALLOCATOR_WORDS + ENGINE_WORDS


def failure_pattern(*extra: str) -> str:
    """A regular expression (for str) matching any failure word, or one of ``extra`` (regex pieces)."""
    return "|".join((*(re.escape(w.decode()) for w in FAILURE_WORDS), *extra))

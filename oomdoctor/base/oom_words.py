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


# A message that says a memory budget was short, in a program's own words rather than an allocator's: a budget
# too small ("cache budget too small", "memory budget exceeded"); a size needed against what the budget or the device
# has ("minimum plan ... needs 8261206016 B > budget 6734265712 B", "requires 3.00 GiB but only 1.20 GiB is free");
# not enough memory ("not enough GPU memory for the buffers"); more than it allows ("requires more memory than the
# budget allows"). An OOM in its words, whatever the exception's class. An illegal memory access, a memory-mapped
# file, a shared-memory segment are not budgets.
# A size as the runtimes print it ("1.25 GiB", "671088640 bytes"); the allocator parser reads its figures with it.
SIZE = r"\d+(?:\.\d+)?\s*(?:bytes|[KMGT]i?B)"
# A budget check's size may be bare bytes too ("needs 8261206016 B").
_SIZE = rf"(?:{SIZE}|\d+(?:\.\d+)?\s*B)\b"
MEMORY_SHORTAGE = (
    r"(?i)\b(?:memory|vram|hbm|cache)\s+budget\b.{0,80}?\b(?:too small|exceed\w*|insufficient)\b"
    r"|\bbudget\s+(?:is\s+)?too small\b"
    rf"|\b(?:needs?|requires?|required)\s+[^;]{{0,40}}?{_SIZE}[^;]{{0,20}}?(?:>|more than|exceeds?|but only)[^;]{{0,30}}?\b(?:budget|available|free)\b"
    r"|\b(?:not enough|insufficient)\s+(?:gpu\s+|device\s+|free\s+)?memory\b"
    r"|\brequires?\s+more\s+(?:gpu\s+|device\s+)?memory\s+than\b"
)

"""Allocator arithmetic on a PyTorch OOM message: the shortfall, the memory within reach, and when slack is fragmentation or another tenant's."""

from __future__ import annotations

from oomdoctor.base.units import GIB
from oomdoctor.memory.derivation import Derived, Step

# Allocator arithmetic on a PyTorch OOM message (DESIGN §2, classes fragmentation and foreign_process).
# Reserved-but-unallocated memory is the caching allocator's normal slack (freed blocks it keeps for
# reuse, rounded to 2 MiB / 20 MiB segments); it is *fragmentation* only when it is material for the
# card: at least 2% of its capacity, or 2 GiB, whichever is smaller (1 GiB when the capacity is
# unknown). Below that, expandable segments give back less than one step of a typical batch or
# chunk setting, so the fix that matters is the activation budget, not the allocator.
# No CUDA/ROCm/NPU device an inference server runs on has less memory than this (the smallest laptop
# and edge GPUs have 2-4 GiB): a request below it cannot be larger than the card, whatever the card.
SMALLEST_SERVING_GPU_BYTES = 2 * GIB
FRAGMENTATION_MATERIAL_SHARE = 0.02
FRAGMENTATION_MATERIAL_CAP_BYTES = 2 * GIB
FRAGMENTATION_MATERIAL_UNKNOWN_CARD_BYTES = 1 * GIB
# Memory an inference process holds outside PyTorch's allocator: CUDA context (0.3-1 GiB), NCCL
# communicators and custom all-reduce buffers (up to ~1.5 GiB), cuBLAS/cuDNN workspaces. Above this,
# plus a 5% margin of the card, memory no figure of the message accounts for belongs to another tenant.
NON_PYTORCH_OVERHEAD_MAX_BYTES = 4 * GIB
UNACCOUNTED_MARGIN_SHARE = 0.05
# With the message's own "this process has X" figure the overhead is inside X; what is left beyond the
# driver's own reservation (~0.5 GiB) and 1.5 GiB of slack is another tenant's.
OTHERS_WITH_SELF_FIGURE_MIN_BYTES = 2 * GIB


def fragmentation_material_bytes(capacity_bytes: int | None) -> int:
    """The reserved-but-unallocated memory that counts as fragmentation on this card."""
    if not capacity_bytes:
        return FRAGMENTATION_MATERIAL_UNKNOWN_CARD_BYTES
    return min(int(capacity_bytes * FRAGMENTATION_MATERIAL_SHARE), FRAGMENTATION_MATERIAL_CAP_BYTES)


def unaccounted_bytes(capacity: int, free: int, pytorch_reserved: int, this_process: int | None) -> tuple[int, int]:
    """(memory no figure of the OOM message accounts for, the threshold above which it is another tenant)."""
    if this_process:
        return capacity - free - this_process, OTHERS_WITH_SELF_FIGURE_MIN_BYTES
    return capacity - free - pytorch_reserved, NON_PYTORCH_OVERHEAD_MAX_BYTES + int(capacity * UNACCOUNTED_MARGIN_SHARE)


def shortfall_bytes(requested_bytes: int, free_bytes: int) -> Derived:
    """What the failed allocation lacked: requested - free, never negative (the step keeps the raw figure)."""
    shortfall = requested_bytes - free_bytes
    return Derived(max(shortfall, 0), (Step("shortfall", "requested - free", shortfall, "bytes"),))


def free_to_process_bytes(free_bytes: int, allowed_bytes: int | None, allocated_bytes: int | None, reserved_unallocated_bytes: int | None) -> int:
    """The free memory this process could take: the card's, or under a per-process cap (PyTorch's "N allowed",
    torch.cuda.set_per_process_memory_fraction) only what the cap leaves above what the process reserved."""
    if allowed_bytes is None:
        return free_bytes
    reserved = (allocated_bytes or 0) + (reserved_unallocated_bytes or 0)
    return min(free_bytes, max(allowed_bytes - reserved, 0))


def reclaimable_bytes(free_bytes: int, reserved_unallocated_bytes: int) -> int:
    """Memory an allocation could have had: free on the card plus the allocator's reserved-but-unallocated."""
    return free_bytes + reserved_unallocated_bytes


def unaccounted_derivation(
    capacity_bytes: int, free_bytes: int, allocated_bytes: int | None, reserved_unallocated_bytes: int | None, this_process_bytes: int | None
) -> tuple[Derived, int, int]:
    """(memory no figure of the OOM message accounts for, never negative; the raw figure; the threshold for another tenant)."""
    pytorch_reserved = (allocated_bytes or 0) + (reserved_unallocated_bytes or 0)
    others, threshold = unaccounted_bytes(capacity_bytes, free_bytes, pytorch_reserved, this_process_bytes)
    step = Step("memory no figure of the message accounts for", "capacity - free - (this process, else PyTorch allocated + reserved-unallocated)", others, "bytes")
    return Derived(max(others, 0), (step,)), others, threshold

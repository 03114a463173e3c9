"""memory.margins pinned with hand-computed numbers: a set's margin on a runtime OOM's gap, the fraction
that closes it, and a fraction's distance inside its window."""

from __future__ import annotations

import pytest

from oomdoctor.base.units import GIB, MIB
from oomdoctor.memory import budget, margins

Y = "--mem-fraction-static"
CHUNK = "--chunked-prefill-size"


def _gap(**over: object) -> margins.Gap:
    # Issue 26's case: a prefill asked 5.50 GiB with 1.20 GiB free, y 0.88 of pre 21.76 GiB, chunk 4096.
    base = {
        "requested_bytes": round(5.50 * GIB),
        "free_bytes": round(1.20 * GIB),
        "fraction_flag": Y,
        "fraction": 0.88,
        "fraction_base_bytes": round(21.76 * GIB),
        "phase": "prefill",
        "stage": "forward",
        "limits": {CHUNK: 4096, "--max-running-requests": 256},
        "reserved_unallocated_bytes": 300 * MIB,
    }
    base.update(over)
    return margins.Gap(**base)  # type: ignore[arg-type]


def test_halving_the_chunk_and_y_088_to_086_leaves_the_gap_open() -> None:
    m = margins.gap_margin(_gap(), ((CHUNK, 2048), (Y, 0.86)))
    # 2.75 GiB asked of 1.20 + 0.02 * 21.76 = 1.635 GiB free.
    assert m.allocation_bytes == round(5.50 * GIB) * 2048 // 4096
    assert m.free_bytes == round(1.20 * GIB) + round(0.02 * round(21.76 * GIB))
    assert m.bytes is not None and m.bytes / GIB == pytest.approx(1.635 - 2.75, abs=0.001)
    assert m.leaves_some is False
    assert [s.step for s in m.steps][-1] == "margin: free after the set minus the allocation after it"


def test_lowering_y_alone_by_shortfall_plus_one_allocation_leaves_that_allocation() -> None:
    lowered = budget.sglang_lowered_mfs(0.88, round(21.76 * GIB), round(4.30 * GIB), round(5.50 * GIB)).value
    m = margins.gap_margin(_gap(), ((Y, lowered),))
    # y 0.42: 1.20 + 0.46 * 21.76 - 5.50 = 5.71 GiB, at least the 5.50 GiB margin lowering y keeps.
    assert lowered == 0.42 and m.bytes is not None and m.bytes / GIB == pytest.approx(5.7096, abs=0.001)


def test_the_fraction_frees_nothing_before_the_kv_pool_exists() -> None:
    # vLLM's profile run asked 4.64 GiB with 3.05 GiB free at u 0.95 of 44.35 GiB, 32768 batched tokens.
    profile = margins.Gap(
        round(4.64 * GIB), round(3.05 * GIB), "--gpu-memory-utilization", 0.95, round(44.35 * GIB), phase="profile", stage="forward",
        limits={"--max-num-batched-tokens": 32768},
    )
    u = margins.gap_margin(profile, (("--gpu-memory-utilization", 0.8),))
    assert u.bytes == round(3.05 * GIB) - round(4.64 * GIB) and u.leaves_some is False
    tokens = margins.gap_margin(profile, (("--max-num-batched-tokens", 16384),))
    assert tokens.bytes == round(3.05 * GIB) - round(4.64 * GIB) // 2 and tokens.leaves_some is True
    assert margins.closing_fraction(profile, (("--max-num-batched-tokens", 16384),)) is None


def test_decode_scales_with_running_requests_and_the_allocator_setting_adds_its_fragments() -> None:
    decode = _gap(phase="decode")
    half = margins.gap_margin(decode, (("--max-running-requests", 128),))
    assert half.allocation_bytes == round(5.50 * GIB) // 2
    # The chunk bounds a prefill, not a decode step: its effect there is not modelled, never guessed.
    chunk = margins.gap_margin(decode, ((CHUNK, 2048),))
    assert chunk.bytes is None and "prefill" in chunk.unknown and chunk.leaves_some is None
    expandable = margins.gap_margin(decode, (("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),))
    assert expandable.bytes == round(1.20 * GIB) + 300 * MIB - round(5.50 * GIB)
    # Sharding moves the window, not the allocation: it counts for nothing on the gap.
    tp = margins.gap_margin(decode, (("--tp-size", 2), (Y, 0.42)))
    assert tp.bytes == margins.gap_margin(decode, ((Y, 0.42),)).bytes


def test_the_fraction_that_closes_a_set_leaves_one_more_allocation_of_the_new_size() -> None:
    gap = _gap(requested_bytes=4 * GIB)
    closing = margins.closing_fraction(gap, ((CHUNK, 2048), (Y, 0.86)))
    # 2 GiB asked after halving; room for 2 GiB more: 0.88 - (2 + 2 - 1.20) / 21.76 = 0.7513 -> 0.75.
    assert closing is not None and closing.value == 0.75
    m = margins.gap_margin(gap, ((CHUNK, 2048), (Y, closing.value)))
    assert m.bytes is not None and m.bytes >= 2 * GIB


def test_a_window_margin_is_the_smaller_side() -> None:
    b = budget.FractionBudget("sglang", 0.7, 78 * GIB, 60 * GIB, 1 * GIB, reserve_bytes=10 * GIB)
    m = margins.window_margin(b, 0.85)
    # KV beyond one request: 0.85 * 78 - 60 - 1 = 5.30 GiB; room beyond the reserve: 0.15 * 78 - 10 = 1.70 GiB.
    assert m.bytes is not None and m.bytes / GIB == pytest.approx(1.70, abs=0.001) and m.free_bytes is None

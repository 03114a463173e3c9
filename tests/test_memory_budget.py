"""The budget model pinned by hand-computed numbers (seed 000's H100 and H20 cases among them)."""

from __future__ import annotations

import pytest

from oomdoctor.base.units import GIB, MIB
from oomdoctor.memory import budget, log_figures, oom_arithmetic


def gib(x: float) -> int:
    return round(x * GIB)


def test_seed000_h100_kv_negative_at_07_and_positive_at_085() -> None:
    pre, post = gib(78), gib(18)  # 60 GB thinker on an 80 GB H100, ~2 GB init
    assert budget.sglang_weights_bytes(pre, post) == gib(60)
    assert budget.sglang_dynamic_region_bytes(pre, 0.7) == pytest.approx(gib(23.4), abs=2)
    assert budget.sglang_kv_budget_bytes(pre, post, 0.7) == pytest.approx(gib(-5.4), abs=2)
    assert budget.sglang_dynamic_region_bytes(pre, 0.85) == pytest.approx(gib(11.7), abs=2)
    assert budget.sglang_kv_budget_bytes(pre, post, 0.85) == pytest.approx(gib(6.3), abs=2)


def test_seed000_h100_recommendation_is_085() -> None:
    pre, weights = gib(78), gib(60)
    reserve = budget.sglang_min_activation_reserve_bytes(gib(79.19)).value
    assert reserve == 10 * GIB
    window = budget.sglang_feasible_window(pre, weights, budget.DEFAULT_KV_FLOOR_BYTES, reserve)
    assert window.low == pytest.approx(61 / 78)
    assert window.high == pytest.approx(1 - 10 / 78)
    assert budget.choose_in_window(window) == 0.85


def test_seed000_h20_has_7_2_gb_of_kv_at_07() -> None:
    # 96 * 0.7 - 60 = 7.2: why CI on H20 never saw the failure.
    pre, post = gib(96), gib(36)
    assert budget.sglang_kv_budget_bytes(pre, post, 0.7) == pytest.approx(gib(7.2), abs=2)
    kv = budget.sglang_kv_derivation(pre, post, 0.7)
    assert kv.value == pytest.approx(gib(7.2), abs=2)
    assert "0.7 * 96.00 GiB - 60.00 GiB = 7.20 GiB" in kv.steps[-1].formula


def test_window_infeasible_when_weights_too_big() -> None:
    window = budget.sglang_feasible_window(gib(78.5), gib(72), gib(1), gib(10))
    assert not window.feasible
    assert budget.choose_in_window(window) is None


def test_choice_falls_back_to_hundredths() -> None:
    # Window [0.861, 0.872]: no multiple of 0.05 inside, 0.87 is.
    window = budget.Window(0.861, 0.872, ())
    assert budget.choose_in_window(window) == 0.87


def test_lowered_mfs_frees_shortfall_plus_margin() -> None:
    pre = gib(78.51)
    lowered = budget.sglang_lowered_mfs(0.838, pre, gib(0.23), gib(1.25))
    # 0.838 - 1.48/78.51 = 0.81915 -> 0.81
    assert lowered.value == 0.81


def test_autotune_eras_for_h100() -> None:
    h100 = 81559 * MIB
    assert budget.sglang_autotune_mfs(h100, era="B").value == pytest.approx(round((81559 - 10240) / 81559, 3))
    assert budget.sglang_autotune_mfs(h100, era="B").value == 0.874
    # current: 512 + 8192*1.5 + 256*2 + 1/8*1024 = 13440 MiB
    assert budget.sglang_autotune_mfs(h100, era="current").value == round((81559 - 13440) / 81559, 3)
    assert budget.sglang_autotune_mfs(h100, tp=8, era="A").value == 0.81


def test_autotune_big_gpu_floor_applies_when_terms_are_small() -> None:
    h100 = 81559 * MIB
    auto = budget.sglang_autotune_mfs(h100, era="current", chunked_prefill_size=2048, cuda_graph_max_bs=8)
    assert auto.value == round((81559 - 10240) / 81559, 3)
    assert any("big-GPU floor" in s.step for s in auto.steps)


def test_small_card_reserve_is_smallest_era() -> None:
    reserve = budget.sglang_min_activation_reserve_bytes(gib(21.8)).value
    assert reserve == round(2.9 * 1024 * MIB)


def test_cell_bytes_and_tokens() -> None:
    # Qwen3-32B at TP=2: 4 KV heads/rank * (128+128) * 64 layers * 2 bytes = 128 KiB
    cell = budget.cell_bytes_mha(4, 128, 128, 64, 2)
    assert cell == 128 * 1024
    assert budget.kv_tokens(gib(35.08), cell) == 287375
    # DeepSeek-V3 MLA: (512 + 64) * 61 * 2, not split by TP
    assert budget.cell_bytes_mla(512, 64, 61, 2) == 70272
    assert budget.kv_tokens(-5, cell) == 0


# --- vLLM: u is a fraction of total memory --------------------------------------------------------


def test_vllm_kv_budget_llama8b() -> None:
    # log_formats.md §3.5: 79.19 GiB, u=0.9, weights 14.99 + peak 1.24 + non-torch 0.35 = 16.58 GiB
    total = gib(79.19)
    kv = budget.vllm_kv_budget_bytes(total, 0.9, gib(16.58))
    assert kv == pytest.approx(gib(54.691), abs=gib(0.001))


def test_vllm_32k_context_that_does_not_fit_and_the_u_that_fixes_it() -> None:
    # Qwen2.5-32B bf16: 8 KV heads * (128+128) * 64 layers * 2 B = 256 KiB per token
    cell = budget.cell_bytes_mha(8, 128, 128, 64, 2)
    assert cell == 256 * 1024
    total, non_kv = gib(79.19), gib(63.30)
    need = 32768 * cell
    assert need == gib(8.0)
    kv_at_09 = budget.vllm_kv_budget_bytes(total, 0.9, non_kv)
    assert kv_at_09 == pytest.approx(gib(7.971), abs=gib(0.001))  # 0.9*79.19 - 63.30
    assert kv_at_09 < need  # the 32k request does not fit
    # vLLM's own estimate of the longest context: 7.971 GiB / 256 KiB = 32650 -> whole 16-token blocks
    assert budget.vllm_max_model_len(kv_at_09, cell) == 32640
    fix = budget.vllm_util_for_kv(total, non_kv, need)
    # (63.30 + 8.00 + 0.50) / 79.19 = 0.9067 -> 0.91
    assert fix.value == 0.91
    assert budget.vllm_kv_budget_bytes(total, fix.value, non_kv) >= need


def test_vllm_max_safe_util_from_free_memory() -> None:
    # Free 58.61 of 79.19 GiB: (58.61 - 0.5) / 79.19 = 0.7338 -> 0.73
    assert budget.vllm_max_safe_util(gib(58.61), gib(79.19)).value == 0.73


def test_vllm_lowered_util_for_runtime_shortfall() -> None:
    # requested 2.62, free 1.41 -> shortfall 1.21 + margin 2.62 = 3.83 GiB; 0.95 - 3.83/79.19 = 0.9016 -> 0.90
    lowered = budget.vllm_lowered_util(0.95, gib(79.19), gib(1.21), gib(2.62))
    assert lowered.value == 0.9


def test_kv_floor_one_request_else_1_gib() -> None:
    """The one "one request's KV, else 1 GiB" rule, in SGLang's and vLLM's wording."""
    d = budget.kv_floor(32768, 98304)
    assert d.value == 32768 * 98304
    assert [(s.step, s.formula) for s in d.steps] == [("one max-length request's KV", "context_len 32768 * 98304 bytes/token")]
    for ctx, cell in ((None, 98304), (32768, None), (0, 98304)):
        assumed = budget.kv_floor(ctx, cell)
        assert assumed.value == budget.DEFAULT_KV_FLOOR_BYTES == GIB
        assert assumed.steps[0].step == "one request's KV (assumed)"
    engine = budget.kv_floor(32768, 98304, engine_bytes=5 * GIB, system="vllm")
    assert engine.value == 5 * GIB and engine.steps[0].step == "KV for one max-length request (vLLM's own figure)"
    assert budget.kv_floor(4096, 131072, system="vllm").steps[0].formula == "4096 tokens * 131072 bytes/token"
    assert budget.kv_floor(None, None, system="vllm").steps[0].formula == "1 GiB: the log gives no per-token KV size"


def test_halved_batch_size_is_a_multiple_of_8_from_16() -> None:
    assert [budget.halved_batch_size(n) for n in (512, 160, 100, 24, 16, 15, 8, 2, 1)] == [256, 80, 48, 8, 8, 7, 4, 1, 1]


def test_context_and_reserve_constants_live_in_budget() -> None:
    from oomdoctor.commands import plan

    assert budget.CUDA_CONTEXT_BYTES == 600 * MIB and budget.NCCL_BYTES == 512 * MIB
    assert not hasattr(plan, "CONTEXT_BYTES") and not hasattr(plan, "NCCL_BYTES")
    # The least SGLang reserve below 60 GiB is the smaller of its two eras' formulas, the same ones its
    # auto-tune applies: on a 24 GiB card at TP=1 Era B's tier gives 2.9 GiB, the current era 6.4 GiB.
    era_b = budget.sglang_autotune_mfs(24 * GIB, era="B")
    assert era_b.steps[1].value == pytest.approx((2.8 + 0.1) * 1024)
    assert budget.sglang_min_activation_reserve_bytes(24 * GIB).value == round(era_b.steps[1].value * MIB)
    big = budget.sglang_autotune_mfs(80 * GIB, chunked_prefill_size=2048, cuda_graph_max_bs=8)
    assert [s.step for s in big.steps][-2] == "big-GPU floor (MiB)" and big.steps[-2].formula == "max(reserve, 10*1024) on cards over 60 GiB"


def test_fact_arithmetic_keeps_the_raw_figure_in_its_step() -> None:
    # Differences that cannot be negative report 0 as the value and the raw figure in the working.
    short = oom_arithmetic.shortfall_bytes(gib(1), gib(3))
    assert short.value == 0 and short.steps[0].value == -gib(2) and short.steps[0].formula == "requested - free"
    assert oom_arithmetic.shortfall_bytes(gib(3), gib(1)).value == gib(2)
    foreign = log_figures.sglang_startup_foreign_bytes(gib(80), gib(70), gib(1))
    assert foreign.value == gib(9) - budget.CUDA_CONTEXT_BYTES
    assert foreign.steps[0].formula == "capacity 80.00 - pre 70.00 - init 1.00 - context 0.59 GiB"
    assert log_figures.sglang_startup_foreign_bytes(gib(80), gib(79.5), 0).value == 0


def test_sglang_pre_and_weights_from_the_load_lines() -> None:
    pre = log_figures.sglang_pre_bytes_from_load_end(gib(18), gib(60))
    assert pre.value == gib(78) and pre.steps[0].formula == "avail mem + mem usage"
    weights = log_figures.sglang_weights_derivation(gib(78), gib(18))
    assert weights.value == gib(60) == budget.sglang_weights_bytes(gib(78), gib(18))
    assert weights.steps[0].formula == "78.00 GiB - 18.00 GiB"


def test_allocator_message_arithmetic() -> None:
    assert oom_arithmetic.reclaimable_bytes(gib(1), gib(2)) == gib(3)
    # Without "this process has X": capacity - free - PyTorch's reserved memory, above 4 GiB + 5% is another tenant.
    unaccounted, raw, threshold = oom_arithmetic.unaccounted_derivation(gib(80), gib(1), gib(60), gib(2), None)
    assert raw == unaccounted.value == gib(17) and threshold == oom_arithmetic.NON_PYTORCH_OVERHEAD_MAX_BYTES + int(gib(80) * 0.05)
    # With it: capacity - free - this process, over 2 GiB; a negative figure is reported as 0.
    unaccounted, raw, threshold = oom_arithmetic.unaccounted_derivation(gib(80), gib(1), None, None, gib(80))
    assert (unaccounted.value, raw, threshold) == (0, -gib(1), oom_arithmetic.OTHERS_WITH_SELF_FIGURE_MIN_BYTES)
    assert log_figures.unbalanced_gap_bytes(gib(10), gib(4)) == gib(6)


def test_process_sums_count_unknown_sizes_as_zero() -> None:
    assert log_figures.processes_bytes([gib(1), None, gib(2)]) == gib(3)
    assert log_figures.processes_bytes([]) == 0
    assert log_figures.nvml_other_used_bytes(gib(70), [gib(60), None]) == gib(10)


def test_vllm_profile_arithmetic() -> None:
    total = log_figures.vllm_total_bytes_from_budget(gib(72), 0.9)
    assert total.value == gib(80) and total.steps[0].formula == "requested u*total / u"
    assert log_figures.vllm_non_kv_bytes_from_profile(gib(15), gib(4), gib(1)).value == gib(20)
    non_kv = log_figures.vllm_non_kv_bytes_from_kv(gib(80), 0.9, gib(52))
    assert non_kv.value == gib(20) and non_kv.steps[0].formula == "u*total - available KV"
    assert log_figures.vllm_startup_free_deficit_bytes(gib(72), gib(70)).value == gib(2)
    assert log_figures.kv_cell_bytes(gib(1), 8192) == 131072

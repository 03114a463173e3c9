"""A class that rests on the assumed 1 GiB of one request's KV is not asserted: the window the log proves is kept.

When a log gives no per-token KV size, the budget assumes 1 GiB for one request. If the weights fit
without it and not with it, "weights don't fit" (shard) and "raise the fraction" both remain possible:
the verdict is the engine's startup KV failure, capped at 0.60, with the largest fraction the GPU
allows and the per-token KV size named as what decides it.
"""

from __future__ import annotations

from pathlib import Path

from oomdoctor.api import diagnose

from conftest import FIXTURES


def _diag(rel: str):
    return diagnose([str(FIXTURES / rel)])


def test_sglang_window_open_only_without_the_assumed_kv() -> None:
    d = _diag("sglang-startup-kv/pos_kv_size_unknown_narrow_window.log")
    f = d.facts
    assert d.verdict_class == "startup_kv" and d.verdict_confidence == 0.60
    assert f.get("weights_fit_undecided") is True and "weights_fit" not in f.values
    assert any("assumed 1 GiB" in c.factor and "weights_dont_fit" in c.factor for c in d.confidence_factors)
    (rec,) = d.findings[0].recommendations
    # Without KV: [19.60 / 23.00, 1 - 2.90 / 23.00] = [0.8522, 0.8739]; the top, to 0.01.
    assert f.get("min_viable_mfs") == 0.8522 and f.get("max_safe_mfs") == 0.8739
    assert rec.flag == "--mem-fraction-static" and rec.value == 0.87
    assert "per-token KV size" in rec.why


def test_weights_that_leave_no_window_even_without_kv_stay_decided() -> None:
    d = _diag("sglang-weights-dont-fit/pos_70b_single_h100.log")
    assert d.verdict_class == "weights_dont_fit" and d.facts.get("weights_fit") is False
    assert not d.facts.get("weights_fit_undecided")


def test_vllm_paste_cut_after_zero_blocks_is_a_startup_kv_failure_at_a_capped_confidence() -> None:
    d = _diag("vllm-startup-kv/pos_real_vllm_13882_zero_blocks_cut.log")
    f = d.facts
    assert d.verdict_class == "startup_kv" and d.evidence.status == "incomplete"
    assert d.verdict_confidence == 0.60 and f.get("weights_fit_undecided") is True
    # Non-KV 6.65 GiB of 8.00 GiB: u >= (6.65 + 0.50 margin) / 8 = 0.894 without KV; 0.95 is the ceiling.
    assert f.get("min_viable_util") == 0.9 and f.get("max_safe_util") == 0.95
    rec = d.findings[0].recommendations[0]
    assert (rec.flag, rec.direction, rec.value) == ("--gpu-memory-utilization", "raise", 0.95)


def test_zero_gpu_blocks_alone_imply_the_failure(tmp_path: Path) -> None:
    log = tmp_path / "v0.log"
    log.write_text(
        "INFO 05-09 00:40:35 model_runner.py:175] Loading model weights took 13.4966 GB\n"
        "INFO 05-09 00:40:38 gpu_executor.py:114] # GPU blocks: 0, # CPU blocks: 2048\n"
    )
    d = diagnose([str(log)])
    assert d.verdict_class == "startup_kv" and d.findings[0].evidence[0].line == 2
    log.write_text(log.read_text().replace("# GPU blocks: 0,", "# GPU blocks: 12,"))
    assert diagnose([str(log)]).verdict_class == "none"


# The engines' startup errors as their format strings print them (log_formats.md §1.4, §2.4), alone.
_SGLANG_BARE = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n"
_VLLM_BARE = "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.\n"
_VLLM_ONE_REQUEST = (
    "ValueError: To serve at least one request with the models's max seq len (32768), (4.00 GiB KV cache is needed, which is larger than "
    "the available KV cache memory (2.15 GiB). Based on the available memory, the estimated maximum model length is 17600. Try increasing "
    "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.\n"
)


def test_a_bare_startup_error_leaves_the_weights_standing(tmp_path: Path) -> None:
    # No weights size and no memory figures: whether any fraction gives the KV cache room is unknown.
    for text in (_SGLANG_BARE, _VLLM_BARE):
        log = tmp_path / "bare.log"
        log.write_text(text)
        d = diagnose([str(log)])
        assert d.verdict_class == "startup_kv" and d.verdict_confidence == 0.60, text
        assert any("neither the weights' size" in c.factor and "weights_dont_fit" in c.factor for c in d.confidence_factors)


def test_a_positive_kv_budget_or_the_weights_lines_decide_it(tmp_path: Path) -> None:
    # vLLM's own figure: 2.15 GiB of KV room at this fraction, so the weights fit in it.
    log = tmp_path / "one_request.log"
    log.write_text(_VLLM_ONE_REQUEST)
    d = diagnose([str(log)])
    assert d.verdict_class == "startup_kv" and d.verdict_confidence >= 0.90
    assert not any("neither the weights' size" in c.factor for c in d.confidence_factors)
    # The README's example: SGLang's lines before and after loading give the weights (the window is computed).
    d = _diag("sglang-startup-kv/pos_h100_qwen3_omni_g2.log")
    assert d.verdict_class == "startup_kv" and d.verdict_confidence == 0.95

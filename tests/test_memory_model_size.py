"""Expected weights from a model's name and launch arguments, pinned with hand-computed numbers."""

from __future__ import annotations

import pytest

from oomdoctor.base.units import GIB
from oomdoctor.memory.model_size import params_of, prior_of, weights_per_rank


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("Qwen/Qwen2.5-72B-Instruct", 72e9),
        ("google/gemma-3-12b-it", 12e9),
        ("meta-llama/Llama-3.1-8B-Instruct", 8e9),  # "3.1" is the version, not the size
        ("/data/models/Qwen2.5-0.5B", 0.5e9),
        ("Qwen/Qwen3-30B-A3B", 30e9),  # a mixture of experts: its total, not its 3B active
        ("Qwen/Qwen3-235B-A22B-FP8", 235e9),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", 56e9),  # experts x size: an upper bound
        ("HuggingFaceTB/SmolLM-135M", 135e6),
        ("deepseek-ai/DeepSeek-R1", None),  # no count in the name: no guess
        ("microsoft/Phi-3-mini-4k-instruct", None),  # 4k is the context
    ],
)
def test_parameters_from_the_name(name: str, params: float | None) -> None:
    assert params_of(name)[0] == params


def test_storage_from_the_arguments_and_the_name() -> None:
    assert prior_of("Qwen/Qwen2.5-72B-Instruct", "bfloat16").bytes_per_param == 2.0
    assert prior_of("Qwen/Qwen2.5-72B-Instruct", None, "fp8").bytes_per_param == 1.0
    assert prior_of("Qwen/Qwen2.5-7B-Instruct-AWQ").bytes_per_param == 0.5
    assert prior_of("openai/gpt-oss-120b", None, "mxfp4").bytes_per_param == 0.5
    auto = prior_of("Qwen/Qwen2.5-72B-Instruct", "auto")
    assert (auto.bytes_per_param, auto.storage_known) == (2.0, False)
    assert prior_of("Qwen/Qwen2.5-VL-7B-Instruct").multimodal and not prior_of("Qwen/Qwen2.5-7B-Instruct").multimodal


def test_weights_per_rank_and_its_range() -> None:
    # 72e9 parameters x 2 bytes / TP 2 = 72e9 bytes = 67.06 GiB; the name's rounding gives 0.9-1.1x.
    value, low, high = weights_per_rank(prior_of("Qwen/Qwen2.5-72B-Instruct", "bfloat16"), tp=2)
    assert value.value == 72_000_000_000 and round(value.value / GIB, 2) == 67.06
    assert (low, high) == (64_800_000_000, 79_200_000_000)
    assert [s.step for s in value.steps] == ["parameters", "bytes per parameter", "ranks sharing the weights", "weights per rank", "range"]
    # AWQ: 0.5 bytes x 1.2 for scales and 16-bit layers; the low end drops the overhead.
    awq, awq_low, _ = weights_per_rank(prior_of("Qwen2.5-7B-Instruct-AWQ"))
    assert awq.value == 4_200_000_000 and awq_low == 3_150_000_000
    # dtype auto: 2 bytes assumed, but the low end allows an FP8 checkpoint that does not say so.
    _, auto_low, _ = weights_per_rank(prior_of("meta-llama/Llama-3.1-70B-Instruct", "auto"))
    assert auto_low == 63_000_000_000
    assert weights_per_rank(prior_of("deepseek-ai/DeepSeek-R1")) is None

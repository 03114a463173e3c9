"""`oomdoctor plan`'s contract: the exit code follows the recommendation, the JSON is versioned, and the
GPU table gives each card's total as CUDA reports it (what the engines size their budgets from)."""

from __future__ import annotations

import pytest

from oomdoctor.base.units import GIB, MIB, gib_to_bytes
from oomdoctor.memory.gpus import find_gpu, gpu_table

from conftest import FIXTURES

OMNI = FIXTURES / "plan" / "qwen3-omni-30b-a3b"
PLAN = ("plan", "--model", str(OMNI), "--gpu", "H100-80GB", "--context-len", "32768")


def test_a_pinned_value_that_does_not_fit_is_reported_and_the_exit_code_follows_the_recommendation(run_cli) -> None:
    res = run_cli(*PLAN, "--at", "0.7", "--format", "json")
    data = res.json
    assert data["feasible"] is True and data["recommended"] == 0.85
    assert data["at"]["value"] == 0.7 and data["at"]["feasible"] is False and data["at"]["kv_bytes"] < 0
    assert res.code == 0
    text = run_cli(*PLAN, "--at", "0.7")
    assert text.code == 0 and "at --mem-fraction-static 0.7: KV -4.98 GiB (0 tokens) -> INFEASIBLE" in text.out
    # A model that fits at no value is still exit 3, whatever --at says.
    tight = run_cli("plan", "--model", str(FIXTURES / "plan" / "llama-3.1-8b"), "--gpu", "A10", "--context-len", "131072", "--system", "vllm", "--at", "0.5")
    assert tight.code == 3


def test_plan_json_carries_its_schema_version_and_the_tool(run_cli) -> None:
    data = run_cli(*PLAN, "--format", "json").json
    assert data["schema_version"] == 1
    assert data["tool"]["name"] == "oomdoctor" and data["tool"]["version"]
    assert data["capacity_source"] == "log" and "H100" in data["capacity_note"]
    # pre comes from CUDA's 79.19 GiB; SGLang's own default from nvidia-smi's 81559 MiB, as SGLang reads it.
    assert data["capacity_bytes"] == gib_to_bytes(79.19) and data["pre_bytes"] == gib_to_bytes(79.19) - 600 * MIB
    assert data["default"] == 0.835
    custom = run_cli("plan", "--model", str(OMNI), "--gpu-mem-gib", "96", "--format", "json").json
    assert custom["schema_version"] == 1 and custom["capacity_source"] == "given"


@pytest.mark.parametrize(
    ("gpu", "fixture"),
    [
        # Real CUDA figures of these cards: an H100 80GB HBM3 OOM message (79.19 GiB) and this project's H200 (139.80 GiB).
        ("H100-80GB", "vllm-cuda-graph-oom/pos_v1_capture_frames.log"),
        ("H200", "gpu-recorded/oom_too_big.log"),
    ],
)
def test_a_card_s_capacity_is_the_total_its_engines_report(gpu: str, fixture: str, run_cli) -> None:
    card = find_gpu(gpu)
    seen = run_cli("diagnose", str(FIXTURES / fixture), "--format", "json").json["budget"]["capacity_bytes"]
    # Both come from a figure printed with two decimals: equal to within half of 0.01 GiB.
    assert abs(card.capacity_bytes - seen) <= 0.005 * GIB
    assert card.smi_total_bytes is not None and card.smi_total_bytes - card.capacity_bytes > 0.4 * GIB


def test_every_card_is_below_its_nvidia_smi_total_and_says_where_its_figure_is_from() -> None:
    for card in gpu_table():
        assert card.smi_total_bytes is not None
        reserved = card.smi_total_bytes - card.capacity_bytes
        assert 0 <= reserved < 1 * GIB, (card.name, reserved / MIB)
        assert card.capacity_source in ("log", "measured", "estimated") and card.capacity_note, card.name


def test_the_assumed_card_for_a_free_reading_is_a_cuda_total_above_it() -> None:
    from oomdoctor.memory.gpus import smallest_card_holding

    # An empty H100 80GB: CUDA's total 79.19 GiB, about 0.3 GiB of context before the first reading.
    label, total = smallest_card_holding(int(78.9 * GIB)) or ("", 0)
    assert label.startswith("80 GB class") and total == gib_to_bytes(79.19)

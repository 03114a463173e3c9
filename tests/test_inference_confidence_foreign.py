"""foreign_process without a phase: freeing the others' memory is enough only if the process's own need
fits the card, which nothing but the phase shows (a model still loading may need more than the card)."""

from __future__ import annotations

import pytest

from oomdoctor.inference import confidence
from oomdoctor.inference.confidence import Evidence

from conftest import FIXTURES

FOREIGN_FACTS = {"foreign_process_bytes", "foreign_process_count", "shortfall_bytes", "process_identity_known"}


def _evidence(phase_source: str) -> Evidence:
    return Evidence(phase_source=phase_source, message_complete=True, system_fallback=False, status="complete")


def test_no_phase_costs_foreign_process_what_it_costs_a_phase_class() -> None:
    value, factors = confidence.adjust(0.85, FOREIGN_FACTS, _evidence("none"), "foreign_process")
    assert value == 0.65
    assert [f.delta for f in factors] == [confidence.PHASE_FROM_NOTHING]
    assert "fits once the others are gone" in factors[0].factor


@pytest.mark.parametrize("source", ["frames", "context", "engine"])
def test_a_known_phase_costs_it_nothing(source: str) -> None:
    assert confidence.adjust(0.85, FOREIGN_FACTS, _evidence(source), "foreign_process") == (0.85, [])


def test_other_classes_from_the_same_numbers_are_unchanged() -> None:
    assert confidence.adjust(0.8, {"reserved_unallocated_bytes", "shortfall_bytes"}, _evidence("none"), "fragmentation") == (0.8, [])


def test_a_72b_model_loading_beside_other_processes_is_not_a_confident_foreign_process(run_cli) -> None:
    # QwenLM/Qwen3#187: the one-line message lists 49 GiB of other processes, but the server (28.8 GiB
    # allocated and still loading a 72B model on one 80 GiB card) would not fit without them either.
    res = run_cli("diagnose", str(FIXTURES / "field" / "vllm-QwenLM-Qwen3-187.log"), "--format", "json")
    v = res.json["verdict"]
    assert v["class"] == "foreign_process" and v["phase"]["source"] == "none"
    assert v["confidence"] == 0.6  # 0.85, fragment -0.05, no phase -0.20
    assert any(f["delta"] == -0.2 and "fits once the others are gone" in f["factor"] for f in v["confidence_factors"])


def test_the_same_numbers_while_serving_stay_confident(run_cli) -> None:
    res = run_cli("diagnose", str(FIXTURES / "oom-foreign-process" / "pos_vllm_v0_runtime.log"), "--format", "json")
    v = res.json["verdict"]
    assert (v["class"], v["phase"]["name"], v["confidence"]) == ("foreign_process", "serving", 0.8)

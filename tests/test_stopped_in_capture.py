"""A log that stops inside CUDA graph capture, never ready and with no error, is not "nothing is wrong"."""

from __future__ import annotations

from oomdoctor import confidence
from oomdoctor.api import diagnose

from conftest import FIXTURES


def test_stopping_inside_capture_is_a_low_confidence_hypothesis() -> None:
    d = diagnose([str(FIXTURES / "incomplete/pos_real_vllm_7593_stops_in_capture.log")])
    assert d.verdict_class == "cuda_graph" and d.inconclusive
    # Below a cut record's hypothesis (0.45): a cut record shows a crash began, a stop does not.
    assert d.verdict_confidence == round(confidence.HYPOTHESIS_CAP - 0.15, 2) == 0.30
    assert d.evidence.status == "incomplete" and "before the server was ready" in d.evidence.reason
    assert "If it is still starting, there is nothing to diagnose yet" in d.summary
    assert d.findings[0].recommendations == [] and d.findings[0].extra["hypothesis"] is True


def test_a_log_that_stops_after_the_capture_finished_is_none() -> None:
    d = diagnose([str(FIXTURES / "incomplete/neg_capture_finished_then_stops_2024.log")])
    assert d.verdict_class == "none" and d.verdict_confidence == 0.6 and not d.inconclusive
    assert d.phase.name == "startup"


def test_serving_after_the_capture_is_none(tmp_path) -> None:
    log = tmp_path / "served.log"
    text = (FIXTURES / "incomplete/neg_capture_finished_then_stops_2024.log").read_text()
    log.write_text(text.replace("Graph capturing finished in 19 secs.\n", "Graph capturing finished in 19 secs.\nINFO:     Application startup complete.\n"))
    assert diagnose([str(log)]).verdict_class == "none"
    # Drop the finish line: stopping inside the capture again.
    log.write_text("".join(line for line in text.splitlines(keepends=True) if "finished" not in line))
    assert diagnose([str(log)]).verdict_class == "cuda_graph"

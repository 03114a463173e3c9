"""A log that stops inside CUDA graph capture, never ready and with no error, is not "nothing is wrong"."""

from __future__ import annotations

from oomdoctor.api import diagnose
from oomdoctor.inference import confidence

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


def test_a_named_cuda_error_during_capture_is_not_an_oom_hypothesis(tmp_path) -> None:
    """sglang#14700: capture begins, then FlashMLA's C++ check prints a CUDA error with no traceback."""
    log = tmp_path / "capture.log"
    begin = "[2025-12-09 05:12:24 DP0 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=7.06 GB\n"
    error = "CUDA error (_deps/repo-flashmla-src/csrc/smxx/get_mla_metadata.cu:93): no kernel image is available for execution on the device\n"
    log.write_text(begin + error + begin.replace("DP0 TP0", "DP1 TP1"))
    d = diagnose([str(log)])
    assert d.verdict_class == "none" and d.verdict_confidence == 0.9 and "no kernel image" in d.summary
    # Without the error line the log just stops inside the capture.
    log.write_text(begin)
    assert diagnose([str(log)]).verdict_class == "cuda_graph"
    # An out-of-memory CUDA error is the OOM itself, never a "named non-OOM error".
    log.write_text(begin + "RuntimeError: CUDA error: out of memory\n")
    assert diagnose([str(log)]).verdict_class == "cuda_graph"
    log.write_text(begin + "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`\n")
    assert diagnose([str(log)]).verdict_class != "none"

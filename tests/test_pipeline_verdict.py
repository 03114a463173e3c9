"""The verdict's wording and confidence when no OOM is evident (pipeline/verdict.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from oomdoctor.api import diagnose

TRACEBACK = 'Traceback (most recent call last):\n  File "/app/engine/cache.py", line 88, in plan\n    assert total <= budget_bytes, (\n'
SHORT = ("none", 0.5, "memory budget was short")
OTHER = ("none", 0.9, "that is not an out-of-memory error")


@pytest.mark.parametrize(
    ("exception", "expected"),
    [
        # FreeToken's own check of its GPU cache budget (FlashML-org/FreeToken#397, fresh batch 2026-12-03j): an OOM in
        # the program's words, so not confidently "no OOM".
        (
            "AssertionError: cache budget too small: minimum plan (moe=576 slots, kv=128 pages) needs 8261206016 B > budget 6734265712 B "
            "(raise memory_ratio, lower kv_reserve_tokens, or free GPU memory)",
            SHORT,
        ),
        ("ValueError: not enough GPU memory for the draft model's buffers", SHORT),
        ("RuntimeError: the model requires more memory than the device budget allows", SHORT),
        ("ValueError: the draft model needs 4.5 GiB, more than the 2.0 GiB available", SHORT),
        # Near misses: other exceptions end the run without an OOM, at the usual confidence.
        ("ValueError: max_model_len 32768 is larger than the model limit 8192", OTHER),
        ("ValueError: the planner needs 3 retries > budget", OTHER),
        ("RuntimeError: CUDA error: an illegal memory access was encountered", OTHER),
        ("OSError: [Errno 28] No space left on device: shared memory segment", OTHER),
    ],
)
def test_an_exception_that_says_a_memory_budget_was_short_is_not_confidently_no_oom(exception: str, expected: tuple, tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text(TRACEBACK + exception + "\n")
    d = diagnose([str(log)])
    klass, confidence, words = expected
    assert (d.verdict_class, d.verdict_confidence) == (klass, confidence)
    assert words in d.summary and exception.split(": ", 1)[1][:40] in d.summary


_SHUTDOWN = "INFO:     Shutting down\nINFO:     Waiting for application shutdown.\nINFO:     Application shutdown complete.\nINFO:     Finished server process [21893]\n"


@pytest.mark.parametrize(
    ("before", "expected"),
    [
        # uvicorn shuts down after the engine died: an exception line (no traceback in the paste) just above it is how
        # the run ended, not a clean end (FreeToken#397's relay copied only the exception line).
        (
            "[03:13:05] stderr/INFO  AssertionError: cache budget too small: minimum plan needs 8261206016 B > budget 6734265712 B\n"
            "[03:13:15] stdout/ERROR  Backend worker is gone and cannot be restarted; stopping the API server\n",
            SHORT,
        ),
        ("RuntimeError: NCCL communicator was aborted on rank 3\n", OTHER),
    ],
)
def test_a_shutdown_just_after_an_exception_line_is_that_exception_not_a_clean_end(before: str, expected: tuple, tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text(before + _SHUTDOWN)
    d = diagnose([str(log)])
    klass, confidence, words = expected
    assert (d.verdict_class, d.verdict_confidence) == (klass, confidence) and words in d.summary
    assert "shut down cleanly" not in d.summary


def test_a_shutdown_long_after_an_error_or_after_a_warning_is_a_clean_end(tmp_path: Path) -> None:
    """Near misses: an exception line more than a screenful above the shutdown, and a warning, leave the end clean."""
    far = tmp_path / "far.log"
    far.write_text("ValueError: bad request body\n" + "".join(f'INFO:     127.0.0.1:5{i:04d} - "POST /generate HTTP/1.1" 200 OK\n' for i in range(20)) + _SHUTDOWN)
    warned = tmp_path / "warned.log"
    warned.write_text("UserWarning: resource_tracker: There appear to be 3 leaked semaphore objects\n" + _SHUTDOWN)
    for log in (far, warned):
        d = diagnose([str(log)])
        assert (d.verdict_class, d.verdict_confidence) == ("none", 0.9) and "shut down cleanly" in d.summary, (log.name, d.summary)

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

"""A chained traceback: the exception before "During handling of the above exception" is the failure's cause.

Python prints a blank line, the chain header and a blank line between the two parts; PyTorch's CUDA errors add
three lines to their message before that. The record keeps the first exception across them, so a paste cut
inside the second part still names its cause (sglang#7918: a capture-time CUDA error under SGLang's capture
handler, read before as a cut graph capture, a cuda_graph hypothesis).
"""

from __future__ import annotations

from pathlib import Path

from oomdoctor.api import diagnose
from oomdoctor.base.evidence import Line, LineRef
from oomdoctor.evidence.parsers import records as rc

_FIRST = """Traceback (most recent call last):
  File "/opt/conda/lib/python3.10/site-packages/sglang/srt/layers/moe/topk.py", line 322, in biased_grouped_topk_gpu
    topk_weights, topk_ids = moe_fused_gate(
  File "/opt/conda/lib/python3.10/site-packages/torch/_ops.py", line 756, in __call__
    return self._op(*args, **kwargs)
RuntimeError: CUDA error: operation not permitted when stream is capturing
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1
Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.


During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/opt/conda/lib/python3.10/site-packages/sglang/srt/model_executor/cuda_graph_runner.py", line 336, in __init__
    self.capture()
  File "/opt/conda/lib/python3.10/site-packages/sglang/srt/model_executor/cuda_graph_runner.py", line 436, in capture
"""


def _records(text: str) -> list:
    parser, out = rc.RecordParser(), []
    for i, raw in enumerate(text.splitlines(), 1):
        out += parser.feed(Line(LineRef("x", i, text=raw), raw))
    out += parser.finish()
    return [e for e in out if e.kind == rc.KIND_RECORD]


def test_the_cause_is_kept_across_a_multi_line_message_and_the_chain_header() -> None:
    (rec,) = _records(_FIRST)
    assert rec.get("complete") is False and rec.get("chain") == (("RuntimeError", "CUDA error: operation not permitted when stream is capturing"),)


def test_a_log_line_after_the_exception_ends_the_record() -> None:
    """Near miss: a stamped log line is not more of the message; the second traceback is a record of its own."""
    text = _FIRST.replace("CUDA kernel errors might be", "[2025-06-01 10:00:00 TP0] Scheduler hit an exception\nCUDA kernel errors might be", 1)
    recs = _records(text)
    assert [r.get("complete") for r in recs][:1] == [True] and recs[-1].get("chain") == ()


def test_a_cut_chain_with_a_named_cause_is_no_oom_and_an_oom_cause_stays_one(tmp_path: Path) -> None:
    log = tmp_path / "capture.log"
    log.write_text(_FIRST)
    d = diagnose([str(log)])
    assert (d.verdict_class, d.verdict_confidence, d.inconclusive) == ("none", 0.35, True)
    assert "raised while handling RuntimeError: CUDA error: operation not permitted when stream is capturing" in d.summary
    oom = tmp_path / "capture_oom.log"
    oom.write_text(_FIRST.replace("CUDA error: operation not permitted when stream is capturing", "CUDA error: out of memory"))
    assert diagnose([str(oom)]).verdict_class != "none"

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


def _of(tmp_path: Path, name: str, text: str):
    log = tmp_path / name
    log.write_text(text)
    return diagnose([str(log)])


def test_a_cut_chain_with_a_named_cause_is_no_oom_and_an_oom_cause_stays_one(tmp_path: Path) -> None:
    d = _of(tmp_path, "capture.log", _FIRST)
    assert (d.verdict_class, d.verdict_confidence, d.inconclusive) == ("none", 0.35, True)
    assert "was raised while handling RuntimeError at " in d.summary and "CUDA error: operation not permitted when stream is capturing" in d.summary
    oom = _FIRST.replace("CUDA error: operation not permitted when stream is capturing", "CUDA error: out of memory")
    assert _of(tmp_path, "capture_oom.log", oom).verdict_class != "none"


_CAPTURED = """(EngineCore pid=3677484) INFO 09-10 09:37:40 [gpu_model_runner.py:3480] Graph capturing finished in 6 secs, took 0.62 GiB
Capturing CUDA graphs (FULL): 100%|██████████| 2/2 [00:00<00:00, 6.11it/s]
Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:164 'invalid argument'
(EngineCore pid=3677484) ERROR 09-10 09:37:41 [multiproc_executor.py:314] Worker proc VllmWorker-0 died unexpectedly (exit code: None), shutting down executor.
"""


def test_vllms_cudacheck_is_a_named_error_and_the_worker_notice_after_it_has_its_cause(tmp_path: Path) -> None:
    """vLLM's CUDACHECK in csrc/custom_all_reduce.cuh prints "Failed: Cuda error FILE:LINE 'message'" and exits; the
    executor's "died unexpectedly" after it is that failure, not one whose cause is cut (read before as a cut graph
    capture). An 'out of memory' one is the device's OOM; the notice alone still stops before its cause."""
    d = _of(tmp_path, "ar.log", _CAPTURED)
    assert (d.verdict_class, d.verdict_confidence, d.inconclusive) == ("none", 0.9, False)
    assert "CUDA error" in d.summary and "invalid argument" in d.summary
    assert _of(tmp_path, "ar_oom.log", _CAPTURED.replace("'invalid argument'", "'out of memory'")).verdict_class != "none"
    alone = _CAPTURED.replace("Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:164 'invalid argument'\n", "")
    assert _of(tmp_path, "notice.log", alone).evidence.status == "incomplete"


_REQUEST = """(APIServer pid=1) ERROR 10-14 16:59:25 [serving_chat.py:251] Traceback (most recent call last):
(APIServer pid=1) ERROR 10-14 16:59:25 [serving_chat.py:251]   File "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/openai/serving_engine.py", line 1012, in _validate_input
(APIServer pid=1) ERROR 10-14 16:59:25 [serving_chat.py:251]     raise ValueError(
(APIServer pid=1) ERROR 10-14 16:59:25 [serving_chat.py:251] ValueError: This model's maximum context length is 40000 tokens. However, your request has 89461 input tokens.
{GAP}(APIServer pid=1) ERROR 10-14 16:59:26 [serving_chat.py:251] Error in preprocessing prompt inputs
(APIServer pid=1) ERROR 10-14 16:59:26 [serving_chat.py:251] Traceback (most recent call last):
(APIServer pid=1) ERROR 10-14 16:59:26 [serving_chat.py:251]   File "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/openai/serving_chat.py", line 236, in create_chat_completion
"""


def test_a_cut_traceback_just_after_a_named_error_is_that_errors_report(tmp_path: Path) -> None:
    """A logger that prefixes every line drops Python's chain header: a whole non-OOM exception ending a few lines
    above the cut traceback is its cause (vllm#27073's request validation error). Near miss: far above, it is not."""
    log = tmp_path / "req.log"
    log.write_text(_REQUEST.replace("{GAP}", ""))
    d = diagnose([str(log)])
    assert (d.verdict_class, d.verdict_confidence) == ("none", 0.35)
    assert "comes just after ValueError" in d.summary and "maximum context length is 40000 tokens" in d.summary
    far = tmp_path / "far.log"
    far.write_text(_REQUEST.replace("{GAP}", "".join(f"(APIServer pid=1) INFO 10-14 16:59:2{i % 10} [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s\n" for i in range(8))))
    assert "comes just after" not in diagnose([str(far)]).summary


def test_a_handled_error_of_another_writer_or_file_is_not_the_cut_tracebacks_cause(tmp_path: Path) -> None:
    """Near misses (review): the API server's handled validation error just above the engine's fatal traceback,
    and the same error at the end of another input, are not its cause: the cut record stays a hypothesis."""
    engine = (
        "(EngineCore_0 pid=210) ERROR 10-14 16:59:26 [core.py:702] EngineCore encountered a fatal error.\n"
        "(EngineCore_0 pid=210) ERROR 10-14 16:59:26 [core.py:702] Traceback (most recent call last):\n"
        '(EngineCore_0 pid=210) ERROR 10-14 16:59:26 [core.py:702]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line 1402, in execute_model\n'
    )
    mixed = tmp_path / "mixed.log"
    mixed.write_text(_REQUEST.replace("{GAP}", "").split("(APIServer pid=1) ERROR 10-14 16:59:26 [serving_chat.py:251] Error in preprocessing")[0] + engine)
    assert "comes just after" not in diagnose([str(mixed)]).summary
    first, second = tmp_path / "a.log", tmp_path / "b.log"
    first.write_text(_REQUEST.replace("{GAP}", "").split("(APIServer pid=1) ERROR 10-14 16:59:26 [serving_chat.py:251] Error in preprocessing")[0])
    second.write_text(engine)
    assert "comes just after" not in diagnose([str(first), str(second)]).summary


def test_rays_wrapper_naming_its_cause_ends_the_record() -> None:
    """"ray.exceptions.RayTaskError(OutOfMemoryError): ray::f() (pid=N)" is the record's exception line (the cause's
    class in parentheses), so the remote traceback Ray prints after it is a record of its own."""
    text = (
        '  File "/usr/local/lib/python3.12/dist-packages/ray/_private/worker.py", line 919, in get_objects\n'
        "    raise value.as_instanceof_cause()\n"
        "ray.exceptions.RayTaskError(OutOfMemoryError): ray::main_task() (pid=508648, ip=10.1.200.6)\n"
        '  File "/home/x/verl/trainer/main_ppo.py", line 40, in main_task\n'
    )
    first, second = _records(text)
    assert first.get("exception") == "ray.exceptions.RayTaskError(OutOfMemoryError)" and first.get("is_oom") and first.get("complete")
    assert second.get("complete") is False and second.get("frames")[-1] == ("/home/x/verl/trainer/main_ppo.py", "main_task")

"""read_events: each line only to the parsers it is for, context lines only when asked for, repeated kinds counted.

The routing is exact only if a parser that is not pending does nothing with a line that holds none of
its ANCHORS, NEEDLES or FOLDED_NEEDLES: checked here on every line of every fixture, as the scanner
gives it (anchored, context and before-failure lines alike).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from oomdoctor.base.evidence import KIND_REPEATS, Line, LineRef
from oomdoctor.evidence.parsers import pasted
from oomdoctor.evidence.parsers import records as rc
from oomdoctor.evidence.parsers import sglang as sg
from oomdoctor.evidence.parsers import torch_oom as tt
from oomdoctor.evidence.parsers import vllm as vl
from oomdoctor.input.files import InputStats
from oomdoctor.input.prefixes import split_prefix
from oomdoctor.input.scan import Reading, scan_lines
from oomdoctor.pipeline import events
from oomdoctor.pipeline.events import ANCHORS, read_events

from conftest import FIXTURES

PARSERS = (sg.SGLangParser, vl.VLLMParser, tt.TorchParser, rc.RecordParser, pasted.PastedParser)


def _fixture_lines() -> list[Line]:
    """Every line of every fixture as the scanner would give it: prefix split, the bits of its anchors."""
    out = []
    for p in sorted(FIXTURES.rglob("*")):
        if not (p.is_file() and p.suffix in (".log", ".txt", ".md")):
            continue
        for n, raw in enumerate(p.read_text(errors="replace").splitlines(), 1):
            stripped = split_prefix(raw)
            data = raw.encode()
            mask = sum(1 << i for i, a in enumerate(ANCHORS) if a in data)
            ref = LineRef("x", n, stripped.rank, raw, stripped.ts, stripped.node)
            out.append(Line(ref, stripped.msg, stripped.ts, bool(mask), stripped.system, stripped.node, mask))
    return out


@pytest.mark.parametrize("parser", PARSERS, ids=lambda p: p.__name__)
def test_an_idle_parser_does_nothing_with_a_line_not_routed_to_it(parser) -> None:
    lines = _fixture_lines()
    assert len(lines) > 3000
    routed = 0
    for line in lines:
        fresh = parser()
        if events._Route(fresh).holds(line):
            routed += 1
            continue
        assert fresh.feed(line) == [] and not fresh.pending, (parser.__name__, line.ref.text)
    assert routed > 100


def _retraction_log(path: Path, n: int, tail: str = "") -> Path:
    lines = ["[2026-03-02 10:00:00] server_args=ServerArgs(model_path='m', mem_fraction_static=0.8, tp_size=1)"]
    for i in range(n):
        lines.append(f"[2026-03-02 10:{i // 60 % 60:02d}:{i % 60:02d}] KV cache pool is full. Retract requests. #retracted_reqs: {i % 7 + 1}, #new_tokens_gained: 5")
        lines.append(f"[2026-03-02 10:{i // 60 % 60:02d}:{i % 60:02d}] Decode batch, #running-req: {i}, #token: 81316, token usage: 0.93, cuda graph: True")
        lines.append(f'[2026-03-02 10:{i // 60 % 60:02d}:{i % 60:02d}] INFO:     127.0.0.1:1 - "POST /generate HTTP/1.1" 200 OK')
    path.write_text("\n".join(lines) + "\n" + tail)
    return path


def _kept(evs: list) -> list:
    return [(e.kind, e.ref.line, e.values) for e in evs if e.kind == sg.KIND_RETRACT or (e.kind == KIND_REPEATS and e.get("kind") == sg.KIND_RETRACT)]


_OOM = (
    "[2026-03-02 11:00:00] Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2987, in run_scheduler_process\n'
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.25 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.02 GiB is free.\n"
)


@pytest.mark.parametrize("tail", ["", _OOM], ids=["end", "failure"])
def test_repeated_lines_keep_what_the_store_kept_when_every_one_was_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tail: str) -> None:
    """The first 16, the last 64 (before a failure, or at the end) and the count: the same events as reading
    every retraction; the lines after the ones counted, not read, are not read."""
    log = str(_retraction_log(tmp_path / "r.log", 500, tail))
    fast = read_events(log, InputStats(path=log))
    # Nothing repeats: every line is read (the catalogue's retraction notice would otherwise repeat in its stead).
    monkeypatch.setattr(events, "_repeating", lambda declared: {})
    slow = read_events(log, InputStats(path=log))
    assert _kept(fast) == _kept(slow)
    repeats = next(e for e in fast if e.kind == KIND_REPEATS and e.get("kind") == sg.KIND_RETRACT)
    assert repeats.get("total") == 500 and repeats.get("dropped") == 500 - 16 - 64
    # The decode lines after the retractions that were only counted gave no context events.
    def context_total(evs: list) -> int:
        return next(e.get("total") for e in evs if e.kind == KIND_REPEATS and e.get("kind") == rc.KIND_CONTEXT)

    assert context_total(fast) < context_total(slow) / 4


def test_a_held_line_is_read_in_full_while_a_parser_is_pending(tmp_path: Path) -> None:
    """While a record is open every line is read: a retraction inside a traceback is not held."""
    reading = Reading(ANCHORS, lambda: True, lambda _: False, [b"Retract requests"], keep_first=0, keep_last=2)
    chunk = b"".join(b"[2026-03-02 10:00:00] KV cache pool is full. Retract requests. #retracted_reqs: 1\nx\n" for _ in range(5))
    got = [(ln.ref.line, ln.anchored, ln.replayed) for ln in scan_lines(iter([chunk]), "x", ANCHORS, [0], (), reading)]
    assert [n for n, anchored, _ in got if anchored] == [1, 3, 5, 7, 9] and not any(r for *_, r in got)
    assert "x" in [ln.msg for ln in scan_lines(iter([chunk]), "x", ANCHORS, [0], (), reading)]


def test_context_lines_are_read_only_when_asked_for() -> None:
    chunk = b"Traceback (most recent call last):\nplain one\nplain two\nDecode batch, #running-req: 1\n"
    asked: list[bytes] = []

    def worth(line: bytes) -> bool:
        asked.append(line)
        return b"Decode batch" in line

    reading = Reading(ANCHORS, lambda: False, worth)
    got = [ln.msg for ln in scan_lines(iter([chunk]), "x", ANCHORS, [0], rc.BEFORE_ANCHORS, reading)]
    assert got == ["Traceback (most recent call last):", "Decode batch, #running-req: 1"]
    assert asked == [b"plain one", b"plain two", b"Decode batch, #running-req: 1"]
    busy = Reading(ANCHORS, lambda: True, worth)
    assert len(list(scan_lines(iter([chunk]), "x", ANCHORS, [0], rc.BEFORE_ANCHORS, busy))) == 4


def test_an_unprefixed_line_after_lines_not_read_takes_their_rank() -> None:
    """A rank the prefix of a line not read names is the rank of the unprefixed lines after it, as before."""
    chunk = (
        b"[2026-03-02 10:00:00 TP1] Capturing batches (bs=1 avail_mem=3.00 GB)\n"
        b"[2026-03-02 10:00:00 TP5] plain\n"
        b"  File \"/x.py\", line 1, in f\n"
    )
    reading = Reading(ANCHORS, lambda: False, lambda _: False)
    got = [(ln.msg, ln.ref.rank) for ln in scan_lines(iter([chunk]), "x", ANCHORS, [0], (), reading)]
    assert got[-1] == ('  File "/x.py", line 1, in f', "TP5")
    assert ("plain", "TP5") not in got


_ALLOC_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU 0 has a total capacity of 23.65 GiB of which "
    "1.06 GiB is free. Including non-PyTorch memory, this process has 22.57 GiB memory in use. Of the allocated memory 21.46 GiB "
    "is allocated by PyTorch, and 660.62 MiB is reserved by PyTorch but unallocated."
)


def _oom_kinds(evs: list) -> list:
    return [(e.kind, e.ref.line, {k: v for k, v in e.values.items()}) for e in evs if e.kind == tt.KIND_OOM]


def test_a_failure_line_repeated_word_for_word_is_read_once_and_counted(tmp_path: Path) -> None:
    """A worker stuck in a retry loop prints the same OOM line thousands of times (issue 24: 300,000 lines
    took 40 s). Each repeat, under its own timestamp, is counted on the first one, not parsed again: the
    same OOM event, its count in a repeats event, and a warning that says so. (Before: 2,000 events and
    no warning.)"""
    n = 2000
    log = tmp_path / "loop.log"
    log.write_text("".join(f"[2024-05-01 10:{i // 60 % 60:02d}:{i % 60:02d}] {_ALLOC_OOM}\n" for i in range(n)))
    stats = InputStats(path=str(log))
    evs = read_events(str(log), stats)
    ooms = [e for e in evs if e.kind == tt.KIND_OOM]
    assert len(ooms) == 1 and ooms[0].ref.line == 1 and ooms[0].get("requested_bytes") == round(1.95 * (1 << 30))
    rep = [e for e in evs if e.kind == KIND_REPEATS and e.get("kind") == tt.KIND_OOM]
    assert [(e.ref.line, e.get("dropped"), e.get("total")) for e in rep] == [(2, n - 1, n)]
    assert stats.warnings == [f"{n - 1} line(s) repeat the failure line just above them word for word: read once, counted"]
    from oomdoctor.inference.facts.common import occurrences

    assert occurrences(evs, tt.KIND_OOM) == n


@pytest.mark.parametrize(
    "between",
    ["[2024-05-01 10:00:01] Decode batch, #running-req: 3, #token: 81316, token usage: 0.93\n", ""],
    ids=["a line between", "another rank"],
)
def test_a_failure_line_not_directly_repeated_is_read_again(tmp_path: Path, between: str) -> None:
    """Near misses: the same OOM after another line, or the same words from another rank, is a failure of its own."""
    second = f"[2024-05-01 10:00:02] {_ALLOC_OOM}\n" if between else f"[2024-05-01 10:00:02] [rank1]: {_ALLOC_OOM}\n"
    log = tmp_path / "two.log"
    log.write_text(f"[2024-05-01 10:00:00] [rank0]: {_ALLOC_OOM}\n" if not between else f"[2024-05-01 10:00:00] {_ALLOC_OOM}\n")
    with log.open("a") as f:
        f.write(between + second)
    stats = InputStats(path=str(log))
    evs = read_events(str(log), stats)
    assert len([e for e in evs if e.kind == tt.KIND_OOM]) == 2
    assert not [e for e in evs if e.kind == KIND_REPEATS] and stats.warnings == []


def test_an_engine_message_inside_a_traceback_end_or_a_failure_notice_is_still_read(tmp_path: Path) -> None:
    """A record (the traceback's end) or vLLM's engine-dead notice cites the line for its shape; the catalogue still
    reads the engine's own message inside it (V0's swap-space abort, a run-time KV exhaustion: dynamo#1471, `none`
    at 0.90 before). Near miss: the notice without an engine message stays a named non-OOM error."""
    from oomdoctor.api import diagnose

    head = (
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.12/site-packages/vllm/entrypoints/openai/serving_chat.py", line 503, in chat_completion_stream_generator\n'
        "    async for res in result_generator:\n"
        "ValueError: a python exception was caught while processing the async generator: MQEngineDeadError: Engine loop is not running. "
        "Inspect the stacktrace to find the original error: "
    )
    log = tmp_path / "swap.log"
    log.write_text(head + "RuntimeError('Aborted due to the lack of CPU swap space. Please increase the swap space to avoid this error.').\n")
    d = diagnose([str(log)])
    assert (d.verdict_class, d.verdict_rule) == ("kv_exhaustion", "engine-message-kv-exhaustion")
    other = tmp_path / "other.log"
    other.write_text(head + "RuntimeError('NCCL error: unhandled system error').\n")
    assert diagnose([str(other)]).verdict_class == "none"


def test_the_allocator_warning_before_a_full_oom_changes_no_verdict(tmp_path: Path) -> None:
    """PyTorch 2.8+ warns from its allocator before the traceback; the diagnosis of the whole record stays the one
    without the warning (the message after it decides the numbers, the frames and the phase)."""
    from oomdoctor.api import diagnose

    log = FIXTURES / "runtime-activation-oom" / "pos_prefill_oom_2026.log"
    lines = log.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if "hit an exception" in line)
    warned = tmp_path / log.name
    warning = "[rank0]:[W302 11:20:31.000000 CUDACachingAllocator.cpp:3933] memory allocation failed with OOM on device 0 while trying to allocate 1342177280 bytes (free: 1095216660, total: 85031714816)\n"
    warned.write_text("".join([*lines[:at], warning, *lines[at:]]))
    before, after = diagnose([str(log)]), diagnose([str(warned)])
    assert (after.verdict_class, after.verdict_confidence) == (before.verdict_class, before.verdict_confidence) == ("runtime_activation", before.verdict_confidence)
    assert after.findings[0].recommendations == before.findings[0].recommendations


def _preemption_log(path: Path, n: int, extra: str = "") -> Path:
    # vLLM V0's warning (log_formats.md V10): its fixed text holds the scanner's "not enough" literal too.
    lines = ["INFO 05-09 00:40:00 llm_engine.py:237] Initializing an LLM engine (v0.6.3) with config: model='m', tensor_parallel_size=1"]
    for i in range(n):
        lines.append(
            f"WARNING 05-09 00:{i // 60 % 60:02d}:{i % 60:02d} scheduler.py:1057] Sequence group {i} is preempted by PreemptionMode.RECOMPUTE mode "
            "because there is not enough KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization or "
            f"tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption={i + 1}{extra if i == n // 2 else ''}"
        )
        lines.append(f"INFO 05-09 00:{i // 60 % 60:02d}:{i % 60:02d} metrics.py:351] Avg prompt throughput: 0.0 tokens/s, Running: 3 reqs, Swapped: 0 reqs, Pending: 9 reqs")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_repeating_message_holding_another_literal_in_its_own_text_still_repeats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The preemption warning's own words hold the literal "not enough": its lines are counted like any repeating
    line (the first 16, the last 64 and the count), the same events as reading every one."""
    log = str(_preemption_log(tmp_path / "p.log", 400))
    fast = read_events(log, InputStats(path=log))
    monkeypatch.setattr(events, "_repeating", lambda declared: {})
    slow = read_events(log, InputStats(path=log))

    def preempts(evs: list) -> list:
        return [(e.kind, e.ref.line, e.values) for e in evs if e.kind == vl.KIND_PREEMPT]

    assert preempts(fast) == preempts(slow) and len(preempts(fast)) == 16 + 64
    repeats = next(e for e in fast if e.kind == KIND_REPEATS and e.get("kind") == vl.KIND_PREEMPT)
    assert repeats.get("total") == 400 and repeats.get("dropped") == 400 - 16 - 64


def test_a_repeating_line_that_also_says_something_else_is_read(tmp_path: Path) -> None:
    """A literal beyond the message's own text (an OOM appended to one preemption line) makes that line news: read."""
    log = str(_preemption_log(tmp_path / "p.log", 400, " torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."))
    evs = read_events(log, InputStats(path=log))
    middle = 1 + 2 * 200 + 1  # the 200th warning's line number (the engine line is line 1)
    assert any(e.ref.line == middle and e.kind != vl.KIND_PREEMPT for e in evs), sorted({e.kind for e in evs})


_GRAPH_NOTICE = (
    "(EngineCore_DP0 pid=211) WARNING 03-02 10:{m:02d}:{s:02d} [gpu_worker.py:411] CUDA graph memory profiling is disabled "
    "(VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0). Without it, CUDA graph memory is not accounted for during KV cache allocation, "
    "which may require lowering --gpu-memory-utilization to avoid OOM. Consider re-enabling it (the default as of v0.21.0) and "
    "increasing --gpu-memory-utilization from 0.8500 to 0.8524."
)
_STATS = "(APIServer pid=1) INFO 03-02 10:{m:02d}:{s:02d} [loggers.py:123] Engine 000: Avg prompt throughput: 9.1 tokens/s, Running: 3 reqs, Waiting: 0 reqs"


def _notice_log(path: Path, n: int, tail: str = "") -> Path:
    lines = []
    for i in range(n):
        lines.append(_GRAPH_NOTICE.format(m=i // 60 % 60, s=i % 60))
        lines.append(_STATS.format(m=i // 60 % 60, s=i % 60))
    path.write_text("\n".join(lines) + "\n" + tail)
    return path


def _counting_feeds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    fed = [0]
    real = vl.VLLMParser.feed

    def feed(self, line):  # type: ignore[no-untyped-def]
        fed[0] += 1
        return real(self, line)

    monkeypatch.setattr(vl.VLLMParser, "feed", feed)
    return fed


def test_a_line_that_said_nothing_is_not_parsed_again_word_for_word(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's graph-profiling notice repeated by a busy server, each followed by a stats line: after the first one
    neither it nor the lines after it are parsed again; the failure after them and every event but the counted
    stats lines' are the same as reading every one, and so is the count of lines no parser read."""
    log = str(_notice_log(tmp_path / "n.log", 300, _OOM.replace("[2026-03-02 11:00:00] ", "")))
    fed = _counting_feeds(monkeypatch)
    fast_stats = InputStats(path=log)
    fast = read_events(log, fast_stats)
    fast_fed = fed[0]
    monkeypatch.setattr(events, "_QUIET_KEPT", 0)
    fed[0] = 0
    slow_stats = InputStats(path=log)
    slow = read_events(log, slow_stats)

    def kept(evs: list) -> list:
        return [(e.kind, e.ref.line, e.values) for e in evs if e.kind not in (rc.KIND_CONTEXT, KIND_REPEATS)]

    assert kept(fast) == kept(slow) and any(e.kind == tt.KIND_OOM for e in fast)
    assert fast_stats.unparsed_lines == slow_stats.unparsed_lines >= 300
    assert fast_fed < 20 < 300 <= fed[0]
    # The stats lines after the notices not read are not read either.
    assert sum(1 for e in fast if e.kind == rc.KIND_CONTEXT) < sum(1 for e in slow if e.kind == rc.KIND_CONTEXT)


def test_a_failure_line_or_one_that_differs_is_read_every_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Near misses: PyTorch's allocator warning (held by the torch parser until the error after it) repeated word for
    word is read every time; a notice whose number differs is another line."""
    warning = "[W1203 10:00:00.000000000 CUDACachingAllocator.cpp:1142] memory allocation failed with OOM on device 0 while trying to allocate 2147483648 bytes (free: 1073741824, total: 85899345920)"
    log = tmp_path / "w.log"
    log.write_text("\n".join([warning] * 5) + "\n")
    evs = read_events(str(log), InputStats(path=str(log)))
    assert len([e for e in evs if e.ref.text == warning]) == 5
    notices = tmp_path / "v.log"
    notices.write_text("\n".join([_GRAPH_NOTICE.format(m=0, s=0), _GRAPH_NOTICE.format(m=0, s=1).replace("0.8524", "0.8600"), _GRAPH_NOTICE.format(m=0, s=2)]) + "\n")
    fed = _counting_feeds(monkeypatch)
    read_events(str(notices), InputStats(path=str(notices)))
    assert fed[0] == 2  # the third says what the first said: not read

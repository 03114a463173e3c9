"""Runs: one definition of a run start (runs.RunSegmenter), used by split_runs and the event store."""

from __future__ import annotations

from pathlib import Path

from oomdoctor.base.evidence import Event, LineRef
from oomdoctor.evidence.parsers import sglang as sg
from oomdoctor.evidence.parsers import vllm as vl
from oomdoctor.evidence.runs import RunSegmenter, split_runs
from oomdoctor.input.files import InputStats
from oomdoctor.pipeline.events import read_events

from conftest import FIXTURES

# A vLLM v0 start-up that fails: one engine config line (no args line), then the KV error.
VLLM_ENGINE_ONLY = FIXTURES / "vllm-startup-kv" / "pos_v0_max_seq_len.log"


def _event(kind: str, line: int) -> Event:
    return Event(kind, (LineRef(path="x.log", line=line, text=kind),), {})


def test_segmenter_run_starts() -> None:
    kinds = [
        "other",
        vl.KIND_ENGINE_CONFIG,  # first engine config of the input: run 1 itself, not a new run
        "other",
        vl.KIND_ENGINE_CONFIG,  # a second engine config: a restart
        vl.KIND_ARGS,  # args: a restart
        vl.KIND_ENGINE_CONFIG,  # the engine config right after its args: the same run
        sg.KIND_SERVER_ARGS,  # a restart
    ]
    seg = RunSegmenter()
    starts = [seg.feed(k) for k in kinds]
    assert starts == [False, False, False, True, True, False, True]
    assert seg.number == 4
    runs = split_runs([[_event(k, i + 1) for i, k in enumerate(kinds)]])
    assert [len(r.events) for r in runs] == [3, 1, 2, 1]


def test_first_start_line_is_not_a_new_run() -> None:
    seg = RunSegmenter()
    assert seg.feed(sg.KIND_SERVER_ARGS) is True and seg.number == 1
    assert seg.feed(sg.KIND_SERVER_ARGS) is True and seg.number == 2


def test_engine_config_crash_loop_is_compacted_and_lists_every_incident(run_cli, tmp_path: Path) -> None:
    restarts = 100  # more than the 64 runs (+ the one being read) the store keeps whole
    crash = VLLM_ENGINE_ONLY.read_text()
    log = tmp_path / "crashloop.log"
    log.write_text(crash * restarts)
    one = read_events(str(VLLM_ENGINE_ONLY), InputStats(path=str(VLLM_ENGINE_ONLY)))
    events = read_events(str(log), InputStats(path=str(log)))
    # Old runs are slimmed: the 65 newest keep every event, older ones their start line and OOM. The
    # first run has no start line before it (its engine config is the first) and stays whole too.
    # Identical compacted runs collapse into one counter: a constant number of events, whatever the count.
    assert len(events) <= 66 * len(one) + 2 * 2
    engine = [e for e in events if e.kind == vl.KIND_ENGINE_CONFIG]
    assert len([e for e in engine if len(e.ref.text) > 160]) == 66
    # split_runs cuts the slimmed events where it cuts the whole log, numbering past the collapsed runs.
    runs = split_runs([events])
    assert runs[-1].number == restarts and sum(1 + r.repeats for r in runs) == restarts
    d = run_cli("diagnose", str(log), "--format", "json").json
    # Every incident is counted; the list shows the kept ones (collapsed runs only in the count).
    assert d["incidents"][-1]["run"] == restarts and len(d["incidents"]) <= 16 + 64 + 1
    assert f"this log holds {restarts - 1} earlier incidents" in d["verdict"]["summary"]
    single = run_cli("diagnose", str(VLLM_ENGINE_ONLY), "--format", "json").json
    assert {i["class"] for i in d["incidents"]} == {single["verdict"]["class"]}
    assert d["verdict"]["class"] == single["verdict"]["class"]


def _ranked(kind: str, line: int, rank: str | None) -> Event:
    return Event(kind, (LineRef(path="x.log", line=line, rank=rank, text=kind),), {})


def test_start_up_line_after_a_failure_with_another_failure_after_it_is_a_restart() -> None:
    path = FIXTURES / "vllm-cuda-graph-oom" / "pos_v0_second_attempt_pasted.log"
    runs = split_runs([read_events(str(path), InputStats(path=str(path)))])
    assert [r.number for r in runs] == [1, 2]
    # The second attempt starts at its weights line (line 5), not at the first failure's neighbours.
    assert runs[1].events[0].kind == vl.KIND_WEIGHTS and runs[1].events[0].refs[0].line == 5
    assert [e.kind for e in runs[0].events if e.kind == vl.KIND_ONE_REQUEST] and not runs[1].of(vl.KIND_ONE_REQUEST)


def test_start_up_lines_after_the_only_failure_stay_in_its_run() -> None:
    # The error pasted above the log it came from: nothing fails after the start-up lines.
    path = FIXTURES / "vllm-startup-kv" / "pos_v0_error_pasted_above_log.log"
    runs = split_runs([read_events(str(path), InputStats(path=str(path)))])
    assert len(runs) == 1 and runs[0].first(vl.KIND_PROFILE_V0_RESULTS) is not None


def test_restart_needs_the_failing_rank_and_keeps_later_run_numbers_in_order() -> None:
    events = [
        _ranked(sg.KIND_SERVER_ARGS, 1, None),
        _ranked(sg.KIND_NOT_ENOUGH, 2, "TP0"),  # TP0 fails
        _ranked(sg.KIND_LOAD_END, 3, "TP1"),  # another rank still finishing its load: same run
        _ranked(sg.KIND_NOT_ENOUGH, 4, "TP1"),
        _ranked(sg.KIND_LOAD_BEGIN, 5, "TP0"),  # TP0 loads again after failing, and fails again: a restart
        _ranked(sg.KIND_NOT_ENOUGH, 6, "TP0"),
        _ranked(sg.KIND_SERVER_ARGS, 7, None),  # a logged restart: after the found one
        _ranked(sg.KIND_LOAD_BEGIN, 8, "TP0"),
    ]
    runs = split_runs([events])
    assert [(r.number, [e.refs[0].line for e in r.events]) for r in runs] == [(1, [1, 2, 3, 4]), (2, [5, 6]), (3, [7, 8])]

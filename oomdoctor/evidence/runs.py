"""Runs and incidents: a long log holds several server runs (restarts, crash loops).

A run starts where ``RunSegmenter`` says (the one definition of a run start, used by ``split_runs``
and by the event store's crash-loop compaction). Within a run, the OOM events form at most one incident;
the same OOM reported two or three times (re-raised, re-logged by each wrapper) counts once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from oomdoctor.base.evidence import Event
from oomdoctor.evidence.parsers import engine_messages as em
from oomdoctor.evidence.parsers import sglang as sg
from oomdoctor.evidence.parsers import torch_oom as tt
from oomdoctor.evidence.parsers import vllm as vl

# The line a server prints once per start: its arguments.
RUN_START_KINDS = frozenset({sg.KIND_SERVER_ARGS, vl.KIND_ARGS})
# Every kind the segmenter reads: the start lines and vLLM's engine config (a start only when it is
# not the first of its run: the API server logs its args, then the engine its config).
RUN_MARKER_KINDS = RUN_START_KINDS | {vl.KIND_ENGINE_CONFIG}


# Lines a server prints once per start, on the way to serving (weights, the memory profile, the KV pool,
# graph capture). One of them after a failure of its run, from the same rank, with another failure after
# it, is the server started again (a paste of two attempts, the second one's arguments not pasted): no run
# goes on past a failure it reported to load its weights or size its KV cache once more.
RESTART_KINDS = frozenset(
    {
        sg.KIND_INIT_DIST_END,
        sg.KIND_LOAD_BEGIN,
        sg.KIND_LOAD_END,
        sg.KIND_KV_ALLOCATED,
        sg.KIND_POOL_END,
        sg.KIND_GRAPH_BEGIN,
        vl.KIND_LOAD_START,
        vl.KIND_WEIGHTS,
        vl.KIND_PROFILE_TOTAL,
        vl.KIND_PROFILE_BREAKDOWN,
        vl.KIND_PROFILE_V1,
        vl.KIND_INITIAL_FREE,
        vl.KIND_KV_AVAILABLE,
        vl.KIND_KV_TOKENS,
        vl.KIND_GPU_BLOCKS,
        vl.KIND_GRAPH_BEGIN,
    }
)

# The value a compacted run's start event carries when identical runs after it were collapsed into it.
COLLAPSED_RUNS = "collapsed_runs"


class RunSegmenter:
    """The one definition of a run start, fed event kinds in log order (one segmenter per input).

    A run starts at SGLang's ``server_args``, vLLM's non-default args, or a vLLM engine config line
    that is not the first of its run. ``feed`` says whether the event starts a run and whether that
    run is a new one (``number`` goes up) rather than the first of the input.
    """

    def __init__(self) -> None:
        self.number = 1
        self._seen_args = False
        self._seen_engine = False
        self._skip = 0

    def skip(self, runs: int) -> None:
        """Runs that were collapsed into the current one: the next run's number comes after them."""
        self._skip += runs

    def feed(self, kind: str) -> bool:
        """Whether an event of this kind starts a run; advances ``number`` when it starts a new one."""
        if kind not in RUN_MARKER_KINDS:
            return False
        is_engine = kind == vl.KIND_ENGINE_CONFIG
        if is_engine and not self._seen_engine:
            self._seen_engine = True
            return False
        if self._seen_args or self._seen_engine:
            self.number += 1 + self._skip
            self._skip = 0
        self._seen_args = not is_engine
        self._seen_engine = is_engine
        return True

# Events that show an OOM (or a memory failure SGLang reports itself).
_OOM_KINDS = {
    tt.KIND_OOM,
    tt.KIND_DRIVER_OOM,
    sg.KIND_NOT_ENOUGH,
    sg.KIND_NO_KV,
    sg.KIND_HYBRID_NOT_ENOUGH,
    sg.KIND_KV_ALLOC_FAIL,
    sg.KIND_REQ_SLOTS_FAIL,
    sg.KIND_OMNI_ENCODER_FAIL,
    vl.KIND_FREE_LESS,
    vl.KIND_NO_CACHE_BLOCKS,
    vl.KIND_ONE_REQUEST,
    vl.KIND_PROFILE_ASSERT,
}


@dataclass
class Run:
    """One server run: its events in log order (across all inputs with the same run number)."""

    number: int
    events: list[Event] = field(default_factory=list)
    # Identical runs after this one that the event store collapsed into it (a crash loop).
    repeats: int = 0

    def of(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.kind == kind]

    def first(self, kind: str) -> Event | None:
        return next((e for e in self.events if e.kind == kind), None)

    def last(self, kind: str) -> Event | None:
        return next((e for e in reversed(self.events) if e.kind == kind), None)


def is_oom_event(event: Event) -> bool:
    """Whether an event by itself is evidence of an out-of-memory failure."""
    if event.kind in _OOM_KINDS:
        return True
    if event.kind == sg.KIND_CAPTURE_FAILED:
        return bool(event.get("is_oom"))
    if event.kind == em.KIND_ENGINE_MESSAGE:
        # An engine's own memory failure (not one of its configuration checks that names memory).
        return bool(event.get("memory_failure"))
    if event.kind == sg.KIND_PROFILED_NEGATIVE:
        return event.get("profiled_tokens", 0) <= 0
    if event.kind == sg.KIND_LEGACY_PROFILE:
        return event.get("rest_bytes", 0) <= 0
    if event.kind == tt.KIND_HOST_OOM:
        return event.get("strength") == "strong"
    if event.kind == vl.KIND_KV_AVAILABLE:
        return (event.get("kv_bytes") or 0) < 0
    return False


def implies_kv_failure(event: Event) -> bool:
    """An engine line that makes a startup KV failure certain, though the failure itself is not in sight.

    vLLM V0 prints its profile arithmetic and block count before raising "No available memory for the
    cache blocks" (raise_if_cache_size_invalid): a negative KV rest or zero GPU blocks always ends that
    way. Read as the OOM only when a run has no failure line of its own (a paste cut after them); when
    the error is there, it stays the line the verdict cites.
    """
    if event.kind in (vl.KIND_PROFILE_BREAKDOWN, vl.KIND_PROFILE_V0_RESULTS):
        return event.get("kv_bytes") is not None and event.get("kv_bytes") < 0
    if event.kind == vl.KIND_GPU_BLOCKS:
        return event.get("gpu_blocks") == 0
    return False


# Machine state a user pasted (nvidia-smi, gpustat, environment reports, the engine's metrics): the
# machine the report is about, not a step of one run (= inference.facts.pasted.KINDS, spelled out so
# that a plain log imports none of those parsers).
MACHINE_STATE_KINDS = frozenset({"smi_driver", "smi_gpu", "smi_process", "smi_no_processes", "env_fact", "env_gpu", "engine_metric"})


def split_runs(events_per_input: list[list[Event]]) -> list[Run]:
    """Segment each input's events into runs (``RunSegmenter``); merge the same run number across inputs.

    Machine state pasted in one run (a bug report's environment section above a log whose first lines
    the segmenter reads as two starts) is given to the runs that hold none, ahead of their own events.
    """
    runs = _split_restarts(_segment(events_per_input))
    state = [e for run in runs for e in run.events if e.kind in MACHINE_STATE_KINDS]
    if state and len(runs) > 1:
        for run in runs:
            if not any(e.kind in MACHINE_STATE_KINDS for e in run.events):
                run.events[:0] = state
    return runs


def _segment(events_per_input: list[list[Event]]) -> list[Run]:
    runs: dict[int, Run] = {}
    for events in events_per_input:
        segmenter = RunSegmenter()
        for event in events:
            segmenter.feed(event.kind)
            run = runs.setdefault(segmenter.number, Run(segmenter.number))
            run.events.append(event)
            collapsed = event.get(COLLAPSED_RUNS)
            if collapsed:
                run.repeats += collapsed
                segmenter.skip(collapsed)
    return [runs[k] for k in sorted(runs)]


def _restart_at(events: list[Event]) -> int | None:
    """Where a run's events show the server starting again: the first start-up line after a failure, from
    the failing rank, that another failure follows (``RESTART_KINDS``); None when there is none."""
    failures = [i for i, event in enumerate(events) if is_oom_event(event)]
    if len(failures) < 2:
        return None
    failed_ranks: set[str | None] = set()
    for i, event in enumerate(events[: failures[-1]]):
        if is_oom_event(event):
            failed_ranks.add(event.rank)
        elif event.kind in RESTART_KINDS and event.rank in failed_ranks:
            return i
    return None


def _split_restarts(runs: list[Run]) -> list[Run]:
    out: list[Run] = []
    added = 0  # a run found inside another pushes the later ones' numbers up by one
    for run in runs:
        events = run.events
        while (cut := _restart_at(events)) is not None:
            out.append(Run(run.number + added, events[:cut]))
            events = events[cut:]
            added += 1
        out.append(Run(run.number + added, events, run.repeats))
    return out


def dedupe_ooms(events: list[Event]) -> list[Event]:
    """Drop repeats of the same allocator OOM (same numbers) within one run; keep the first."""
    seen: set[tuple] = set()
    out: list[Event] = []
    for event in events:
        if event.kind == tt.KIND_OOM:
            key = (
                event.rank,
                event.get("requested_bytes"),
                event.get("free_bytes"),
                event.get("capacity_bytes"),
            )
            if key in seen and any(v is not None for v in key[1:]):
                continue
            seen.add(key)
        out.append(event)
    return out

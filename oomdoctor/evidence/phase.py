"""The phase step (DESIGN §2.1): where in the server's life a failure happened, before its class.

The phase comes from the strongest source available, in this order: an engine-authored verdict line
(the engine says what it was doing), traceback frames, the log lines around the failure (startup
milestones, loader or capture progress, serving traffic), nothing. The tables are data
(``data/phases.toml``); this module only applies them.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, NamedTuple

from oomdoctor.base import built_in
from oomdoctor.base.evidence import Event, LineRef
from oomdoctor.evidence import phase_map
from oomdoctor.evidence.phase_map import package_path
from oomdoctor.input.patterns import LazyRegex
from oomdoctor.input.scan import BEFORE_LINES

if TYPE_CHECKING:
    from typing import Any

SOURCES = ("engine", "frames", "context", "none")
# How much each source is worth when the confidence model weighs a class that depends on the phase.
STRENGTH = {"engine": 1.0, "frames": 0.9, "context": 0.6, "none": 0.0}


class PhaseSpec(NamedTuple):
    name: str
    stage: str
    likely_class: str
    doc: str
    # Every context line of the phase marks it begun or in progress, never done: a log whose last phase line is
    # one of them stops inside the phase (phases.toml `begun_only`).
    begun_only: bool = False


class FrameRule(NamedTuple):
    phase: str
    func: LazyRegex | None
    path: LazyRegex | None
    example: str
    within: LazyRegex | None = None  # with func: the frame's path must match this too


class ContextRule(NamedTuple):
    phase: str
    pattern: LazyRegex
    example: str
    # A line that names the stage that failed (multi-stage servers) counts even after the failure.
    after_failure: bool = False
    # Lower-case literals of which every match of ``pattern``, lower-cased, holds one.
    needles: tuple[str, ...] = ()
    # A line that says less than the others (a forward pass, not which): it names the phase only when
    # no other context line or milestone before the failure does.
    fallback: bool = False


class Tables(NamedTuple):
    phases: dict[str, PhaseSpec]
    frames: tuple[FrameRule, ...]
    context: tuple[ContextRule, ...]
    milestones: dict[str, str]
    # The generated phase map's vocabulary -> this table's phases, for a frame ("" decides nothing).
    frame_map: dict[str, str]
    # The same for a module's own phase, which a frame whose function the map does not list falls back to.
    module_map: dict[str, str]
    # Which phase a traceback's frames name when several name one: earlier wins.
    precedence: tuple[str, ...]
    # A phase of this table that is a finer kind of one the map's vocabulary has (weight_creation of
    # weight_loading): a [[frames]] entry naming it for a frame replaces the map's coarser phase there.
    refines: dict[str, str]
    # Every context pattern in one alternation, for a line that is not ASCII (where lower-casing is not
    # how the patterns' (?i) compares): one search says no where a search per rule took ~13.
    any_context: LazyRegex | None = None
    # Each distinct needle of the context rules with the rules (indexes, in table order) it stands for.
    context_needles: tuple[tuple[str, tuple[int, ...]], ...] = ()
    # Any of the needles, in one search: most lines hold none, and one search says so.
    any_needle: LazyRegex | None = None


class Phase(NamedTuple):
    """A phase with where it came from; ``ref`` is the line that decided it (if any)."""

    name: str
    source: str
    ref: LineRef | None = None
    detail: str = ""

    @property
    def strength(self) -> float:
        return STRENGTH[self.source]

    @property
    def stage(self) -> str:
        return tables().phases[self.name].stage

    @property
    def likely_class(self) -> str:
        return tables().phases[self.name].likely_class


UNKNOWN = Phase("unknown", "none")


def _lazy(source: str) -> LazyRegex:
    """A table regex compiled when first tried: a small log tries few of the ~30 frame and context
    patterns, and compiling them all cost ~3 ms of its start (tests/test_evidence_phase.py compiles every one)."""
    return LazyRegex(None, source)


def parse_tables(data: dict[str, Any]) -> Tables:
    phases = {
        name: PhaseSpec(name, entry["stage"], entry.get("likely_class", ""), entry.get("doc", ""), entry.get("begun_only", False))
        for name, entry in data["phases"].items()
    }

    def known(name: str, where: str) -> str:
        if name not in phases:
            raise ValueError(f"phases.toml: {where}: unknown phase {name!r}")
        return name

    frames = tuple(
        FrameRule(
            known(e["phase"], "frames"),
            _lazy(e["func"]) if e.get("func") else None,
            _lazy(e["path"]) if e.get("path") else None,
            e.get("example", ""),
            _lazy(e["within"]) if e.get("within") else None,
        )
        for e in data.get("frames", [])
    )
    context = tuple(
        ContextRule(
            known(e["phase"], "context"), _lazy(e["pattern"]), e.get("example", ""), bool(e.get("after_failure", False)), _needles(e), bool(e.get("fallback", False))
        )
        for e in data.get("context", [])
    )
    milestones = {e["kind"]: known(e["phase"], "milestones") for e in data.get("milestones", [])}
    any_context = _lazy("|".join(f"(?:{_scoped(e['pattern'])})" for e in data.get("context", []))) if context else None
    by_needle: dict[str, list[int]] = {}
    for i, rule in enumerate(context):
        for needle in rule.needles:
            by_needle.setdefault(needle, []).append(i)
    any_needle = _lazy("|".join(re.escape(n) for n in sorted(by_needle))) if by_needle else None
    spec = data.get("frame_map", {})
    frame_map = {generated: (known(ours, "frame_map") if ours else "") for generated, ours in spec.get("phases", {}).items()}
    module_map = {generated: (known(ours, "frame_map") if ours else "") for generated, ours in spec.get("module_phases", {}).items()}
    precedence = tuple(known(name, "frame_map.precedence") for name in spec.get("precedence", ()))
    refines = {known(fine, "frame_map.refines"): known(coarse, "frame_map.refines") for fine, coarse in spec.get("refines", {}).items()}
    missing = {rule.phase for rule in frames} - set(precedence)
    if missing:
        raise ValueError(f"phases.toml: frame_map.precedence: frame phases without a place: {sorted(missing)}")
    return Tables(
        phases,
        frames,
        context,
        milestones,
        frame_map,
        module_map,
        precedence,
        refines,
        any_context,
        tuple((n, tuple(ids)) for n, ids in by_needle.items()),
        any_needle,
    )


def _needles(entry: dict[str, Any]) -> tuple[str, ...]:
    needles = tuple(entry.get("needles", ()))
    if not needles or any(not n or n != n.lower() for n in needles):
        raise ValueError(f"phases.toml: context {entry.get('pattern')!r}: needles must be a non-empty list of lower-case literals")
    return needles


_LEADING_FLAGS = re.compile(r"\(\?([aiLmsux]+)\)")


def _scoped(source: str) -> str:
    """A pattern whose leading global flags (``(?i)...``) apply to it alone, so it can sit in an alternation."""
    m = _LEADING_FLAGS.match(source)
    return f"(?{m.group(1)}:{source[m.end():]})" if m else source


@functools.cache
def tables() -> Tables:
    return parse_tables(built_in.table("phases.toml"))


def classify_frames(frames: tuple[tuple[str, str], ...] | list[tuple[str, str]] | None) -> str | None:
    """The phase named by a traceback's frames (file, function), or None.

    Each frame names phases three ways, strongest first: its function's own (the generated map's root
    or name phase for that function in that module, or a [[frames]] entry: a finer phase an entry names
    replaces the map's coarser one, ``frame_map.refines``); the phase the map's call graph gives it from a
    root that calls it; its module's phase in the map. The strongest kind any frame has decides: among
    own phases the earliest in ``frame_map.precedence`` (a forward inside graph capture is a capture
    failure), among borrowed and module phases the deepest frame's (the call nearest the failure).
    """
    if not frames:
        return None
    found = tables()
    rank = {name: i for i, name in enumerate(found.precedence)}
    own: set[str] = set()
    borrowed: str | None = None
    by_module: str | None = None
    for full_path, func in frames:
        path = package_path(full_path)
        hand = set()
        for rule in found.frames:
            func_hit = rule.func is not None and rule.func.search(func) and (rule.within is None or rule.within.search(path))
            if func_hit or (rule.path is not None and rule.path.search(path)):
                hand.add(rule.phase)
        mapped = phase_map.frame(full_path, func) if full_path.endswith(".py") else None
        if mapped is None:
            own |= hand
            continue
        own_phases = _ours(mapped[0], found.frame_map)
        calls_phases = _ours(mapped[1], found.frame_map)
        if len(own_phases) == 1:
            coarse = next(iter(own_phases))
            finer = {p for p in hand if found.refines.get(p) == coarse}
            own |= finer or own_phases
            continue
        own |= hand
        if own_phases or len(calls_phases) > 1:
            continue  # several phases (other classes, other releases): the frame names none
        if calls_phases:
            borrowed = next(iter(calls_phases))
        elif found.module_map.get(mapped[2]) and func not in _NOT_THE_MODULES:
            by_module = found.module_map[mapped[2]]
    if own:
        return min(own, key=rank.__getitem__)
    return borrowed or by_module


# A constructor runs where its object is built (a scheduler's at start-up), not in the phase its module's
# functions run in; a module's body and comprehensions say nothing of their own.
_NOT_THE_MODULES = frozenset({"__init__", "<module>", "<listcomp>", "<genexpr>", "<dictcomp>", "<lambda>"})


def _ours(generated: frozenset[str], frame_map: dict[str, str]) -> set[str]:
    """The phases of this table a set of the generated map's phases is (those that decide something)."""
    return {frame_map[g] for g in generated if frame_map.get(g)}


# Ray's log deduplication prints the first of a run of similar lines at once and the rest, up to five
# seconds later, as one line ending "[repeated 30x across cluster]": a late copy of what happened
# before, so it says nothing about where the processes are now.
_RAY_DEDUP_COPY = LazyRegex("across cluster]", r"\[repeated \d+x across cluster\]\s*$")


def late_copy(text: str) -> bool:
    """Whether a line is Ray's deduplicated copy of earlier lines (not a sign of the current phase)."""
    return _RAY_DEDUP_COPY.search(text) is not None


def classify_context(text: str) -> ContextRule | None:
    """The context rule a log line matches (its phase, and whether it may follow the failure), or None.

    Only the rules one of whose needles the line holds are tried (one pass over the needles; most log
    lines hold none), in table order: the first that matches is the first of the whole table that does.
    """
    found = tables()
    if text.isascii():
        low = text.lower()
        if found.any_needle is None or found.any_needle.search(low) is None:
            return None
        hits = {i for needle, ids in found.context_needles if needle in low for i in ids}
        if not hits:
            return None
        rules = [found.context[i] for i in sorted(hits)]
    elif found.any_context is not None and found.any_context.search(text) is None:
        return None
    else:
        rules = list(found.context)
    if late_copy(text):
        return None
    for rule in rules:
        if rule.pattern.search(text):
            return rule
    return None


def milestone_phase(events: list[Event], index: int) -> tuple[str, LineRef | None]:
    """The phase by the startup milestones before event ``index`` (the v1 stage ladder)."""
    phase, ref = "unknown", None
    table = tables().milestones
    for event in events[:index]:
        found = table.get(event.kind)
        if found is not None and not late_copy(event.ref.text):
            phase, ref = found, event.ref
    return phase, ref


def legacy_stage(phase_name: str) -> str:
    return tables().phases[phase_name].stage


# Engine-authored lines that say by themselves what the engine was doing when it failed.
_ENGINE_PHASES: dict[str, str] = {
    "not_enough_memory": "kv_pool",
    "weights_leave_no_kv": "kv_pool",
    "hybrid_state_not_enough": "kv_pool",
    "profiled_negative": "kv_pool",
    "vllm_no_cache_blocks": "kv_pool",
    "vllm_one_request_does_not_fit": "kv_pool",
    "req_slots_fail": "serving",
    "omni_encoder_fail": "encoder",
}
# The knowledge catalogue's phases (tools/knowledge/classify.py) that are not names of this table's phases.
_KNOWLEDGE_PHASES = {"prefill_decode": "serving", "scheduler": "serving"}


def knowledge_phase(name: str | None) -> str:
    """The phase of this table a catalogue phase is: its own name where the table has it, else its match."""
    name = _KNOWLEDGE_PHASES.get(name or "", name or "unknown")
    return name if name in tables().phases else "unknown"


# Engine messages among the driver-level OOMs that say what the engine was doing (TGI/LoRAX warmup:
# "Not enough memory to handle N prefill tokens" is the warmup's prefill pass).
_ENGINE_DRIVER_SOURCES: dict[str, str] = {"warmup_prefill": "profiling"}


def infer(events: list[Event], failure_index: int, oom: Event | None, records: list[Event]) -> Phase:
    """The phase of the failure at ``events[failure_index]`` from the strongest source available.

    ``oom`` is the allocator/driver OOM event (its own frames come first); ``records`` are the
    failure records (tracebacks) of the run, from which the one that belongs to the failure is taken.
    """
    failure = events[failure_index] if 0 <= failure_index < len(events) else None
    # 1. Engine verdict lines.
    for e in events[: failure_index + 1] if failure is not None else events:
        if e.kind == "capture_failed" and e.get("is_oom"):
            return Phase("graph_capture", "engine", e.ref, "the engine reported a CUDA graph capture failure")
        if e.kind == "kv_alloc_fail":
            return Phase("prefill" if e.get("which") == "prefill" else "decode", "engine", e.ref, "SGLang's KV allocator failed")
        if e.kind == "engine_message" and e.get("memory_failure") and knowledge_phase(e.get("phase")) != "unknown":
            # The engine's own failure message: the phase its function belongs to in the engine's code.
            return Phase(knowledge_phase(e.get("phase")), "engine", e.ref, f"the engine's own failure message, raised in {e.get('site')}")
        name = _ENGINE_PHASES.get(e.kind) or (_ENGINE_DRIVER_SOURCES.get(e.get("source", "")) if e.kind == "driver_oom" else None)
        if name is not None:
            return Phase(name, "engine", e.ref, "an engine-authored memory error")
    # 2. Frames: the record that carries the failure (its frames and the calls in progress on their
    #    source lines), with the OOM's own traceback.
    record = owning_record(records, failure.ref.line if failure is not None else None)
    frames = tuple(record.get("frames") or ()) if record is not None else ()
    if oom is not None:
        frames = frames + tuple(oom.get("frames") or ())
    found = classify_frames(frames)
    if found:
        ref = oom.ref if oom is not None else (record.ref if record is not None else None)
        return _refine(Phase(found, "frames", ref, "traceback frames of the failure"), events, failure_index)
    # 3. Context: the last context line or milestone before the failure.
    line = failure.ref.line if failure is not None else (record.ref.line if record is not None else None)
    best: tuple[int, str, LineRef] | None = None
    upto = failure_index if failure is not None else len(events)
    milestone, mref = milestone_phase(events, upto)
    if milestone != "unknown" and mref is not None:
        best = (mref.line, milestone, mref)
    fallback: tuple[int, str, LineRef] | None = None
    for e in events:
        if e.kind != "context_line" or (line is not None and e.ref.line > line and not e.get("after_failure")):
            continue
        if e.get("fallback"):
            fallback = (e.ref.line, e.get("phase"), e.ref)
        elif best is None or e.ref.line >= best[0]:
            best = (e.ref.line, e.get("phase"), e.ref)
    best = best or fallback
    if best is not None:
        return Phase(best[1], "context", best[2], "log lines before the failure")
    if failure is not None and line is not None:
        # Nothing before it: the ranks of one server step through start-up together, and a relay (Ray's driver)
        # prints the other workers' lines late, so another rank's line just after the failure says where they were.
        rank = failure.ref.rank
        for e in events[failure_index + 1 :]:
            if e.ref.line > line + _OTHER_RANKS_AFTER_LINES:
                break
            if e.kind == "context_line" and e.ref.rank != rank and e.ref.rank is not None and not e.get("fallback"):
                return Phase(e.get("phase"), "context", e.ref, OTHER_RANKS_AFTER)
    return UNKNOWN


# How far after a failure with nothing before it another rank's line still tells the phase (its relayed lines): the
# scanner's own window around a failure line, the lines it reads before one (not a count fitted to a paste).
_OTHER_RANKS_AFTER_LINES = BEFORE_LINES
OTHER_RANKS_AFTER = "another rank's lines just after the failure"


def _refine(found: Phase, events: list[Event], failure_index: int) -> Phase:
    """Refine a frames phase with what the log said just before the failure.

    A profiling pass that the engine said runs the multimodal encoder is an encoder failure; a
    generic serving frame (the engine's busy loop) takes the runtime phase the last context line
    names (prefill, decode, KV slot allocation, encoder). A forward frame under a graph capture's
    progress is the differential's to weigh (inference/differential._read), not a decided capture.
    """
    before = events[: failure_index + 1] if failure_index >= 0 else events
    if found.name == "serving":
        last = next((e for e in reversed(before) if e.kind == "context_line"), None)
        if last is not None and last.get("phase") in _RUNTIME_REFINEMENTS:
            return Phase(last.get("phase"), found.source, found.ref, f"{found.detail}, refined by {last.ref.path}:{last.ref.line}")
        return found
    if found.name != "profiling":
        return found
    if any(e.kind == "vllm_mm_profile" or (e.kind == "context_line" and e.get("phase") == "encoder") for e in before):
        return Phase("encoder", found.source, found.ref, "a profiling pass over the multimodal encoder")
    return found


_RUNTIME_REFINEMENTS = frozenset({"prefill", "decode", "sampling", "encoder", "kv_alloc"})


def owning_record(records: list[Event], line: int | None) -> Event | None:
    """The failure record a failure at ``line`` belongs to.

    The record that ends at (or just after) the failure line, else one that starts after it and
    carries an OOM in its chain (vLLM prints the exception repr first, the traceback after it).
    Records that ended before the failure belong to earlier failures and are never borrowed.
    """
    if not records:
        return None
    if line is None:
        return records[-1]
    covering = [r for r in records if r.get("first_line", 0) <= line <= r.get("last_line", 0) + 3]
    if covering:
        return covering[-1]
    # vLLM prints the exception's repr, then its traceback on the next line: a record that opens within
    # a few lines after the failure is its own, even when the paste stops before the record's end.
    after = [r for r in records if line < r.get("first_line", 0) and (r.get("chain_has_oom") or r.get("first_line", 0) <= line + _FOLLOWS_WITHIN_LINES)]
    return after[0] if after else None


_FOLLOWS_WITHIN_LINES = 3


def describe(phase: Phase) -> dict[str, Any]:
    return {"name": phase.name, "source": phase.source}

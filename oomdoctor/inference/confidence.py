"""The confidence model: a rule's base confidence, moved by what the evidence lacks.

Documented in the README ("How sure it is"). Every move is a named factor in the verdict, so a
reader sees why a finding is at 0.55 and not at its rule's 0.8:

- the phase came from surrounding log lines only (-0.10), from another rank's lines after the failure
  (-0.20: the ranks step together, but not its own lines) or from nothing (-0.20), for a class
  that depends on where the failure happened; for ``foreign_process``, nothing showing the phase
  costs the same -0.20 (its fix, freeing the others' memory, is enough only if the process's own
  need fits the card: one still loading a model may need more than the whole card);
- the OOM message stops before its last clause (-0.10), for a class computed from its numbers;
- the serving system is a fallback (from line prefixes or frame paths, not engine lines) (-0.05);
- the evidence is a fragment (-0.05) or the input stops inside a later record (-0.05);
- the OOM is stated in words only, by a runtime no table knows (the last resort, parsers/oom_signatures.py):
  no figures, and not which memory ran out, the device's or the host's pinned memory (-0.10), for a GPU class;
- two classes hold equally: capped at 0.60; so is a startup KV verdict when whether the weights leave
  room for one request rests on the assumed 1 GiB of KV, or when the input gives no figure at all (no
  weights size, no memory around their loading, no positive KV budget of the engine's): weights_dont_fit
  holds as well.
Engine-authored verdict lines ("Not enough memory ...", vLLM's KV-cache errors, "Free memory on
device ... less than desired", a capture failure with an OOM reason) keep >= 0.90 on complete
evidence. Nothing here is tuned on the field corpus: each step is a fixed fraction of the scale,
argued from what the missing evidence could change.
"""

from __future__ import annotations

from typing import NamedTuple

from oomdoctor.inference import classes

# Facts whose truth comes from an engine-authored verdict line.
ENGINE_FACTS = frozenset(
    {"startup_kv_error", "free_less_than_requested", "kv_alloc_failed", "req_slots_failed", "profile_memory_changed", "unbalanced_memory", "capture_failed"}
)
# Facts that say where a failure happened.
PHASE_FACTS = frozenset({"oom_stage", "oom_stage_source", "server_ready", "weight_load_oom", "capture_oom", "encoder_oom", "phase", "phase_source"})
# Facts read from the allocator message's numbers.
ALLOCATOR_FACTS = frozenset(
    {"requested_bytes", "free_bytes", "reserved_unallocated_bytes", "shortfall_bytes", "foreign_process_bytes", "foreign_process_count", "allocated_bytes", "unaccounted_bytes"}
)

PHASE_FROM_CONTEXT = -0.10
PHASE_FROM_OTHER_RANKS = -0.20
PHASE_FROM_NOTHING = -0.20
MESSAGE_CUT = -0.10
SYSTEM_FALLBACK = -0.05
FRAGMENT = -0.05
LATER_RECORD_CUT = -0.05
STATED_ONLY = -0.10
TIE_CAP = 0.60
ENGINE_FLOOR = 0.90
HYPOTHESIS_CAP = 0.45
INCOMPLETE_NONE_CAP = 0.35


class Factor(NamedTuple):
    factor: str
    delta: float

    def to_json(self) -> dict[str, object]:
        return {"factor": self.factor, "delta": round(self.delta, 2)}


class Evidence(NamedTuple):
    """What the confidence model needs to know about one incident's evidence."""

    phase_source: str  # engine | frames | context | none
    message_complete: bool | None
    system_fallback: bool
    status: str  # complete | incomplete | fragment
    observer_only: bool = False  # the OOM is known only from the capture hook's observer record
    stated_only: bool = False  # the OOM is the last resort's statement: words, no figures, no known runtime
    phase_from_other_ranks: bool = False  # the context phase is another rank's, from its lines after the failure


def adjust(base: float, used: set[str], ev: Evidence, klass: str = "") -> tuple[float, list[Factor]]:
    """A finding's confidence from its rule's base, the facts it used and its class."""
    factors: list[Factor] = []
    engine = bool(used & ENGINE_FACTS)
    if used & PHASE_FACTS and not engine:
        if ev.phase_source == "context" and ev.phase_from_other_ranks:
            factors.append(Factor("the phase comes from another rank's lines just after the failure, not from its own", PHASE_FROM_OTHER_RANKS))
        elif ev.phase_source == "context":
            factors.append(Factor("the phase comes from surrounding log lines only, not from a traceback", PHASE_FROM_CONTEXT))
        elif ev.phase_source == "none":
            factors.append(Factor("no evidence of the phase (no traceback frames, no startup or serving lines)", PHASE_FROM_NOTHING))
    elif _phase_decides_sufficiency(klass) and not engine and ev.phase_source == "none":
        factors.append(
            Factor(
                "no evidence of the phase: whether this process fits once the others are gone is unknown (loading a model, it may need more than the card)",
                PHASE_FROM_NOTHING,
            )
        )
    if used & ALLOCATOR_FACTS and ev.message_complete is False:
        factors.append(Factor("the OOM message stops before its last clause", MESSAGE_CUT))
    if ev.stated_only and not engine and not classes.load().has(klass, "host_steps"):
        factors.append(Factor("the OOM is stated in words only, by a runtime no table knows: no figures, and not which memory (the GPU's or the host's pinned memory) ran out", STATED_ONLY))
    if ev.system_fallback and not engine:
        factors.append(Factor("the serving system is inferred from line prefixes or frame paths", SYSTEM_FALLBACK))
    if ev.status == "fragment":
        what = "the capture hook's record of the OOM alone, without the log around it" if ev.observer_only else "a quoted message without the log around it"
        factors.append(Factor(what, FRAGMENT))
    elif ev.status == "incomplete":
        factors.append(Factor("the input stops inside a later record", LATER_RECORD_CUT))
    value = base + sum(f.delta for f in factors)
    if engine and base >= ENGINE_FLOOR and ev.status != "incomplete":
        value = max(value, ENGINE_FLOOR)
    return round(max(0.05, min(value, 0.99)), 2), factors


def tie_cap(value: float, factors: list[Factor], rival_class: str, why: str = "") -> tuple[float, list[Factor]]:
    """Cap a finding that a rival class holds as well as; ``why`` says what keeps the rival standing."""
    if value <= TIE_CAP:
        return value, factors
    what = f"{why}: {rival_class} holds as well" if why else f"{rival_class} holds as strongly"
    return TIE_CAP, [*factors, Factor(what, round(TIE_CAP - value, 2))]


def _phase_decides_sufficiency(klass: str) -> bool:
    """Whether the class's fix is enough only if the phase allows it (data/classes.toml says why)."""
    return classes.load().has(klass, "phase_decides_sufficiency")

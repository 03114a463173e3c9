"""The differential for an evident OOM no rule decides: the classes it may be, ranked, and what tells them apart.

The model (data/differential.toml holds its candidates and evidence):

1. **Candidates**: the classes whose failures can happen in the phase the phase step found (a
   weight-loading failure is weights or another tenant, never activations). A phase read only from
   the lines around the failure (``phase_source`` "context") is weaker than frames: the classes of
   other phases stay candidates, one step against. A class with a ``requires`` condition (host_oom:
   a kill) is a candidate only when it holds.
2. **Prior**: uniform over the candidates. The catalogue is not a sample of failures, and no
   frequency was taken from any corpus: every mechanism the phase allows starts equal.
3. **Evidence**: each item whose condition holds on the facts moves its class's odds by
   ``STEP_ODDS`` per step, up ("for") or down ("against"); "exclude" removes a class its contract
   rules out (fragmentation needs free + reserved-unallocated >= the request). ``STEP_ODDS`` is the
   odds ratio between the catalogue's proven and inferred rule of one kind (oom-foreign-process at
   0.85 against oom-foreign-process-inferred at 0.6: 5.7 / 1.5, about 4): one fact of evidence counts
   here as much as it does there.
4. **Likelihoods** are the odds normalised over the candidates and one more, unnamed, of odds 1:
   the table is not every way memory runs out (a leak, a bug in the engine, an error misreported
   as an OOM), so no class takes the whole mass because the others were ruled out. The check shown
   is the first candidate's, the one thing that confirms or rules it out, and so tells it from the
   second.

The verdict stays ``unknown_oom`` unless the first candidate leads clearly (``leading``): then it names
that class as a hypothesis only (at most confidence.HYPOTHESIS_CAP). A likelihood here rests on priors
and weak signals, not on a rule the log satisfies, and advice is given only by rules. Pure: facts in, a ranked list out.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, NamedTuple

from oomdoctor.base import built_in
from oomdoctor.base.units import format_bytes
from oomdoctor.evidence import phase as phase_step
from oomdoctor.inference.rule_engine import evaluate

if TYPE_CHECKING:
    from typing import Any

STEP_ODDS = 4.0
# The odds of a cause the table does not name, kept in every denominator (point 4 above).
UNNAMED_ODDS = 1.0
# Candidates shown: the likeliest few (the rest hold little and would only lengthen the report).
SHOWN = 4

_PLACEHOLDER = re.compile(r"\{(\w+)\}")
_OPTIONAL = re.compile(r"\[\[([^\[\]]*)\]\]")


class Candidate(NamedTuple):
    klass: str
    likelihood: float
    evidence_for: tuple[str, ...]
    evidence_against: tuple[str, ...]
    check: str

    def to_json(self) -> dict[str, Any]:
        return {"class": self.klass, "likelihood": self.likelihood, "for": list(self.evidence_for), "against": list(self.evidence_against), "check": self.check}


@functools.cache
def _table() -> dict[str, Any]:
    return built_in.table("differential.toml")


@functools.cache
def _breadth() -> tuple[dict[str, float], dict[str, int]]:
    """Each candidate's share of a server's life, and its place in the table.

    With nothing said about the phase, every phase a candidate lists is taken as equally likely and, within a
    phase, every class possible there: a class's share is the mean over phases of 1/(classes possible there).
    Another tenant can strike in any phase and CUDA graph capture in one, so a bare OOM's equal odds list the
    first before the second, and its first check is the one that tells the commonest causes apart.
    """
    rows = _table()["candidate"]
    phases = {row["class"]: set(row["phases"]) for row in rows}
    every = set().union(*phases.values())
    share = {k: sum(1 / sum(1 for v in phases.values() if p in v) for p in every if p in v) / len(every) for k, v in phases.items()}
    return share, {row["class"]: i for i, row in enumerate(rows)}


def _words(template: str, facts: dict[str, Any]) -> str:
    """Fill {fact} placeholders (sizes in words, shares as percentages); drop a [[clause]] whose fact is missing."""
    text = _OPTIONAL.sub(lambda m: m.group(1) if all(n in facts for n in _PLACEHOLDER.findall(m.group(1))) else "", template)

    def shown(m: re.Match[str]) -> str:
        name, value = m.group(1), facts.get(m.group(1))
        if value is None:
            return "n/a"
        if name.endswith("_bytes"):
            return format_bytes(int(value))
        if name.endswith("_share"):
            return f"{float(value):.0%}"
        return str(value)

    return _PLACEHOLDER.sub(shown, text)


def _holds(condition: dict[str, Any], facts: dict[str, Any]) -> bool:
    return evaluate(condition, facts).result is True


# The phases a startup milestone's stage (timeline_stage, the v1 vocabulary) names, where that startup
# step is itself a forward pass of the model.
_FORWARD_STEPS = {"cuda_graph": "graph_capture"}
_CAPTURE_FORWARD = "the traceback shows a forward pass and the startup lines before it a CUDA graph capture under way, with no ready line after it: the forward was the capture's"


def _read(facts: dict[str, Any]) -> dict[str, Any]:
    """The facts as the differential reads them: a generic forward frame inside a startup forward step is that step.

    phases.toml's generic "serving" frames (forward, _dummy_run, execute_model, a module's __call__)
    say a forward pass ran, not which: graph capture runs the model's forward too, and its table reads
    a forward frame under a capture frame as capture. A paste cut above the capture frame keeps the
    milestones: when the last before the failure is a capture (its begin line or progress bar) the
    forward was the capture's, and the server_ready that the serving phase set stands on nothing else
    (a ready line would have moved the milestones past the capture).
    """
    step = _FORWARD_STEPS.get(facts.get("timeline_stage") or "")
    if step is None or facts.get("phase") != "serving" or facts.get("phase_source") != "frames":
        return facts
    read = {k: v for k, v in facts.items() if k != "server_ready"}
    read["phase"] = step
    read["_frames_phase"] = facts["phase"]
    return read


def differential(facts: dict[str, Any]) -> list[Candidate]:
    """The ranked candidates for an undecided OOM; never empty while a candidate's phase allows it."""
    facts = _read(facts)
    odds, reasons, checks = _weigh(facts)
    total = sum(odds.values()) + UNNAMED_ODDS
    if total <= UNNAMED_ODDS:
        return []
    # Equal odds are ordered by the class a failure in this phase most often is (data/phases.toml), then by
    # how much of a server's life each class can happen in (_breadth), then by the table's order: an order to
    # read them in (and the first check to run), not a likelihood.
    phase = facts.get("phase") or "unknown"
    likely = phase_step.tables().phases[phase].likely_class if phase in phase_step.tables().phases else ""
    breadth, order = _breadth()
    ranked = sorted((k for k in odds if odds[k] > 0), key=lambda k: (-odds[k], k != likely, -breadth.get(k, 0.0), order.get(k, len(order))))
    return [Candidate(k, round(odds[k] / total, 2), tuple(reasons[k][0]), tuple(reasons[k][1]), checks[k]) for k in ranked[:SHOWN]]


# When the first candidate stands a step of evidence ahead of the second (its odds STEP_ODDS times the
# runner-up's: a ratio of 3 or more in the rounded likelihoods) and holds at least LEAD_LIKELIHOOD, an
# expert would name it: the verdict names it as a hypothesis (no rule decides it, no advice, at most
# confidence.HYPOTHESIS_CAP). 0.4 lies between what one step earns among four candidates and the unnamed
# cause (4 / (4 + 3 + 1) = 0.5) and what it earns among the seven of an unknown phase (4 / 11 = 0.36):
# in a wide field one item of evidence is not a lead; it takes a second (or the rivals it speaks against).
LEAD_LIKELIHOOD = 0.4
LEAD_RATIO = 3.0


def leading(candidates: list[Candidate]) -> Candidate | None:
    """The first candidate when the evidence sets it clearly ahead (see LEAD_LIKELIHOOD), else None.

    Only a lead the evidence speaks for, over a rival it was weighed against: a class left alone because the
    others were ruled out is named by elimination, which is not evidence for it (an engine's KV pool failing
    in the allocator rules out the KV budget and the weights, and leaves another tenant or a fraction set
    too high, which the table does not name)."""
    if len(candidates) < 2 or candidates[0].likelihood < LEAD_LIKELIHOOD or not candidates[0].evidence_for:
        return None
    if candidates[0].likelihood < LEAD_RATIO * candidates[1].likelihood:
        return None
    return candidates[0]


def possible(facts: dict[str, Any]) -> frozenset[str]:
    """The classes the differential leaves open on these facts: a candidate of its phase the evidence did not exclude."""
    odds, _, _ = _weigh(_read(facts))
    return frozenset(k for k, v in odds.items() if v > 0)


def _weigh(facts: dict[str, Any]) -> tuple[dict[str, float], dict[str, tuple[list[str], list[str]]], dict[str, str]]:
    """Every candidate's odds (0 when excluded), its reasons for and against, and its check."""
    table = _table()
    phase = facts.get("phase") or "unknown"
    weak_phase = facts.get("phase_source") in (None, "none", "context")
    odds: dict[str, float] = {}
    reasons: dict[str, tuple[list[str], list[str]]] = {}
    checks: dict[str, str] = {}
    for c in table["candidate"]:
        klass = c["class"]
        if "requires" in c and not _holds(c["requires"], facts):
            continue
        in_phase = phase in c["phases"]
        if not in_phase and not (weak_phase and "unknown" in c["phases"]):
            continue
        odds[klass] = 1.0
        reasons[klass] = ([], [])
        checks[klass] = _words(c["check"], facts)
        if not in_phase:
            odds[klass] /= STEP_ODDS
            reasons[klass][1].append(f"the lines before the failure point to the {phase.replace('_', ' ')} phase")
        elif facts.get("_frames_phase") and facts["_frames_phase"] not in c["phases"]:
            # Why a class the frames alone would not allow is a candidate (no step: it is the phase).
            reasons[klass][0].append(_CAPTURE_FORWARD)
    for item in table["evidence"]:
        klass = item["class"]
        if klass not in odds or not _holds(item["when"], facts):
            continue
        says = _words(item["says"], facts)
        if item["steps"] == "exclude":
            odds[klass] = 0.0
            reasons[klass][1].append(says)
            continue
        factor = STEP_ODDS ** int(item["steps"])
        if item["direction"] == "for":
            odds[klass] *= factor
            reasons[klass][0].append(says)
        else:
            odds[klass] /= factor
            reasons[klass][1].append(says)
    return odds, reasons, checks


# Below this no candidate is "likely": the unnamed cause holds the rest (everything the table names was ruled
# out or weighed down).
_NAMED_FLOOR = 0.05


def summary(candidates: list[Candidate]) -> str:
    """The report's first words for an undecided OOM: the two likeliest and the check that tells them apart."""
    if not candidates:
        return ""
    first = candidates[0]
    if first.likelihood < _NAMED_FLOOR:
        return f"No class the table names is likely on this evidence (the likeliest, {first.klass}, at {first.likelihood:.2f}): something it does not name (an engine bug, a setting, a misreported error) is as likely; the first check: {first.check}. "
    if len(candidates) == 1:
        return f"Most likely {first.klass} ({first.likelihood:.2f}); to confirm it: {first.check}. "
    second = candidates[1]
    if first.likelihood == second.likelihood:
        tied = [c.klass for c in candidates if c.likelihood == first.likelihood]
        names = ", ".join(tied[:-1]) + f" or {tied[-1]}"
        return f"Equally likely on this evidence: {names} ({first.likelihood:.2f} each); the first check: {first.check}. "
    return f"Most likely {first.klass} ({first.likelihood:.2f}), else {second.klass} ({second.likelihood:.2f}); to tell them apart: {first.check}. "

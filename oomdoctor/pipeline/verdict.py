"""The verdict and its words: the chosen incident's summary, or what the input shows when no OOM is evident."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING

from oomdoctor.base.oom_words import MEMORY_SHORTAGE
from oomdoctor.evidence import phase as phase_step
from oomdoctor.evidence.parsers import sglang as sg
from oomdoctor.evidence.readings import Readings
from oomdoctor.evidence.readings import read as read_readings
from oomdoctor.inference import classes, confidence
from oomdoctor.inference.completeness import Completeness
from oomdoctor.memory import budget
from oomdoctor.pipeline.across_nodes import nodes_facts, timeline_of
from oomdoctor.pipeline.budget_view import budget_view
from oomdoctor.pipeline.model import Diagnosis, Finding

if TYPE_CHECKING:
    from typing import Any

    from oomdoctor.base.evidence import LineRef
    from oomdoctor.inference.facts import Facts
    from oomdoctor.input.files import InputStats
    from oomdoctor.pipeline.across_nodes import Across
    from oomdoctor.pipeline.history import IncidentHistory


def incident_verdict(histories: list[tuple[IncidentHistory, list[Any]]], chosen: int, across: Across | None, stats_list: list[InputStats]) -> Diagnosis:
    """The verdict on the chosen server's last incident, its summary joined from every step's words."""
    history = histories[chosen][0]
    incidents = [i for h, _ in histories if h is not history for i in h.incidents()] + history.incidents()
    last = history.incidents()[-1]
    primary = last.primary
    node_text = nodes_facts(last.facts, timeline_of(across, chosen), primary.klass)
    pods_text = _monitoring_text(last.facts)
    summary = primary.message + history.earlier_text() + _reported_text(last.facts)
    summary += node_text + _other_servers_text(histories, history, across) + pods_text
    # The findings say it too (every report shows them): the first failing node on the verdict's
    # finding, the other pods on the foreign-process finding.
    catalogue = classes.load()
    findings = [
        replace(f, message=f.message + (node_text if f is primary else "") + (pods_text if catalogue.has(f.klass, "monitoring_pods") else ""))
        if (f is primary and node_text) or (catalogue.has(f.klass, "monitoring_pods") and pods_text)
        else f
        for f in last.findings
    ]
    return Diagnosis(
        verdict_class=primary.klass,
        verdict_confidence=primary.confidence,
        verdict_rule=primary.rule_id,
        summary=summary,
        findings=findings,
        incidents=incidents,
        budget=budget_view(last.facts),
        not_evaluated=last.not_evaluated,
        inputs=stats_list,
        facts=last.facts,
        evidence=_completeness(last.facts),
        phase=_phase_of(last.facts),
        confidence_factors=primary.factors,
        readings=read_readings(last.facts.events),
    )


def _other_servers_text(histories: list[tuple[IncidentHistory, list[Any]]], chosen: IncidentHistory, across: Across | None) -> str:
    if across is None or len(histories) < 2:
        return ""
    parts = []
    for g, (h, _) in enumerate(histories):
        if h is chosen:
            continue
        incidents = h.incidents()
        what = f"{incidents[-1].primary.klass}" if incidents else "no out-of-memory incident"
        parts.append(f"{across.labels[g]}: {what}")
    verdict = next(across.labels[g] for g, (h, _) in enumerate(histories) if h is chosen)
    return f" The inputs hold {len(histories)} different servers, diagnosed separately (this verdict: {verdict}; " + "; ".join(parts) + ")."


def _monitoring_text(facts: Facts) -> str:
    pods = facts.get("_monitoring_pods") or []
    if not pods:
        return ""
    named = ", ".join(
        f"pod {p['pod']}" + (f" in namespace {p['namespace']}" if p["namespace"] else "") + (f" on GPU {p['gpu']}" if p.get("gpu") is not None else "") + (f" of {p['hostname']}" if p.get("hostname") else "")
        for p in pods
    )
    held = facts.get("monitoring_foreign_bytes")
    much = f", holding {budget.describe(int(held))} (the GPU's used memory minus the server's own)" if held else ""
    return f" DCGM shows another tenant on the server's GPU: {named}{much}."


_REPORTED_WORDS = {
    "mem_fraction_static": "--mem-fraction-static {}",
    "gpu_memory_utilization": "--gpu-memory-utilization {}",
    "tp_size": "TP {}",
    "max_model_len": "--max-model-len {}",
    "context_length": "--context-length {}",
    "chunked_prefill_size": "--chunked-prefill-size {}",
    "max_num_seqs": "--max-num-seqs {}",
    "model_path": "model {}",
    "capacity_bytes": "the GPU ({})",
}


def _reported_text(facts: Facts) -> str:
    """Which numbers rest on the reporter's words rather than on a log line."""
    names = facts.get("reported_facts") or ()
    if not names:
        return ""
    parts = []
    for name in names:
        value = facts.get("reported_gpu") if name == "capacity_bytes" else facts.get(name)
        ref = facts.ref(name)
        where = f" (line {ref.line})" if ref is not None else ""
        parts.append(_REPORTED_WORDS.get(name, name + " {}").format(value) + where)
    return " Stated by the reporter, not read from a log: " + "; ".join(parts) + "."


def _completeness(facts: Facts | None) -> Completeness:
    if facts is None:
        return Completeness("complete")
    return Completeness(facts.get("evidence_status", "complete"), facts.get("evidence_reason", ""), facts.ref("evidence_status"))


def _phase_of(facts: Facts | None) -> phase_step.Phase:
    if facts is None or facts.get("phase") is None:
        return phase_step.UNKNOWN
    return phase_step.Phase(facts.get("phase"), facts.get("phase_source", "none"), facts.ref("phase"))


# What fetches the rest of a cut log, for every hypothesis and inconclusive verdict.
FETCH_REST = (
    "the whole log from the server's start to its end: `kubectl logs --previous POD` (a restarted pod), "
    "`journalctl -u UNIT --no-pager`, `docker logs CONTAINER`, or the log file itself"
)


def no_oom_verdict(runs: list[Any], facts: Facts | None, stats_list: list[InputStats]) -> Diagnosis:
    """The verdict when no OOM is evident: none (how sure depends on how the input ends) or a hypothesis."""
    evidence = _completeness(facts)
    found = _phase_of(facts)
    base: dict[str, Any] = {
        "readings": read_readings(facts.events) if facts is not None else Readings(),
        "incidents": [],
        "budget": budget_view(facts),
        "not_evaluated": [],
        "inputs": stats_list,
        "facts": facts,
        "evidence": evidence,
        "phase": found,
    }
    cause = facts.get("cut_record_cause") if facts is not None else None
    if evidence.incomplete and cause:
        # The cut traceback was raised while handling an exception the input shows, and that one is no OOM: the
        # failure is named, so no memory-class hypothesis; still no more than the cap for incomplete input.
        assert facts is not None
        ref = facts.ref("cut_record_cause")
        where = f" at {ref.path}:{ref.line}" if ref is not None else ""
        summary = "No out-of-memory evidence in the input." + (
            f" The traceback the input stops in {'was raised while handling' if facts.get('cut_record_cause_chained') else 'comes just after'} {cause}{where}: "
            f"{(facts.get('cut_record_cause_message') or '')[:160]}; "
            f"that is not an out-of-memory error, and no memory flag fixes it. The rest of the record is cut ({evidence.reason}): to be sure, fetch {FETCH_REST}."
        )
        factors = [confidence.Factor(f"the evidence is incomplete: {evidence.reason}", -0.55)]
        return Diagnosis(
            verdict_class="none", verdict_confidence=0.35, verdict_rule=None, summary=summary, findings=[], confidence_factors=factors, inconclusive=True, **base
        )
    if evidence.incomplete:
        # Only a record that was opened (a crash began) supports a hypothesis; a bare cut mark does not.
        likely = found.likely_class if found.name != "unknown" and facts is not None and facts.get("failure_record_open") else ""
        if likely:
            # A cut record in a memory-heavy phase: that phase's usual class, as a hypothesis only.
            value = confidence.HYPOTHESIS_CAP if found.source in ("frames", "engine") else confidence.HYPOTHESIS_CAP - 0.10
            message = (
                f"Crash during {found.name.replace('_', ' ')} ({_phase_words(found)}); the exception line is missing: {evidence.reason}. "
                f"If it was an out-of-memory error, then it is most likely {likely} — {classes.load().hypothesis_fix(likely)}. "
                f"To decide it, fetch {FETCH_REST}."
            )
            refs = tuple(dict.fromkeys(r for r in (found.ref, evidence.ref) if r is not None))
            return _phase_hypothesis(found, likely, value, evidence.reason, message, refs, f"the end of the failure record: {FETCH_REST}", base)
        summary = f"Inconclusive: the evidence is incomplete ({evidence.reason}); no failure is evident in what was read."
        spec = phase_step.tables().phases.get(found.name)
        if found.source == "frames" and spec is not None and not spec.likely_class and facts is not None and facts.get("failure_record_open"):
            # The frames name a phase that implies no class (device_sync): say where the record stops and why.
            where = spec.doc.rstrip(".")
            summary += f" Its frames stop in {where[0].lower()}{where[1:]}: no memory class is read from that."
        summary += f" To decide it, fetch {FETCH_REST}."
        return Diagnosis(
            verdict_class="none",
            verdict_confidence=0.3,
            verdict_rule=None,
            summary=summary,
            findings=[],
            confidence_factors=[confidence.Factor(f"the evidence is incomplete: {evidence.reason}", -0.6)],
            inconclusive=True,
            **base,
        )
    summary = "No out-of-memory evidence in the input."
    value = 0.6
    factors = [confidence.Factor("nothing is wrong in the input, and nothing shows how it ends", -0.3)]
    other = next((e for run in runs for e in run.events if e.kind == sg.KIND_CAPTURE_FAILED and not e.get("is_oom")), None)
    if facts is not None and facts.get("load_straggler"):
        # This rank finished loading, another did not: the failure (often an OOM) is in the other rank's log.
        ref = facts.ref("load_straggler")
        where = f" ({ref.path}:{ref.line})" if ref is not None else ""
        summary = (
            f"Inconclusive: this rank finished loading weights but another rank did not{where}; SGLang says that is likely an OOM or a slow node on "
            "that rank. Its log decides it: fetch every rank's log (all pods of the job, or `--log` for each node)."
        )
        factors = [confidence.Factor("the failing rank's log is not in the input", -0.7)]
        base["evidence"] = Completeness("incomplete", "another rank did not finish loading and its log is not in the input", ref)
        return Diagnosis(verdict_class="none", verdict_confidence=0.3, verdict_rule=None, summary=summary, findings=[], confidence_factors=factors, inconclusive=True, **base)
    terminal = facts.get("terminal_exception") if facts is not None and other is None else None
    if other is None and not terminal and found.ref is not None and _stopped_during_startup(facts, found):
        likely, where = found.likely_class, f"{found.ref.path}:{found.ref.line}"
        value = round(confidence.HYPOTHESIS_CAP + _STOPPED_HYPOTHESIS_DELTA, 2)
        reason = f"the input stops during {found.name.replace('_', ' ')} (from {where}), before the server was ready, and shows no error"
        message = (
            f"The log stops during {found.name.replace('_', ' ')} ({_phase_words(found)}), before the server was ready, and shows no error. "
            f"If the server died there, then it is most likely {likely} — {classes.load().hypothesis_fix(likely)}. "
            f"If it is still starting, there is nothing to diagnose yet. To decide it, fetch {FETCH_REST}."
        )
        base["evidence"] = Completeness("incomplete", reason, found.ref)
        return _phase_hypothesis(found, likely, value, reason, message, (found.ref,), f"the lines after {where}: {FETCH_REST}", base)
    if terminal:
        value, factors = 0.9, []
        message = (facts.get("terminal_exception_message") or "")[:160] if facts is not None else ""
        ref = facts.ref("terminal_exception") if facts is not None else None
        where = f" at {ref.path}:{ref.line}" if ref is not None else ""
        if re.search(MEMORY_SHORTAGE, message):
            # A program's own check that its memory budget is short (an assertion, a ValueError) is an OOM in its
            # words, whatever the exception's class: not confidently "no OOM".
            value = 0.5
            factors = [confidence.Factor("the exception's message speaks of a memory budget that is short", -0.4)]
            summary = (
                f"No allocator's out-of-memory error in the input, but the run ended with {terminal}{where} and its message says a "
                f"memory budget was short: {message}. If that is the program's own check before it allocates, give it more memory "
                "(its memory fraction, or free the GPU), as for a KV cache that does not fit at start-up."
            )
        else:
            summary += f" The run ended with {terminal}{where}" + (f": {message}" if message else "") + "; that is not an out-of-memory error, and no memory flag fixes it."
    elif facts is not None and facts.get("clean_end"):
        value, factors = 0.9, []
        summary += " The server shut down cleanly."
    elif facts is not None and (facts.get("retraction_events") or facts.get("preemptions")) and other is None:
        return _deferral_verdict(facts, base)
    # A failure that is not an OOM but that people tune memory flags for: say so.
    if other is not None:
        value, factors = 0.9, []
        summary += (
            f" CUDA graph capture failed at {other.ref.path}:{other.ref.line} for another reason ({(other.get('reason') or '')[:120]}); "
            "lowering --mem-fraction-static or the graph batch size will not fix that."
        )
    if not any(s.lines for s in stats_list):
        value = 0.5
    return Diagnosis(
        verdict_class="none",
        verdict_confidence=value,
        verdict_rule=None,
        summary=summary,
        findings=[],
        confidence_factors=factors,
        **base,
    )


def _deferral_verdict(facts: Facts, base: dict[str, Any]) -> Diagnosis:
    """The engine's own lines say its KV pool ran short: it retracted or preempted requests, and nothing else failed.

    That is the KV pool running out while serving, in the engine's words (the class classes.toml flags
    engine_deferral), and also the engine's routine answer to a full pool, the way it avoids an OOM: whether it
    is the trouble the input was brought for (requests that stalled, timed out or crawled) the lines do not say.
    So the class at the middle of the scale, with both readings and the flag that admits fewer requests.
    """
    retracted = facts.get("retraction_events")
    what = f"{retracted} retraction(s)" if retracted else f"{facts.get('preemptions')} preemption(s)"
    fewer = "--max-running-requests" if retracted else "--max-num-seqs"  # SGLang retracts, vLLM preempts
    klass = classes.load().flagged("engine_deferral") or "none"
    ref = facts.ref("retraction_events" if retracted else "preemptions")
    where = f" (last at {ref.path}:{ref.line})" if ref is not None else ""
    message = (
        f"The engine logged {what}{where}: its KV cache ran out of space and it deferred requests (to recompute or swap them back in later). "
        f"No allocation failed; this is the engine's own answer to a full KV pool. If requests stalled, timed out or slowed, "
        f"the KV pool is too small for the load: admit fewer requests at once ({fewer}) or give the KV cache more memory "
        "(a higher memory fraction where the activation room allows it, more tensor parallelism). If nothing else went wrong, "
        "nothing needs fixing."
    )
    factors = [
        confidence.Factor(f"the engine's own lines say the KV pool ran short ({what}), and no allocation failed", 0.0),
        confidence.Factor("whether requests stalled or slowed is not in the input", round(_KV_POOL_RAN_OUT_CONFIDENCE - 1.0, 2)),
    ]
    would_decide = "the request latencies or the clients' errors while these lines were logged: stalls or timeouts make it the trouble"
    refs = (ref,) if ref is not None else ()
    return _hypothesis(klass, _KV_POOL_RAN_OUT_CONFIDENCE, message, refs, factors, would_decide, base, inconclusive=False)


# Below a cut record's hypothesis: a cut record shows a crash began; a log that merely stops does not.
_STOPPED_HYPOTHESIS_DELTA = -0.15
# The engine's own KV shortage with nothing else wrong: as likely as not the trouble itself (the middle of the scale).
_KV_POOL_RAN_OUT_CONFIDENCE = 0.5


def _stopped_during_startup(facts: Facts | None, found: phase_step.Phase) -> bool:
    """Whether a log stops inside a startup phase, never ready, with no error and no clean end.

    "Nothing is wrong" is not what such a log shows: the server had not finished starting when the
    input ends, so whatever ended it (or the rest of the paste) is missing.
    """
    spec = phase_step.tables().phases.get(found.name)
    if facts is None or spec is None or not spec.begun_only or not found.likely_class:
        return False
    return not (facts.get("server_ready") or facts.get("clean_end") or facts.get("retraction_events") or facts.get("preemptions"))


def _phase_hypothesis(
    found: phase_step.Phase, likely: str, value: float, reason: str, message: str, refs: tuple[LineRef, ...], would_decide: str, base: dict[str, Any]
) -> Diagnosis:
    """The phase's likely class as a hypothesis only: inconclusive, no advice, what would decide it named."""
    factors = [
        confidence.Factor(f"the evidence is incomplete: {reason}", round(value - 1.0, 2)),
        confidence.Factor(f"class inferred from the phase ({found.name}, from {found.source}) only", 0.0),
    ]
    return _hypothesis(likely, value, message, refs, factors, would_decide, base, inconclusive=True)


def _hypothesis(
    klass: str,
    value: float,
    message: str,
    refs: tuple[LineRef, ...],
    factors: list[confidence.Factor],
    would_decide: str,
    base: dict[str, Any],
    inconclusive: bool,
) -> Diagnosis:
    """A class no rule decides, named with its confidence, no advice and what would decide it."""
    finding = Finding(
        rule=None,
        klass=klass,
        confidence=value,
        message=message,
        evidence=refs,
        recommendations=[],
        extra={"hypothesis": True, "would_decide": [would_decide]},
        factors=factors,
    )
    return Diagnosis(
        verdict_class=klass,
        verdict_confidence=value,
        verdict_rule=None,
        summary=message,
        findings=[finding],
        confidence_factors=factors,
        inconclusive=inconclusive,
        **base,
    )


def _phase_words(found: phase_step.Phase) -> str:
    return {"frames": "from its traceback frames", "context": "from the log lines before it", "engine": "from the engine's own line"}.get(found.source, "phase unknown")

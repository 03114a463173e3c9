"""One incident evaluated: every applicable rule on its facts, the findings worded, ranked and given a confidence."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING

from oomdoctor.advice.registry import recommend
from oomdoctor.inference import catalogue, classes, confidence, differential
from oomdoctor.inference.rule_engine import Rule, evaluate
from oomdoctor.memory import budget
from oomdoctor.pipeline.model import Finding, Incident

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any

    from oomdoctor.advice.registry import Recommender
    from oomdoctor.base.evidence import LineRef
    from oomdoctor.inference.facts import Facts


_PLACEHOLDER_RE = re.compile(r"\{(\w+)\}")
_OPTIONAL_RE = re.compile(r"\[\[([^\[\]]*)\]\]")


def _render_message(template: str, facts: Facts) -> str:
    """Fill ``{fact_name}`` placeholders; nothing else in a rule's text is interpreted.

    A clause written ``[[ ... {fact} ...]]`` is left out when one of its facts is missing, so that a
    message never says "n/a" where a clause can simply be dropped. Not ``str.format``: a rule file
    from --rules must not reach attributes like ``{x.__class__}``.
    """

    def optional(m: re.Match[str]) -> str:
        inner = m.group(1)
        return inner if all(name in facts.values for name in _PLACEHOLDER_RE.findall(inner)) else ""

    template = _OPTIONAL_RE.sub(optional, template)

    def shown(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in facts.values:
            return "n/a"
        value = facts.values[name]
        if name.endswith("_bytes") and isinstance(value, (int, float)):
            return budget.describe(int(value))
        if isinstance(value, float):
            return f"{value:g}"
        if isinstance(value, tuple):
            return ", ".join(str(v) for v in value)
        return str(value)

    return _PLACEHOLDER_RE.sub(shown, template)


def _evidence_for(rule: Rule, used: set[str], facts: Facts) -> tuple[LineRef, ...]:
    refs: dict[tuple[str, int], LineRef] = {}
    for name in sorted(used):
        for ref in facts.refs.get(name, ()):
            refs.setdefault((ref.path, ref.line), ref)
    return tuple(sorted(refs.values(), key=lambda r: (r.path, r.line)))


def _finding_extra(rule: Rule, facts: Facts) -> dict[str, Any]:
    if not classes.load().has(rule.klass, "lists_processes"):
        return {}
    server = set(facts.get("process_family_pids") or ())
    processes = [
        {"pid": p.pid, "used_bytes": p.used_bytes, "is_self": p.is_self or p.pid in server or (p.pid == facts.get("assumed_self_pid"))}
        for p in facts.get("process_list") or ()
    ]
    held = facts.get("startup_foreign_bytes")
    if held and "startup_foreign_bytes" in rule.facts_used() and not any(not p["is_self"] for p in processes):
        # The rule decided on memory held before the server started: the OOM message's process list (the
        # server alone) does not show that holder, so the list names it.
        processes.append({"pid": None, "used_bytes": held, "is_self": False, "what": "held before the server started (not in the OOM message)"})
    return {"processes": processes}


def evaluate_incident(facts: Facts, rules: Iterable[Rule], recommenders: Mapping[str, Recommender] | None = None) -> Incident:
    """Run every applicable rule on one incident's facts; order findings by whose fix comes first."""
    values = facts.values
    rules = list(rules)
    system = values.get("system", "unknown")
    fired: list[tuple[int, float, Finding]] = []
    not_evaluated: list[dict[str, Any]] = []
    for rule in rules:
        if "any" not in rule.systems and system not in rule.systems:
            continue
        ev = evaluate(rule.when, values)
        if ev.result is None:
            not_evaluated.append({"rule": rule.id, "missing": sorted(ev.missing)})
            continue
        if not ev.result:
            continue
        used = ev.used | rule.facts_used()
        value, factors = confidence.adjust(rule.confidence, used, _evidence_of(facts), rule.klass)
        if "weights_fit" in used and (facts.get("weights_fit_undecided") or _weights_share_unknown(facts)):
            # The engine says the KV did not fit; which fix (raise the fraction, or shard) is ours to
            # compute, and here it hangs on a per-token KV size the log does not give, or on figures it lacks.
            why = _UNDECIDED_WHY if facts.get("weights_fit_undecided") else _UNKNOWN_WHY
            spec = classes.load().get(rule.klass)
            for rival in spec.companions if spec is not None else ():  # startup_kv's: weights_dont_fit
                value, factors = confidence.tie_cap(value, factors, rival, why)
        finding = Finding(
            rule=rule,
            klass=rule.klass,
            confidence=value,
            factors=factors,
            message=_render_message(rule.message, facts),
            evidence=_evidence_for(rule, ev.used, facts),
            recommendations=recommend(rule.advice, facts, recommenders),
            extra=_finding_extra(rule, facts),
        )
        fired.append((rule.priority, -value, finding))
    fired.sort(key=lambda t: (t[0], t[1], t[2].rule_id or ""))
    findings = [f for _, _, f in fired]
    # Two rules of one class are one finding for the reader; keep the first (highest priority).
    seen: set[str] = set()
    unique: list[Finding] = []
    for f in findings:
        if f.klass not in seen:
            seen.add(f.klass)
            unique.append(f)
    if len(unique) > 1 and unique[1].confidence >= unique[0].confidence and not _companions(unique[0].klass, unique[1].klass):
        # Two classes hold as strongly and neither explains the other: say so in the number.
        value, factors = confidence.tie_cap(unique[0].confidence, unique[0].factors, unique[1].klass)
        unique[0] = replace(unique[0], confidence=value, factors=factors)
    stronger = [f for f in unique[1:] if f.confidence > unique[0].confidence] if unique else []
    if stronger:
        # The verdict is the fix that comes first, not the surest finding: say so where they differ.
        note = confidence.Factor(
            f"ranked first because its fix comes first; {stronger[0].klass} is more certain ({stronger[0].confidence:.2f}) but is addressed after it",
            0.0,
        )
        unique[0] = replace(unique[0], factors=[*unique[0].factors, note])
    if not unique:
        not_evaluated = _that_matter(not_evaluated, rules, None, facts)
        missing = sorted({m for item in not_evaluated for m in item["missing"]})
        decisive = _decisive_gaps(facts)
        evidence = tuple(r for r in (facts.first_line,) if r is not None)
        unique.append(
            Finding(
                rule=None,
                klass="unknown_oom",
                confidence=0.3,
                message=(
                    "An out-of-memory failure is evident, but the evidence does not support any class. "
                    + ("What would decide it: " + "; ".join(decisive) + "." if decisive else "No rule matched its circumstances.")
                ),
                evidence=evidence,
                recommendations=[],
                extra={"missing": missing, "would_decide": decisive},
            )
        )
    if unique[0].klass == "unknown_oom":
        # Not a bare "unknown": the classes it may still be, ranked, and the check that tells them apart.
        candidates = differential.differential(facts.values)
        unique[0] = replace(
            unique[0],
            message=differential.summary(candidates) + unique[0].message,
            extra={**unique[0].extra, "differential": [c.to_json() for c in candidates]},
        )
        lead = differential.leading(candidates)
        if lead is not None:
            unique[0] = _lead_hypothesis(unique[0], candidates)
    if unique[0].rule is not None:
        not_evaluated = _that_matter(not_evaluated, rules, unique[0], facts)
    return Incident(run=facts.run, facts=facts, findings=unique, not_evaluated=not_evaluated)


def _lead_hypothesis(undecided: Finding, candidates: list[differential.Candidate]) -> Finding:
    """An undecided OOM whose differential sets one class clearly ahead: that class, as a hypothesis only.

    No rule holds, so no advice is computed and the confidence stays at or under the hypothesis cap; the
    words say why, what the class's fix is and the one check that confirms it. The differential stays in full.
    """
    lead = candidates[0]
    fix = classes.load().hypothesis_fix(lead.klass)
    value = round(min(confidence.HYPOTHESIS_CAP, lead.likelihood), 2)
    because = "; ".join(lead.evidence_for) if lead.evidence_for else "the phase allows no other class named here"
    runner_up = f" Else {candidates[1].klass} ({candidates[1].likelihood:.2f})." if len(candidates) > 1 else ""
    decisive = list(undecided.extra.get("would_decide", []))
    message = (
        f"Most likely {lead.klass} ({lead.likelihood:.2f} on the differential), a hypothesis: no rule decides it. "
        f"For it: {because}. If so: {fix}.{runner_up} To confirm it: {lead.check}."
        + (" What else would decide it: " + "; ".join(decisive) + "." if decisive else "")
    )
    factors = [
        confidence.Factor("no rule holds: the class is the differential's first candidate, a step of evidence ahead of the next", 0.0),
        confidence.Factor(f"a hypothesis stays at or under {confidence.HYPOTHESIS_CAP:.2f}", round(value - lead.likelihood, 2)),
    ]
    extra = {**undecided.extra, "hypothesis": True, "would_decide": [lead.check, *decisive]}
    return replace(undecided, klass=lead.klass, confidence=value, message=message, extra=extra, factors=factors)


def _that_matter(items: list[dict[str, Any]], rules: Iterable[Rule], first: Finding | None, facts: Facts) -> list[dict[str, Any]]:
    """The rules not evaluated whose missing evidence could change the verdict, each with its class and
    the command that collects what it lacks.

    A rule of the verdict's own class would confirm it, not change it. Against a decided verdict a rule
    matters when it would rank above it had its facts held (its fix comes first, or it is as early and
    surer); against an undecided OOM, when its class is one the differential leaves open (the class
    contract or the phase has not ruled it out). A verdict of no OOM leaves none: with no failure,
    no OOM rule's missing fact changes it.
    """
    if not items or (first is not None and first.klass == "none"):
        return []
    by_id = {r.id: r for r in rules}
    verdict_rule = by_id.get(first.rule_id or "") if first is not None else None
    open_classes = differential.possible(facts.values) if first is None or first.klass == "unknown_oom" else frozenset()
    out = []
    for item in items:
        rule = by_id.get(item["rule"])
        if rule is None or (first is not None and rule.klass == first.klass):
            continue
        if first is None or first.klass == "unknown_oom":
            if rule.klass not in open_classes:
                continue
        elif verdict_rule is not None and not (rule.priority < verdict_rule.priority or (rule.priority == verdict_rule.priority and rule.confidence > first.confidence)):
            continue
        commands = [row["command"] for row in catalogue.load().asks(item["missing"])]
        out.append({**item, "class": rule.klass, "commands": commands})
    return out


_UNDECIDED_WHY = "whether the weights leave room for one request's KV rests on an assumed 1 GiB (the log gives no per-token KV size)"
_UNKNOWN_WHY = "the input gives neither the weights' size nor the memory around their loading: whether any fraction leaves the KV cache room is not known"


def _weights_share_unknown(facts: Facts) -> bool:
    """Nothing in the input says whether the weights leave the KV cache any room at some fraction.

    The engine's startup error says the KV cache did not fit; a larger fraction is the fix when the weights
    leave room under the largest safe one, more GPUs or a smaller model when they do not. That takes the
    weights' size (or the memory before and after their loading), or the engine's own positive KV budget
    (vLLM's "available KV cache memory (N GiB)", a token capacity): a KV budget above zero says the weights
    fit at the fraction in use. A bare error line has none of these.
    """
    if "weights_fit" in facts.values or facts.get("weights_bytes") is not None:
        return False
    return not ((facts.get("kv_budget_bytes") or 0) > 0 or (facts.get("kv_capacity_tokens") or 0) > 0)


def _evidence_of(facts: Facts) -> confidence.Evidence:
    return confidence.Evidence(
        phase_source=facts.get("phase_source", "none"),
        message_complete=facts.get("oom_message_complete"),
        system_fallback=facts.get("system_source") in ("prefix", "frames", "fallback"),
        status=facts.get("evidence_status", "complete"),
        observer_only=any(e.get("source") == "capture_observer" for e in facts.events) and facts.get("oom_count") == 1,
        stated_only=facts.get("driver_oom_source") == "oom_statement" and not facts.get("torch_oom"),
        phase_from_other_ranks=bool(facts.get("phase_from_other_ranks")),
    )


def _decisive_gaps(f: Facts) -> list[str]:
    """The evidence whose absence left an OOM unclassified: what it is and where to get it (the fact catalogue's words)."""
    missing = []
    if f.get("oom_stage") in (None, "unknown", "startup", "kv_pool"):
        missing.append("oom_stage")
    if f.get("requested_bytes") is None:
        missing.append("requested_bytes")
    if f.get("system") == "sglang" and (f.get("pre_bytes") is None or f.get("post_bytes") is None):
        missing.extend(("pre_bytes", "post_bytes"))
    if f.get("process_list") is None and "collected_gpus" not in f.values:
        missing.append("process_list")
    return [f"{row['what']}: {row['command']}" for row in catalogue.load().asks(missing)]


def _companions(first: str, second: str) -> bool:
    """Whether two classes hold together by design (data/classes.toml): their agreement is no rivalry."""
    spec = classes.load().get(first)
    return spec is not None and second in spec.companions

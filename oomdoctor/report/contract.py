"""The JSON contract (DESIGN §5, schema_version 1): what a Diagnosis becomes for every renderer.

The view model (oomdoctor.report.view) builds on it; renderers read only the resulting dict. Keys are
sorted and the same inputs give byte-identical JSON. A finding's ``extra`` may carry only the keys in
EXTRA_KEYS, so nothing unchecked reaches the contract.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomdoctor.inference import classes
from oomdoctor.inference.facts import Facts
from oomdoctor.pipeline.model import Diagnosis, Finding

if TYPE_CHECKING:
    from typing import Any

SCHEMA_VERSION = 1
# What a finding may add beyond the fixed keys: the processes of a foreign_process finding, and the
# missing / would_decide lists of unknown_oom and hypothesis findings.
EXTRA_KEYS = frozenset({"processes", "missing", "would_decide", "hypothesis", "pods", "differential"})


def _jsonable(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)


def finding_json(f: Finding, facts: Facts | None = None) -> dict[str, Any]:
    recommendations = list(f.recommendations)
    extra = dict(f.extra)
    out = {
        "rule": f.rule_id,
        "class": f.klass,
        "confidence": f.confidence,
        "message": f.message,
        "evidence": [{"path": r.path, "line": r.line, "rank": r.rank, "text": r.text} for r in f.evidence],
        "recommendations": [r.to_json() for r in recommendations],
        "confidence_factors": [x.to_json() for x in f.factors],
    }
    if facts is not None and classes.load().has(f.klass, "monitoring_pods") and facts.get("_monitoring_pods"):
        # The other pods DCGM labels on the server's GPU (inside a container nvidia-smi cannot list them).
        extra["pods"] = list(facts.get("_monitoring_pods"))
    unknown = set(extra) - EXTRA_KEYS
    if unknown:
        raise ValueError(f"finding {f.rule_id}: extra keys outside the contract: {sorted(unknown)}")
    out.update(extra)
    return out


def to_dict(d: Diagnosis) -> dict[str, Any]:
    incidents = [
        {
            **({"server": i.facts.get("server")} if i.facts.get("server") else {}),
            "run": i.run,
            "first_line": i.facts.first_line.line if i.facts.first_line else None,
            "path": i.facts.first_line.path if i.facts.first_line else None,
            "time": i.facts.time,
            "class": i.primary.klass,
            "rule": i.primary.rule_id,
        }
        for i in d.incidents
    ]
    return _jsonable(
        {
            **_across(d),
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "oomdoctor", "version": d.tool_version},
            "verdict": {
                "class": d.verdict_class,
                "confidence": d.verdict_confidence,
                "rule": d.verdict_rule,
                "summary": d.summary,
                "evidence": d.evidence.status,
                "evidence_reason": d.evidence.reason,
                "inconclusive": d.inconclusive,
                "phase": {"name": d.phase.name, "source": d.phase.source},
                "confidence_factors": [f.to_json() for f in d.confidence_factors],
                # Additive: the ranked candidates of an OOM no rule decides (inference/differential.py).
                **({"differential": d.findings[0].extra["differential"]} if d.findings and "differential" in d.findings[0].extra else {}),
                **verdict_extra(d),
            },
            "findings": [finding_json(f, d.facts) for f in d.findings],
            "budget": d.budget,
            "incidents": incidents,
            "not_evaluated": d.not_evaluated,
            "implausible_values": list(d.facts.get("implausible_values", ())) if d.facts else [],
            "inputs": [
                {
                    "path": s.path,
                    "kind": s.kind,
                    "lines": s.lines,
                    "unparsed_lines": s.unparsed_lines,
                    "compression": s.compression,
                    "truncated": s.truncated,
                    "long_lines": s.long_lines,
                    "warnings": s.warnings,
                    # Additive, only when it is so: the compressed stream is corrupt, not only cut short.
                    **({"damaged": True} if s.damaged else {}),
                }
                for s in d.inputs
            ],
        }
    )


def _across(d: Diagnosis) -> dict[str, Any]:
    """Additive keys, present only when there is something to say: nodes, consequences, monitoring."""
    f = d.facts
    if f is None:
        return {}
    out: dict[str, Any] = {}
    if f.get("_nodes"):
        out["nodes"] = f.get("_nodes")
        out["consequences"] = f.get("_consequences") or []
    if f.get("_monitoring_gpus"):
        out["monitoring"] = {"gpus": f.get("_monitoring_gpus"), "foreign_pods": list(f.get("monitoring_foreign_pods") or ())}
    if f.get("_samples"):
        from oomdoctor.memory import growth

        totals = {str(g.get("uuid") or g.get("gpu")): g["total_bytes"] for g in f.get("_monitoring_gpus") or () if g.get("total_bytes")}
        found = growth.growth(list(f.get("_samples")), totals)
        if found:
            out["memory_growth"] = found
    return out


def verdict_extra(d: Diagnosis) -> dict[str, Any]:
    """The verdict's node keys (only across nodes): the node, role and rank that failed first."""
    f = d.facts
    if f is None or not f.get("_nodes"):
        return {}
    return {"node": f.get("failing_node"), "node_role": f.get("failing_node_role"), "node_rank_tag": f.get("failing_rank")}

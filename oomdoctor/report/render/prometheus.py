"""Prometheus text format for node_exporter's textfile collector: one diagnosis as samples a fleet can count.

    oomdoctor_incident{class,system,node,gpu}   the incident's time (unix seconds)
    oomdoctor_recommended_value{flag,class}     the verdict's recommended flag values (numeric ones)
    oomdoctor_confidence{class}                 how sure the verdict is (0..1)

Written through prometheus-client's registry (imported here only, so the other formats never need it),
never by string formatting. Write it with ``-o /var/lib/node_exporter/textfile/oomdoctor.prom``
(replaced atomically) or with ``write_textfile``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from oomdoctor.base import timestamps

if TYPE_CHECKING:
    from typing import Any


def _client() -> Any:
    try:
        import prometheus_client
    except ImportError:  # pragma: no cover - a declared dependency
        raise RuntimeError("--format prometheus needs prometheus-client: pip install prometheus-client") from None
    return prometheus_client


def incident_time(view: dict[str, Any], now: float | None = None) -> float:
    """Unix time of the verdict's incident: its log timestamp (UTC when the log gives no zone), else ``now``."""
    for text in _candidate_times(view):
        parsed = timestamps.epoch_seconds(text)
        if parsed is not None:
            return parsed
    if now is None:
        import time

        now = time.time()
    return now


_DATED = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?")


def _candidate_times(view: dict[str, Any]) -> list[str]:
    """The first failing node's time, the incident's, else the latest dated line the verdict cites."""
    out = [n.get("first_failure_time") or "" for n in view.get("nodes") or [] if n.get("is_cause")]
    incidents = view.get("incidents") or []
    out.append((incidents[-1].get("time") if incidents else None) or "")
    findings = view.get("findings") or []
    cited = [m.group(0) for e in (findings[0].get("evidence", []) if findings else []) for m in [_DATED.search(e.get("text") or "")] if m]
    out.extend(sorted(cited, reverse=True))
    return out


def _gpu(view: dict[str, Any]) -> str:
    findings = view.get("findings") or []
    pods = findings[0].get("pods") if findings else None
    if pods and pods[0].get("gpu") is not None:
        return str(pods[0]["gpu"])
    return str((view.get("budget") or {}).get("likely_gpu") or "")


def registry(view: dict[str, Any], now: float | None = None) -> Any:
    """A prometheus-client registry holding the diagnosis's samples."""
    client = _client()
    reg = client.CollectorRegistry()
    verdict = view.get("verdict") or {}
    klass = verdict.get("class") or "none"
    system = (view.get("budget") or {}).get("system") or "unknown"
    confidence = client.Gauge("oomdoctor_confidence", "How sure oomdoctor is of its verdict (0..1).", ["class"], registry=reg)
    confidence.labels(klass).set(float(verdict.get("confidence") or 0.0))
    if klass != "none" and not verdict.get("inconclusive"):
        incident = client.Gauge(
            "oomdoctor_incident", "Unix time of the out-of-memory incident oomdoctor diagnosed.", ["class", "system", "node", "gpu"], registry=reg
        )
        incident.labels(klass, system, str(verdict.get("node") or ""), _gpu(view)).set(incident_time(view, now))
    recommended = client.Gauge("oomdoctor_recommended_value", "The value oomdoctor recommends for a launch flag or setting.", ["flag", "class"], registry=reg)
    findings = view.get("findings") or []
    for rec in findings[0].get("recommendations", []) if findings else []:
        value = rec.get("value")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and rec.get("flag"):
            recommended.labels(str(rec["flag"]), klass).set(float(value))
    return reg


def render(view: dict[str, Any], now: float | None = None) -> str:
    return _client().generate_latest(registry(view, now)).decode("utf-8")


def write_textfile(view: dict[str, Any], path: str, now: float | None = None) -> None:
    """Write the samples for the textfile collector with prometheus-client's atomic write_to_textfile."""
    _client().write_to_textfile(path, registry(view, now))

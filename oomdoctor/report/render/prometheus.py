"""Prometheus text format for node_exporter's textfile collector: one diagnosis as samples a fleet can alert on.

    oomdoctor_incident_info{server,class,system,node,gpu,gpu_model,time_source}  1 per diagnosed OOM
    oomdoctor_incident_timestamp_seconds{server,class,system,node,gpu,gpu_model} the incident's Unix time
    oomdoctor_confidence_ratio{server,class}                  how sure the verdict is (0..1)
    oomdoctor_recommended_value{server,class,flag}            the verdict's numeric flag values
    oomdoctor_budget_{weights,kv_pool,activation_reserve}_bytes{server,system,gpu,gpu_model}
                                                              the server's memory split, per GPU (healthy too)
    oomdoctor_memory_growth_bytes_per_second{server,gpu,pid}  memory that grows until it fails (memory/growth.py)
    oomdoctor_projected_full_seconds{server,gpu,pid}          seconds until that growth fills the card

One meaning per label: ``server`` is the server's identity (the textfile's name carries it too, so two
servers on one node keep two files and distinct series), ``gpu`` an index or UUID (empty when the inputs
do not say which card), ``gpu_model`` the class of card. The incident's time is the log's: a vLLM
month-day stamp takes its year from a reference (input/dating.py) and ``time_source`` says which one
(``log``, ``log+manifest``, ``log+log``, ``log+mtime``; ``preceding...`` when the failure's lines carry no
stamp and the last stamped line before them gives it); when no time is known ``time_source`` is ``unknown``
and there is no timestamp sample (never the time of diagnosis).

Written through prometheus-client's registry (imported here only, so the other formats never need it),
never by string formatting.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from oomdoctor.base import timestamps

if TYPE_CHECKING:
    from typing import Any

    from oomdoctor.input.dating import Reference


def _client() -> Any:
    try:
        import prometheus_client
    except ImportError:  # pragma: no cover - a declared dependency
        raise RuntimeError("--format prometheus needs prometheus-client: pip install prometheus-client") from None
    return prometheus_client


_DATED = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?|(?<![\d-])\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?")


def incident_time(view: dict[str, Any], references: dict[str, Reference] | None = None, preceding: tuple[str, str] | None = None) -> tuple[float | None, str]:
    """Unix time of the verdict's incident and where it came from; ``(None, "unknown")`` when nothing dates it.

    A full-date stamp is read as it is (UTC when it has no zone); a month-day stamp takes its year from the
    reference of the input it came from (else of any input). ``preceding``: (stamp, path) of the last stamped
    line before the failure (input/dating.py), used when the failure's own lines carry no stamp; its
    ``time_source`` starts ``preceding``.
    """
    references = references or {}
    found = _dated(_candidate_times(view), references)
    if found[0] is None and preceding:
        unix, source = _dated([preceding], references)
        return (unix, source.replace("log", "preceding", 1)) if unix is not None else (None, "unknown")
    return found


def _dated(candidates: list[tuple[str, str]], references: dict[str, Reference]) -> tuple[float | None, str]:
    for text, path in candidates:
        full = timestamps.epoch_seconds(text)
        if full is not None:
            return full, "log"
        refs = [references[path]] if path in references else list(references.values())
        for ref in refs:
            dated = timestamps.with_year(text, ref.unix, not_after=ref.not_after)
            if dated is not None:
                return dated, f"log+{ref.source}"
    return None, "unknown"


def _candidate_times(view: dict[str, Any]) -> list[tuple[str, str]]:
    """(stamp, input path): the first failing node's time, the incident's, else the latest stamp the verdict cites."""
    first_input = ((view.get("inputs") or [{}])[0]).get("path") or ""
    out = [(n.get("first_failure_time") or "", ((n.get("first_failure_line") or {}).get("path") or first_input)) for n in view.get("nodes") or [] if n.get("is_cause")]
    incidents = view.get("incidents") or []
    if incidents:
        out.append((incidents[-1].get("time") or "", incidents[-1].get("path") or first_input))
    findings = view.get("findings") or []
    cited = [(m.group(0), e.get("path") or first_input) for e in (findings[0].get("evidence", []) if findings else []) for m in [_DATED.search(e.get("text") or "")] if m]
    out.extend(sorted(cited, reverse=True))
    return [(t, p) for t, p in out if t]


_TORCH_DEVICE = re.compile(r"\bGPU (\d+) has a total capacity of")


def gpu_id(view: dict[str, Any]) -> str:
    """The failing card's index or UUID: the DCGM pod's GPU, else the index PyTorch's OOM message names; "" when unknown."""
    findings = view.get("findings") or []
    pods = findings[0].get("pods") if findings else None
    if pods and pods[0].get("gpu") is not None:
        return str(pods[0]["gpu"])
    for e in findings[0].get("evidence", []) if findings else []:
        m = _TORCH_DEVICE.search(e.get("text") or "")
        if m:
            return m.group(1)
    return ""


def gpu_model(view: dict[str, Any]) -> str:
    return str((view.get("budget") or {}).get("likely_gpu") or "")


# The budget's per-GPU split as gauges: (metric, help, the budget keys in order of preference).
_BUDGET = (
    ("oomdoctor_budget_weights_bytes", "Model weights per GPU, as the server's log measured them.", ("weights_bytes",)),
    ("oomdoctor_budget_kv_pool_bytes", "KV cache pool per GPU (the pool the server built, else the budget it had for one).", ("kv_pool_bytes", "kv_budget_bytes")),
    (
        "oomdoctor_budget_activation_reserve_bytes",
        "Memory per GPU left outside the static region for activations, CUDA graphs and workspaces (SGLang's (1-y)*pre).",
        ("dynamic_region_bytes",),
    ),
)

_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


def server_identity(text: str) -> str:
    """A server's identity as a label value and file-name part: letters, digits, ``._-``, at most 64 characters."""
    return _SAFE_NAME.sub("-", text).strip("-.")[:64] or "server"


def textfile_name(server: str) -> str:
    """The textfile for one server: ``oomdoctor-<server>.prom`` (two servers on a node keep two files)."""
    return f"oomdoctor-{server_identity(server)}.prom"


def registry(view: dict[str, Any], server: str = "server", references: dict[str, Reference] | None = None, preceding: tuple[str, str] | None = None) -> Any:
    """A prometheus-client registry holding the diagnosis's samples for ``server``."""
    client = _client()
    reg = client.CollectorRegistry()
    server = server_identity(server)
    verdict = view.get("verdict") or {}
    klass = verdict.get("class") or "none"
    budget = view.get("budget") or {}
    system = budget.get("system") or "unknown"
    gpu, model = gpu_id(view), gpu_model(view)
    confidence = client.Gauge("oomdoctor_confidence_ratio", "How sure oomdoctor is of its verdict (0..1).", ["server", "class"], registry=reg)
    confidence.labels(server, klass).set(float(verdict.get("confidence") or 0.0))
    if klass != "none" and not verdict.get("inconclusive"):
        node = str(verdict.get("node") or "")
        unix, source = incident_time(view, references, preceding)
        info = client.Gauge(
            "oomdoctor_incident_info", "An out-of-memory incident oomdoctor diagnosed (1); time_source says where its time came from.",
            ["server", "class", "system", "node", "gpu", "gpu_model", "time_source"], registry=reg,
        )
        info.labels(server, klass, system, node, gpu, model, source).set(1)
        if unix is not None:
            stamp = client.Gauge(
                "oomdoctor_incident_timestamp_seconds", "Unix time of the out-of-memory incident, from its log.",
                ["server", "class", "system", "node", "gpu", "gpu_model"], registry=reg,
            )
            stamp.labels(server, klass, system, node, gpu, model).set(unix)
    recommended = client.Gauge("oomdoctor_recommended_value", "The value oomdoctor recommends for a launch flag or setting.", ["server", "class", "flag"], registry=reg)
    findings = view.get("findings") or []
    for rec in findings[0].get("recommendations", []) if findings else []:
        value = rec.get("value")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and rec.get("flag"):
            recommended.labels(server, klass, str(rec["flag"])).set(float(value))
    for name, help_text, keys in _BUDGET:
        value = next((budget[k] for k in keys if isinstance(budget.get(k), (int, float))), None)
        if value is not None:
            client.Gauge(name, help_text, ["server", "system", "gpu", "gpu_model"], registry=reg).labels(server, system, gpu, model).set(float(value))
    _growth(client, reg, view, server)
    return reg


def _growth(client: Any, reg: Any, view: dict[str, Any], server: str, always: bool = False) -> None:
    """The memory-growth findings' rate and time to full (memory/growth.py), for an alert that fires before the OOM.

    ``always``: the families even without a growing series (the live file of ``run``: no sample means no growth).
    """
    trends = view.get("memory_growth") or []
    if not trends and not always:
        return
    labels = ["server", "gpu", "pid"]
    rate = client.Gauge("oomdoctor_memory_growth_bytes_per_second", "GPU memory growth of a process, from a linear fit over its samples.", labels, registry=reg)
    full = client.Gauge("oomdoctor_projected_full_seconds", "Seconds from the last sample until that growth fills the card.", labels, registry=reg)
    for t in trends:
        key = (server, str(t.get("gpu") if t.get("gpu") is not None else ""), str(t.get("pid") if t.get("pid") is not None else ""))
        rate.labels(*key).set(float(t["bytes_per_second"]))
        if t.get("seconds_to_full") is not None:
            full.labels(*key).set(float(t["seconds_to_full"]))


def render(view: dict[str, Any], server: str = "server", references: dict[str, Reference] | None = None, preceding: tuple[str, str] | None = None) -> str:
    return _client().generate_latest(registry(view, server, references, preceding)).decode("utf-8")


def write_textfile(view: dict[str, Any], path: str, server: str = "server", references: dict[str, Reference] | None = None, preceding: tuple[str, str] | None = None) -> None:
    """Write the samples for the textfile collector with prometheus-client's atomic write_to_textfile."""
    _client().write_to_textfile(path, registry(view, server, references, preceding))


def write_growth_textfile(trends: list[dict[str, Any]], path: str, server: str = "server") -> None:
    """``run``'s live file while the server is up: only the growth gauges, rewritten as samples come in."""
    client = _client()
    reg = client.CollectorRegistry()
    _growth(client, reg, {"memory_growth": trends}, server_identity(server), always=True)
    client.write_to_textfile(path, reg)

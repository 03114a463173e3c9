"""The engines' own Prometheus metrics pasted beside a log: KV pool use, preemptions, request queues.

What a ``curl :8000/metrics`` scrape prints (the text exposition format), or a Prometheus HTTP API
query result (``/api/v1/query`` or ``query_range`` JSON), of the series that tell how loaded the
server was before it failed:

| metric (engine's source) | read as |
|---|---|
| ``vllm:kv_cache_usage_perc``, older ``vllm:gpu_cache_usage_perc`` (vllm/v1/metrics/loggers.py, a 0-1 gauge) | ``kv_usage`` |
| ``vllm:num_preemptions_total`` (the counter ``vllm:num_preemptions``; prometheus_client adds ``_total``) | ``preemptions`` |
| ``vllm:num_requests_waiting`` / ``vllm:num_requests_running`` | ``waiting`` / ``running`` |
| ``sglang:token_usage`` (sglang/srt/metrics/collector.py, the KV token pool's use, 0-1) | ``kv_usage`` |
| ``sglang:num_queue_reqs`` / ``sglang:num_running_reqs`` | ``waiting`` / ``running`` |

Sample lines are read with the DCGM scrape's reader (oomdoctor.evidence.monitoring: linear in the
line, label escapes stepped over one at a time), the query JSON with ``json`` when it is one line.
Each sample becomes one ``engine_metric`` event. A malformed line is skipped here (a paste is not a
scrape file; a file given to diagnose is refused with its line, as the DCGM scrape is). Pure.
"""

from __future__ import annotations

import json
import math
import re
from typing import TYPE_CHECKING

from oomdoctor.base.evidence import Event, Line, LineRef
from oomdoctor.evidence.parsers.pasted import ENGINE_METRIC_ANCHORS

if TYPE_CHECKING:
    from typing import Any

KIND_ENGINE_METRIC = "engine_metric"
KINDS = frozenset({KIND_ENGINE_METRIC})
ANCHORS: tuple[bytes, ...] = ENGINE_METRIC_ANCHORS

# Series name -> (engine, what it is).
METRICS: dict[str, tuple[str, str]] = {
    "vllm:kv_cache_usage_perc": ("vllm", "kv_usage"),
    "vllm:gpu_cache_usage_perc": ("vllm", "kv_usage"),
    "vllm:num_preemptions_total": ("vllm", "preemptions"),
    "vllm:num_preemptions": ("vllm", "preemptions"),
    "vllm:num_requests_waiting": ("vllm", "waiting"),
    "vllm:num_requests_running": ("vllm", "running"),
    "sglang:token_usage": ("sglang", "kv_usage"),
    "sglang:num_queue_reqs": ("sglang", "waiting"),
    "sglang:num_running_reqs": ("sglang", "running"),
}
_NAME_RE = re.compile("(" + "|".join(re.escape(n) for n in sorted(METRICS, key=len, reverse=True)) + r")(?=[{ \t])")
# Labels kept on the event (which engine core / DP rank / model a sample is of); the rest are dropped.
_KEPT_LABELS = ("engine", "model_name", "dp_rank", "tp_rank", "pp_rank", "instance")


def _event(name: str, labels: dict[str, str], value: float, ref: LineRef) -> Event | None:
    if name not in METRICS or not math.isfinite(value) or value < 0:
        return None
    engine, what = METRICS[name]
    if what == "kv_usage" and value > 1.0:
        return None  # a share: above 1 is not this gauge
    kept = {k: labels[k][:200] for k in _KEPT_LABELS if k in labels}
    return Event(KIND_ENGINE_METRIC, (ref,), {"engine": engine, "metric": what, "name": name, "value": value, "labels": kept})


def query_events(data: Any, ref: LineRef) -> list[Event]:
    """The engine series of a Prometheus HTTP API result (instant ``value`` or range ``values``), each point an event."""
    result = data.get("data", {}).get("result") if isinstance(data, dict) and isinstance(data.get("data"), dict) else None
    out: list[Event] = []
    for series in result if isinstance(result, list) else []:
        if not isinstance(series, dict) or not isinstance(series.get("metric"), dict):
            continue
        labels = {str(k): str(v) for k, v in series["metric"].items()}
        points = series.get("values") or ([series["value"]] if series.get("value") else [])
        for point in points if isinstance(points, list) else []:
            try:
                value = float(point[1])
            except (TypeError, ValueError, IndexError, KeyError, OverflowError):
                continue  # "NaN" written as a string, or not a point: no reading
            e = _event(labels.get("__name__", ""), labels, value, ref)
            if e is not None:
                out.append(e)
    return out


class EngineMetricsParser:
    """One line at a time: a sample line of an engine series, or a one-line query result."""

    def feed(self, line: Line) -> list[Event]:
        from oomdoctor.evidence import monitoring

        msg = line.msg.strip()
        if not msg or len(msg) > 100_000:
            return []
        if msg.startswith("{") and '"result"' in msg:
            try:
                return query_events(json.loads(msg), line.ref)
            except ValueError:
                return []
        m = _NAME_RE.search(msg)
        if m is None or msg.startswith("#"):
            return []
        try:
            sample = monitoring.sample(msg[m.start() :] + "\n", _NAME_RE)
        except ValueError:
            return []  # a malformed sample in a paste: not read
        if sample is None:
            return []
        e = _event(sample[0], sample[1], sample[2], line.ref)
        return [e] if e is not None else []

    def finish(self) -> list[Event]:
        return []


def looks_like_engine_metrics(head: bytes) -> bool:
    """A saved /metrics scrape of vLLM or SGLang, whatever the file is called."""
    return any(a in head for a in ENGINE_METRIC_ANCHORS)


def read_text(text: str, path: str) -> list[Event]:
    """The engine series of a saved scrape, each sample cited by its line."""
    parser = EngineMetricsParser()
    out: list[Event] = []
    for number, raw in enumerate(text.splitlines(), 1):
        out += parser.feed(Line(ref=LineRef(path=path, line=number, text=raw[:4000]), msg=raw))
    return out

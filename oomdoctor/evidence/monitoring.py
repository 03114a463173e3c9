"""GPU evidence from the monitoring stack: a DCGM exporter /metrics scrape and a Prometheus query_range export.

Inside a container ``nvidia-smi`` does not list other containers' processes; NVIDIA's DCGM exporter
labels each GPU's series with the Kubernetes pod, namespace and container it is assigned to (one
series per pod where the GPU is shared by time-slicing or MPS). With the server's own memory from its
log (the OOM message's "this process has X in use"), the GPU's used memory minus the server's own is
what the other pods on that GPU held.

Of the text exposition format only the framebuffer samples are read, line by line with linear regular
expressions (the official client's parser spends quadratic time on a label value full of backslashes
and holds a whole metric family at once; its results on real scrapes are the same, tests compare them);
the query_range JSON is the Prometheus HTTP API's own.
"""

from __future__ import annotations

import io
import math
import re
from typing import TYPE_CHECKING

from oomdoctor.base.errors import InputError
from oomdoctor.input.secret_rules import redact_secrets

if TYPE_CHECKING:
    from typing import Any

MIB = 1 << 20
# Framebuffer metrics of the DCGM exporter (MiB), and what each becomes.
_FB = {"DCGM_FI_DEV_FB_USED": "used_bytes", "DCGM_FI_DEV_FB_FREE": "free_bytes", "DCGM_FI_DEV_FB_RESERVED": "reserved_bytes", "DCGM_FI_DEV_FB_TOTAL": "total_bytes"}
_POD_LABELS = (("pod", "namespace", "container"), ("exported_pod", "exported_namespace", "exported_container"))
# Past these a scrape is not of real GPUs (a node has at most a few dozen; time-slicing shares one among
# tens of pods): it is refused with the cap named instead of being read at any length.
MAX_DCGM_GPUS = 4096
MAX_PODS_PER_GPU = 256


def looks_like_dcgm(head: bytes) -> bool:
    """A DCGM exporter scrape, whatever the file is called (a `curl .../metrics > metrics.txt`)."""
    return b"DCGM_FI_DEV_FB_USED" in head or b"DCGM_FI_DEV_FB_FREE" in head


def _gpu_key(labels: dict[str, str]) -> tuple[str, str, str]:
    return (labels.get("Hostname") or labels.get("instance") or "", labels.get("UUID") or labels.get("uuid") or "", labels.get("gpu") or labels.get("device") or "")


def _pod_of(labels: dict[str, str]) -> dict[str, str] | None:
    for pod_l, ns_l, c_l in _POD_LABELS:
        if labels.get(pod_l):
            return {"pod": labels[pod_l], "namespace": labels.get(ns_l, ""), "container": labels.get(c_l, "")}
    return None


def _gpu_entry(gpus: dict[tuple[str, str, str], dict[str, Any]], labels: dict[str, str], path: str = "") -> dict[str, Any]:
    key = _gpu_key(labels)
    entry = gpus.get(key)
    if entry is None:
        if len(gpus) >= MAX_DCGM_GPUS:
            raise InputError(f"{path}: more than {MAX_DCGM_GPUS} GPUs (oomdoctor.evidence.monitoring.MAX_DCGM_GPUS); not a scrape of real GPUs")
        entry = gpus[key] = {
            "hostname": key[0] or None,
            "uuid": key[1] or None,
            "gpu": int(key[2]) if key[2].isdigit() else (key[2] or None),
            "model": labels.get("modelName"),
            "pods": [],
            "_pod_keys": set(),
        }
    pod = _pod_of(labels)
    if pod is not None:
        pod_key = (pod["pod"], pod["namespace"], pod["container"])
        if pod_key not in entry["_pod_keys"]:  # a set: a GPU with many pods is read in linear time
            if len(entry["pods"]) >= MAX_PODS_PER_GPU:
                raise InputError(f"{path}: more than {MAX_PODS_PER_GPU} pods on one GPU (oomdoctor.evidence.monitoring.MAX_PODS_PER_GPU); not a scrape of real GPUs")
            entry["_pod_keys"].add(pod_key)
            entry["pods"].append(pod)
    return entry


# One framebuffer sample line: name, optional {labels}, value, optional timestamp. Each label is
# name="value" with \\, \" and \n escapes. No pattern repeats an alternation (which the re module
# runs with a saved state per repeat): runs of plain characters are one character class, and escapes
# are stepped over one at a time, so time and memory stay linear in the line.
_FB_NAME_RE = re.compile(r"(DCGM_FI_DEV_FB_(?:USED|FREE|RESERVED|TOTAL))(?=[{ \t])")
_LABEL_NAME_RE = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"')
_PLAIN_RE = re.compile(r'[^"\\\n]*')
_AFTER_VALUE_RE = re.compile(r"[ \t]*(,?)")
_END_LABELS_RE = re.compile(r"[ \t]*\}")
_VALUE_RE = re.compile(r"[ \t]+([^ \t\n]+)(?:[ \t]+-?[0-9]+)?[ \t]*\n?\Z")
_ESCAPES = {"n": "\n", "\\": "\\", '"': '"'}


def _quoted(line: str) -> str:
    """A scrape line as an error quotes it: its secrets redacted first (a label may hold one), then cut,
    so no cut leaves the start of a token the rules would no longer know."""
    return repr(redact_secrets(line)[:80])


def _label_value(line: str, pos: int) -> tuple[str, int]:
    """The unescaped label value that starts at ``pos`` (just after its opening quote) and where it ends."""
    parts = []
    while True:
        plain = _PLAIN_RE.match(line, pos)
        assert plain is not None  # * matches the empty string
        parts.append(plain.group())
        pos = plain.end()
        if pos >= len(line) or line[pos] == "\n":
            raise ValueError(f"unterminated label value in {_quoted(line)}")
        if line[pos] == '"':
            return "".join(parts), pos + 1
        escaped = line[pos + 1 : pos + 2]
        parts.append(_ESCAPES.get(escaped, "\\" + escaped))
        pos += 2


def _sample(line: str, name_re: re.Pattern[str] = _FB_NAME_RE) -> tuple[str, dict[str, str], float] | None:
    """(metric, labels, value) of a sample line whose name ``name_re`` matches (the framebuffer metrics by
    default); None for any other line; ValueError when it is malformed."""
    m = name_re.match(line)
    if m is None:
        return None
    labels: dict[str, str] = {}
    pos = m.end()
    if line.startswith("{", pos):
        pos += 1
        while True:
            name = _LABEL_NAME_RE.match(line, pos)
            if name is None:
                break
            labels[name.group(1)], pos = _label_value(line, name.end())
            after = _AFTER_VALUE_RE.match(line, pos)
            assert after is not None  # every part is optional
            pos = after.end()
            if not after.group(1):
                break
        end = _END_LABELS_RE.match(line, pos)
        if end is None:
            raise ValueError(f"malformed labels in {_quoted(line)}")
        pos = end.end()
    vm = _VALUE_RE.match(line, pos)
    if vm is None:
        raise ValueError(f"no value in {_quoted(line)}")
    return m.group(1), labels, float(vm.group(1))


# The engines' metrics read the same way (oomdoctor.evidence.parsers.engine_metrics).
sample = _sample


def parse_scrape(text: str, path: str) -> dict[str, Any]:
    """A DCGM exporter /metrics scrape to {'kind': 'dcgm', 'gpus': [...]} (sizes in bytes); linear in the scrape's length."""
    gpus: dict[tuple[str, str, str], dict[str, Any]] = {}
    for n, line in enumerate(io.StringIO(text), 1):
        try:
            sample = _sample(line)
        except ValueError as exc:
            raise InputError(f"{path}:{n}: not a Prometheus text exposition ({str(exc)[:200]})") from None
        if sample is None:
            continue
        name, labels, raw = sample
        entry = _gpu_entry(gpus, labels, path)
        value = _mib_bytes(raw)
        if value is not None:  # NaN or an infinity: no reading, the rest of the scrape still counts
            entry[_FB[name]] = value
    if not gpus:
        raise InputError(f"{path}: no DCGM_FI_DEV_FB_USED / DCGM_FI_DEV_FB_FREE samples (a DCGM exporter /metrics scrape is expected)")
    return {"kind": "dcgm", "path": path, "source": "dcgm-exporter /metrics", "gpus": _finish(gpus)}


def _mib_bytes(value: float) -> int | None:
    """A framebuffer figure in MiB as bytes; None for NaN, an infinity or a size no GPU has."""
    if not (math.isfinite(value) and 0 <= value < _MAX_MIB):
        return None
    return int(value * MIB)


_MAX_MIB = 1 << 44  # 16 EiB in MiB, as live.smi reads nvidia-smi's figures


def _finish(gpus: dict[tuple[str, str, str], dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for entry in gpus.values():
        if entry.get("total_bytes") is None and entry.get("used_bytes") is not None and entry.get("free_bytes") is not None:
            entry["total_bytes"] = entry["used_bytes"] + entry["free_bytes"] + entry.get("reserved_bytes", 0)
        entry.pop("_pod_keys", None)
        entry["pods"] = sorted(entry["pods"], key=lambda p: (p["namespace"], p["pod"], p["container"]))
        out.append(entry)
    return sorted(out, key=lambda g: (g["hostname"] or "", str(g["gpu"]), g["uuid"] or ""))


def is_query_range(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("data"), dict) and data["data"].get("resultType") in ("matrix", "vector")


def parse_query_range(data: dict[str, Any], path: str) -> dict[str, Any]:
    """A Prometheus query_range (or instant query) export of DCGM framebuffer series, per GPU over time.

    The snapshot kept for the foreign-memory arithmetic is each GPU's peak used memory in the window
    (an OOM happens at the peak; after the crash the server's memory is already free).
    """
    if data.get("status") not in (None, "success"):
        raise InputError(f"{path}: the Prometheus query failed ({data.get('error') or data.get('status')})")
    gpus: dict[tuple[str, str, str], dict[str, Any]] = {}
    series: dict[tuple[str, str, str], dict[float, int]] = {}
    results = data["data"].get("result") or []
    for result in results if isinstance(results, list) else []:
        if not isinstance(result, dict) or not isinstance(result.get("metric") or {}, dict):
            continue
        labels = {str(k): str(v) for k, v in (result.get("metric") or {}).items()}
        field = _FB.get(labels.get("__name__", "DCGM_FI_DEV_FB_USED"))
        if field is None:
            continue
        points = result.get("values") or ([result["value"]] if result.get("value") else [])
        entry = _gpu_entry(gpus, labels, path)
        for point in points if isinstance(points, list) else []:
            try:
                t, value = float(point[0]), int(float(point[1]) * MIB)
            except (TypeError, ValueError, IndexError, KeyError, OverflowError):
                continue  # "NaN", "+Inf" (Prometheus writes them as strings) or not a point: no reading
            if not (math.isfinite(t) and 0 <= value < _MAX_MIB * MIB):
                continue
            if field == "used_bytes":
                series.setdefault(_gpu_key(labels), {})[t] = value
                entry["used_bytes"] = max(entry.get("used_bytes", 0), value)
            elif field == "free_bytes":
                entry[field] = min(entry.get(field, value), value)  # the least free in the window
            elif field not in entry:
                entry[field] = value
    if not gpus:
        raise InputError(f"{path}: no DCGM framebuffer series in the Prometheus export")
    samples = [
        {"t": t, "gpus": [{"index": g["gpu"], "uuid": g["uuid"], "hostname": g["hostname"], "used_bytes": series[k][t]} for k, g in gpus.items() if t in series.get(k, {})], "processes": []}
        for t in sorted({t for s in series.values() for t in s})
    ]
    return {"kind": "dcgm", "path": path, "source": "prometheus query_range", "gpus": _finish(gpus), "samples": samples}


def foreign_pods(items: list[dict[str, Any]], own: set[str], self_bytes: int | None) -> dict[str, Any] | None:
    """The other pods on the server's GPUs and what they held: used memory minus the server's own.

    The server's GPUs are those labelled with one of its pods (``own``: pod names, host names, node
    names from the logs); when none is, a GPU shared by several pods is the candidate.
    """
    gpus = [g for item in items if item.get("kind") == "dcgm" for g in item.get("gpus", [])]
    if not gpus:
        return None

    def mine(g: dict[str, Any]) -> bool:
        return any(p["pod"] in own for p in g["pods"])

    server_gpus = [g for g in gpus if mine(g)]
    if not server_gpus:
        server_gpus = [g for g in gpus if len(g["pods"]) > 1]
    if not server_gpus:
        return None
    pods: list[dict[str, Any]] = []
    held = 0
    for g in server_gpus:
        others = [p for p in g["pods"] if p["pod"] not in own]
        if not others:
            continue
        used = g.get("used_bytes")
        other = used - self_bytes if used is not None and self_bytes is not None else None
        if other is not None and other > 0:
            held = max(held, other)
        for p in others:
            pods.append({**p, "gpu": g["gpu"], "uuid": g["uuid"], "hostname": g["hostname"], "gpu_used_bytes": used, "other_bytes": other if other is None or other > 0 else 0})
    if not pods:
        return None
    return {"pods": pods, "held_bytes": held or None, "self_known": bool(own & {p["pod"] for g in server_gpus for p in g["pods"]})}


def gpus_json(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per GPU: its labels, its framebuffer figures, and its used memory over time (query_range)."""
    out = []
    for item in items:
        if item.get("kind") != "dcgm":
            continue
        over_time: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
        for s in item.get("samples") or []:
            for g in s["gpus"]:
                over_time.setdefault((g["hostname"], g["uuid"]), []).append({"t": s["t"], "used_bytes": g["used_bytes"]})
        for g in item["gpus"]:
            out.append({**g, "source": item["source"], "path": item["path"], "used_over_time": over_time.get((g["hostname"], g["uuid"]), [])})
    return out

"""GPU evidence from the monitoring stack: a DCGM exporter /metrics scrape and a Prometheus query_range export.

Inside a container ``nvidia-smi`` does not list other containers' processes; NVIDIA's DCGM exporter
labels each GPU's series with the Kubernetes pod, namespace and container it is assigned to (one
series per pod where the GPU is shared by time-slicing or MPS). With the server's own memory from its
log (the OOM message's "this process has X in use"), the GPU's used memory minus the server's own is
what the other pods on that GPU held.

The text exposition format is parsed with the official client's parser (``prometheus-client``,
imported only when such a file is read); the query_range JSON is the Prometheus HTTP API's own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomdoctor.base.errors import InputError

if TYPE_CHECKING:
    from typing import Any

MIB = 1 << 20
# Framebuffer metrics of the DCGM exporter (MiB), and what each becomes.
_FB = {"DCGM_FI_DEV_FB_USED": "used_bytes", "DCGM_FI_DEV_FB_FREE": "free_bytes", "DCGM_FI_DEV_FB_RESERVED": "reserved_bytes", "DCGM_FI_DEV_FB_TOTAL": "total_bytes"}
_POD_LABELS = (("pod", "namespace", "container"), ("exported_pod", "exported_namespace", "exported_container"))


def looks_like_dcgm(head: bytes) -> bool:
    """A DCGM exporter scrape, whatever the file is called (a `curl .../metrics > metrics.txt`)."""
    return b"DCGM_FI_DEV_FB_USED" in head or b"DCGM_FI_DEV_FB_FREE" in head


def _parser() -> Any:
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        raise InputError("reading a DCGM exporter scrape needs prometheus-client: pip install prometheus-client") from None
    return text_string_to_metric_families


def _gpu_key(labels: dict[str, str]) -> tuple[str, str, str]:
    return (labels.get("Hostname") or labels.get("instance") or "", labels.get("UUID") or labels.get("uuid") or "", labels.get("gpu") or labels.get("device") or "")


def _pod_of(labels: dict[str, str]) -> dict[str, str] | None:
    for pod_l, ns_l, c_l in _POD_LABELS:
        if labels.get(pod_l):
            return {"pod": labels[pod_l], "namespace": labels.get(ns_l, ""), "container": labels.get(c_l, "")}
    return None


def _gpu_entry(gpus: dict[tuple[str, str, str], dict[str, Any]], labels: dict[str, str]) -> dict[str, Any]:
    key = _gpu_key(labels)
    entry = gpus.get(key)
    if entry is None:
        entry = gpus[key] = {
            "hostname": key[0] or None,
            "uuid": key[1] or None,
            "gpu": int(key[2]) if key[2].isdigit() else (key[2] or None),
            "model": labels.get("modelName"),
            "pods": [],
        }
    pod = _pod_of(labels)
    if pod is not None and pod not in entry["pods"]:
        entry["pods"].append(pod)
    return entry


def parse_scrape(text: str, path: str) -> dict[str, Any]:
    """A DCGM exporter /metrics scrape to {'kind': 'dcgm', 'gpus': [...]} (sizes in bytes)."""
    families = _parser()
    gpus: dict[tuple[str, str, str], dict[str, Any]] = {}
    try:
        for family in families(text):
            for sample in family.samples:
                field = _FB.get(sample.name)
                if field is None:
                    continue
                entry = _gpu_entry(gpus, dict(sample.labels))
                entry[field] = int(sample.value * MIB)
    except ValueError as exc:
        raise InputError(f"{path}: not a Prometheus text exposition ({str(exc)[:200]})") from None
    if not gpus:
        raise InputError(f"{path}: no DCGM_FI_DEV_FB_USED / DCGM_FI_DEV_FB_FREE samples (a DCGM exporter /metrics scrape is expected)")
    return {"kind": "dcgm", "path": path, "source": "dcgm-exporter /metrics", "gpus": _finish(gpus)}


def _finish(gpus: dict[tuple[str, str, str], dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for entry in gpus.values():
        if entry.get("total_bytes") is None and entry.get("used_bytes") is not None and entry.get("free_bytes") is not None:
            entry["total_bytes"] = entry["used_bytes"] + entry["free_bytes"] + entry.get("reserved_bytes", 0)
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
    for result in data["data"].get("result") or []:
        if not isinstance(result, dict):
            continue
        labels = {str(k): str(v) for k, v in (result.get("metric") or {}).items()}
        field = _FB.get(labels.get("__name__", "DCGM_FI_DEV_FB_USED"))
        if field is None:
            continue
        points = result.get("values") or ([result["value"]] if result.get("value") else [])
        entry = _gpu_entry(gpus, labels)
        for point in points:
            try:
                t, value = float(point[0]), int(float(point[1]) * MIB)
            except (TypeError, ValueError, IndexError):
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

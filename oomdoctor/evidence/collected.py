"""Evidence that is not a log: oomdoctor bundles, nvidia-smi CSV/XML, memory_stats JSON, snapshot pickles.

Each loader turns one file into a plain dict of collected evidence that oomdoctor.inference.facts merges into the
incident of the last run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomdoctor.base.errors import InputError
from oomdoctor.base.limits import memory_budget, read_capped
from oomdoctor.input.kinds import BUNDLE_KIND, BUNDLE_VERSION, MONITORING_SUFFIXES, SNAPSHOT_SUFFIXES, is_evidence_file, read_json

if TYPE_CHECKING:
    from typing import Any

def manifest_header(source: str) -> dict[str, Any]:
    """The fields every bundle manifest starts with, whichever command (collect, run, capture) wrote it."""
    from oomdoctor import __version__

    return {"kind": BUNDLE_KIND, "bundle_version": BUNDLE_VERSION, "tool": {"name": "oomdoctor", "version": __version__}, "source": source}


# oomdoctor's own outputs written into a bundle (by `run`), not evidence.
_OWN_OUTPUTS = {"manifest.json", "diagnosis.json"}


def evidence_files(path: str) -> list[str]:
    """Non-log evidence inside a bundle directory (manifest, memory_stats, snapshots, samples, nvidia-smi dumps).

    Only regular files inside the directory: a link that leads out of it, a FIFO or a device is never
    read (the directory walk of the logs lists each as skipped, with its reason), and a file reached
    twice (through a link inside) is read once.
    """
    import os
    from pathlib import Path  # a bundle directory only

    from oomdoctor.input.files import entry_problem

    real_root = os.path.realpath(path)
    manifest = os.path.join(path, "manifest.json")
    out = [manifest] if entry_problem(manifest, real_root) is None else []
    seen = {os.path.realpath(manifest)}
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(path, followlinks=False, onerror=lambda e: None):
        dirnames.sort()
        for name in filenames:
            full = os.path.join(dirpath, name)
            if name in _OWN_OUTPUTS or not is_evidence_file(full) or entry_problem(full, real_root) is not None:
                continue
            found.append(full)
    # Real files before links to them, so that a file is read at its own path.
    for full in sorted(found, key=lambda p: (os.path.islink(p), Path(p))):
        real = os.path.realpath(full)
        if real not in seen:
            seen.add(real)
            out.append(full)
    return _ordered(out, manifest)


def _ordered(paths: list[str], manifest: str) -> list[str]:
    """The manifest first, then the rest in path order (what rglob's sorted walk gave)."""
    from pathlib import Path

    rest = sorted((p for p in paths if p != manifest), key=Path)
    return ([manifest] if manifest in paths else []) + rest


# Caps on one evidence file, checked before it is read (README "Input caps"); parsing then runs inside
# base.limits.memory_budget. Real files are far smaller: a manifest or memory_stats dump is kilobytes,
# `run`'s samples.json (1,200 samples) about a megabyte, one node's DCGM scrape a few hundred kilobytes.
MAX_EVIDENCE_JSON_BYTES = 64 << 20
MAX_SMI_BYTES = 16 << 20
MAX_SCRAPE_BYTES = 64 << 20


def _cap(path: str) -> tuple[int, str]:
    if path.endswith(".json"):
        return MAX_EVIDENCE_JSON_BYTES, "evidence JSON"
    if path.endswith((".csv", ".xml")):
        return MAX_SMI_BYTES, "nvidia-smi output"
    return MAX_SCRAPE_BYTES, "a monitoring scrape"


# A saved DCGM exporter /metrics scrape (Prometheus text format): oomdoctor.evidence.monitoring reads it.
def load(path: str) -> dict[str, Any]:
    """One evidence file to {'kind': ..., ...}; InputError when it is none of the known kinds, too large or malformed."""
    # Imported here: most diagnoses read logs only, and these pull in csv, xml, pickle and psutil.
    from oomdoctor.evidence import allocator

    if path.endswith(SNAPSHOT_SUFFIXES):
        return {"kind": "snapshot", "path": path, **allocator.snapshot_facts(allocator.load_snapshot(path), path)}
    cap, what = _cap(path)
    with memory_budget(path, what):
        return _load_text(path, read_capped(path, cap, what).decode("utf-8", "replace"))


def _load_text(path: str, text: str) -> dict[str, Any]:
    from oomdoctor.evidence import allocator, monitoring
    from oomdoctor.live import smi

    head = text[:65536].encode("utf-8", "replace")
    if not path.endswith((".json", ".csv", ".xml")) and not monitoring.looks_like_dcgm(head):
        from oomdoctor.evidence.parsers import engine_metrics

        if engine_metrics.looks_like_engine_metrics(head):
            # vLLM's or SGLang's own /metrics scrape: read as the same lines pasted into a log are.
            return {"kind": "engine_metrics", "path": path, "events": engine_metrics.read_text(text, path)}
    if path.endswith(MONITORING_SUFFIXES) or (not path.endswith((".json", ".csv", ".xml")) and monitoring.looks_like_dcgm(head)):
        return monitoring.parse_scrape(text, path)
    if path.endswith(".xml"):
        try:
            gpus = smi.parse_smi_xml(text)
        except ValueError as exc:
            raise InputError(f"{path}: {exc}") from None
        return {"kind": "gpus", "path": path, "source": "nvidia-smi -q -x", "gpus": [g.to_json() for g in gpus], "driver_version": smi.driver_version_xml(text)}
    if path.endswith(".csv"):
        try:
            gpus = smi.parse_gpu_csv(text)
        except ValueError as exc:
            raise InputError(f"{path}: {exc}") from None
        if gpus:
            return {"kind": "gpus", "path": path, "source": "nvidia-smi csv", "gpus": [g.to_json() for g in gpus]}
        from oomdoctor.evidence.parsers import nvidia_smi

        # --query-compute-apps: read as the same lines pasted into a log are (the server's family and
        # the other processes, oomdoctor.inference.facts.pasted), each row cited by its line.
        apps = [e for e in nvidia_smi.read_text(text, path) if e.kind in (nvidia_smi.KIND_SMI_PROCESS, nvidia_smi.KIND_SMI_NO_PROCESSES)]
        if apps:
            return {"kind": "apps", "path": path, "events": apps}
        raise InputError(f"{path}: not an nvidia-smi --query-gpu or --query-compute-apps CSV")
    data = read_json(text, path)
    from oomdoctor.evidence.parsers import engine_metrics, gpustat

    if gpustat.looks_like_gpustat(data):
        # gpustat --json > gpustat.json: its lines read as the same document pasted into a log is.
        return {"kind": "gpustat", "path": path, "events": gpustat.read_text(text, path)}
    del text
    if monitoring.is_query_range(data):
        from oomdoctor.base.evidence import LineRef

        engine = engine_metrics.query_events(data, LineRef(path=path, line=1, text=""))
        if engine:
            # A Prometheus query of vLLM's or SGLang's series (KV use, preemptions, queues), not DCGM's.
            return {"kind": "engine_metrics", "path": path, "events": engine}
        return monitoring.parse_query_range(data, path)
    if isinstance(data, dict) and data.get("kind") == "oomdoctor-samples":
        return {"kind": "samples", "path": path, "samples": _checked_samples(data.get("samples"), path), "unavailable": _text_or_none(data.get("unavailable"), path, "unavailable")}
    if isinstance(data, dict) and data.get("kind") == BUNDLE_KIND:
        evidence = data.get("gpu_evidence") or {}
        if not isinstance(evidence, dict):
            raise InputError(_malformed(path, "gpu_evidence", evidence, "an object"))
        return {
            "kind": "gpus",
            "path": path,
            "source": _text_or_none(evidence.get("source"), path, "gpu_evidence.source"),
            "gpus": _checked_gpus(data.get("gpus"), path),
            "driver_version": _text_or_none(evidence.get("driver_version"), path, "gpu_evidence.driver_version"),
            "manifest": data,
        }
    if allocator.is_memory_stats(data):
        item = {"kind": "memory_stats", "path": path, **allocator.stats_facts(allocator.memory_stats_of(data, path), path)}
        observer = allocator.observer_figures(data, path)
        if observer:
            item["observer"] = observer
        return item
    if isinstance(data, dict) and "segments" in data:
        return {"kind": "snapshot", "path": path, **allocator.snapshot_facts(data, path)}
    raise InputError(f"{path}: JSON is neither an oomdoctor bundle manifest, memory_stats nor a snapshot")


# --- the shape of a manifest and of samples.json, checked before anything reads them ----------------
# A bundle can come from anywhere (a bug report's attachment): a field of the wrong type is refused
# with its name, and the bundle's logs are still diagnosed (the manifest is listed as not read).
_GPU_BYTES = ("total_bytes", "used_bytes", "free_bytes", "reserved_bytes")
_GPU_TEXT = ("uuid", "pci_bus_id", "name")
_MAX_BYTES = 1 << 64


def _malformed(path: str, where: str, value: Any, expected: str) -> str:
    shown = repr(value)
    return f"{path}: {where} is {shown[:40] + ('...' if len(shown) > 40 else '')} ({type(value).__name__}), not {expected}"


def _byte_count(value: Any, path: str, where: str) -> int | None:
    import math

    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float) and not math.isfinite(value)) or not 0 <= value < _MAX_BYTES:
        raise InputError(_malformed(path, where, value, "a byte count"))
    return int(value)


def _int_or_none(value: Any, path: str, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not -_MAX_BYTES < value < _MAX_BYTES:
        raise InputError(_malformed(path, where, value, "an integer"))
    return value


def _text_or_none(value: Any, path: str, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise InputError(_malformed(path, where, value, "a string"))


def _list_of_objects(value: Any, path: str, where: str) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InputError(_malformed(path, where, value, "a list"))
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise InputError(_malformed(path, f"{where}[{i}]", item, "an object"))
    return value


def _checked_process(p: dict[str, Any], path: str, where: str) -> dict[str, Any]:
    pid = _int_or_none(p.get("pid"), path, f"{where}.pid")
    if pid is None:
        raise InputError(f"{path}: {where} has no pid")
    out = {**p, "pid": pid, "used_bytes": _byte_count(p.get("used_bytes"), path, f"{where}.used_bytes")}
    if "status" in p:
        out["status"] = _text_or_none(p["status"], path, f"{where}.status")
    if "is_server" in p and not isinstance(p["is_server"], (bool, type(None))):
        raise InputError(_malformed(path, f"{where}.is_server", p["is_server"], "true or false"))
    return out


def _checked_gpus(value: Any, path: str) -> list[dict[str, Any]]:
    """A manifest's ``gpus``: a list of GPU objects whose sizes are byte counts and processes a list (or why there is none)."""
    out = []
    for i, g in enumerate(_list_of_objects(value, path, "gpus")):
        where = f"gpus[{i}]"
        gpu = {**g, "index": _int_or_none(g.get("index"), path, f"{where}.index")}
        for key in _GPU_BYTES:
            gpu[key] = _byte_count(g.get(key), path, f"{where}.{key}")
        for key in _GPU_TEXT:
            gpu[key] = _text_or_none(g.get(key), path, f"{where}.{key}")
        procs = g.get("processes")
        if isinstance(procs, list):
            gpu["processes"] = [_checked_process(p, path, f"{where}.processes[{j}]") for j, p in enumerate(_list_of_objects(procs, path, f"{where}.processes"))]
        elif not isinstance(procs, (dict, type(None))):
            raise InputError(_malformed(path, f"{where}.processes", procs, "a list of processes"))
        out.append(gpu)
    return out


def _checked_samples(value: Any, path: str) -> list[dict[str, Any]]:
    """samples.json's ``samples``: each with a finite time ``t`` and lists of GPU and process readings."""
    import math

    out = []
    for i, s in enumerate(_list_of_objects(value, path, "samples")):
        t = s.get("t")
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
            raise InputError(_malformed(path, f"samples[{i}].t", t, "a time in seconds"))
        gpus = [
            {**g, "used_bytes": _byte_count(g.get("used_bytes"), path, f"samples[{i}].gpus[{j}].used_bytes")}
            for j, g in enumerate(_list_of_objects(s.get("gpus"), path, f"samples[{i}].gpus"))
        ]
        procs = [_checked_process(p, path, f"samples[{i}].processes[{j}]") for j, p in enumerate(_list_of_objects(s.get("processes"), path, f"samples[{i}].processes"))]
        out.append({**s, "t": t, "gpus": gpus, "processes": procs})
    return out

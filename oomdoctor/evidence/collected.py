"""Evidence that is not a log: oomdoctor bundles, nvidia-smi CSV/XML, memory_stats JSON, snapshot pickles.

Each loader turns one file into a plain dict of collected evidence that oomdoctor.inference.facts merges into the
incident of the last run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomdoctor.base.errors import InputError
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


# A saved DCGM exporter /metrics scrape (Prometheus text format): oomdoctor.evidence.monitoring reads it.
def load(path: str) -> dict[str, Any]:
    """One evidence file to {'kind': ..., ...}; InputError when it is none of the known kinds."""
    # Imported here: most diagnoses read logs only, and these pull in csv, xml, pickle and psutil.
    from oomdoctor.evidence import allocator, monitoring
    from oomdoctor.live import smi

    if path.endswith(SNAPSHOT_SUFFIXES):
        return {"kind": "snapshot", "path": path, **allocator.snapshot_facts(allocator.load_snapshot(path), path)}
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if path.endswith(MONITORING_SUFFIXES) or (not path.endswith((".json", ".csv", ".xml")) and monitoring.looks_like_dcgm(text[:65536].encode("utf-8", "replace"))):
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
            apps = [] if gpus else smi.parse_apps_csv(text)
        except ValueError as exc:
            raise InputError(f"{path}: {exc}") from None
        if gpus:
            return {"kind": "gpus", "path": path, "source": "nvidia-smi csv", "gpus": [g.to_json() for g in gpus]}
        if apps:
            return {"kind": "apps", "path": path, "apps": apps}
        raise InputError(f"{path}: not an nvidia-smi --query-gpu or --query-compute-apps CSV")
    data = read_json(text, path)
    if monitoring.is_query_range(data):
        return monitoring.parse_query_range(data, path)
    if isinstance(data, dict) and data.get("kind") == "oomdoctor-samples":
        return {"kind": "samples", "path": path, "samples": data.get("samples") or [], "unavailable": data.get("unavailable")}
    if isinstance(data, dict) and data.get("kind") == BUNDLE_KIND:
        evidence = data.get("gpu_evidence") or {}
        return {"kind": "gpus", "path": path, "source": evidence.get("source"), "gpus": data.get("gpus") or [], "driver_version": evidence.get("driver_version"), "manifest": data}
    if allocator.is_memory_stats(data):
        item = {"kind": "memory_stats", "path": path, **allocator.stats_facts(allocator.memory_stats_of(data, path), path)}
        observer = allocator.observer_figures(data, path)
        if observer:
            item["observer"] = observer
        return item
    if isinstance(data, dict) and "segments" in data:
        return {"kind": "snapshot", "path": path, **allocator.snapshot_facts(data, path)}
    raise InputError(f"{path}: JSON is neither an oomdoctor bundle manifest, memory_stats nor a snapshot")

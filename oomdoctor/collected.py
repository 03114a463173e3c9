"""Evidence that is not a log: oomdoctor bundles, nvidia-smi CSV/XML, memory_stats JSON, snapshot pickles.

Each loader turns one file into a plain dict of collected evidence that oomdoctor.facts merges into the
incident of the last run.
"""

from __future__ import annotations

import os

from oomdoctor.errors import InputError
from oomdoctor.limits import nesting_depth

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost); mypy reads this as True
if TYPE_CHECKING:
    from typing import Any

BUNDLE_KIND = "oomdoctor-bundle"
BUNDLE_VERSION = 1

SNAPSHOT_SUFFIXES = (".pickle", ".pkl")
# Evidence JSON (manifests, memory_stats, samples, snapshots) is a few levels deep; deeper nesting is
# hostile or corrupt and is refused before anything walks it.
MAX_JSON_DEPTH = 64


_nesting_depth = nesting_depth


def read_json(text: str, path: str) -> Any:
    """Parsed evidence JSON; InputError (never RecursionError or a huge-int ValueError) when it is not sane."""
    import json  # here: a plain log diagnosis reads no JSON and need not import it

    try:
        data = json.loads(text)
    except RecursionError:
        raise InputError(f"{path}: JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:
        raise InputError(f"{path}: not JSON ({str(exc)[:200]})") from None
    if _nesting_depth(data, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
        raise InputError(f"{path}: JSON nested deeper than {MAX_JSON_DEPTH} levels")
    return data


def manifest_header(source: str) -> dict[str, Any]:
    """The fields every bundle manifest starts with, whichever command (collect, run, capture) wrote it."""
    from oomdoctor import __version__

    return {"kind": BUNDLE_KIND, "bundle_version": BUNDLE_VERSION, "tool": {"name": "oomdoctor", "version": __version__}, "source": source}


def is_bundle_dir(path: str) -> bool:
    manifest = os.path.join(path, "manifest.json")
    if not os.path.isfile(manifest):
        return False
    try:
        with open(manifest, encoding="utf-8", errors="replace") as fh:
            return read_json(fh.read(), manifest).get("kind") == BUNDLE_KIND
    except (OSError, InputError, AttributeError):
        return False


# oomdoctor's own outputs written into a bundle (by `run`), not evidence.
_OWN_OUTPUTS = {"manifest.json", "diagnosis.json"}


def evidence_files(path: str) -> list[str]:
    """Non-log evidence inside a bundle directory (manifest, memory_stats, snapshots, samples, nvidia-smi dumps)."""
    from pathlib import Path  # a bundle directory only

    root = Path(path)
    out = [str(root / "manifest.json")]
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.name not in _OWN_OUTPUTS and is_evidence_file(str(p)):
            out.append(str(p))
    return out


# A saved DCGM exporter /metrics scrape (Prometheus text format): oomdoctor.monitoring reads it.
MONITORING_SUFFIXES = (".prom", ".metrics")


def is_evidence_file(path: str) -> bool:
    return path.endswith((*SNAPSHOT_SUFFIXES, ".json", ".csv", ".xml", *MONITORING_SUFFIXES))


def load(path: str) -> dict[str, Any]:
    """One evidence file to {'kind': ..., ...}; InputError when it is none of the known kinds."""
    # Imported here: most diagnoses read logs only, and these pull in csv, xml, pickle and psutil.
    from oomdoctor import allocator, monitoring, smi

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

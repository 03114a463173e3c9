"""Facts of evidence that is not a log: allocator dumps (memory_stats, snapshots), NVML snapshots, samples."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomdoctor.base.evidence import LineRef
from oomdoctor.inference.facts.store import Facts
from oomdoctor.memory import log_figures

if TYPE_CHECKING:
    from typing import Any

# Keys of a collected item that are not facts: its kind and path, and the capture observer's record
# (read as an OOM event by the pipeline when no log holds the message: diagnosis._observer_oom).
_ITEM_KEYS = ("kind", "path", "observer")


def collected_facts(f: Facts, items: list[dict[str, Any]]) -> None:
    """GPU snapshots (collect / nvidia-smi) and allocator dumps (capture), merged into the incident."""
    for item in items:
        ref = LineRef(path=item["path"], line=0, text=f"{item['kind']} evidence")
        kind = item["kind"]
        if kind == "memory_stats":
            for key, value in item.items():
                if key not in _ITEM_KEYS:
                    f.set(key, value, ref)
        elif kind == "snapshot":
            _snapshot_facts(f, item, ref)
        elif kind == "gpus":
            _gpus_facts(f, item, ref)
        elif kind == "samples" and item.get("samples"):
            f.set("_samples", item["samples"], ref)


def _snapshot_facts(f: Facts, item: dict[str, Any], ref: LineRef) -> None:
    for key, value in item.items():
        if key not in _ITEM_KEYS:
            f.set(key, tuple(value) if isinstance(value, list) else value, ref)
    ooms = item.get("snapshot_ooms") or []
    if ooms and ooms[-1].get("size"):
        f.offer("requested_bytes", int(ooms[-1]["size"]), ref, source="snapshot")


def _gpus_facts(f: Facts, item: dict[str, Any], ref: LineRef) -> None:
    gpus = item.get("gpus") or []
    f.set("collected_gpus", len(gpus), ref)
    f.set("driver_version", item.get("driver_version"), ref)
    names = sorted({g.get("name") for g in gpus if g.get("name")})
    if names:
        f.set("gpu_names", tuple(names), ref)
    foreign_bytes, foreign_pids, occupied = 0, [], 0
    identity_known = True
    for g in gpus:
        procs = g.get("processes")
        if not isinstance(procs, list):
            identity_known = False
            continue
        servers = [p for p in procs if p.get("is_server")]
        if any(p.get("status") not in (None, "ok") for p in procs):
            identity_known = False
        if not servers and procs and any(p.get("status") == "ok" for p in procs):
            continue  # no server on this GPU: its tenants are not this incident's
        others = [p for p in procs if not p.get("is_server") and p.get("status") == "ok"]
        foreign_bytes += log_figures.processes_bytes([p.get("used_bytes") for p in others])
        foreign_pids += [p["pid"] for p in others]
        if g.get("used_bytes") is not None and servers:
            occupied = max(occupied, log_figures.nvml_other_used_bytes(g["used_bytes"], [p.get("used_bytes") for p in servers]))
        if g.get("total_bytes") and servers:
            f.offer("capacity_bytes", g["total_bytes"], ref, source="nvml")
    f.set("collected_foreign_process_bytes", foreign_bytes, ref)
    f.set("collected_foreign_pids", tuple(foreign_pids), ref)
    f.set("collected_process_identity_known", identity_known, ref)
    f.set("collected_other_used_bytes", occupied, ref)

"""Allocator evidence from the server: torch.cuda.memory_stats() JSON and _dump_snapshot pickles.

Snapshot pickles hold only plain Python data, so they are read with an unpickler that refuses every
global: a pickle from a bug report cannot run code here. torch is not needed.
"""

from __future__ import annotations

import io
import pickle
from collections import Counter
from typing import Any

from oomdoctor.errors import InputError

MAX_PICKLE_BYTES = 512 << 20


class RestrictedUnpickler(pickle.Unpickler):
    """Plain data only: dicts, lists, tuples, str, bytes, numbers, bools, None."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refers to {module}.{name}; only plain data is read from snapshots")


def load_snapshot(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_PICKLE_BYTES + 1)
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if len(data) > MAX_PICKLE_BYTES:
        raise InputError(f"{path}: snapshot larger than {MAX_PICKLE_BYTES >> 20} MiB")
    try:
        obj = RestrictedUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as exc:
        raise InputError(f"{path}: rejected pickle: it {exc}") from None
    except Exception as exc:  # noqa: BLE001 - truncated or corrupt pickles raise EOFError, ValueError, ...
        raise InputError(f"{path}: not a readable snapshot pickle ({type(exc).__name__})") from None
    if isinstance(obj, list):
        obj = {"segments": obj}  # torch 1.x dumped the segment list alone
    if not isinstance(obj, dict) or "segments" not in obj:
        raise InputError(f"{path}: not a torch memory snapshot (no 'segments')")
    return obj


def snapshot_facts(snap: dict[str, Any]) -> dict[str, Any]:
    """Fragmentation and the biggest holders, from segments and blocks; the OOM from device_traces."""
    largest_free = 0
    inactive = 0
    inactive_split = 0
    reserved = 0
    allocated = 0
    private = 0
    sites: Counter[str] = Counter()
    for seg in snap.get("segments") or []:
        if not isinstance(seg, dict):
            continue
        total = int(seg.get("total_size", 0) or 0)
        reserved += total
        pool = seg.get("segment_pool_id")
        if pool not in (None, (0, 0), [0, 0]):
            private += total
        blocks = seg.get("blocks") or []
        active_in_segment = any(b.get("state") in ("active_allocated", "active_pending_free", "active_awaiting_free") for b in blocks if isinstance(b, dict))
        for b in blocks:
            if not isinstance(b, dict):
                continue
            size = int(b.get("size", 0) or 0)
            state = b.get("state")
            if state == "inactive":
                largest_free = max(largest_free, size)
                inactive += size
                if active_in_segment:
                    inactive_split += size
            elif state == "active_allocated":
                allocated += size
                frames = b.get("frames") or [h for hist in (b.get("history") or []) for h in (hist.get("frames") or [])]
                site = _site(frames)
                if site:
                    sites[site] += size
    ooms = []
    for trace in snap.get("device_traces") or []:
        for entry in trace or []:
            if isinstance(entry, dict) and entry.get("action") == "oom":
                ooms.append({"size": entry.get("size"), "device_free": entry.get("device_free")})
    return {
        "snapshot_reserved_bytes": reserved,
        "snapshot_allocated_bytes": allocated,
        "snapshot_inactive_split_bytes": inactive_split,
        "snapshot_inactive_bytes": inactive,
        "largest_free_block_bytes": largest_free,
        "snapshot_private_pool_bytes": private,
        "top_allocation_sites": [{"site": s, "bytes": n} for s, n in sites.most_common(5)],
        "snapshot_ooms": ooms[-3:],
    }


def _site(frames: Any) -> str | None:
    if not isinstance(frames, list):
        return None
    for f in frames:
        if not isinstance(f, dict):
            continue
        name = str(f.get("filename", ""))
        if "torch/" in name or name.startswith("<"):
            continue
        return f"{name}:{f.get('line')} {f.get('name')}"
    return None


def memory_stats_of(data: Any, path: str) -> dict[str, Any]:
    """The memory_stats() dict of a parsed JSON file (bare, or as capture writes it under "memory_stats")."""
    if isinstance(data, dict) and "memory_stats" in data:
        data = data["memory_stats"]
    if not isinstance(data, dict) or not any(k.startswith(("allocated_bytes.", "reserved_bytes.", "num_")) for k in data):
        raise InputError(f"{path}: not a torch.cuda.memory_stats() dump")
    return data


def stats_facts(stats: dict[str, Any]) -> dict[str, Any]:
    def g(key: str) -> int | None:
        v = stats.get(key)
        return int(v) if isinstance(v, (int, float)) else None

    out = {
        "stats_allocated_bytes": g("allocated_bytes.all.current"),
        "stats_reserved_bytes": g("reserved_bytes.all.current"),
        "stats_inactive_split_bytes": g("inactive_split_bytes.all.current"),
        "num_alloc_retries": g("num_alloc_retries"),
        "num_ooms": g("num_ooms"),
        "stats_peak_allocated_bytes": g("allocated_bytes.all.peak"),
    }
    return {k: v for k, v in out.items() if v is not None}


def is_memory_stats(data: Any) -> bool:
    return isinstance(data, dict) and ("memory_stats" in data or any(str(k).startswith("allocated_bytes.") for k in data))

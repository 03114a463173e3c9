"""Allocator evidence from the server: torch.cuda.memory_stats() JSON and _dump_snapshot pickles.

Snapshot pickles hold only plain Python data, so they are read with an unpickler that refuses every
global: a pickle from a bug report cannot run code here. torch is not needed.

A pickle can also refer to one object many times: 400 KB of shared references make a list of a
thousand segments that each hold the same thousand blocks, or far more. A segment, block list or
block met twice is refused at once (torch never shares them), and the walk is bounded by
MAX_SNAPSHOT_SEGMENTS, MAX_SNAPSHOT_BLOCKS, MAX_SNAPSHOT_FRAMES and MAX_SNAPSHOT_TRACE_ENTRIES
(visits, repeats included: frame lists may be shared); a snapshot past a cap is refused with the cap
named (exit 5 when it is the only input) rather than read for minutes. Real snapshots of a full
141 GB GPU stay far below them.
"""

from __future__ import annotations

import io
import math
import os
import pickle
import stat
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from oomdoctor.base.errors import InputError
from oomdoctor.base.limits import memory_budget, too_large

if TYPE_CHECKING:
    from typing import Any

# A snapshot larger than this is refused by its size, before a byte is read or unpickled (README "Input caps");
# unpickling what is read runs inside base.limits.memory_budget.
MAX_PICKLE_BYTES = 128 << 20
# Visits in one snapshot walk, repeats included (shared references count every time they are met).
MAX_SNAPSHOT_SEGMENTS = 200_000
MAX_SNAPSHOT_BLOCKS = 1_000_000
MAX_SNAPSHOT_FRAMES = 2_000_000
MAX_SNAPSHOT_TRACE_ENTRIES = 2_000_000
# Byte counts beyond this (16 EiB) are not sizes of anything on a GPU: a hostile or corrupt value.
_MAX_SIZE = 1 << 64


class RestrictedUnpickler(pickle.Unpickler):
    """Plain data only: dicts, lists, tuples, str, bytes, numbers, bools, None."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refers to {module}.{name}; only plain data is read from snapshots")


def load_snapshot(path: str) -> dict[str, Any]:
    """The snapshot's plain data; InputError past MAX_PICKLE_BYTES (checked before reading) or past the memory budget."""
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below, on every path
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        try:
            st = os.fstat(fh.fileno())
        except OSError:
            st = None
        regular = st is not None and stat.S_ISREG(st.st_mode)
        if regular and st is not None and st.st_size > MAX_PICKLE_BYTES:
            raise InputError(too_large(path, st.st_size, MAX_PICKLE_BYTES, "a memory snapshot pickle"))
        with memory_budget(path, "snapshot pickle"):
            # A regular file of checked size is unpickled as it is read; anything else (a FIFO) is read capped first.
            source: Any = fh if regular else io.BytesIO(fh.read(MAX_PICKLE_BYTES + 1))
            if not regular and len(source.getbuffer()) > MAX_PICKLE_BYTES:
                raise InputError(too_large(path, None, MAX_PICKLE_BYTES, "a memory snapshot pickle"))
            try:
                obj = RestrictedUnpickler(source).load()
            except pickle.UnpicklingError as exc:
                raise InputError(f"{path}: rejected pickle: it {exc}") from None
            except MemoryError:
                raise
            except OSError as exc:
                raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
            except Exception as exc:  # noqa: BLE001 - truncated or corrupt pickles raise EOFError, ValueError, ...
                raise InputError(f"{path}: not a readable snapshot pickle ({type(exc).__name__})") from None
            finally:
                del source
    finally:
        fh.close()
    if isinstance(obj, list):
        obj = {"segments": obj}  # torch 1.x dumped the segment list alone
    if not isinstance(obj, dict) or "segments" not in obj:
        raise InputError(f"{path}: not a torch memory snapshot (no 'segments')")
    return obj


def _capped(path: str, cap: int, what: str) -> InputError:
    return InputError(
        f"{path}: snapshot walk stopped after {cap:,} {what} (oomdoctor.evidence.allocator.MAX_SNAPSHOT_{what.upper().replace(' ', '_')}); "
        "the pickle repeats shared references or is far larger than any real snapshot"
    )


def _shared(path: str, what: str) -> InputError:
    return InputError(f"{path}: snapshot refers to one {what} more than once (shared pickle references); a real snapshot never does")


def _size(value: Any, path: str, what: str) -> int:
    """A byte count from allocator data; InputError for anything that is not one (inf, NaN, 1e400, 10**5000)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{path}: {what} is {str(value)[:40]!r}, not a byte count")
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"{path}: {what} is {value}, not a byte count")
    if not -_MAX_SIZE < value < _MAX_SIZE:
        raise InputError(f"{path}: {what} is out of range for a byte count (more than 16 EiB)")
    return int(value)


def snapshot_facts(snap: dict[str, Any], path: str = "snapshot") -> dict[str, Any]:
    """Fragmentation and the biggest holders, from segments and blocks; the OOM from device_traces.

    InputError when the walk passes one of the MAX_SNAPSHOT_* caps.
    """
    n_segments = n_blocks = n_frames = n_entries = 0
    largest_free = 0
    inactive = 0
    inactive_split = 0
    reserved = 0
    allocated = 0
    private = 0
    sites: Counter[str] = Counter()
    segments = snap.get("segments") or []
    if not isinstance(segments, list):
        segments = []
    # torch writes every segment, block list and block as its own object; a pickle that refers to
    # one of them twice is built to multiply the walk, and is refused at the first repeat.
    seen: set[int] = set()
    for seg in segments:
        n_segments += 1
        if n_segments > MAX_SNAPSHOT_SEGMENTS:
            raise _capped(path, MAX_SNAPSHOT_SEGMENTS, "segments")
        if not isinstance(seg, dict):
            continue
        if id(seg) in seen:
            raise _shared(path, "segment")
        seen.add(id(seg))
        total = _size(seg.get("total_size"), path, "a segment's total_size")
        reserved += total
        pool = seg.get("segment_pool_id")
        if pool not in (None, (0, 0), [0, 0]):
            private += total
        blocks = seg.get("blocks")
        if not isinstance(blocks, list) or not blocks:
            continue
        n_blocks += len(blocks)
        if n_blocks > MAX_SNAPSHOT_BLOCKS:
            raise _capped(path, MAX_SNAPSHOT_BLOCKS, "blocks")
        before = len(seen)
        seen.add(id(blocks))
        seen.update(id(b) for b in blocks if isinstance(b, dict))
        if len(seen) - before != 1 + sum(1 for b in blocks if isinstance(b, dict)):
            raise _shared(path, "block")
        active_in_segment = any(b.get("state") in ("active_allocated", "active_pending_free", "active_awaiting_free") for b in blocks if isinstance(b, dict))
        for b in blocks:
            if not isinstance(b, dict):
                continue
            size = _size(b.get("size"), path, "a block's size")
            state = b.get("state")
            if state == "inactive":
                largest_free = max(largest_free, size)
                inactive += size
                if active_in_segment:
                    inactive_split += size
            elif state == "active_allocated":
                allocated += size
                site, visited = _site(b, MAX_SNAPSHOT_FRAMES - n_frames)
                n_frames += visited
                if n_frames > MAX_SNAPSHOT_FRAMES:
                    raise _capped(path, MAX_SNAPSHOT_FRAMES, "frames")
                if site:
                    sites[site] += size
    ooms = []
    traces = snap.get("device_traces") or []
    for trace in traces if isinstance(traces, list) else []:
        for entry in trace if isinstance(trace, list) else []:
            n_entries += 1
            if n_entries > MAX_SNAPSHOT_TRACE_ENTRIES:
                raise _capped(path, MAX_SNAPSHOT_TRACE_ENTRIES, "trace entries")
            if isinstance(entry, dict) and entry.get("action") == "oom":
                free = entry.get("device_free")
                ooms.append({"size": _size(entry.get("size"), path, "an oom trace's size") or None, "device_free": None if free is None else _size(free, path, "an oom trace's device_free")})
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


def _site(block: dict[str, Any], budget: int) -> tuple[str | None, int]:
    """The first frame outside torch of a block (or of its history entries) and the frames visited.

    Stops after ``budget`` + 1 visits (a history entry counts as one): the caller then refuses the
    snapshot, so shared frame lists cannot make this loop run for minutes.
    """
    frames = block.get("frames")
    if isinstance(frames, list) and frames:
        lists: Iterable[Any] = (frames,)
    else:
        history = block.get("history")
        lists = (h.get("frames") if isinstance(h, dict) else None for h in history) if isinstance(history, list) else ()
    visited = 0
    for frame_list in lists:
        visited += 1
        if visited > budget:
            return None, visited
        if not isinstance(frame_list, list):
            continue
        for f in frame_list:
            visited += 1
            if visited > budget:
                return None, visited
            if not isinstance(f, dict):
                continue
            name = str(f.get("filename", ""))
            if "torch/" in name or name.startswith("<"):
                continue
            return f"{name}:{f.get('line')} {f.get('name')}", visited
    return None, visited


def memory_stats_of(data: Any, path: str) -> dict[str, Any]:
    """The memory_stats() dict of a parsed JSON file (bare, or as capture writes it under "memory_stats")."""
    if isinstance(data, dict) and "memory_stats" in data:
        data = data["memory_stats"]
    if not isinstance(data, dict) or not any(k.startswith(("allocated_bytes.", "reserved_bytes.", "num_")) for k in data):
        raise InputError(f"{path}: not a torch.cuda.memory_stats() dump")
    return data


def stats_facts(stats: dict[str, Any], path: str = "memory_stats") -> dict[str, Any]:
    """The counters rules use; InputError when one is not a finite count (1e400, NaN, 10**5000)."""

    def g(key: str) -> int | None:
        v = stats.get(key)
        return _size(v, path, key) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    out = {
        "stats_allocated_bytes": g("allocated_bytes.all.current"),
        "stats_reserved_bytes": g("reserved_bytes.all.current"),
        "stats_inactive_split_bytes": g("inactive_split_bytes.all.current"),
        "num_alloc_retries": g("num_alloc_retries"),
        "num_ooms": g("num_ooms"),
        "stats_peak_allocated_bytes": g("allocated_bytes.all.peak"),
    }
    return {k: v for k, v in out.items() if v is not None}


def observer_figures(data: Any, path: str) -> dict[str, int] | None:
    """The capture hook's observer record beside memory_stats (oomdoctor.capture writes it), or None.

    PyTorch's caching allocator calls the observer only on its OOM path, just before raising, with the
    request, the device's limit (its total, or the per-process fraction's maximum) and what was free:
    so the record alone says an allocator OOM happened, even when the message was printed elsewhere
    (a forked worker whose exception went back to the parent). Seen on an H200 with torch 2.11.
    """
    obs = data.get("observer") if isinstance(data, dict) else None
    if not isinstance(obs, dict) or "alloc" not in obs:
        return None
    figures = {"requested_bytes": _size(obs.get("alloc"), path, "observer alloc")}
    limit = _size(obs.get("device_alloc"), path, "observer device limit") if obs.get("device_alloc") else None
    if obs.get("device_free") is not None:
        figures["free_bytes"] = _size(obs.get("device_free"), path, "observer device free")
    if limit is not None:
        # The limit is the card's total, or under set_per_process_memory_fraction the process's cap. More
        # free than the limit can only be a cap (the message would say "N allowed"); otherwise it is read as
        # the card (a cap above what is free cannot be told apart from the record alone).
        if figures.get("free_bytes", 0) > limit:
            figures["allowed_bytes"] = limit
        else:
            figures["capacity_bytes"] = limit
    return figures


def is_memory_stats(data: Any) -> bool:
    return isinstance(data, dict) and ("memory_stats" in data or any(str(k).startswith("allocated_bytes.") for k in data))

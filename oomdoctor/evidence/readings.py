"""Per-rank readings and the free-memory timeline of one incident, read from its events.

The report draws a bar per rank and free memory through the startup milestones; those need the
per-rank values the facts (worst rank only) do not keep. This module is the only place above the
parsers that reads raw events for them, so the view reads typed readings, never events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from oomdoctor.base.evidence import Event
from oomdoctor.evidence.parsers import sglang as sg
from oomdoctor.evidence.parsers import torch_oom as tt
from oomdoctor.evidence.parsers import vllm as vl

# Per-rank quantities of SGLang's startup lines: (event kind, value key) -> reading name.
_PER_RANK = {
    "pre_bytes": (sg.KIND_LOAD_BEGIN, "avail_bytes"),
    "post_bytes": (sg.KIND_LOAD_END, "avail_bytes"),
    "kv_pool_bytes": (sg.KIND_KV_ALLOCATED, "kv_bytes"),
    "pool_end_bytes": (sg.KIND_POOL_END, "avail_bytes"),
    "cuda_graph_bytes": (sg.KIND_GRAPH_END, "mem_usage_bytes"),
}

# Milestones whose free-memory reading goes on the timeline: kind -> (label, value key).
_TIMELINE = {
    sg.KIND_LOAD_BEGIN: ("load begin", "avail_bytes"),
    sg.KIND_LOAD_END: ("load end", "avail_bytes"),
    sg.KIND_POOL_END: ("KV pool built", "avail_bytes"),
    sg.KIND_GRAPH_BEGIN: ("graph capture begin", "avail_bytes"),
    sg.KIND_GRAPH_BAR: ("capturing", "avail_bytes"),
    sg.KIND_GRAPH_END: ("graph capture end", "avail_bytes"),
    sg.KIND_SUMMARY: ("serving", "available_gpu_mem_bytes"),
    tt.KIND_OOM: ("OOM", "free_bytes"),
    vl.KIND_INITIAL_FREE: ("start", "free_at_start_bytes"),
    vl.KIND_FREE_LESS: ("start", "free_at_start_bytes"),
}


class TimelinePoint(NamedTuple):
    label: str
    free_bytes: int
    line: int


@dataclass(frozen=True, slots=True)
class Readings:
    """Per-rank values ({reading: {rank: bytes}}), the free-memory timeline per rank, the summary's token count."""

    per_rank: dict[str, dict[str, int]] = field(default_factory=dict)
    timeline: dict[str, tuple[TimelinePoint, ...]] = field(default_factory=dict)
    summary_tokens: int | None = None

    def of(self, reading: str) -> dict[str, int]:
        return self.per_rank.get(reading, {})


def read(events: list[Event]) -> Readings:
    per_rank: dict[str, dict[str, int]] = {}
    for name, (kind, key) in _PER_RANK.items():
        values: dict[str, int] = {}
        for e in events:
            if e.kind == kind and e.get(key) is not None:
                values.setdefault(e.rank or "GPU", e.get(key))
        if values:
            per_rank[name] = values
    summary = next((e.get("max_total_num_tokens") for e in events if e.kind == sg.KIND_SUMMARY), None)
    return Readings(per_rank, _timeline(events), summary)


def _timeline(events: list[Event]) -> dict[str, tuple[TimelinePoint, ...]]:
    series: dict[str, list[TimelinePoint]] = {}
    for e in events:
        step = _TIMELINE.get(e.kind)
        if step is None:
            continue
        label, key = step
        value = e.get(key)
        if value is None:
            continue
        points = series.setdefault(e.rank or "all", [])
        # A capture progress bar redraws many times: keep its latest reading only.
        if e.kind == sg.KIND_GRAPH_BAR and points and points[-1].label == "capturing":
            points[-1] = TimelinePoint(label, value, e.ref.line)
            continue
        points.append(TimelinePoint(label, value, e.ref.line))
    # A rank without a tag (TP=1) and the untagged OOM line are the same GPU.
    if "all" in series and len(series) == 2:
        other = next(k for k in series if k != "all")
        series[other] = sorted(series[other] + series.pop("all"), key=lambda p: p.line)
    return {k: tuple(v) for k, v in sorted(series.items()) if len(v) >= 2}

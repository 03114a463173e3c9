"""Collected evidence joined to a log's incidents: DCGM's other tenants on the GPU, the capture observer's OOM."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomdoctor.base.evidence import Event, LineRef
from oomdoctor.evidence.parsers import torch_oom as tt
from oomdoctor.pipeline.across_nodes import own_names

if TYPE_CHECKING:
    from typing import Any

    from oomdoctor.inference.facts import Facts
    from oomdoctor.pipeline.across_nodes import Across


def monitoring_facts(facts: Facts, gathered: list[dict[str, Any]], across: Across | None, paths: list[str]) -> None:
    """DCGM / Prometheus evidence: the other pods on the server's GPUs and the GPUs' memory over time."""
    items = [g for g in gathered if g.get("kind") == "dcgm"]
    if not items:
        return
    from oomdoctor.evidence import monitoring

    ref = LineRef(path=items[0]["path"], line=0, text="dcgm evidence")
    facts.set("_monitoring_gpus", monitoring.gpus_json(items), ref)
    samples = [s for item in items for s in item.get("samples") or []]
    if samples and "_samples" not in facts.values:
        facts.set("_samples", sorted(samples, key=lambda s: s["t"]), ref)
    own = own_names(across, paths) | {r.split("/")[0] for e in facts.events for r in [e.ref.rank or ""] if "/" in r}
    self_bytes = facts.get("this_process_bytes")
    found = monitoring.foreign_pods(items, own, self_bytes)
    if found is None:
        return
    facts.set("monitoring_foreign_pods", tuple(f"{p['namespace']}/{p['pod']}" if p["namespace"] else p["pod"] for p in found["pods"]), ref)
    facts.set("_monitoring_pods", found["pods"], ref)
    if found["held_bytes"]:
        facts.set("monitoring_foreign_bytes", found["held_bytes"], ref)
        if found["held_bytes"] > (facts.get("collected_other_used_bytes") or 0):
            facts.set("collected_other_used_bytes", found["held_bytes"], ref)


def observer_oom(gathered: list[dict[str, Any]]) -> Event | None:
    """An allocator OOM known only from the capture hook's observer record (allocator.observer_figures).

    The process printed its message where no input holds it (a forked worker's exception went back to
    its parent); the observer's figures (request, device limit, free) are the message's own, so the
    OOM is read as one, cited at the memory_stats file. None when no input holds such a record.
    """
    for item in gathered:
        figures = item.get("observer")
        if item.get("kind") == "memory_stats" and figures:
            text = "capture observer: the allocator raised an OOM" + "".join(f", {k} {v}" for k, v in sorted(figures.items()))
            values: dict[str, Any] = {**figures, "complete": True, "source": "capture_observer", "stage": "unknown"}
            return Event(tt.KIND_OOM, (LineRef(path=item["path"], line=0, text=text),), values)
    return None

"""The node step: the nodes and roles behind the inputs, who failed first, and the event streams grouped by server."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from oomdoctor.evidence.runs import is_oom_event

if TYPE_CHECKING:  # imported where used: one small log from one node needs no node step
    from typing import Any

    from oomdoctor.base.evidence import Event
    from oomdoctor.inference import nodes as nodes_mod
    from oomdoctor.inference.facts import Facts
    from oomdoctor.input.files import InputStats
    from oomdoctor.pipeline.history import IncidentHistory


@dataclass
class Across:
    """The inputs seen as nodes: the timeline, and the event streams grouped by server."""

    timeline: nodes_mod.Timeline
    groups: list[list[list[Event]]]
    labels: list[str]
    group_nodes: list[set[str]]
    linked: bool  # the servers are parts of one deployment (one model; prefill and decode)


def _event_node(event: Event, file_node: str) -> str:
    return event.ref.node or file_node


def across_nodes(
    paths: list[str], stats: list[InputStats], per_input: list[list[Event]], roots: list[str], scans: list[nodes_mod.NodeScan] | None = None
) -> Across | None:
    """Nodes, roles and the cross-node timeline; None for one input from one node (nothing to do).

    ``scans`` are the inputs' node scans read on the main pass; without them (one input whose prefixes
    turned out to name nodes) each input is scanned for its node lines here.
    """
    # The scanner already split every prefix: a single input needs this step only when a prefix named a node.
    if len(per_input) < 2 and not any(s.node_prefixed for s in stats):
        return None
    from oomdoctor.inference import nodes as nodes_mod

    displays = [s.path for s in stats]
    readable = [s.kind != "issue" for s in stats]
    if scans is None:
        scans = [nodes_mod.scan_input(p if ok else os.devnull, d) for p, ok, d in zip(paths, readable, displays, strict=True)]
    elif not all(readable):
        # An issue body's node lines are its quoted logs, which the scan of the raw file would not see.
        scans = [scan if ok else nodes_mod.NodeScan() for scan, ok in zip(scans, readable, strict=True)]
    file_nodes = nodes_mod.identify(paths, [r for r in roots if r != "-"])
    # Streams: each input, split by the node its lines' prefixes name.
    streams: list[tuple[int, str, list[Event]]] = []
    stream_nodes: list[set[str]] = []
    for i, events in enumerate(per_input):
        by_node: dict[str, list[Event]] = {}
        for e in events:
            by_node.setdefault(_event_node(e, file_nodes[i][0]), []).append(e)
        stream_nodes.append(set(by_node) | set(scans[i].prefix_nodes))
        streams.extend((i, n, evs) for n, evs in by_node.items())
    infos, names = nodes_mod.build_nodes(displays, scans, file_nodes, stream_nodes)
    observations: list[nodes_mod.Observation] = []
    order = 0
    for i, raw, events in streams:
        node = names[(i, raw)]
        last_ts: str | None = None
        for e in events:
            last_ts = e.ref.ts or last_ts
            if is_oom_event(e):
                observations.append(nodes_mod.Observation(node, "oom", e.ref, e.ref.ts or last_ts, e.ref.rank, order))
                order += 1
                break
    for i, scan in enumerate(scans):
        for seen_node, kind, line, ts in scan.consequences:
            raw_node = seen_node or file_nodes[i][0]
            node = names.get((i, raw_node), raw_node)
            observations.append(nodes_mod.Observation(node, kind, line.ref, ts, line.ref.rank, order))
            order += 1
    tl = nodes_mod.timeline(infos, observations)
    # Servers: streams whose nodes print the same arguments (less what differs between nodes) are one server.
    identities = {infos[names[(i, raw)]].identity for i, raw, _ in streams} - {None}
    keys: list[str | None] = []
    for i, raw, _ in streams:
        info = infos[names[(i, raw)]]
        keys.append(info.identity if len(identities) > 1 else None)
    order_keys = list(dict.fromkeys(keys))
    cause_node = tl.cause.node if tl.cause is not None else None
    groups: list[list[list[Event]]] = []
    labels: list[str] = []
    group_nodes: list[set[str]] = []
    for key in order_keys:
        members = [(i, raw, evs) for (i, raw, evs), k in zip(streams, keys, strict=True) if k == key]
        # The node that failed first leads its server's streams: its OOM is the incident's first.
        members.sort(key=lambda m: names[(m[0], m[1])] != cause_node)
        groups.append([evs for _, _, evs in members])
        member_nodes = {names[(i, raw)] for i, raw, _ in members}
        group_nodes.append(member_nodes)
        labels.append(_server_label([infos[n] for n in sorted(member_nodes)]))
    models = {infos[n].model for n in infos if infos[n].model}
    roles = {infos[n].role for n in infos}
    linked = len(models) <= 1 or {"prefill", "decode"} <= roles
    return Across(timeline=tl, groups=groups, labels=labels, group_nodes=group_nodes, linked=linked)


def _server_label(members: list[nodes_mod.NodeInfo]) -> str:
    roles = sorted({m.role for m in members if m.role in ("prefill", "decode")})
    model = next((m.model for m in members if m.model), None)
    parts = [f"{'/'.join(roles)} server" if roles else "server"]
    if model:
        parts.append(f"of {model}")
    parts.append("on " + ", ".join(m.node for m in members[:4]) + (f" (+{len(members) - 4})" if len(members) > 4 else ""))
    return " ".join(parts)


def verdict_group(histories: list[tuple[IncidentHistory, list[Any]]], across: Across | None) -> int:
    """The server whose incident is the verdict: the one that failed first (one deployment), else the last to fail."""
    with_incidents = [g for g, (h, _) in enumerate(histories) if h.incidents()]
    if not with_incidents:
        return len(histories) - 1
    if across is None or len(histories) == 1:
        return with_incidents[-1]
    cause = across.timeline.cause
    if across.linked and cause is not None:
        for g in with_incidents:
            if cause.node in across.group_nodes[g]:
                return g
    ordered = [o for o in across.timeline.observations if o.primary]
    for o in reversed(ordered):
        for g in with_incidents:
            if o.node in across.group_nodes[g]:
                return g
    return with_incidents[-1]


def timeline_of(across: Across | None, group: int) -> nodes_mod.Timeline | None:
    """The timeline the verdict speaks of: all nodes of one deployment, or the verdict's own server's nodes."""
    if across is None:
        return None
    if across.linked or len(across.groups) < 2:
        return across.timeline
    mine = across.group_nodes[group]
    tl = across.timeline
    from oomdoctor.inference import nodes as nodes_mod

    return nodes_mod.timeline({n: i for n, i in tl.nodes.items() if n in mine}, [o for o in tl.observations if o.node in mine])


def nodes_facts(facts: Facts, tl: nodes_mod.Timeline | None, klass: str) -> str:
    """The verdict's node facts (who failed first, the consequences) and the sentence that names them."""
    if tl is None or not tl.multi_node:
        return ""
    from oomdoctor.inference import nodes as nodes_mod

    node_list, consequences = nodes_mod.to_json(tl, klass)
    facts.set("node_count", len(tl.nodes))
    facts.set("_nodes", node_list)
    facts.set("_consequences", consequences)
    if tl.cause is not None:
        info = tl.nodes.get(tl.cause.node)
        facts.set("failing_node", tl.cause.node, tl.cause.ref)
        facts.set("failing_node_role", info.role if info is not None else None, tl.cause.ref)
        facts.set("failing_rank", tl.cause.rank, tl.cause.ref)
    return nodes_mod.summary(tl)


def own_names(across: Across | None, paths: list[str]) -> set[str]:
    """The server's own pods and hosts: its nodes (kubectl prefixes, file and directory names)."""
    if across is None:
        from oomdoctor.inference import nodes as nodes_mod

        return {nodes_mod.node_of_path(p)[0] for p in paths}
    return set(across.timeline.nodes)

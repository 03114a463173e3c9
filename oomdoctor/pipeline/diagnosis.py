"""The pipeline from input paths to one Diagnosis view model that every renderer reads.

inputs -> scanned lines -> parser events -> runs -> facts per incident -> rules -> findings ->
recommendations; the verdict is the last incident's finding whose fix comes first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomdoctor.base.errors import InputError, UsageError
from oomdoctor.evidence.runs import is_oom_event, split_runs
from oomdoctor.inference.facts import build_facts
from oomdoctor.input import kinds
from oomdoctor.input.files import InputStats, expand_paths, is_monitoring_json, unread_input
from oomdoctor.input.stdin_spool import release_stdin_spool, spool_stdin
from oomdoctor.pipeline.across_nodes import across_nodes, nodes_facts, timeline_of, verdict_group
from oomdoctor.pipeline.collected_evidence import monitoring_facts, observer_oom
from oomdoctor.pipeline.evaluation import evaluate_incident
from oomdoctor.pipeline.events import read_events
from oomdoctor.pipeline.history import IncidentHistory
from oomdoctor.pipeline.inputs import is_monitoring_text, split_evidence
from oomdoctor.pipeline.verdict import incident_verdict, no_oom_verdict

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from oomdoctor.advice.registry import Recommender
    from oomdoctor.base.evidence import Event
    from oomdoctor.inference.nodes import NodeScan
    from oomdoctor.inference.rule_engine import Rule
    from oomdoctor.pipeline.model import Diagnosis


def diagnose(paths: list[str], rules: list[Rule], system: str | None = None, recommenders: Mapping[str, Recommender] | None = None) -> Diagnosis:
    """Read every input, find the incidents, and return the diagnosis; InputError if nothing was readable."""
    if paths.count("-") > 1:
        raise UsageError("'-' (standard input) is given more than once; it can be read as one input only")
    if "-" in paths:
        # Standard input is read twice (events, then the node timeline): spooled to a temporary file.
        spool_stdin()
    try:
        return _diagnose(paths, rules, system, recommenders)
    finally:
        release_stdin_spool()


def _diagnose(paths: list[str], rules: list[Rule], system: str | None, recommenders: Mapping[str, Recommender] | None = None) -> Diagnosis:
    monitoring = [p for p in paths if is_monitoring_text(p)]  # one sniff of each input's head
    log_paths, evidence_paths = split_evidence([p for p in paths if p not in monitoring])
    evidence_paths.extend(monitoring)
    gathered: list[dict[str, Any]] = []
    # Inputs nothing was read from: each is listed under its own path with its reason (kind missing
    # or unreadable, lines 0), after the inputs that were read.
    unread: list[InputStats] = []
    if not log_paths:
        found: list[str] = []
    else:
        found, missing = expand_paths(log_paths)
        unread.extend(missing)
        # Monitoring evidence found in a directory (a DCGM scrape, a query_range export) is not a log.
        evidence_paths.extend(p for p in found if p != "-" and (p.lower().endswith(kinds.MONITORING_SUFFIXES) or is_monitoring_json(p)))
        found = [p for p in found if p not in evidence_paths]
    for path in evidence_paths:
        from oomdoctor.evidence import collected  # evidence files' reader: a plain log has none

        try:
            gathered.append(collected.load(path))
        except InputError as exc:
            unread.append(unread_input(path, str(exc)))
    if not found and not gathered:
        raise InputError(unread[0].problem if unread else "no input")
    stats_list: list[InputStats] = []
    per_input: list[list[Event]] = []
    read_paths: list[str] = []
    # Several inputs: the node step's lines are read on the main pass (one read of each input). One
    # input from one node needs no node step, and does not import it.
    node_scans: list[NodeScan] | None = None
    if len(found) > 1:
        from oomdoctor.inference.nodes import NodeScan

        node_scans = []
    for path in found:
        stats = InputStats(path="<stdin>" if path == "-" else path)
        scan = NodeScan() if node_scans is not None else None
        try:
            per_input.append(read_events(path, stats, scan))
        except InputError as exc:
            unread.append(unread_input(stats.path, str(exc)))
            continue
        stats_list.append(stats)
        read_paths.append(path)
        if node_scans is not None and scan is not None:
            node_scans.append(scan)
    for item in gathered:
        stats_list.append(InputStats(path=item["path"], kind=item["kind"]))
    if not stats_list:
        raise InputError(unread[0].problem if unread else "no input")
    stats_list.extend(unread)
    hints: dict[str, int] = {}
    for s in stats_list:
        for name, count in s.system_hints.items():
            hints[name] = hints.get(name, 0) + count
    # When no event names the system (an OOM traceback alone), the line prefixes' style decides.
    hint = max(sorted(hints), key=lambda k: hints[k]) if hints else None
    line_counts = {s.path: s.lines for s in stats_list}
    # A hard wrap's pieces, read joined to their line, are blank lines now, not log of their own.
    joined_pieces = {s.path: s.joined_pieces for s in stats_list if s.joined_pieces}
    across = across_nodes(read_paths, stats_list[: len(read_paths)], per_input, log_paths, node_scans)
    observed = observer_oom(gathered) if across is None else None
    if observed is not None and not any(is_oom_event(e) for events in per_input for e in events):
        per_input.append([observed])
    groups = across.groups if across is not None else [per_input]
    histories: list[tuple[IncidentHistory, list[Any]]] = []
    for g, streams in enumerate(groups):
        runs = split_runs(streams)
        history = IncidentHistory()
        for i, run in enumerate(runs):
            facts = build_facts(run, system=system, hint=hint, collected=gathered if i == len(runs) - 1 else (), line_counts=line_counts, joined_pieces=joined_pieces)
            if facts is not None:
                if i == len(runs) - 1:
                    monitoring_facts(facts, gathered, across, read_paths)
                if across is not None and len(groups) > 1:
                    facts.set("server", across.labels[g])
                history.add(evaluate_incident(facts, rules, recommenders), repeats=run.repeats)
        histories.append((history, runs))
    chosen = verdict_group(histories, across)
    history, runs = histories[chosen]
    if history.incidents():
        return incident_verdict(histories, chosen, across, stats_list)
    all_runs = [r for _, rs in histories for r in rs]
    last_facts = build_facts(runs[-1], force=True, system=system, hint=hint, collected=gathered, line_counts=line_counts, joined_pieces=joined_pieces) if runs else None
    if last_facts is not None:
        nodes_facts(last_facts, timeline_of(across, chosen), "none")
        # A healthy server's memory over time too: growth that has not failed yet is what an alert needs.
        monitoring_facts(last_facts, gathered, across, read_paths)
    return no_oom_verdict(all_runs, last_facts, stats_list)

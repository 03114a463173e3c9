"""The pipeline from input paths to one Diagnosis view model that every renderer reads.

inputs -> scanned lines -> parser events -> runs -> facts per incident -> rules -> findings ->
recommendations; the verdict is the last incident's finding whose fix comes first.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from oomdoctor import __version__
from oomdoctor.advice.recommendation import Recommendation
from oomdoctor.advice.registry import recommend
from oomdoctor.base.errors import InputError, UsageError
from oomdoctor.base.evidence import KIND_REPEATS, Event, LineRef
from oomdoctor.evidence import collected
from oomdoctor.evidence import phase as phase_step
from oomdoctor.evidence.parsers import records as rc
from oomdoctor.evidence.parsers import sglang as sg
from oomdoctor.evidence.parsers import torch_oom as tt
from oomdoctor.evidence.parsers import vllm as vl
from oomdoctor.evidence.readings import Readings
from oomdoctor.evidence.readings import read as read_readings
from oomdoctor.evidence.runs import COLLAPSED_RUNS, RUN_MARKER_KINDS, RunSegmenter, is_oom_event, split_runs
from oomdoctor.inference import confidence
from oomdoctor.inference.completeness import Completeness
from oomdoctor.inference.confidence import Factor
from oomdoctor.inference.facts import Facts, build_facts
from oomdoctor.inference.rule_engine import Rule, evaluate
from oomdoctor.input import kinds
from oomdoctor.input.files import (
    InputStats,
    expand_paths,
    file_head,
    is_monitoring_json,
    iter_line_chunks,
    release_stdin_spool,
    spool_stdin,
    unread_input,
)
from oomdoctor.input.issue_input import issue_chunks
from oomdoctor.input.paste import repaired
from oomdoctor.input.prefixes import split_prefix
from oomdoctor.input.scan import scan_lines
from oomdoctor.memory import budget
from oomdoctor.memory.gpus import smallest_card_holding

if TYPE_CHECKING:  # imported where used: one small log needs neither the node nor the monitoring step
    import re
    from collections import OrderedDict, deque
    from collections.abc import Iterable, Mapping
    from typing import Any

    from oomdoctor.advice.registry import Recommender
    from oomdoctor.inference import nodes as nodes_mod
else:
    try:  # the C types collections re-exports: importing collections costs a start ~1 ms
        from collections import OrderedDict, deque
    except ImportError:  # pragma: no cover - another implementation
        from collections import OrderedDict, deque

ANCHORS: tuple[bytes, ...] = tuple(dict.fromkeys(sg.ANCHORS + vl.ANCHORS + tt.ANCHORS + rc.ANCHORS))
SYSTEMS = ("sglang", "vllm", "torch")
_FRAME_PREFIXES = ("File ", "Traceback", "During handling", "The above exception")


@dataclass(frozen=True)
class Finding:
    rule: Rule | None
    klass: str
    confidence: float
    message: str
    evidence: tuple[LineRef, ...]
    recommendations: list[Recommendation]
    extra: dict[str, Any] = field(default_factory=dict)
    factors: list[Factor] = field(default_factory=list)

    @property
    def rule_id(self) -> str | None:
        return self.rule.id if self.rule else None


@dataclass(frozen=True)
class Incident:
    run: int
    facts: Facts
    findings: list[Finding]
    not_evaluated: list[dict[str, Any]]

    @property
    def primary(self) -> Finding:
        return self.findings[0]


@dataclass(frozen=True)
class Diagnosis:
    """Everything a renderer shows: verdict, findings, budget, incidents, inputs."""

    verdict_class: str
    verdict_confidence: float
    verdict_rule: str | None
    summary: str
    findings: list[Finding]
    incidents: list[Incident]
    budget: dict[str, Any]
    not_evaluated: list[dict[str, Any]]
    inputs: list[InputStats]
    facts: Facts | None
    evidence: Completeness = field(default_factory=lambda: Completeness("complete"))
    phase: phase_step.Phase = phase_step.UNKNOWN
    confidence_factors: list[confidence.Factor] = field(default_factory=list)
    # The input stops before a failure is evident: the verdict (none, or a hypothesis) is inconclusive.
    inconclusive: bool = False
    # Per-rank values and the free-memory timeline, for the report's bars and chart.
    readings: Readings = field(default_factory=Readings)
    tool_version: str = __version__

    @property
    def oom(self) -> bool:
        return self.verdict_class != "none" and not self.inconclusive


# Kinds that repeat for as long as a server runs (one per retraction, preemption, failed encoder
# request, tqdm redraw); of these only the first and the most recent are kept, with a count, so that
# memory stays flat on logs of days.
_REPEATING = {
    sg.KIND_RETRACT,
    sg.KIND_GRAPH_BAR,
    sg.KIND_KV_ALLOC_DETAIL,
    sg.KIND_OMNI_ENCODER_FAIL,
    sg.KIND_CAPTURE_ADVICE,
    vl.KIND_PREEMPT,
    vl.KIND_KV_AVAILABLE,
    tt.KIND_OOM,
    tt.KIND_DRIVER_OOM,
    tt.KIND_HOST_OOM,
    rc.KIND_RECORD,
    rc.KIND_CUT,
    rc.KIND_CONTEXT,
}
# Of a compacted run's start line only the values an old incident's class can hang on are kept.
_SLIM_KEEP = frozenset({"mem_fraction_static", "tp_size", "gpu_memory_utilization", "version", "v1"})
_KEEP_FIRST = 16
_KEEP_LAST = 64
_UNPARSED_WINDOW = 64
_FULL_RUNS = 64


class _EventStore:
    """Events in log order, with repeating kinds bounded to their first and last occurrences.

    A crash loop restarts the server thousands of times; only the last _FULL_RUNS runs keep all
    their events, older ones keep their start line (and the other lines runs.RunSegmenter reads)
    and their OOM events (enough to list them as incidents), so memory stays bounded however long
    the log. Run starts are RunSegmenter's, the same that split_runs cuts at.
    """

    def __init__(self) -> None:
        self.kept: list[Event] = []
        self.tail: dict[str, deque[Event]] = {}
        self.counts: dict[str, int] = {}
        self.run_starts: list[int] = []  # indexes into kept
        self.segmenter = RunSegmenter()  # the same run starts split_runs finds
        # The last compacted run: its signature and the index of its start event, so that an identical
        # next one is collapsed into it (a counter) instead of kept: memory stays constant in a crash loop.
        self.last_signature: tuple | None = None
        self.last_start: int = -1

    @staticmethod
    def _slim(event: Event) -> Event:
        """A run-marker event without its long config text (its kind and short values stay)."""
        # One ref (the first), short text, no long strings or traceback frames: enough to segment the
        # run and to classify its OOM, a constant size however long the original record was.
        return Event(
            event.kind,
            (replace(event.ref, text=event.ref.text[:160]),),
            {k: v for k, v in event.values.items() if k in _SLIM_KEEP or (event.kind not in RUN_MARKER_KINDS and k not in ("frames", "message") and (not isinstance(v, str) or len(v) < 200))},
        )

    def _compact_oldest_full_run(self) -> None:
        i = len(self.run_starts) - _FULL_RUNS - 2  # the newest run (being read) and _FULL_RUNS before it stay whole
        start, end = self.run_starts[i], self.run_starts[i + 1]
        # The run's start line and the other lines the segmenter reads are kept for segmentation only
        # (their long config text is not), so split_runs cuts the slimmed events where it cut the whole ones.
        segment = self.kept[start:end]
        slim = [self._slim(e) for j, e in enumerate(segment) if j == 0 or e.kind in RUN_MARKER_KINDS or is_oom_event(e)]
        signature = _signature(slim)
        if signature == self.last_signature and self.last_start >= 0 and self.last_start == (self.run_starts[i - 1] if i > 0 else -1):
            # The same run again: count it on the previous compacted run's start event, keep nothing.
            head = self.kept[self.last_start]
            head.values[COLLAPSED_RUNS] = head.values.get(COLLAPSED_RUNS, 0) + 1
            del self.kept[start:end]
            del self.run_starts[i]
            self.run_starts[i:] = [s - len(segment) for s in self.run_starts[i:]]
            return
        removed = len(segment) - len(slim)
        self.kept[start:end] = slim
        self.run_starts[i + 1 :] = [s - removed for s in self.run_starts[i + 1 :]]
        self.last_signature, self.last_start = signature, start

    def add(self, event: Event) -> None:
        kind = event.kind
        if self.segmenter.feed(kind):
            self.run_starts.append(len(self.kept))
            if len(self.run_starts) > _FULL_RUNS + 1:
                self._compact_oldest_full_run()
        n = self.counts.get(kind, 0) + 1
        self.counts[kind] = n
        if kind not in _REPEATING or n <= _KEEP_FIRST:
            self.kept.append(event)
            return
        self.tail.setdefault(kind, deque(maxlen=_KEEP_LAST)).append(event)

    def events(self) -> list[Event]:
        out = list(self.kept)
        for kind, tail in self.tail.items():
            out.extend(tail)
            dropped = self.counts[kind] - _KEEP_FIRST - len(tail)
            if dropped > 0:
                out.append(Event(KIND_REPEATS, (tail[0].ref,), {"kind": kind, "dropped": dropped, "total": self.counts[kind]}))
        out.sort(key=lambda e: e.ref.line)
        return out


def _signature(events: list[Event]) -> tuple:
    """What makes two compacted runs the same incident: their kinds and values, not their lines."""
    return tuple((e.kind, tuple(sorted((k, repr(v)) for k, v in e.values.items() if k != COLLAPSED_RUNS))) for e in events)


def read_events(path: str, stats: InputStats) -> list[Event]:
    """Scan one input and run every parser over its lines; pure apart from reading the input."""
    parsers = (sg.SGLangParser(), vl.VLLMParser(), tt.TorchParser(), rc.RecordParser())
    store = _EventStore()
    counter = [0]
    # Anchored lines no event has cited yet; a wrapped message cites its first line only once its
    # last line is read, so a line is counted as unparsed when it leaves this window uncited.
    pending: OrderedDict[int, None] = OrderedDict()
    unparsed = 0
    display = "<stdin>" if path == "-" else path

    def cite(events: list[Event]) -> None:
        for e in events:
            store.add(e)
            for r in e.refs:
                pending.pop(r.line, None)

    def reversed_note() -> None:
        stats.warn("timestamps go back in time (a newest-first console export): read oldest first; line numbers count from the end")

    def issue_note(reported: list[Event]) -> None:
        stats.kind = "issue"
        stats.warn("read as a bug report: only its code blocks, <details> and quoted logs are evidence; stated flags are marked as reported")
        for e in reported:
            store.add(e)

    def dedent_note(columns: int) -> None:
        stats.warn(f"every line is indented by the same {columns} column(s) (an indented paste): read without them")

    def unwrap_note(width: int, pieces: tuple[int, ...]) -> None:
        stats.joined_pieces = pieces
        stats.warn(f"lines are cut at column {width} (a terminal's hard wrap): each cut line is read joined to its rest")

    chunks = repaired(issue_chunks(iter_line_chunks(path, stats), path, display, issue_note), reversed_note, dedent_note, unwrap_note)
    for line in scan_lines(chunks, display, ANCHORS, counter, rc.BEFORE_ANCHORS):
        if line.system:
            stats.system_hints[line.system] = stats.system_hints.get(line.system, 0) + 1
        if line.node:
            stats.node_prefixed = True
        # Traceback frames and their indented source lines are context, not unparsed evidence.
        if (
            line.anchored
            and not line.msg.startswith("    ")
            and not line.msg.lstrip().startswith(_FRAME_PREFIXES)
            and "Traceback (most recent call last)" not in line.msg
        ):
            pending[line.ref.line] = None
            if len(pending) > _UNPARSED_WINDOW:
                pending.popitem(last=False)
                unparsed += 1
        for parser in parsers:
            cite(parser.feed(line))
        # A line that says which phase the server was in (progress bars, serving traffic) is context
        # evidence, cited like any other event.
        context_rule = phase_step.classify_context(line.msg) if not line.msg.startswith(" ") else None
        if context_rule is not None:
            cite([Event(rc.KIND_CONTEXT, (line.ref,), {"phase": context_rule.phase, "after_failure": context_rule.after_failure})])
    for parser in parsers:
        cite(parser.finish())
    stats.lines = counter[0]
    stats.unparsed_lines = unparsed + len(pending)
    return store.events()


_PLACEHOLDER_RE = re.compile(r"\{(\w+)\}")
_OPTIONAL_RE = re.compile(r"\[\[([^\[\]]*)\]\]")


def _render_message(template: str, facts: Facts) -> str:
    """Fill ``{fact_name}`` placeholders; nothing else in a rule's text is interpreted.

    A clause written ``[[ ... {fact} ...]]`` is left out when one of its facts is missing, so that a
    message never says "n/a" where a clause can simply be dropped. Not ``str.format``: a rule file
    from --rules must not reach attributes like ``{x.__class__}``.
    """

    def optional(m: re.Match[str]) -> str:
        inner = m.group(1)
        return inner if all(name in facts.values for name in _PLACEHOLDER_RE.findall(inner)) else ""

    template = _OPTIONAL_RE.sub(optional, template)

    def shown(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in facts.values:
            return "n/a"
        value = facts.values[name]
        if name.endswith("_bytes") and isinstance(value, (int, float)):
            return budget.describe(int(value))
        if isinstance(value, float):
            return f"{value:g}"
        if isinstance(value, tuple):
            return ", ".join(str(v) for v in value)
        return str(value)

    return _PLACEHOLDER_RE.sub(shown, template)


def _evidence_for(rule: Rule, used: set[str], facts: Facts) -> tuple[LineRef, ...]:
    refs: dict[tuple[str, int], LineRef] = {}
    for name in sorted(used):
        for ref in facts.refs.get(name, ()):
            refs.setdefault((ref.path, ref.line), ref)
    return tuple(sorted(refs.values(), key=lambda r: (r.path, r.line)))


def _finding_extra(klass: str, facts: Facts) -> dict[str, Any]:
    if klass != "foreign_process":
        return {}
    processes = facts.get("process_list") or ()
    return {
        "processes": [
            {"pid": p.pid, "used_bytes": p.used_bytes, "is_self": p.is_self or (p.pid == facts.get("assumed_self_pid"))}
            for p in processes
        ]
    }


def evaluate_incident(facts: Facts, rules: Iterable[Rule], recommenders: Mapping[str, Recommender] | None = None) -> Incident:
    """Run every applicable rule on one incident's facts; order findings by whose fix comes first."""
    values = facts.values
    system = values.get("system", "unknown")
    fired: list[tuple[int, float, Finding]] = []
    not_evaluated: list[dict[str, Any]] = []
    for rule in rules:
        if "any" not in rule.systems and system not in rule.systems:
            continue
        ev = evaluate(rule.when, values)
        if ev.result is None:
            not_evaluated.append({"rule": rule.id, "missing": sorted(ev.missing)})
            continue
        if not ev.result:
            continue
        used = ev.used | rule.facts_used()
        value, factors = confidence.adjust(rule.confidence, used, _evidence_of(facts), rule.klass)
        if "weights_fit" in used and facts.get("weights_fit_undecided"):
            # The engine says the KV did not fit; which fix (raise the fraction, or shard) is ours to
            # compute, and here it hangs on a per-token KV size the log does not give.
            value, factors = confidence.tie_cap(value, factors, "weights_dont_fit", _UNDECIDED_WHY)
        finding = Finding(
            rule=rule,
            klass=rule.klass,
            confidence=value,
            factors=factors,
            message=_render_message(rule.message, facts),
            evidence=_evidence_for(rule, ev.used, facts),
            recommendations=recommend(rule.advice, facts, recommenders),
            extra=_finding_extra(rule.klass, facts),
        )
        fired.append((rule.priority, -value, finding))
    fired.sort(key=lambda t: (t[0], t[1], t[2].rule_id or ""))
    findings = [f for _, _, f in fired]
    # Two rules of one class are one finding for the reader; keep the first (highest priority).
    seen: set[str] = set()
    unique: list[Finding] = []
    for f in findings:
        if f.klass not in seen:
            seen.add(f.klass)
            unique.append(f)
    if len(unique) > 1 and unique[1].confidence >= unique[0].confidence and unique[1].klass not in _COMPANIONS.get(unique[0].klass, ()):
        # Two classes hold as strongly and neither explains the other: say so in the number.
        value, factors = confidence.tie_cap(unique[0].confidence, unique[0].factors, unique[1].klass)
        unique[0] = replace(unique[0], confidence=value, factors=factors)
    stronger = [f for f in unique[1:] if f.confidence > unique[0].confidence] if unique else []
    if stronger:
        # The verdict is the fix that comes first, not the surest finding: say so where they differ.
        note = confidence.Factor(
            f"ranked first because its fix comes first; {stronger[0].klass} is more certain ({stronger[0].confidence:.2f}) but is addressed after it",
            0.0,
        )
        unique[0] = replace(unique[0], factors=[*unique[0].factors, note])
    if not unique:
        missing = sorted({m for item in not_evaluated for m in item["missing"]})
        decisive = _decisive_gaps(facts)
        evidence = tuple(r for r in (facts.first_line,) if r is not None)
        unique.append(
            Finding(
                rule=None,
                klass="unknown_oom",
                confidence=0.3,
                message=(
                    "An out-of-memory failure is evident, but the evidence does not support any class. "
                    + ("What would decide it: " + "; ".join(decisive) + "." if decisive else "No rule matched its circumstances.")
                ),
                evidence=evidence,
                recommendations=[],
                extra={"missing": missing, "would_decide": decisive},
            )
        )
    return Incident(run=facts.run, facts=facts, findings=unique, not_evaluated=not_evaluated)


# Classes that hold together by design: the first is the fix that comes first, the second is still
# true (a foreign process *and* a startup KV failure), so their agreement is no rivalry.
_COMPANIONS: dict[str, tuple[str, ...]] = {
    "foreign_process": ("startup_kv", "weights_dont_fit", "runtime_activation", "cuda_graph", "fragmentation", "encoder_starvation"),
    "weights_dont_fit": ("startup_kv",),
    "startup_kv": ("weights_dont_fit",),
    "cuda_graph": ("runtime_activation",),
    "encoder_starvation": ("runtime_activation",),
}


_UNDECIDED_WHY = "whether the weights leave room for one request's KV rests on an assumed 1 GiB (the log gives no per-token KV size)"


def _evidence_of(facts: Facts) -> confidence.Evidence:
    return confidence.Evidence(
        phase_source=facts.get("phase_source", "none"),
        message_complete=facts.get("oom_message_complete"),
        system_fallback=facts.get("system_source") in ("prefix", "frames", "fallback"),
        status=facts.get("evidence_status", "complete"),
        observer_only=any(e.get("source") == "capture_observer" for e in facts.events) and facts.get("oom_count") == 1,
    )


def _decisive_gaps(f: Facts) -> list[str]:
    """The evidence whose absence left an OOM unclassified, in words and with where to get it."""
    gaps = []
    if f.get("oom_stage") in (None, "unknown", "startup", "kv_pool"):
        gaps.append("where the allocation failed: the traceback above the OOM, or the startup lines before it")
    if f.get("requested_bytes") is None:
        gaps.append("the allocator's numbers: the complete 'CUDA out of memory. Tried to allocate ...' message (a bare 'CUDA error: out of memory' has none)")
    if f.get("system") == "sglang" and (f.get("pre_bytes") is None or f.get("post_bytes") is None):
        gaps.append("SGLang's 'Load weight begin/end ... avail mem=' lines (--log-level info)")
    if f.get("process_list") is None and "collected_gpus" not in f.values:
        gaps.append("the processes on the GPU at the time: nvidia-smi, or `oomdoctor collect -o DIR` / `oomdoctor run`")
    return gaps


def _budget_view(facts: Facts | None) -> dict[str, Any]:
    if facts is None:
        return {"system": "unknown"}
    keys = (
        "pre_bytes",
        "post_bytes",
        "weights_bytes",
        "mem_fraction_static",
        "kv_budget_bytes",
        "dynamic_region_bytes",
        "kv_pool_bytes",
        "kv_pool_tokens",
        "cell_bytes",
        "capacity_bytes",
        "likely_gpu",
        "activation_reserve_bytes",
        "kv_floor_bytes",
        "min_viable_mfs",
        "max_safe_mfs",
        "requested_bytes",
        "free_bytes",
        "reserved_unallocated_bytes",
        "available_gpu_mem_bytes",
        "cuda_graph_bytes",
        "startup_foreign_bytes",
    )
    view: dict[str, Any] = {"system": facts.get("system", "unknown")}
    for key in keys:
        if key in facts.values:
            view[key] = facts.values[key]
    derivations = {name: [s.to_json() for s in d.steps] for name, d in sorted(facts.derivations.items())}
    kv, cell = facts.get("kv_budget_bytes"), facts.get("cell_bytes")
    if kv is not None and cell:
        view["kv_tokens"] = budget.kv_tokens(kv, cell)
    auto = _autotune_view(facts)
    if auto is not None:
        view["sglang_autotune_mfs"] = auto.value
        derivations["sglang_autotune_mfs"] = [s.to_json() for s in auto.steps]
    view["derivations"] = derivations
    return view


def _autotune_view(facts: Facts) -> budget.Derived | None:
    if facts.get("system") != "sglang":
        return None
    capacity = facts.get("capacity_bytes")
    assumed: list[budget.Step] = []
    if not capacity and facts.get("pre_bytes"):
        card = smallest_card_holding(facts.get("pre_bytes"))
        if card is None:
            return None
        capacity = card[1]
        assumed.append(budget.Step("card capacity (assumed from pre)", f"smallest known card above pre: {card[0]}", capacity, "bytes"))
    if not capacity:
        return None
    era = "B" if facts.get("load_end_era") == "V-a/b" else "current"
    auto = budget.sglang_autotune_mfs(
        capacity,
        tp=facts.get("tp_size") or 1,
        pp=facts.get("pp_size") or 1,
        era=era,
        chunked_prefill_size=facts.get("chunked_prefill_size"),
        cuda_graph_max_bs=facts.get("cuda_graph_max_bs"),
    )
    return budget.Derived(auto.value, (*tuple(assumed), budget.Step("auto-tune era", "from the log's line formats", era, "text"), *auto.steps))


def _is_issue_export(path: str) -> bool:
    """An issue's JSON export (body and comments) is a bug report to read, not collected evidence."""
    if not path.lower().endswith(".json"):
        return False
    head = file_head(path, 4 << 20)
    if head is None:
        return False
    from oomdoctor.input import issue_body

    return issue_body.is_issue_json(head.decode("utf-8", "replace"))


def _split_evidence(paths: list[str]) -> tuple[list[str], list[str]]:
    """Log paths, and non-log evidence files (bundle manifests, memory_stats, snapshots, nvidia-smi)."""
    logs: list[str] = []
    evidence: list[str] = []
    for path in paths:
        if path != "-" and os.path.isdir(path) and kinds.is_bundle_dir(path):
            evidence.extend(collected.evidence_files(path))
            logs.append(path)
        elif path != "-" and os.path.isfile(path) and not _is_issue_export(path) and kinds.is_evidence_file(path):
            evidence.append(path)
        else:
            logs.append(path)
    return logs, evidence


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
    log_paths, evidence_paths = _split_evidence([p for p in paths if not _is_monitoring_text(p)])
    evidence_paths.extend(p for p in paths if _is_monitoring_text(p))
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
        try:
            gathered.append(collected.load(path))
        except InputError as exc:
            unread.append(unread_input(path, str(exc)))
    if not found and not gathered:
        raise InputError(unread[0].problem if unread else "no input")
    stats_list: list[InputStats] = []
    per_input: list[list[Event]] = []
    read_paths: list[str] = []
    for path in found:
        stats = InputStats(path="<stdin>" if path == "-" else path)
        try:
            per_input.append(read_events(path, stats))
        except InputError as exc:
            unread.append(unread_input(stats.path, str(exc)))
            continue
        stats_list.append(stats)
        read_paths.append(path)
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
    across = _across_nodes(read_paths, stats_list[: len(read_paths)], per_input, log_paths)
    observed = _observer_oom(gathered) if across is None else None
    if observed is not None and not any(is_oom_event(e) for events in per_input for e in events):
        per_input.append([observed])
    groups = across.groups if across is not None else [per_input]
    histories: list[tuple[_IncidentHistory, list[Any]]] = []
    for g, streams in enumerate(groups):
        runs = split_runs(streams)
        history = _IncidentHistory()
        for i, run in enumerate(runs):
            facts = build_facts(run, system=system, hint=hint, collected=gathered if i == len(runs) - 1 else (), line_counts=line_counts, joined_pieces=joined_pieces)
            if facts is not None:
                if i == len(runs) - 1:
                    _monitoring_facts(facts, gathered, across, read_paths)
                if across is not None and len(groups) > 1:
                    facts.set("server", across.labels[g])
                history.add(evaluate_incident(facts, rules, recommenders), repeats=run.repeats)
        histories.append((history, runs))
    chosen = _verdict_group(histories, across)
    history, runs = histories[chosen]
    incidents = [i for h, _ in histories if h is not history for i in h.incidents()] + history.incidents()
    if history.incidents():
        last = history.incidents()[-1]
        primary = last.primary
        node_text = _nodes_facts(last.facts, _timeline_of(across, chosen), primary.klass)
        pods_text = _monitoring_text(last.facts)
        summary = primary.message + history.earlier_text() + _reported_text(last.facts)
        summary += node_text + _other_servers_text(histories, history, across) + pods_text
        # The findings say it too (every report shows them): the first failing node on the verdict's
        # finding, the other pods on the foreign-process finding.
        findings = [
            replace(f, message=f.message + (node_text if f is primary else "") + (pods_text if f.klass == "foreign_process" else ""))
            if (f is primary and node_text) or (f.klass == "foreign_process" and pods_text)
            else f
            for f in last.findings
        ]
        return Diagnosis(
            verdict_class=primary.klass,
            verdict_confidence=primary.confidence,
            verdict_rule=primary.rule_id,
            summary=summary,
            findings=findings,
            incidents=incidents,
            budget=_budget_view(last.facts),
            not_evaluated=last.not_evaluated,
            inputs=stats_list,
            facts=last.facts,
            evidence=_completeness(last.facts),
            phase=_phase_of(last.facts),
            confidence_factors=primary.factors,
            readings=read_readings(last.facts.events),
        )
    all_runs = [r for _, rs in histories for r in rs]
    last_facts = build_facts(runs[-1], force=True, system=system, hint=hint, collected=gathered, line_counts=line_counts, joined_pieces=joined_pieces) if runs else None
    if last_facts is not None:
        _nodes_facts(last_facts, _timeline_of(across, chosen), "none")
    return _no_oom_verdict(all_runs, last_facts, stats_list)


def _is_monitoring_text(path: str) -> bool:
    """A DCGM exporter scrape given by path, whatever its name (`curl .../metrics > metrics.txt`)."""
    if path == "-" or not os.path.isfile(path) or path.lower().endswith((".json", ".csv", ".xml", ".gz", ".bz2", ".xz")):
        return False
    if path.lower().endswith(kinds.MONITORING_SUFFIXES):
        return True
    head = file_head(path, 64 << 10)
    if head is None or not head.lstrip().startswith((b"# HELP DCGM_", b"# TYPE DCGM_", b"DCGM_FI_")):
        return False
    from oomdoctor.evidence import monitoring

    return monitoring.looks_like_dcgm(head)


@dataclass
class _Across:
    """The inputs seen as nodes: the timeline, and the event streams grouped by server."""

    timeline: nodes_mod.Timeline
    groups: list[list[list[Event]]]
    labels: list[str]
    group_nodes: list[set[str]]
    linked: bool  # the servers are parts of one deployment (one model; prefill and decode)


def _event_node(event: Event, file_node: str) -> str:
    node = split_prefix(event.ref.text).node if event.ref.text else None
    return node or file_node


def _across_nodes(paths: list[str], stats: list[InputStats], per_input: list[list[Event]], roots: list[str]) -> _Across | None:
    """Nodes, roles and the cross-node timeline; None for one input from one node (nothing to do)."""
    # The scanner already split every prefix: a single input needs this step only when a prefix named a node.
    if len(per_input) < 2 and not any(s.node_prefixed for s in stats):
        return None
    from oomdoctor.inference import nodes as nodes_mod

    displays = [s.path for s in stats]
    readable = [s.kind != "issue" for s in stats]
    scans, file_nodes = nodes_mod.identify([p if ok else os.devnull for p, ok in zip(paths, readable, strict=True)], displays, [r for r in roots if r != "-"])
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
    return _Across(timeline=tl, groups=groups, labels=labels, group_nodes=group_nodes, linked=linked)


def _server_label(members: list[nodes_mod.NodeInfo]) -> str:
    roles = sorted({m.role for m in members if m.role in ("prefill", "decode")})
    model = next((m.model for m in members if m.model), None)
    parts = [f"{'/'.join(roles)} server" if roles else "server"]
    if model:
        parts.append(f"of {model}")
    parts.append("on " + ", ".join(m.node for m in members[:4]) + (f" (+{len(members) - 4})" if len(members) > 4 else ""))
    return " ".join(parts)


def _verdict_group(histories: list[tuple[_IncidentHistory, list[Any]]], across: _Across | None) -> int:
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


def _timeline_of(across: _Across | None, group: int) -> nodes_mod.Timeline | None:
    """The timeline the verdict speaks of: all nodes of one deployment, or the verdict's own server's nodes."""
    if across is None:
        return None
    if across.linked or len(across.groups) < 2:
        return across.timeline
    mine = across.group_nodes[group]
    tl = across.timeline
    from oomdoctor.inference import nodes as nodes_mod

    return nodes_mod.timeline({n: i for n, i in tl.nodes.items() if n in mine}, [o for o in tl.observations if o.node in mine])


def _nodes_facts(facts: Facts, tl: nodes_mod.Timeline | None, klass: str) -> str:
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


def _other_servers_text(histories: list[tuple[_IncidentHistory, list[Any]]], chosen: _IncidentHistory, across: _Across | None) -> str:
    if across is None or len(histories) < 2:
        return ""
    parts = []
    for g, (h, _) in enumerate(histories):
        if h is chosen:
            continue
        incidents = h.incidents()
        what = f"{incidents[-1].primary.klass}" if incidents else "no out-of-memory incident"
        parts.append(f"{across.labels[g]}: {what}")
    verdict = next(across.labels[g] for g, (h, _) in enumerate(histories) if h is chosen)
    return f" The inputs hold {len(histories)} different servers, diagnosed separately (this verdict: {verdict}; " + "; ".join(parts) + ")."


def _own_names(across: _Across | None, paths: list[str]) -> set[str]:
    """The server's own pods and hosts: its nodes (kubectl prefixes, file and directory names)."""
    if across is None:
        from oomdoctor.inference import nodes as nodes_mod

        return {nodes_mod.node_of_path(p)[0] for p in paths}
    return set(across.timeline.nodes)


def _monitoring_facts(facts: Facts, gathered: list[dict[str, Any]], across: _Across | None, paths: list[str]) -> None:
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
    own = _own_names(across, paths) | {r.split("/")[0] for e in facts.events for r in [e.ref.rank or ""] if "/" in r}
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


def _monitoring_text(facts: Facts) -> str:
    pods = facts.get("_monitoring_pods") or []
    if not pods:
        return ""
    named = ", ".join(
        f"pod {p['pod']}" + (f" in namespace {p['namespace']}" if p["namespace"] else "") + (f" on GPU {p['gpu']}" if p.get("gpu") is not None else "") + (f" of {p['hostname']}" if p.get("hostname") else "")
        for p in pods
    )
    held = facts.get("monitoring_foreign_bytes")
    much = f", holding {budget.describe(int(held))} (the GPU's used memory minus the server's own)" if held else ""
    return f" DCGM shows another tenant on the server's GPU: {named}{much}."


class _IncidentHistory:
    """The incidents of a log, bounded: a crash loop of any length keeps a constant amount.

    The newest incident is kept whole (it is the verdict); earlier ones are slimmed to what the
    incident list shows (run, line, time, class, rule), and of those only the first _HEAD_INCIDENTS
    and the last _TAIL_INCIDENTS are kept, with counts per class for all of them.
    """

    def __init__(self) -> None:
        self.head: list[Incident] = []
        self.tail: deque[Incident] = deque(maxlen=_TAIL_INCIDENTS)
        self.newest: Incident | None = None
        self.newest_repeats = 0
        self.counts: dict[tuple[str, str | None], int] = {}
        self.earlier_total = 0

    def add(self, incident: Incident, repeats: int = 0) -> None:
        if self.newest is not None:
            slim = _slim(self.newest)
            key = (slim.primary.klass, slim.primary.rule_id)
            self.counts[key] = self.counts.get(key, 0) + 1 + self.newest_repeats
            self.earlier_total += 1 + self.newest_repeats
            if len(self.head) < _HEAD_INCIDENTS:
                self.head.append(slim)
            else:
                self.tail.append(slim)
        self.newest = incident
        self.newest_repeats = repeats

    def incidents(self) -> list[Incident]:
        return [*self.head, *self.tail, *([self.newest] if self.newest is not None else [])]

    def earlier_text(self) -> str:
        if not self.earlier_total:
            return ""
        if self.earlier_total <= 5:
            listed = "; ".join(f"run {i.run}: {i.primary.klass}" for i in self.incidents()[:-1])
            return f" (earlier incidents in this log: {listed})"
        by_class = ", ".join(f"{n:,} {klass}" for (klass, _rule), n in sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0][0])))
        return f" (this log holds {self.earlier_total:,} earlier incidents: {by_class})"


_HEAD_INCIDENTS = 16
_TAIL_INCIDENTS = 64


def _slim(incident: Incident) -> Incident:
    """An earlier incident as the incident list shows it, without its facts, events and advice."""
    f = incident.facts
    primary = incident.primary
    facts = Facts(run=f.run, first_line=f.first_line, time=f.time)
    finding = Finding(rule=primary.rule, klass=primary.klass, confidence=primary.confidence, message="", evidence=(), recommendations=[])
    return Incident(run=incident.run, facts=facts, findings=[finding], not_evaluated=[])


_REPORTED_WORDS = {
    "mem_fraction_static": "--mem-fraction-static {}",
    "gpu_memory_utilization": "--gpu-memory-utilization {}",
    "tp_size": "TP {}",
    "max_model_len": "--max-model-len {}",
    "context_length": "--context-length {}",
    "chunked_prefill_size": "--chunked-prefill-size {}",
    "max_num_seqs": "--max-num-seqs {}",
    "model_path": "model {}",
    "capacity_bytes": "the GPU ({})",
}


def _reported_text(facts: Facts) -> str:
    """Which numbers rest on the reporter's words rather than on a log line."""
    names = facts.get("reported_facts") or ()
    if not names:
        return ""
    parts = []
    for name in names:
        value = facts.get("reported_gpu") if name == "capacity_bytes" else facts.get(name)
        ref = facts.ref(name)
        where = f" (line {ref.line})" if ref is not None else ""
        parts.append(_REPORTED_WORDS.get(name, name + " {}").format(value) + where)
    return " Stated by the reporter, not read from a log: " + "; ".join(parts) + "."


def _completeness(facts: Facts | None) -> Completeness:
    if facts is None:
        return Completeness("complete")
    return Completeness(facts.get("evidence_status", "complete"), facts.get("evidence_reason", ""), facts.ref("evidence_status"))


def _phase_of(facts: Facts | None) -> phase_step.Phase:
    if facts is None or facts.get("phase") is None:
        return phase_step.UNKNOWN
    return phase_step.Phase(facts.get("phase"), facts.get("phase_source", "none"), facts.ref("phase"))


# What fetches the rest of a cut log, for every hypothesis and inconclusive verdict.
FETCH_REST = (
    "the whole log from the server's start to its end: `kubectl logs --previous POD` (a restarted pod), "
    "`journalctl -u UNIT --no-pager`, `docker logs CONTAINER`, or the log file itself"
)


def _observer_oom(gathered: list[dict[str, Any]]) -> Event | None:
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


def _no_oom_verdict(runs: list[Any], facts: Facts | None, stats_list: list[InputStats]) -> Diagnosis:
    """The verdict when no OOM is evident: none (how sure depends on how the input ends) or a hypothesis."""
    evidence = _completeness(facts)
    found = _phase_of(facts)
    base: dict[str, Any] = {
        "readings": read_readings(facts.events) if facts is not None else Readings(),
        "incidents": [],
        "budget": _budget_view(facts),
        "not_evaluated": [],
        "inputs": stats_list,
        "facts": facts,
        "evidence": evidence,
        "phase": found,
    }
    if evidence.incomplete:
        # Only a record that was opened (a crash began) supports a hypothesis; a bare cut mark does not.
        likely = found.likely_class if found.name != "unknown" and facts is not None and facts.get("failure_record_open") else ""
        if likely:
            # A cut record in a memory-heavy phase: that phase's usual class, as a hypothesis only.
            value = confidence.HYPOTHESIS_CAP if found.source in ("frames", "engine") else confidence.HYPOTHESIS_CAP - 0.10
            message = (
                f"Crash during {found.name.replace('_', ' ')} ({_phase_words(found)}); the exception line is missing: {evidence.reason}. "
                f"If it was an out-of-memory error, then it is most likely {likely} — {_HYPOTHESIS_FIX.get(likely, 'see the class documentation')}. "
                f"To decide it, fetch {FETCH_REST}."
            )
            refs = tuple(dict.fromkeys(r for r in (found.ref, evidence.ref) if r is not None))
            return _phase_hypothesis(found, likely, value, evidence.reason, message, refs, f"the end of the failure record: {FETCH_REST}", base)
        summary = f"Inconclusive: the evidence is incomplete ({evidence.reason}); no failure is evident in what was read. To decide it, fetch {FETCH_REST}."
        return Diagnosis(
            verdict_class="none",
            verdict_confidence=0.3,
            verdict_rule=None,
            summary=summary,
            findings=[],
            confidence_factors=[confidence.Factor(f"the evidence is incomplete: {evidence.reason}", -0.6)],
            inconclusive=True,
            **base,
        )
    summary = "No out-of-memory evidence in the input."
    value = 0.6
    factors = [confidence.Factor("nothing is wrong in the input, and nothing shows how it ends", -0.3)]
    other = next((e for run in runs for e in run.events if e.kind == sg.KIND_CAPTURE_FAILED and not e.get("is_oom")), None)
    if facts is not None and facts.get("load_straggler"):
        # This rank finished loading, another did not: the failure (often an OOM) is in the other rank's log.
        ref = facts.ref("load_straggler")
        where = f" ({ref.path}:{ref.line})" if ref is not None else ""
        summary = (
            f"Inconclusive: this rank finished loading weights but another rank did not{where}; SGLang says that is likely an OOM or a slow node on "
            "that rank. Its log decides it: fetch every rank's log (all pods of the job, or `--log` for each node)."
        )
        factors = [confidence.Factor("the failing rank's log is not in the input", -0.7)]
        base["evidence"] = Completeness("incomplete", "another rank did not finish loading and its log is not in the input", ref)
        return Diagnosis(verdict_class="none", verdict_confidence=0.3, verdict_rule=None, summary=summary, findings=[], confidence_factors=factors, inconclusive=True, **base)
    terminal = facts.get("terminal_exception") if facts is not None and other is None else None
    if other is None and not terminal and found.ref is not None and _stopped_during_startup(facts, found):
        likely, where = found.likely_class, f"{found.ref.path}:{found.ref.line}"
        value = round(confidence.HYPOTHESIS_CAP + _STOPPED_HYPOTHESIS_DELTA, 2)
        reason = f"the input stops during {found.name.replace('_', ' ')} (from {where}), before the server was ready, and shows no error"
        message = (
            f"The log stops during {found.name.replace('_', ' ')} ({_phase_words(found)}), before the server was ready, and shows no error. "
            f"If the server died there, then it is most likely {likely} — {_HYPOTHESIS_FIX.get(likely, 'see the class documentation')}. "
            f"If it is still starting, there is nothing to diagnose yet. To decide it, fetch {FETCH_REST}."
        )
        base["evidence"] = Completeness("incomplete", reason, found.ref)
        return _phase_hypothesis(found, likely, value, reason, message, (found.ref,), f"the lines after {where}: {FETCH_REST}", base)
    if terminal:
        value, factors = 0.9, []
        message = (facts.get("terminal_exception_message") or "")[:160] if facts is not None else ""
        ref = facts.ref("terminal_exception") if facts is not None else None
        where = f" at {ref.path}:{ref.line}" if ref is not None else ""
        summary += f" The run ended with {terminal}{where}" + (f": {message}" if message else "") + "; that is not an out-of-memory error, and no memory flag fixes it."
    elif facts is not None and facts.get("clean_end"):
        value, factors = 0.9, []
        summary += " The server shut down cleanly."
    elif facts is not None and (facts.get("retraction_events") or facts.get("preemptions")):
        # The engine's own lines say what happened: a full KV pool handled by retracting or
        # preempting requests, which is how it avoids an OOM, not an OOM.
        value, factors = 0.9, []
        what = f"{facts.get('retraction_events')} retraction(s)" if facts.get("retraction_events") else f"{facts.get('preemptions')} preemption(s)"
        summary += (
            f" The engine logged {what}: it ran out of KV cache slots and deferred requests, which is its normal answer to a full "
            "KV pool, not an out-of-memory error. More KV (a higher memory fraction, fewer running requests) only reduces how often."
        )
    # A failure that is not an OOM but that people tune memory flags for: say so.
    if other is not None:
        value, factors = 0.9, []
        summary += (
            f" CUDA graph capture failed at {other.ref.path}:{other.ref.line} for another reason ({(other.get('reason') or '')[:120]}); "
            "lowering --mem-fraction-static or the graph batch size will not fix that."
        )
    if not any(s.lines for s in stats_list):
        value = 0.5
    return Diagnosis(
        verdict_class="none",
        verdict_confidence=value,
        verdict_rule=None,
        summary=summary,
        findings=[],
        confidence_factors=factors,
        **base,
    )


# Startup phases whose every context line marks the phase begun or in progress, never done (graph
# capture: "Capturing CUDA graphs", "Capture cuda graph begin", its progress bar; its end lines are
# milestones of another phase). A log whose last phase line is one of these stops inside the phase.
# Not weight loading, profiling or KV sizing: their context lines include "took N s" and block-count
# lines printed after the step is done, and a log that stops at such a boundary does not show the
# next step at all.
_STARTUP_PHASES = ("graph_capture",)
# Below a cut record's hypothesis: a cut record shows a crash began; a log that merely stops does not.
_STOPPED_HYPOTHESIS_DELTA = -0.15


def _stopped_during_startup(facts: Facts | None, found: phase_step.Phase) -> bool:
    """Whether a log stops inside a startup phase, never ready, with no error and no clean end.

    "Nothing is wrong" is not what such a log shows: the server had not finished starting when the
    input ends, so whatever ended it (or the rest of the paste) is missing.
    """
    if facts is None or found.name not in _STARTUP_PHASES or not found.likely_class:
        return False
    return not (facts.get("server_ready") or facts.get("clean_end") or facts.get("retraction_events") or facts.get("preemptions"))


def _phase_hypothesis(
    found: phase_step.Phase, likely: str, value: float, reason: str, message: str, refs: tuple[LineRef, ...], would_decide: str, base: dict[str, Any]
) -> Diagnosis:
    """The phase's likely class as a hypothesis only: inconclusive, no advice, what would decide it named."""
    factors = [
        confidence.Factor(f"the evidence is incomplete: {reason}", round(value - 1.0, 2)),
        confidence.Factor(f"class inferred from the phase ({found.name}, from {found.source}) only", 0.0),
    ]
    hypothesis = Finding(
        rule=None,
        klass=likely,
        confidence=value,
        message=message,
        evidence=refs,
        recommendations=[],
        extra={"hypothesis": True, "would_decide": [would_decide]},
        factors=factors,
    )
    return Diagnosis(
        verdict_class=likely, verdict_confidence=value, verdict_rule=None, summary=message, findings=[hypothesis], confidence_factors=factors, inconclusive=True, **base
    )


_HYPOTHESIS_FIX = {
    "weights_dont_fit": "the weights do not fit the GPU share: more tensor parallelism, quantization, or a bigger GPU",
    "startup_kv": "no room for the KV cache at startup: raise --mem-fraction-static (SGLang) / --gpu-memory-utilization (vLLM) or lower the context length",
    "cuda_graph": "graph capture ran out: lower the captured batch size (--cuda-graph-max-bs) or disable CUDA graphs",
    "encoder_starvation": "the multimodal encoder got no room: reserve memory for it or cap the media size",
    "runtime_activation": "a forward pass outgrew the activation reserve: lower --mem-fraction-static / --chunked-prefill-size (SGLang) or --gpu-memory-utilization / --max-num-batched-tokens (vLLM)",
}


def _phase_words(found: phase_step.Phase) -> str:
    return {"frames": "from its traceback frames", "context": "from the log lines before it", "engine": "from the engine's own line"}.get(found.source, "phase unknown")


def display_path(path: str) -> str:
    return os.path.relpath(path) if os.path.isabs(path) else path

"""Incidents across nodes (DESIGN §2.2): which node and role each line came from, and who failed first.

One incident may span many logs: the ranks and nodes of one multi-node server (SGLang ``--nnodes``,
vLLM on Ray, a LeaderWorkerSet group), or prefill and decode servers behind a router. A node's identity
comes from, strongest first: a multiplexing prefix on the line (``kubectl logs --prefix``, Ray's
``(pid=N, ip=A.B.C.D)``, ``srun -l``'s task id), the server's own arguments (``node_rank``,
``dist_init_addr``, ``disaggregation_mode``), then the file name and the directory layout (a Slurm
``slurm-<job>_<task>.out``, a Ray session's ``logs/worker-*.out``, a ``kubectl logs`` dump per pod).

The nodes' failures are put on one timeline ordered by timestamp. Clocks of different hosts differ,
so two failures less than SKEW_TOLERANCE_S apart are treated as simultaneous; the first *primary*
failure (an out-of-memory error) is the cause, and what follows on the other nodes (NCCL timeouts,
watchdog aborts, connection resets, "rank N exited") is a consequence, never the verdict.

Pure apart from reading an input a second time when one input turned out to name nodes (scan_input).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from oomdoctor.base import timestamps
from oomdoctor.base.evidence import Line, LineRef
from oomdoctor.input.files import InputStats, iter_line_chunks
from oomdoctor.input.prefixes import split_prefix
from oomdoctor.input.scan import scan_lines

if TYPE_CHECKING:
    from typing import Any

# Two failures on different hosts closer than this are simultaneous: host clocks drift apart
# (NTP keeps them within milliseconds, unsynchronised containers within seconds).
SKEW_TOLERANCE_S = 2.0

# What follows a peer's death on the other ranks; (kind, pattern), the first that matches names it.
CONSEQUENCES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("nccl_timeout", re.compile(r"Watchdog caught collective operation timeout|ran for \d+ milliseconds before timing out|NCCL[^\n]{0,80}time(?:d )?out|Timed out waiting for (?:the )?(?:peer|rank|store|other)")),
    (
        "watchdog_abort",
        re.compile(
            r"Terminating the process after attempting to dump debug info|Process group watchdog thread terminated|NCCL communicator was aborted|"
            r"ProcessGroupNCCL[^\n]{0,120}(?:abort|terminat)|Aborting process group|heartbeat monitor"
        ),
    ),
    ("nccl_error", re.compile(r"DistBackendError|NCCL error|ncclRemoteError|ncclSystemError|ncclInternalError|remote process exited or there was a network error")),
    ("connection_reset", re.compile(r"Connection reset by peer|Connection closed by peer|ConnectionResetError|Broken pipe|BrokenPipeError|EOFError: connection closed|Connection refused")),
    ("kv_transfer_failed", re.compile(r"KV ?[Tt]ransfer[^\n]{0,40}(?:fail|error|timeout|timed out)|Failed to (?:send|receive|transfer) KV|KVTransferError|bootstrap[^\n]{0,40}(?:fail|timed out)")),
    (
        "rank_exited",
        re.compile(
            r"\b[Rr]ank \d+ (?:exited|died|is dead|failed|terminated)|scheduler is dead|Child process unexpectedly failed|"
            r"task \d+: Exited with exit code|exitcode\s*:\s*-?\d+|A worker died or was killed|ActorDiedError|RayActorError|"
            r"The actor died|worker died|exited with (?:exit )?code -?\d+|terminated with signal|killed by signal"
        ),
    ),
)
CONSEQUENCE_WORDS = {
    "nccl_timeout": "NCCL collective timeout",
    "watchdog_abort": "NCCL watchdog abort",
    "nccl_error": "NCCL error (a peer went away)",
    "connection_reset": "connection reset",
    "kv_transfer_failed": "KV transfer failed",
    "rank_exited": "a rank or worker exited",
}

# Lines the node scan reads: the consequences above and the lines that say who a node is.
ANCHORS: tuple[bytes, ...] = (
    b"Watchdog",
    b"timing out",
    b"imed out",
    b"imeout",
    b"NCCL",
    b"ommunicator",
    b"Connection",
    b"Broken pipe",
    b"BrokenPipe",
    b"EOFError",
    b"exited",
    b"xit code",
    b"exitcode",
    b"is dead",
    b"died",
    b"RayActorError",
    b"unexpectedly failed",
    b"signal",
    b"ransfer",
    b"bootstrap",
    b"heartbeat",
    b"hit an exception",
    b"Traceback",
    b"server_args=",
    b"non-default args",
    b"node-rank",
    b"node_rank",
    b"disaggregation",
    b"dist-init-addr",
    b"dist_init_addr",
)

# server_args fields (repr) and launch flags (command line) that say who a node is.
_ARG_RE = re.compile(
    r"(?<![\w-])(?:--)?(?P<key>node[_-]rank|nnodes|dist[_-]init[_-]addr|disaggregation[_-]mode|model[_-]path|served[_-]model[_-]name|tp[_-]size|"
    r"tensor[_-]parallel[_-]size|'model'|model)(?:=|\s+|':\s*)(?P<value>'[^']*'|\"[^\"]*\"|[^\s,)]+)"
)
# Fields that differ between the nodes of one job and must not tell its nodes apart as servers.
_NODE_SPECIFIC = re.compile(r"(?<![\w])(?:node_rank|host|port|base_gpu_id|random_seed|nccl_port|dist_init_addr|disaggregation_bootstrap_port)=(?:'[^']*'|[^\s,)]+)")
# File and directory names that say nothing about which node a log came from.
_GENERIC = re.compile(
    r"^(?:server|sglang|vllm|log|logs|output|out|stdout|stderr|err|console|current|latest|raylet|gcs_server|dashboard|monitor|"
    r"python-core-(?:worker|driver)-.*|worker-[0-9a-f]+-[0-9a-f]+-\d+|job-driver-.*|driver-.*|session_.*|session_latest|slurm-\d+|slurm|\d{8,})$",
    re.I,
)
_SUFFIX_RE = re.compile(r"(?:\.(?:log|txt|out|err|stdout|stderr))?(?:\.\d{1,6}|-\d{8,14})?(?:\.(?:gz|bz2|xz))?$", re.I)
_SLURM_TASK_RE = re.compile(r"^(?:slurm-)?(?P<job>\d+)[._-](?P<task>\d+)$|^(?:slurm-)?\d+[._-](?:task|t|rank)[._-]?(?P<task2>\d+)$", re.I)
_RAY_WORKER_RE = re.compile(r"^(?:python-core-)?worker-(?:[0-9a-f]+-)+(?P<pid>\d+)$")
# A file name that names a node (node0, gpu-node-7, sglang-lws-0-1, 10.0.0.2, decode): one with a number or
# a role; server, nccl or dmesg do not, and files so named belong to the node their directory names.
_NODE_LIKE = re.compile(r"\d|prefill|decode|leader|worker|head", re.I)
_SRUN_TASK_RE = re.compile(r"^srun: error: \S+: task (\d+): ")
_ROLE_WORDS = ("prefill", "decode", "router", "leader", "worker", "driver", "raylet", "head")
_ROLE_RE = re.compile(r"(?<![a-z])(" + "|".join(_ROLE_WORDS) + r")(?![a-z])", re.I)


@dataclass
class Observation:
    """One failure seen on a node: an OOM (primary) or a consequence, with its time and line."""

    node: str
    kind: str  # "oom", or a key of CONSEQUENCES
    ref: LineRef
    ts: str | None
    rank: str | None = None
    order: int = 0  # reading order, for ties and lines without a timestamp

    @property
    def primary(self) -> bool:
        return self.kind == "oom"


@dataclass
class NodeInfo:
    node: str
    source: str
    role: str | None = None
    node_rank: int | None = None
    nnodes: int | None = None
    dist_init_addr: str | None = None
    model: str | None = None
    paths: list[str] = field(default_factory=list)
    ranks: list[str] = field(default_factory=list)
    identity: str | None = None  # the server's arguments minus what differs between its nodes


@dataclass
class Timeline:
    """The nodes of the inputs, their failures in time order, the cause and its consequences."""

    nodes: dict[str, NodeInfo]
    observations: list[Observation]
    cause: Observation | None
    simultaneous: list[Observation]  # other primaries within the skew tolerance of the cause
    consequences: list[Observation]
    comparable: bool  # whether the timestamps allowed an ordering across nodes

    @property
    def multi_node(self) -> bool:
        return len(self.nodes) > 1


def node_of_path(path: str, roots: Iterable[str] = ()) -> tuple[str, str, str | None]:
    """(node, where the name came from, rank) of a file from its name and the directories above it."""
    if path in ("-", "<stdin>"):
        return "<stdin>", "input", None
    name = os.path.basename(path)
    stem = _SUFFIX_RE.sub("", name)
    m = _SLURM_TASK_RE.match(stem)
    if m:
        return f"task{int(m.group('task') or m.group('task2'))}", "slurm file name", None
    rank = None
    rm = _RAY_WORKER_RE.match(stem)
    if rm:
        rank = f"pid{rm.group('pid')}"
    if not _GENERIC.match(stem) and _NODE_LIKE.search(stem):
        return stem, "file name", rank
    parent = os.path.dirname(os.path.abspath(path))
    stop = {os.path.abspath(r) for r in roots}
    for _ in range(6):
        base = os.path.basename(parent)
        if not base:
            break
        if not _GENERIC.match(base):
            return base, "directory", rank
        if parent in stop:
            break
        parent = os.path.dirname(parent)
    return stem, "file name", rank


def ts_key(ts: str | None) -> tuple[int, float] | None:
    """(precision, seconds) of a log timestamp (oomdoctor.base.timestamps): 3 full date, 2 month-day, 1 time of day."""
    return timestamps.parse(ts)


@dataclass
class NodeScan:
    """What the lines of one input say about its nodes: per prefix node, its identity and its consequences.

    Fed with the input's lines holding one of ``anchors`` by the main read (pipeline/events.read_events
    hands it to the scanner as its side reader), so a multi-input incident reads each input once.
    """

    anchors: ClassVar[tuple[bytes, ...]] = ANCHORS
    identity: dict[str | None, dict[str, Any]] = field(default_factory=dict)
    consequences: list[tuple[str | None, str, Line, str | None]] = field(default_factory=list)
    prefix_nodes: dict[str, str] = field(default_factory=dict)
    containers: dict[str, str] = field(default_factory=dict)
    last_ts: dict[str | None, str] = field(default_factory=dict)

    def feed(self, line: Line) -> None:
        """Read one anchored line (its prefix already split by the scanner)."""
        stripped = split_prefix(line.ref.text)
        node = stripped.node
        if node and stripped.node_source:
            self.prefix_nodes.setdefault(node, stripped.node_source)
            if stripped.container:
                self.containers.setdefault(node, stripped.container)
        if node is None:
            task = _SRUN_TASK_RE.search(line.msg)
            if task:
                # srun's own report names the task: "srun: error: HOST: task 1: Exited with exit code 1".
                node = f"task{int(task.group(1))}"
        ts = line_ts(line)
        key = ts_key(ts)
        if ts is not None and key is not None and key[0] >= (ts_key(self.last_ts.get(node)) or (0, 0.0))[0]:
            self.last_ts[node] = ts
        msg = line.msg
        if "server_args=" in msg or "non-default args" in msg or "node" in msg or "disaggregation" in msg or "dist" in msg:
            _identity(self.identity.setdefault(node, {}), msg)
        for kind, pattern in CONSEQUENCES:
            if pattern.search(msg):
                # A line without a time of its own (a traceback's last line) happened at the last time seen.
                self.consequences.append((node, kind, line, ts or self.last_ts.get(node)))
                break


def scan_input(path: str, display: str) -> NodeScan:
    """The node scan of an input read on its own: a single input whose prefixes turned out to name nodes."""
    out = NodeScan()
    counter = [0]
    try:
        for line in scan_lines(iter_line_chunks(path, InputStats(path=display)), display, ANCHORS, counter):
            if line.anchored:
                out.feed(line)
    except Exception:  # noqa: BLE001 - the node scan is an addition: a damaged input was reported by the main read
        return out
    return out


def _identity(found: dict[str, Any], msg: str) -> None:
    for m in _ARG_RE.finditer(msg):
        key = m.group("key").strip("'").replace("-", "_")
        value = m.group("value").strip("'\"")
        key = {"tensor_parallel_size": "tp_size", "model": "model_path", "served_model_name": "model_path"}.get(key, key)
        if key in found or value in ("None", "null", ""):
            continue
        found[key] = value
    if "server_args=" in msg or "non-default args" in msg:
        found.setdefault("_identity", _NODE_SPECIFIC.sub("", msg.split("server_args=", 1)[-1].split("non-default args", 1)[-1]))


def _role(found: dict[str, Any], *names: str | None) -> str | None:
    mode = found.get("disaggregation_mode")
    if mode in ("prefill", "decode"):
        return str(mode)
    for name in names:
        if name:
            m = _ROLE_RE.search(name)
            if m:
                return m.group(1).lower()
    return None


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


@dataclass
class StreamKey:
    """One stream of lines: an input, or the part of a multiplexed input under one prefix node."""

    index: int  # the input's position
    node: str

    def __hash__(self) -> int:
        return hash((self.index, self.node))


def identify(paths: list[str], roots: Iterable[str]) -> list[tuple[str, str, str | None]]:
    """The node each input's file name and directories name."""
    return [node_of_path(p, roots) for p in paths]


def build_nodes(
    displays: list[str],
    scans: list[NodeScan],
    file_nodes: list[tuple[str, str, str | None]],
    stream_nodes: list[set[str]],
) -> tuple[dict[str, NodeInfo], dict[tuple[int, str], str]]:
    """Every node of the inputs with its role, node rank and server identity, and each stream's node name.

    A stream is (input index, the node its prefixes or its file name give); its node's name is that,
    or ``node<N>`` from the server's node_rank when the file name says nothing (stdin, server.log).
    """
    nodes: dict[str, NodeInfo] = {}
    names: dict[tuple[int, str], str] = {}
    for i, display in enumerate(displays):
        file_node, file_source, _ = file_nodes[i]
        scan = scans[i]
        for node in sorted(stream_nodes[i] | {file_node}):
            prefixed = node in scan.prefix_nodes
            found = dict(scan.identity.get(node if prefixed else None, {}))
            if not prefixed:
                # An unprefixed stream: what any unprefixed line of the input said (one node's log).
                for k, v in scan.identity.get(None, {}).items():
                    found.setdefault(k, v)
            name = node
            source = scan.prefix_nodes.get(node, file_source)
            node_rank = _int(found.get("node_rank"))
            if not prefixed and node_rank is not None and (display == "<stdin>" or file_source == "directory" or _GENERIC.match(node)):
                name, source = f"node{node_rank}", "server args (node_rank)"
            names[(i, node)] = name
            if node == file_node and not prefixed and node not in stream_nodes[i]:
                continue  # the file's own name, for lines without a prefix: a node only if it has lines
            info = nodes.setdefault(name, NodeInfo(node=name, source=source))
            if display not in info.paths:
                info.paths.append(display)
            info.node_rank = info.node_rank if info.node_rank is not None else node_rank
            info.nnodes = info.nnodes or _int(found.get("nnodes"))
            info.dist_init_addr = info.dist_init_addr or found.get("dist_init_addr")
            info.model = info.model or found.get("model_path")
            info.role = info.role or _role(found, scan.containers.get(node), node)
            if info.role is None and (info.nnodes or 0) > 1 and node_rank is not None:
                # SGLang's node 0 serves HTTP and leads the job; the others are workers.
                info.role = "leader" if node_rank == 0 else "worker"
            info.identity = info.identity or found.get("_identity")
    return nodes, names


# glog-style time of NCCL's C++ lines: "[E302 10:10:41.123...]" or "E0302 10:10:41.123456".
_GLOG_TS_RE = re.compile(r"\b[EWIF](?P<m>\d{2})(?P<d>\d{2}) (?P<t>\d{2}:\d{2}:\d{2}(?:\.\d+)?)")
_GLOG_SHORT_RE = re.compile(r"\[[EWIF](?P<md>\d{3,4}) (?P<t>\d{2}:\d{2}:\d{2}(?:\.\d+)?)")


def line_ts(line: Line) -> str | None:
    """A line's timestamp: its prefix's, else the glog time NCCL's C++ lines carry."""
    if line.ts:
        return line.ts
    m = _GLOG_TS_RE.search(line.ref.text)
    if m:
        return f"{m.group('m')}-{m.group('d')} {m.group('t')}"
    m = _GLOG_SHORT_RE.search(line.ref.text)
    if m:
        md = m.group("md").zfill(4)
        return f"{md[:2]}-{md[2:]} {m.group('t')}"
    return None


def order(observations: list[Observation]) -> tuple[list[Observation], bool]:
    """Observations in time order at the finest precision all of them share; reading order breaks ties.

    Those without a timestamp come after the timed ones, in reading order. The order is comparable
    when every primary failure (OOM) has a timestamp.
    """
    timed = [(o, k) for o in observations if (k := ts_key(o.ts)) is not None]
    untimed = sorted((o for o in observations if ts_key(o.ts) is None), key=lambda o: o.order)
    precision = min((k[0] for _, k in timed), default=3)
    ordered = [o for o, _ in sorted(timed, key=lambda ok: (timestamps.at_precision(ok[1], precision), ok[0].order))] + untimed
    return ordered, all(ts_key(o.ts) is not None for o in observations if o.primary)


def seconds_between(a: Observation, b: Observation) -> float | None:
    ka, kb = ts_key(a.ts), ts_key(b.ts)
    if ka is None or kb is None:
        return None
    precision = min(ka[0], kb[0])
    return timestamps.at_precision(kb, precision) - timestamps.at_precision(ka, precision)


def timeline(nodes: dict[str, NodeInfo], observations: list[Observation]) -> Timeline:
    """The cause (the first primary failure, any node) and the consequences that follow it elsewhere."""
    ordered, comparable = order(observations)
    primaries = [o for o in ordered if o.primary]
    cause = primaries[0] if primaries else None
    simultaneous: list[Observation] = []
    consequences: list[Observation] = []
    if cause is not None:
        for o in primaries[1:]:
            gap = seconds_between(cause, o)
            if o.node != cause.node and gap is not None and abs(gap) < SKEW_TOLERANCE_S:
                simultaneous.append(o)
        seen: set[tuple[str, str]] = set()
        for o in ordered:
            if o.primary or o.node == cause.node or (o.node, o.kind) in seen:
                continue
            # Listed whether before or after the cause (its seconds_after_cause says which): never the verdict.
            seen.add((o.node, o.kind))
            consequences.append(o)
    return Timeline(nodes=nodes, observations=ordered, cause=cause, simultaneous=simultaneous, consequences=consequences, comparable=comparable)


def first_failures(tl: Timeline) -> dict[str, Observation]:
    out: dict[str, Observation] = {}
    for o in tl.observations:
        out.setdefault(o.node, o)
    return out


def to_json(tl: Timeline, verdict_class: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The ``nodes`` and ``consequences`` lists of the JSON contract."""
    firsts = first_failures(tl)
    nodes = []
    for name in sorted(tl.nodes, key=lambda n: (tl.nodes[n].node_rank if tl.nodes[n].node_rank is not None else 1 << 30, n)):
        info = tl.nodes[name]
        first = firsts.get(name)
        klass = None
        if first is not None:
            klass = verdict_class if first.primary else "consequence"
        nodes.append(
            {
                "node": name,
                "source": info.source,
                "role": info.role,
                "node_rank": info.node_rank,
                "paths": info.paths,
                "first_failure_time": first.ts if first else None,
                "first_failure": (CONSEQUENCE_WORDS.get(first.kind, "out of memory") if first else None),
                "first_failure_rank": first.rank if first else None,
                "first_failure_line": ({"path": first.ref.path, "line": first.ref.line} if first else None),
                "class": klass,
                "is_cause": tl.cause is not None and tl.cause.node == name,
            }
        )
    consequences = [
        {
            "node": o.node,
            "rank": o.rank,
            "time": o.ts,
            "kind": o.kind,
            "what": CONSEQUENCE_WORDS.get(o.kind, o.kind),
            "path": o.ref.path,
            "line": o.ref.line,
            "text": o.ref.text[:300],
            "seconds_after_cause": (round(s, 3) if tl.cause is not None and (s := seconds_between(tl.cause, o)) is not None else None),
        }
        for o in tl.consequences
    ]
    return nodes, consequences


def summary(tl: Timeline) -> str:
    """One sentence for the verdict: who failed first, and what followed elsewhere."""
    cause = tl.cause
    if cause is None or not tl.multi_node:
        return ""
    info = tl.nodes.get(cause.node)
    who = f"node {cause.node}" + (f" ({info.role})" if info is not None and info.role else "") + (f", rank {cause.rank.split('/')[-1]}" if cause.rank else "")
    when = f" at {cause.ts}" if cause.ts else ""
    text = f" First to fail: {who}{when} ({cause.ref.path}:{cause.ref.line})."
    if tl.simultaneous:
        others = ", ".join(f"node {o.node}" for o in tl.simultaneous)
        text += f" {others} failed within the clock-skew tolerance ({SKEW_TOLERANCE_S:g} s) of it."
    if not tl.comparable:
        text += " (Not every failure line has a timestamp: ordered by reading order.)"
    if tl.consequences:
        by_node: dict[str, list[str]] = {}
        for o in tl.consequences:
            words = CONSEQUENCE_WORDS.get(o.kind, o.kind)
            if words not in by_node.setdefault(o.node, []):
                by_node[o.node].append(words)
        listed = "; ".join(f"node {n}: {', '.join(w)}" for n, w in by_node.items())
        text += f" What followed on the others is a consequence, not a cause: {listed}."
    return text

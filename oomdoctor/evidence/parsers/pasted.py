"""Machine state a user pasted beside the log: nvidia-smi output (the table, its CSV queries, ``-q``
text), gpustat --json, the engines' own metrics, environment reports, kubectl's pod view.

nvitop has no dump format: its ``-1`` / ``--once`` (nvitop/cli.py, "Report query data only once")
prints the same live view for a terminal, with box-drawing characters and its own columns, and is not read.

Their anchors are known up front (the scanner needs them), their parsers are imported the first
time a line holds one of their literals: most logs hold neither, and start-up is part of a small
log's run time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from oomdoctor.base.evidence import Event, Line
    from oomdoctor.evidence.parsers.engine_metrics import EngineMetricsParser
    from oomdoctor.evidence.parsers.environment import EnvironmentParser
    from oomdoctor.evidence.parsers.gpustat import GpustatParser
    from oomdoctor.evidence.parsers.host import HostParser
    from oomdoctor.evidence.parsers.nvidia_smi import NvidiaSmiParser
    from oomdoctor.evidence.parsers.smi_query import SmiQueryParser

# The literals of the nvidia-smi, environment and host parsers, kept here (those modules import them) so that a
# plain log, which holds none of them, imports none of those parsers.
SMI_ANCHORS: tuple[bytes, ...] = (
    b"NVIDIA-SMI",
    b"00000000:",
    b"MiB /",
    b"MiB |",
    b"... |",
    b"No running processes found",
    b"used_gpu_memory",
    b"memory.total",
    b"memory.used",
    b" MiB\n",
    b" MiB\r",
)
# nvidia-smi -q's report. The scanner reads a line holding an anchor and the three after it, so each
# line the reader needs holds one: the header and top-level keys (padded before their colon), a GPU's
# name, the three sections whose Total / Used / Free lines it must tell apart (their figures end in
# " MiB", an anchor of the table's), the processes' header (indented: "Accounted Processes" and the
# table's "| Processes:" are not it) and each process's "Process ID" (its type, name and memory are
# the three lines after it). No anchor needs the line's end: ANSI colours and CRLF leave them whole.
SMI_QUERY_ANCHORS: tuple[bytes, ...] = (
    b"NVSMI LOG",
    b"Driver Version    ",
    b"CUDA Version    ",
    b"Product Name    ",
    b"FB Memory Usage",
    b"BAR1 Memory Usage",
    b"Protected Memory Usage",
    b"    Processes",
    b"Process ID    ",
    b"Used GPU Memory",
)
# gpustat --json: keys only its document holds, one a line (json.dump's indent): the top level's query
# time, a GPU's UUID (its name is the line after it) and memory, a process's user (its command follows)
# and memory (its PID is the third line after it).
GPUSTAT_ANCHORS: tuple[bytes, ...] = (b'"query_time"', b'"uuid": "GPU-', b'"memory.total"', b'"username"', b'"gpu_memory_usage"')
# The engines' own Prometheus metrics (a /metrics scrape or a query result pasted): the KV pool's use,
# preemptions and the request queues (vllm/v1/metrics/loggers.py, sglang/srt/metrics/collector.py).
ENGINE_METRIC_ANCHORS: tuple[bytes, ...] = (
    b"vllm:kv_cache_usage_perc",
    b"vllm:gpu_cache_usage_perc",
    b"vllm:num_preemptions",
    b"vllm:num_requests_waiting",
    b"vllm:num_requests_running",
    b"sglang:token_usage",
    b"sglang:num_queue_reqs",
    b"sglang:num_running_reqs",
)
ENV_ANCHORS: tuple[bytes, ...] = (
    b"PyTorch version",
    b"PyTorch: ",
    b"CUDA runtime version",
    b"CUDA used to build PyTorch",
    b"Nvidia driver version",
    b"CUDA Driver Version",
    b"NVCC: ",
    b"GPU models and configuration",
    b": NVIDIA ",
    b": Tesla ",
    b"vLLM Version",
    b"vllm: ",
    b"sglang: ",
    b"[pip3] torch==",
    b"[pip3] vllm==",
    b"[pip3] sglang==",
    b"CUDA_VISIBLE_DEVICES=",
    b"NVIDIA_VISIBLE_DEVICES=",
)
# kubectl's view of a killed container (its limit, restarts, exit code).
HOST_ANCHORS: tuple[bytes, ...] = (b"Restart Count", b"restartCount", b"Exit Code", b"exitCode", b"Limits:", b'"limits"', b"oom_kill ")
ANCHORS: tuple[bytes, ...] = SMI_ANCHORS + SMI_QUERY_ANCHORS + GPUSTAT_ANCHORS + ENGINE_METRIC_ANCHORS + ENV_ANCHORS + HOST_ANCHORS
# What a line's text holds when one of the anchors was found on it (the newline of " MiB\n" is not in
# the line's text: such a line ends in " MiB"). Once a parser is imported it reads every line, the
# context lines an anchor brings too (rows of a table or a CSV whose own text holds no anchor).
_SMI_NEEDLES = tuple(a.decode() for a in SMI_ANCHORS if not a.endswith((b"\n", b"\r")))
_ENV_NEEDLES = tuple(a.decode() for a in ENV_ANCHORS)
_HOST_NEEDLES = tuple(a.decode() for a in HOST_ANCHORS)
_QUERY_NEEDLES = tuple(a.decode() for a in SMI_QUERY_ANCHORS)
_GPUSTAT_NEEDLES = tuple(a.decode() for a in GPUSTAT_ANCHORS)
_METRIC_NEEDLES = tuple(a.decode() for a in ENGINE_METRIC_ANCHORS)


def _query_gpu_line(msg: str) -> bool:
    """A "GPU 00000000:18:00.0" line, which opens an ``nvidia-smi -q`` GPU block (``-q -d MEMORY`` has no header)."""
    text = msg.strip()
    return text.startswith("GPU ") and text.count(":") == 2 and "." in text and len(text) < 24


class PastedParser:
    """Hands each line to the nvidia-smi and environment parsers, imported when a line needs one.

    Until one is imported it reads only lines holding one of ANCHORS or NEEDLES (pipeline/events.py
    routes the others past it); once one is, it is ``pending`` and reads every line.
    """

    ANCHORS = ANCHORS
    # A line whose text ends in " MiB" (the anchor " MiB\n" misses it before a carriage return).
    NEEDLES: tuple[str, ...] = (" MiB",)
    FOLDED_NEEDLES: tuple[str, ...] = ()
    REPEATING: tuple[tuple[bytes, str], ...] = ()

    def __init__(self) -> None:
        self._smi: NvidiaSmiParser | None = None
        self._env: EnvironmentParser | None = None
        self._host: HostParser | None = None
        self._query: SmiQueryParser | None = None
        self._gpustat: GpustatParser | None = None
        self._metrics: EngineMetricsParser | None = None

    @property
    def pending(self) -> bool:
        """A pasted-state parser was imported: it reads every line from now on."""
        return any(p is not None for p in (self._smi, self._env, self._host, self._query, self._gpustat, self._metrics))

    def feed(self, line: Line) -> list[Event]:
        msg = line.msg
        out: list[Event] = []
        if self._smi is not None or any(n in msg for n in _SMI_NEEDLES) or msg.rstrip().endswith(" MiB"):
            if self._smi is None:
                from oomdoctor.evidence.parsers.nvidia_smi import NvidiaSmiParser

                self._smi = NvidiaSmiParser()
            out += self._smi.feed(line)
        if self._env is not None or any(n in msg for n in _ENV_NEEDLES):
            if self._env is None:
                from oomdoctor.evidence.parsers.environment import EnvironmentParser

                self._env = EnvironmentParser()
            out += self._env.feed(line)
        if self._host is not None or any(n in msg for n in _HOST_NEEDLES):
            if self._host is None:
                from oomdoctor.evidence.parsers.host import HostParser

                self._host = HostParser()
            out += self._host.feed(line)
        if self._query is not None or any(n in msg for n in _QUERY_NEEDLES) or _query_gpu_line(msg):
            if self._query is None:
                from oomdoctor.evidence.parsers.smi_query import SmiQueryParser

                self._query = SmiQueryParser()
            out += self._query.feed(line)
        if self._gpustat is not None or any(n in msg for n in _GPUSTAT_NEEDLES):
            if self._gpustat is None:
                from oomdoctor.evidence.parsers.gpustat import GpustatParser

                self._gpustat = GpustatParser()
            out += self._gpustat.feed(line)
        if self._metrics is not None or any(n in msg for n in _METRIC_NEEDLES):
            if self._metrics is None:
                from oomdoctor.evidence.parsers.engine_metrics import EngineMetricsParser

                self._metrics = EngineMetricsParser()
            out += self._metrics.feed(line)
        return out

    def finish(self) -> list[Event]:
        return [e for p in (self._smi, self._query, self._gpustat, self._metrics) if p is not None for e in p.finish()]

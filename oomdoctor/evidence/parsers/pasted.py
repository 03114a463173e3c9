"""Machine state a user pasted beside the log: nvidia-smi output, environment reports, kubectl's pod view.

Their anchors are known up front (the scanner needs them), their parsers are imported the first
time a line holds one of their literals: most logs hold neither, and start-up is part of a small
log's run time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from oomdoctor.base.evidence import Event, Line
    from oomdoctor.evidence.parsers.environment import EnvironmentParser
    from oomdoctor.evidence.parsers.host import HostParser
    from oomdoctor.evidence.parsers.nvidia_smi import NvidiaSmiParser

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
ANCHORS: tuple[bytes, ...] = SMI_ANCHORS + ENV_ANCHORS + HOST_ANCHORS
# What a line's text holds when one of the anchors was found on it (the newline of " MiB\n" is not in
# the line's text: such a line ends in " MiB"). Once a parser is imported it reads every line, the
# context lines an anchor brings too (rows of a table or a CSV whose own text holds no anchor).
_SMI_NEEDLES = tuple(a.decode() for a in SMI_ANCHORS if not a.endswith((b"\n", b"\r")))
_ENV_NEEDLES = tuple(a.decode() for a in ENV_ANCHORS)
_HOST_NEEDLES = tuple(a.decode() for a in HOST_ANCHORS)


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

    @property
    def pending(self) -> bool:
        """A pasted-state parser was imported: it reads every line from now on."""
        return self._smi is not None or self._env is not None or self._host is not None

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
        return out

    def finish(self) -> list[Event]:
        return self._smi.finish() if self._smi is not None else []

"""``nvidia-smi -q`` text pasted into a log or a bug report: each GPU's framebuffer and its processes.

The query's report, as drivers from about 450 print it (checked against public pastes: driver 530.30.02
on a Tesla T4 and 566.36 on an RTX 4070 Laptop GPU, tests/fixtures/README.md):

    ==============NVSMI LOG==============
    Driver Version                            : 530.30.02
    CUDA Version                              : 12.1
    Attached GPUs                             : 1
    GPU 00000000:00:08.0
        Product Name                          : Tesla T4
        FB Memory Usage
            Total                             : 15360 MiB
            Reserved                          : 399 MiB        (drivers since about 510)
            Used                              : 31 MiB
            Free                              : 14928 MiB
        BAR1 Memory Usage
            Total                             : 256 MiB
        Processes
            GPU instance ID                   : N/A
            Compute instance ID               : N/A
            Process ID                        : 25384
                Type                          : C
                Name                          : nvidia-cuda-mps-server
                Used GPU Memory               : 26 MiB

GPUs are listed in nvidia-smi's index order, so a block's position is its index. Only the "FB Memory
Usage" section's Total / Reserved / Used / Free are the card's memory: the same keys under "BAR1
Memory Usage" and "Conf Compute Protected Memory Usage" are other apertures. "Processes : None" is an
empty list; "Accounted Processes" (accounting mode, finished processes' peaks) is not the processes
holding memory now and is not read. The events are the table parser's (nvidia_smi.KIND_*) with
``source = "query"``, so the facts read them the same way. Pure: lines in, events out.
"""

from __future__ import annotations

import re

from oomdoctor.base.evidence import Event, Line, LineRef
from oomdoctor.base.units import MIB
from oomdoctor.evidence.parsers.nvidia_smi import KIND_SMI_DRIVER, KIND_SMI_GPU, KIND_SMI_NO_PROCESSES, KIND_SMI_PROCESS
from oomdoctor.evidence.parsers.pasted import SMI_QUERY_ANCHORS
from oomdoctor.input.patterns import lazy
from oomdoctor.input.prefixes import strip_ansi

ANCHORS: tuple[bytes, ...] = SMI_QUERY_ANCHORS

# "Key    : value" (padding before the colon varies by driver); a section header is a key with no colon.
_KEY_RE = lazy(":", r"^(?P<key>[A-Za-z][\w ./()-]*?)\s*:\s*(?P<value>.*?)\s*$")
_GPU_RE = lazy("GPU ", r"^GPU (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
_HEADER_RE = lazy("NVSMI LOG", r"=+\s*NVSMI LOG\s*=+")
_MIB_RE = re.compile(r"(\d{1,16})\s*MiB")
# No card has 2**44 MiB: a longer figure is corrupt and reads as unknown (as nvidia_smi reads the table).
_MAX_MIB = 1 << 44
_FB_KEYS = {"Total": "total_bytes", "Reserved": "reserved_bytes", "Used": "used_bytes", "Free": "free_bytes"}
_PROCESS_KEYS = frozenset({"GPU instance ID", "Compute instance ID", "Process ID", "Type", "Name", "Used GPU Memory"})


def _mib(value: str) -> int | None:
    m = _MIB_RE.fullmatch(value.strip())
    if m is None:
        return None
    figure = int(m.group(1))
    return figure * MIB if figure < _MAX_MIB else None


class SmiQueryParser:
    """Incremental: ``feed`` one line at a time, ``finish`` at the end of the input."""

    def __init__(self) -> None:
        self._snapshot = 0
        self._index = -1
        self._gpu: dict[str, object] | None = None
        self._gpu_refs: list[LineRef] = []
        self._section: str | None = None
        self._process: dict[str, object] | None = None
        self._process_refs: list[LineRef] = []
        self._driver: tuple[dict[str, object], tuple[LineRef, ...]] | None = None

    def _snapshot_id(self) -> str:
        # Apart from the table parser's numbers: a table and a query pasted together are two snapshots.
        return f"q{self._snapshot}"

    def _flush_process(self) -> list[Event]:
        process, refs = self._process, self._process_refs
        self._process, self._process_refs = None, []
        if process is None or process.get("pid") is None:
            return []
        return [Event(KIND_SMI_PROCESS, tuple(refs[:6]), {"snapshot": self._snapshot_id(), "gpu": self._index, "type": "C", "name": None, "used_bytes": None, **process, "source": "query"})]

    def _flush_driver(self) -> list[Event]:
        held, self._driver = self._driver, None
        return [Event(KIND_SMI_DRIVER, held[1], held[0])] if held is not None else []

    def _flush_gpu(self) -> list[Event]:
        out = self._flush_driver() + self._flush_process()
        gpu, refs = self._gpu, self._gpu_refs
        self._gpu, self._gpu_refs, self._section = None, [], None
        if gpu is None:
            return out
        return [Event(KIND_SMI_GPU, tuple(refs[:6]), {"snapshot": self._snapshot_id(), "index": self._index, "name": None, "used_bytes": None, "total_bytes": None, **gpu, "source": "query"}), *out]

    def feed(self, line: Line) -> list[Event]:
        msg = line.msg.strip()
        if not msg:
            return []
        if _HEADER_RE.search(msg):
            out = self._flush_gpu()
            self._snapshot += 1
            self._index = -1
            return out
        gpu = _GPU_RE.search(msg)
        if gpu is not None:
            out = self._flush_driver() + self._flush_gpu()
            self._snapshot = self._snapshot or 1  # a paste that starts below the header
            self._index += 1
            self._gpu, self._gpu_refs = {"bus_id": gpu.group("bus")}, [line.ref]
            return out
        if self._gpu is not None and strip_ansi(line.msg)[:1] not in (" ", "\t"):
            # A GPU block's lines are indented under its "GPU <bus id>" line: an unindented line is
            # the log again (or the next top-level key), and the block is over.
            out = self._flush_gpu()
            return out + self.feed(line) if _KEY_RE.search(msg) and self._snapshot else out
        m = _KEY_RE.search(msg)
        if m is None:
            # A key with no colon is a section header ("FB Memory Usage", "Processes", "Capabilities").
            out = self._flush_process() if self._section == "processes" else []
            self._section = {"FB Memory Usage": "fb", "Processes": "processes"}.get(msg, "other") if re.fullmatch(r"[A-Za-z][\w ./()-]*", msg) else self._section
            return out
        key, value = m.group("key"), m.group("value")
        if self._snapshot == 0 and key not in ("Driver Version", "CUDA Version"):
            return []
        if key == "Driver Version" and self._gpu is None:
            # Held for the CUDA Version line under it: one driver event with both, as the table's header is.
            out = self._flush_driver()
            self._snapshot = self._snapshot or 1
            self._driver = ({"snapshot": self._snapshot_id(), "smi_version": None, "driver_version": value or None}, (line.ref,))
            return out
        if key == "CUDA Version" and self._gpu is None:
            if self._driver is not None and re.fullmatch(r"[\d.]+", value):
                self._driver = ({**self._driver[0], "cuda_version": value}, (*self._driver[1], line.ref))
            return self._flush_driver()
        if self._gpu is None:
            return []
        if key == "Product Name":
            self._gpu["name"] = value or None
            self._gpu_refs.append(line.ref)
            return []
        if key == "Processes" and not value:
            self._section = "processes"  # "Processes :" with nothing after it: the list follows
            return []
        if key == "Processes" and value.lower() == "none":
            self._section = None
            return [Event(KIND_SMI_NO_PROCESSES, (line.ref,), {"snapshot": self._snapshot_id()})]
        if self._section == "fb" and key in _FB_KEYS and _FB_KEYS[key] not in self._gpu:
            # The first of each key after the header: a BAR1 "Total" whose header a paste lost is not the card's.
            self._gpu[_FB_KEYS[key]] = _mib(value)
            self._gpu_refs.append(line.ref)
            return []
        if self._section == "processes" and key in _PROCESS_KEYS:
            return self._process_line(key, value, line.ref)
        if self._section in ("fb", "processes"):
            # Another key at the section's depth: the section ended (a driver printing one more field).
            out = self._flush_process()
            self._section = "other"
            return out
        return []

    def _process_line(self, key: str, value: str, ref: LineRef) -> list[Event]:
        out: list[Event] = []
        if key in ("GPU instance ID", "Compute instance ID") or (key == "Process ID" and self._process is not None and "pid" in self._process):
            out = self._flush_process()
        if self._process is None:
            self._process = {}
        self._process_refs.append(ref)
        if key == "Process ID":
            self._process["pid"] = int(value) if value.isdigit() else None
        elif key == "Type":
            self._process["type"] = value or "C"
        elif key == "Name":
            self._process["name"] = value or None
        elif key == "Used GPU Memory":
            # "Not available in WDDM driver model", "N/A": a process of unknown memory.
            self._process["used_bytes"] = _mib(value)
        return out

    def finish(self) -> list[Event]:
        return self._flush_gpu()


def read_text(text: str, path: str) -> list[Event]:
    """Every event of a saved ``nvidia-smi -q`` report (a file given to diagnose), each line cited by its number."""
    parser = SmiQueryParser()
    out: list[Event] = []
    for number, raw in enumerate(text.splitlines(), 1):
        out += parser.feed(Line(ref=LineRef(path=path, line=number, text=raw[:4000]), msg=raw))
    return out + parser.finish()

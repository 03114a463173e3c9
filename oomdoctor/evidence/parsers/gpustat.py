"""``gpustat --json`` pasted into a log or a bug report (or given as a .json file): GPUs and their processes.

gpustat (github.com/wookayin/gpustat, gpustat/core.py) prints ``json.dump(o, indent=4)`` of
``{"hostname", "driver_version", "query_time", "gpus": [...]}``; each GPU is its entry dict in the
order it is built: ``index``, ``uuid``, ``name``, ``temperature.gpu``, ``fan.speed``, the utilizations,
``power.draw``, ``enforced.power.limit``, ``memory.used`` and ``memory.total`` (MiB, ``// MB`` of NVML's
bytes), then ``processes``: a list of ``{"username", "command", "full_command": [...],
"gpu_memory_usage" (MiB, null when NVML does not report it), "cpu_percent", "cpu_memory_usage", "pid"}``,
or ``null`` when the processes could not be read.

Read line by line, as json.dump's indented layout puts one key on a line, so that a paste cut anywhere
still gives the GPUs and processes it holds. The events are the nvidia-smi table parser's
(nvidia_smi.KIND_*) with ``source = "gpustat"``: the facts read them the same way. Pure.
"""

from __future__ import annotations

import json
import re

from oomdoctor.base.evidence import Event, Line, LineRef
from oomdoctor.base.units import MIB
from oomdoctor.evidence.parsers.nvidia_smi import KIND_SMI_DRIVER, KIND_SMI_GPU, KIND_SMI_NO_PROCESSES, KIND_SMI_PROCESS
from oomdoctor.evidence.parsers.pasted import GPUSTAT_ANCHORS

ANCHORS: tuple[bytes, ...] = GPUSTAT_ANCHORS

# One "key": value pair of json.dump's indented output (the value a number, a string, null, or the
# opening bracket of a list).
_PAIR_RE = re.compile(r'^"(?P<key>[\w.]+)"\s*:\s*(?P<value>-?\d+(?:\.\d+)?|"(?:[^"\\]|\\.)*"|null|true|false|\[\]?|\{\}?)\s*,?\s*$')
_ITEM_RE = re.compile(r'^"(?:[^"\\]|\\.)*"\s*,?\s*$')
_MAX_MIB = 1 << 44


def _value(text: str) -> object:
    if text in ("[", "{"):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return None


def _mib(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < _MAX_MIB:
        return None
    return int(value) * MIB


class GpustatParser:
    """Incremental: ``feed`` one line at a time, ``finish`` at the end of the input."""

    def __init__(self) -> None:
        self._snapshot = 0
        self._gpu: dict[str, object] | None = None
        self._gpu_refs: list[LineRef] = []
        self._in_processes = False
        self._in_command = False
        self._process: dict[str, object] | None = None
        self._process_refs: list[LineRef] = []
        self._count = 0  # GPUs of this snapshot so far

    def _snapshot_id(self) -> str:
        return f"g{self._snapshot}"

    def _flush_process(self) -> list[Event]:
        process, refs = self._process, self._process_refs
        self._process, self._process_refs = None, []
        if not process or not isinstance(process.get("pid"), int) or self._gpu is None:
            return []
        values = {"snapshot": self._snapshot_id(), "gpu": self._gpu.get("index"), "pid": process["pid"], "type": "C", "name": process.get("name"), "used_bytes": _mib(process.get("gpu_memory_usage")), "source": "gpustat"}
        return [Event(KIND_SMI_PROCESS, tuple(refs[:6]), values)]

    def _flush_gpu(self) -> list[Event]:
        out = self._flush_process()
        gpu, refs = self._gpu, self._gpu_refs
        self._gpu, self._gpu_refs, self._in_processes = None, [], False
        if gpu is None or not refs:
            return out
        values = {"snapshot": self._snapshot_id(), "index": gpu.get("index"), "name": gpu.get("name"), "bus_id": None, "used_bytes": _mib(gpu.get("memory.used")), "total_bytes": _mib(gpu.get("memory.total")), "source": "gpustat"}
        if isinstance(gpu.get("uuid"), str):
            values["uuid"] = gpu["uuid"]
        return [Event(KIND_SMI_GPU, tuple(refs[:6]), values), *out]

    def feed(self, line: Line) -> list[Event]:
        msg = line.msg.strip()
        if not msg:
            return []
        if self._in_command:
            # full_command's list of arguments, one string a line, until its closing bracket (which the
            # scanner may not have read: a key after the arguments ends it as well).
            if _ITEM_RE.match(msg):
                return []
            self._in_command = False
            if msg.startswith("]"):
                return []
        if msg in ("}", "},") and self._in_processes and self._process is not None:
            return self._flush_process()
        if msg in ("{", "{,") and self._in_processes:
            out = self._flush_process()
            self._process, self._process_refs = {}, []
            return out
        if msg in ("]", "],") and self._in_processes and self._process is None:
            self._in_processes = False
            return []
        m = _PAIR_RE.match(msg)
        if m is None:
            return []
        key, value = m.group("key"), _value(m.group("value"))
        if key == "query_time":
            out = self._flush_gpu()
            self._snapshot += 1
            self._count = 0
            return out
        if key == "driver_version" and isinstance(value, str) and self._gpu is None:
            self._snapshot = self._snapshot or 1
            return [Event(KIND_SMI_DRIVER, (line.ref,), {"snapshot": self._snapshot_id(), "smi_version": None, "driver_version": value})]
        if key == "username" and self._in_processes:
            # A process's first key: the one before it is over (its closing brace may not have been read).
            out = self._flush_process()
            self._process, self._process_refs = {}, [line.ref]
            return out
        if self._process is not None:
            if key == "command" and isinstance(value, str):
                self._process["name"] = value
            elif key == "full_command":
                self._in_command = value == "["
            elif key in ("gpu_memory_usage", "pid"):
                self._process[key] = value
            self._process_refs.append(line.ref)
            return []
        if key == "index" and isinstance(value, int) and not isinstance(value, bool):
            out = self._flush_gpu()
            self._snapshot = self._snapshot or 1
            self._gpu, self._gpu_refs = {"index": value}, [line.ref]
            self._count += 1
            return out
        if key == "uuid" and (self._gpu is None or "uuid" in self._gpu):
            # A GPU whose "index" line was not read (the scanner reads from the UUID on): gpustat lists
            # GPUs in index order, so its place is its index.
            out = self._flush_gpu()
            self._snapshot = self._snapshot or 1
            self._gpu, self._gpu_refs = {"index": self._count}, []
            self._count += 1
            out += self.feed(line)
            return out
        if self._gpu is None:
            return []
        if key in ("uuid", "name", "memory.used", "memory.total"):
            self._gpu[key] = value
            self._gpu_refs.append(line.ref)
        elif key == "processes":
            if value == "[":
                self._in_processes = True
            elif value == []:
                return [Event(KIND_SMI_NO_PROCESSES, (line.ref,), {"snapshot": self._snapshot_id()})]
        return []

    def finish(self) -> list[Event]:
        return self._flush_gpu()


def looks_like_gpustat(data: object) -> bool:
    """A parsed gpustat --json document: a dict whose ``gpus`` are dicts with gpustat's memory keys."""
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), list) or "query_time" not in data:
        return False
    return all(isinstance(g, dict) and "memory.total" in g for g in data["gpus"])


def read_text(text: str, path: str) -> list[Event]:
    """Every event of a saved gpustat --json document, each line cited by its number."""
    parser = GpustatParser()
    out: list[Event] = []
    for number, raw in enumerate(text.splitlines(), 1):
        out += parser.feed(Line(ref=LineRef(path=path, line=number, text=raw[:4000]), msg=raw))
    return out + parser.finish()

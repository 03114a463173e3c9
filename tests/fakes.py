"""Recorded NVML/psutil scenarios (tests/fixtures/collect/*.json) played back through the same API
names pynvml and psutil have, so the collector is driven at its one injection seam."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

MIB = 1 << 20
SCENARIOS = Path(__file__).parent / "fixtures" / "collect"


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    pass


class FakeNvml:
    """A pynvml stand-in built from a scenario's "devices"."""

    nvmlMemory_v2 = 0x02000028
    NVMLError = NVMLError

    def __init__(self, scenario: dict[str, Any]):
        self.s = scenario

    def nvmlInit(self) -> None:
        if not self.s.get("driver", True):
            raise NVMLError_LibraryNotFound("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return self.s.get("driver_version", "550.54.15").encode()

    def nvmlDeviceGetCount(self) -> int:
        return len(self.s["devices"])

    def nvmlDeviceGetHandleByIndex(self, i: int) -> dict:
        return self.s["devices"][i]

    def nvmlDeviceGetUUID(self, h: dict) -> str:
        return h["uuid"]

    def nvmlDeviceGetName(self, h: dict) -> bytes:
        return h["name"].encode()

    def nvmlDeviceGetPciInfo(self, h: dict) -> SimpleNamespace:
        return SimpleNamespace(busId=h["bus"].encode())

    def nvmlDeviceGetMemoryInfo(self, h: dict, version: int | None = None) -> SimpleNamespace:
        if version is not None and not h.get("v2", True):
            raise NVMLError_NotSupported("Not Supported")
        mem = SimpleNamespace(total=h["total_mib"] * MIB, used=h["used_mib"] * MIB, free=(h["total_mib"] - h["used_mib"]) * MIB)
        if version is not None:
            mem.reserved = h.get("reserved_mib", 0) * MIB
        return mem

    def nvmlDeviceGetMigMode(self, h: dict) -> tuple[int, int]:
        if "mig" not in h:
            raise NVMLError_NotSupported("Not Supported")
        return (1 if h["mig"] else 0, 1 if h["mig"] else 0)

    def nvmlDeviceGetComputeRunningProcesses(self, h: dict) -> list[SimpleNamespace]:
        procs = h.get("processes", [])
        if procs == "not_supported":
            raise NVMLError_NotSupported("Not Supported")
        na = (1 << 64) - 1
        return [SimpleNamespace(pid=p["pid"], usedGpuMemory=na if p.get("used_mib") is None else p["used_mib"] * MIB) for p in procs]


class FakePsutil:
    """A psutil stand-in: Process(pid) from the scenario's "psutil" table, else NoSuchProcess."""

    class NoSuchProcess(Exception):
        pass

    class AccessDenied(Exception):
        pass

    def __init__(self, scenario: dict[str, Any]):
        self.table = {int(k): v for k, v in scenario.get("psutil", {}).items()}
        outer = self

        class Process:
            def __init__(self, pid: int):
                if pid not in outer.table:
                    raise outer.NoSuchProcess(pid)
                self.info = outer.table[pid]
                if self.info == "denied":
                    raise outer.AccessDenied(pid)

            def oneshot(self):
                return contextlib.nullcontext()

            def cmdline(self):
                return self.info["cmdline"]

            def name(self):
                return self.info["name"]

            def username(self):
                return self.info.get("username")

            def create_time(self):
                return self.info.get("create_time")

            def environ(self):
                return self.info.get("environ", {})

        self.Process = Process


def load(name: str) -> dict[str, Any]:
    return json.loads((SCENARIOS / f"{name}.json").read_text())

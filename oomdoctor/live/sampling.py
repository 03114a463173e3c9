"""The flight recorder's NVML reads: memory samples at an interval into a ring buffer, and the process snapshot at an OOM."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from oomdoctor.live import procinfo
from oomdoctor.live.nvml import Nvml


class Sampler(threading.Thread):
    """NVML samples every interval into a ring buffer; one query per device per tick, nothing else."""

    def __init__(self, nvml: Nvml, interval_s: float, keep: int, clock: Callable[[], float]):
        super().__init__(daemon=True)
        self.nvml, self.interval_s, self.clock = nvml, interval_s, clock
        self.samples: deque[dict[str, Any]] = deque(maxlen=keep)
        self.stop_event = threading.Event()
        self.lock = threading.Lock()

    def sample(self) -> None:
        gpus = self.nvml.gpus()
        record = {
            "t": round(self.clock(), 3),
            "gpus": [{"uuid": g.uuid, "index": g.index, "used_bytes": g.used_bytes, "total_bytes": g.total_bytes} for g in gpus],
            "processes": [
                {"gpu": g.uuid, "pid": p.pid, "used_bytes": p.used_bytes}
                for g in gpus
                if isinstance(g.processes, list)
                for p in g.processes
            ],
        }
        with self.lock:
            self.samples.append(record)

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.sample()
            self.stop_event.wait(self.interval_s)


class Snapshot:
    """The GPUs and the processes on them, taken once: at the first OOM line, else when the server has exited.

    ``data`` stays empty until it is taken, and always when NVML did not start (``enabled`` False).
    """

    def __init__(self, nvml: Nvml, psutil_module: Any, clock: Callable[[], float], enabled: bool) -> None:
        self.nvml, self.psutil_module, self.clock, self.enabled = nvml, psutil_module, clock, enabled
        self.data: dict[str, Any] = {}

    def take(self) -> None:
        if self.data or not self.enabled:
            return
        self.data["gpus"] = procinfo.gpus_with_processes(self.nvml.gpus(), self.psutil_module)
        self.data["t"] = round(self.clock(), 3)

    def take_at_oom(self) -> None:
        """``take`` on a pump's thread, the moment an OOM line passes (the other process that caused it may still be there)."""
        try:
            self.take()
        except Exception:  # noqa: BLE001 - the pump must go on (a stopped pump would block the server); the bundle retries
            self.data.clear()

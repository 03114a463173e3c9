"""The one choke point for NVML: lazy import, no call ever raises, every failure is a value.

``pynvml`` (from the nvidia-ml-py package) is imported only when a collection starts; NVML reads
driver state and never creates a CUDA context, so it is safe on a GPU host that is already out of
memory. Tests pass a recorded fake module with the same function names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from oomdoctor.base.evidence import Unavailable

if TYPE_CHECKING:
    from typing import Any

# NVML's usedGpuMemory for a process it cannot account (MIG, some vGPU setups): NVML_VALUE_NOT_AVAILABLE.
_NOT_AVAILABLE = (1 << 64) - 1


@dataclass
class GpuProcess:
    pid: int
    used_bytes: int | None  # None: NVML reports N/A (MIG, WDDM, some containers)
    kind: str = "compute"


@dataclass
class Gpu:
    index: int
    uuid: str | None
    pci_bus_id: str | None
    name: str | None
    total_bytes: int | None
    used_bytes: int | None
    free_bytes: int | None
    reserved_bytes: int | None
    mig_mode: bool | None
    processes: list[GpuProcess] | Unavailable = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        procs: Any
        if isinstance(self.processes, Unavailable):
            procs = {"unavailable": self.processes.reason}
        else:
            procs = [{"pid": p.pid, "used_bytes": p.used_bytes, "kind": p.kind} for p in self.processes]
        return {
            "index": self.index,
            "uuid": self.uuid,
            "pci_bus_id": self.pci_bus_id,
            "name": self.name,
            "total_bytes": self.total_bytes,
            "used_bytes": self.used_bytes,
            "free_bytes": self.free_bytes,
            "reserved_bytes": self.reserved_bytes,
            "mig_mode": self.mig_mode,
            "processes": procs,
            "errors": self.errors,
        }


class Nvml:
    """Queries through one module object (``pynvml`` or a fake); errors are logged once each."""

    def __init__(self, module: Any = None) -> None:
        self._module = module
        self.errors: list[str] = []
        self._seen: set[str] = set()
        self.available: Unavailable | None = None

    def _log(self, what: str, exc: BaseException) -> None:
        message = f"{what}: {type(exc).__name__}: {exc}".strip()
        key = f"{what}:{type(exc).__name__}"
        if key not in self._seen:
            self._seen.add(key)
            self.errors.append(message)

    def call(self, what: str, fn: Callable[..., Any], *args: Any, default: Any = None, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - NVML raises a zoo of NVMLError subclasses; all become values
            self._log(what, exc)
            return default

    def start(self) -> bool:
        if self._module is None:
            try:
                import pynvml  # lazy: never on the diagnose path

                self._module = pynvml
            except ImportError as exc:
                self.available = Unavailable(f"the nvidia-ml-py package is not importable ({exc})")
                return False
        try:
            self._module.nvmlInit()
        except Exception as exc:  # noqa: BLE001
            self.available = Unavailable(f"NVML could not start: {type(exc).__name__}: {exc} (no NVIDIA driver or no GPU)")
            return False
        return True

    def stop(self) -> None:
        if self._module is not None and self.available is None:
            self.call("nvmlShutdown", self._module.nvmlShutdown)

    def driver_version(self) -> str | None:
        m = self._module
        if not hasattr(m, "nvmlSystemGetDriverVersion"):
            return None
        return self._text(self.call("nvmlSystemGetDriverVersion", m.nvmlSystemGetDriverVersion))

    def gpus(self) -> list[Gpu]:
        m = self._module
        count = self.call("nvmlDeviceGetCount", m.nvmlDeviceGetCount, default=0) or 0
        out = []
        for i in range(count):
            h = self.call("nvmlDeviceGetHandleByIndex", m.nvmlDeviceGetHandleByIndex, i)
            if h is None:
                continue
            out.append(self._gpu(i, h))
        return out

    @staticmethod
    def _text(value: Any) -> str | None:
        if value is None:
            return None
        return value.decode() if isinstance(value, bytes) else str(value)

    def _gpu(self, index: int, h: Any) -> Gpu:
        m = self._module
        errors_before = len(self.errors)
        pci = self.call("nvmlDeviceGetPciInfo", m.nvmlDeviceGetPciInfo, h)
        bus = self._text(getattr(pci, "busId", None)) if pci is not None else None
        mem = None
        # v2 memory info separates "reserved" (driver/firmware) from "used"; older drivers lack it.
        if hasattr(m, "nvmlMemory_v2"):
            mem = self.call("nvmlDeviceGetMemoryInfo(v2)", m.nvmlDeviceGetMemoryInfo, h, version=m.nvmlMemory_v2)
        if mem is None:
            mem = self.call("nvmlDeviceGetMemoryInfo", m.nvmlDeviceGetMemoryInfo, h)
        mig = self.call("nvmlDeviceGetMigMode", m.nvmlDeviceGetMigMode, h)
        mig_on = bool(mig[0]) if isinstance(mig, (list, tuple)) and mig else None
        procs_raw = self.call("nvmlDeviceGetComputeRunningProcesses", m.nvmlDeviceGetComputeRunningProcesses, h)
        processes: list[GpuProcess] | Unavailable
        if procs_raw is None:
            processes = Unavailable(self.errors[-1] if len(self.errors) > errors_before else "process list not available")
        else:
            processes = []
            for p in procs_raw:
                used = getattr(p, "usedGpuMemory", None)
                if used is None or used >= _NOT_AVAILABLE:
                    used = None
                processes.append(GpuProcess(pid=int(p.pid), used_bytes=used))
        return Gpu(
            index=index,
            uuid=self._text(self.call("nvmlDeviceGetUUID", m.nvmlDeviceGetUUID, h)),
            pci_bus_id=bus,
            name=self._text(self.call("nvmlDeviceGetName", m.nvmlDeviceGetName, h)),
            total_bytes=getattr(mem, "total", None),
            used_bytes=getattr(mem, "used", None),
            free_bytes=getattr(mem, "free", None),
            reserved_bytes=getattr(mem, "reserved", None),
            mig_mode=mig_on,
            processes=processes,
            errors=self.errors[errors_before:],
        )

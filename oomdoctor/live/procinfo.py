"""Who a GPU process is: psutil facts, the container it runs in, and PID-namespace trouble.

NVML reports host PIDs. Inside a container without the host PID namespace those numbers do not name
the local processes (or name different ones), which is said, not hidden.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from oomdoctor.input.redact import redact_text

if TYPE_CHECKING:
    from typing import Any

_ENV_ALLOW = re.compile(r"^(?:CUDA_|NVIDIA_|PYTORCH_|NCCL_|SGLANG_|VLLM_|TORCH_|OMP_NUM_THREADS$|HF_HOME$|LOCAL_RANK$|RANK$|WORLD_SIZE$)")
_CONTAINER_RE = re.compile(r"(?:docker|kubepods|containerd|libpod|crio)[-/:]?([0-9a-f]{12,64})?")
SERVER_MARKERS = ("sglang", "vllm", "launch_server", "EngineCore", "api_server", "sgl-", "tgi", "text-generation")


def in_container(proc_root: str = "/proc") -> bool:
    if os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv"):
        return True
    try:
        return bool(_CONTAINER_RE.search(Path(proc_root, "1", "cgroup").read_text()))
    except OSError:
        return False


def nspid_map(proc_root: str = "/proc") -> dict[int, int]:
    """Outermost visible PID -> innermost PID, from /proc/<pid>/status NSpid (processes in child namespaces)."""
    out: dict[int, int] = {}
    root = Path(proc_root)
    try:
        entries = list(root.iterdir())
    except OSError:
        return out
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("NSpid:"):
                    pids = [int(p) for p in line.split()[1:]]
                    if len(pids) >= 2:
                        out[pids[0]] = pids[-1]
                    break
        except (OSError, ValueError):
            continue
    return out


def container_of(pid: int, proc_root: str = "/proc") -> str | None:
    try:
        m = _CONTAINER_RE.search(Path(proc_root, str(pid), "cgroup").read_text())
    except OSError:
        return None
    if not m:
        return None
    return (m.group(1) or m.group(0))[:12]


def describe(pid: int, psutil_module: Any, proc_root: str = "/proc", containerized: bool = False, nspids: dict[int, int] | None = None) -> dict[str, Any]:
    """Facts about one NVML PID: identity when psutil can see it, otherwise why not."""
    info: dict[str, Any] = {"pid": pid}
    if psutil_module is None:
        info["status"] = "unknown"
        info["reason"] = "psutil is not available"
        return info
    try:
        p = psutil_module.Process(pid)
        with p.oneshot():
            cmdline = p.cmdline()
            info.update(
                {
                    "status": "ok",
                    "name": p.name(),
                    "username": _safe(p.username),
                    "create_time": _safe(p.create_time),
                    "cmdline": redact_text(" ".join(cmdline))[:2000],
                    "container": container_of(pid, proc_root),
                    "environ": _env(p),
                }
            )
        info["is_server"] = any(marker in info["cmdline"] or marker in (info["name"] or "") for marker in SERVER_MARKERS)
        if containerized:
            info["pid_namespace"] = "container: NVML gives host PIDs; this local process may be a different one with the same number"
    except psutil_module.NoSuchProcess:
        if containerized and (nspids is None or pid not in nspids):
            info["status"] = "other_pid_namespace"
            info["reason"] = "NVML reports host PIDs and this container does not share the host PID namespace (run with --pid=host / hostPID: true, or collect on the host)"
        else:
            info["status"] = "vanished"
            info["reason"] = "the process exited between the NVML query and the lookup"
    except psutil_module.AccessDenied:
        info["status"] = "access_denied"
        info["reason"] = "not permitted to read this process (run collect as root)"
    except Exception as exc:  # noqa: BLE001 - psutil raises several types per platform; record, go on
        info["status"] = "error"
        info["reason"] = f"{type(exc).__name__}: {exc}"
    return info


def load_psutil(psutil_module: Any = "auto") -> Any:
    """psutil, or None where it is not installed ("auto"); a test passes its fake instead."""
    if psutil_module != "auto":
        return psutil_module
    try:
        import psutil  # lazy: imported only by collect and run

        return psutil
    except ImportError:
        return None


def gpus_with_processes(gpus: list[Any], psutil_module: Any, proc_root: str = "/proc", containerized: bool | None = None) -> list[dict[str, Any]]:
    """Each GPU as JSON, its NVML processes described (who they are, or why that is unknown)."""
    if containerized is None:
        containerized = in_container(proc_root)
    nspids = nspid_map(proc_root)
    out = []
    for g in gpus:
        item = g.to_json()
        if isinstance(item["processes"], list):
            item["processes"] = [{**p, **describe(p["pid"], psutil_module, proc_root, containerized, nspids)} for p in item["processes"]]
        out.append(item)
    return out


def _safe(fn: Any) -> Any:
    try:
        return fn()
    except Exception:  # noqa: BLE001
        return None


def _env(p: Any) -> dict[str, str]:
    try:
        env = p.environ()
    except Exception:  # noqa: BLE001 - other users' environments are often unreadable
        return {}
    return {k: redact_text(f"{k}={v}").split("=", 1)[1] for k, v in sorted(env.items()) if _ENV_ALLOW.match(k)}


def visible_devices(env: dict[str, str]) -> dict[str, Any]:
    """CUDA_VISIBLE_DEVICES / CUDA_DEVICE_ORDER, and how sure the ordinal -> physical mapping is."""
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    order = env.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    out: dict[str, Any] = {"CUDA_VISIBLE_DEVICES": cvd, "CUDA_DEVICE_ORDER": order}
    if cvd is None:
        out["mapping"] = "all GPUs visible"
    elif order != "PCI_BUS_ID" and not all(x.strip().startswith(("GPU-", "MIG-")) for x in cvd.split(",") if x.strip()):
        out["mapping"] = "uncertain: CUDA orders devices fastest-first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, NVML by PCI bus"
    else:
        out["mapping"] = "exact"
    return out


def cgroup_oom_kills(proc_self_cgroup: str = "/proc/self/cgroup", cgroup_root: str = "/sys/fs/cgroup") -> tuple[int, str] | None:
    """This process's memory cgroup OOM-kill counter and the file it came from; None where unreadable.

    cgroup v2: ``oom_kill`` in memory.events of our cgroup (hierarchical: children's kills count);
    cgroup v1: ``oom_kill`` in memory.oom_control of the memory controller's cgroup.
    """
    try:
        lines = Path(proc_self_cgroup).read_text().splitlines()
    except OSError:
        return None
    candidates: list[Path] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        controllers, rel = parts[1], parts[2].lstrip("/")
        if controllers == "":
            candidates.append(Path(cgroup_root, rel, "memory.events"))
        elif "memory" in controllers.split(","):
            candidates.append(Path(cgroup_root, "memory", rel, "memory.oom_control"))
    for path in candidates:
        try:
            text = path.read_text()
        except OSError:
            continue
        for row in text.splitlines():
            key, _, value = row.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value), str(path)
    return None

"""nvidia-smi output (CSV queries and `-q -x` XML): the fallback when NVML cannot be imported, and
the parser for such files saved during an incident and given to `diagnose`.

Sizes are MiB in nvidia-smi; "[N/A]", "N/A" and "Not Supported" become None.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

from oomdoctor.base.units import MIB
from oomdoctor.live.nvml import Gpu, GpuProcess

if TYPE_CHECKING:
    from typing import Any

GPU_QUERY = "index,uuid,pci.bus_id,name,memory.total,memory.used,memory.free,memory.reserved"
APPS_QUERY = "gpu_uuid,gpu_bus_id,pid,process_name,used_memory"
_NA = {"", "[n/a]", "n/a", "not supported", "[not supported]", "[insufficient permissions]", "none"}
_MIB_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:MiB)?\s*$")


# No GPU has 2**44 MiB (16 EiB); a longer number is corrupt or hostile and reads as unknown.
_MAX_MIB = 1 << 44


def _mib(text: str | None) -> int | None:
    if text is None or text.strip().lower() in _NA:
        return None
    m = _MIB_RE.match(text)
    if not m or len(m.group(1)) > 32:
        return None
    value = float(m.group(1))
    return round(value * MIB) if value < _MAX_MIB else None


def _rows(text: str) -> tuple[list[str] | None, list[list[str]]]:
    """CSV rows; ValueError when the text is not CSV nvidia-smi could have written (a huge field, a NUL)."""
    try:
        rows = [[c.strip() for c in r] for r in csv.reader(io.StringIO(text)) if r and any(c.strip() for c in r)]
    except csv.Error as exc:
        raise ValueError(f"not nvidia-smi CSV ({exc})") from None
    header = None
    if rows and any(c.startswith(("index", "uuid", "gpu_uuid", "pid", "name", "memory.")) for c in rows[0]):
        header = [re.sub(r"\s*\[.*\]$", "", c) for c in rows[0]]
        rows = rows[1:]
    return header, rows


def parse_gpu_csv(text: str) -> list[Gpu]:
    """`nvidia-smi --query-gpu=GPU_QUERY --format=csv[,noheader][,nounits]`."""
    header, rows = _rows(text)
    cols = header or GPU_QUERY.split(",")
    out = []
    for r in rows:
        d = dict(zip(cols, r, strict=False))  # short rows: missing trailing columns
        if "index" not in d:
            continue
        try:
            index = int(d["index"])
        except ValueError:
            continue
        out.append(
            Gpu(
                index=index,
                uuid=d.get("uuid") or None,
                pci_bus_id=d.get("pci.bus_id") or None,
                name=d.get("name") or None,
                total_bytes=_mib(d.get("memory.total")),
                used_bytes=_mib(d.get("memory.used")),
                free_bytes=_mib(d.get("memory.free")),
                reserved_bytes=_mib(d.get("memory.reserved")),
                mig_mode=None,
                processes=[],
            )
        )
    return out


def parse_apps_csv(text: str) -> list[dict[str, Any]]:
    """`nvidia-smi --query-compute-apps=APPS_QUERY --format=csv[,noheader][,nounits]`."""
    header, rows = _rows(text)
    cols = header or APPS_QUERY.split(",")
    out = []
    for r in rows:
        d = dict(zip(cols, r, strict=False))  # short rows: missing trailing columns
        try:
            pid = int(d.get("pid", ""))
        except ValueError:
            continue
        out.append({"gpu_uuid": d.get("gpu_uuid"), "gpu_bus_id": d.get("gpu_bus_id"), "pid": pid, "name": d.get("process_name"), "used_bytes": _mib(d.get("used_memory"))})
    return out


def attach_apps(gpus: list[Gpu], apps: list[dict[str, Any]]) -> None:
    for app in apps:
        for g in gpus:
            same_uuid = app["gpu_uuid"] and app["gpu_uuid"] == g.uuid
            same_bus = app["gpu_bus_id"] and g.pci_bus_id and app["gpu_bus_id"].lower().endswith(g.pci_bus_id.lower()[-12:])
            if (same_uuid or same_bus) and isinstance(g.processes, list):
                g.processes.append(GpuProcess(pid=app["pid"], used_bytes=app["used_bytes"]))


def driver_version_xml(text: str) -> str | None:
    try:
        return (ET.fromstring(text).findtext("driver_version") or "").strip() or None
    except ET.ParseError:
        return None


def parse_smi_xml(text: str) -> list[Gpu]:
    """`nvidia-smi -q -x`: every GPU with its framebuffer memory and compute processes."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise ValueError(f"not nvidia-smi XML ({exc})") from None
    if root.tag != "nvidia_smi_log":
        raise ValueError("not nvidia-smi XML (no nvidia_smi_log root)")
    out = []
    for i, gpu in enumerate(root.findall("gpu")):
        fb = gpu.find("fb_memory_usage")

        def fbv(tag: str, fb: Any = fb) -> int | None:
            node = fb.find(tag) if fb is not None else None
            return _mib(node.text) if node is not None else None

        procs: list[GpuProcess] = []
        for p in gpu.findall("processes/process_info"):
            try:
                pid = int((p.findtext("pid") or "").strip())
            except ValueError:
                continue
            used = p.findtext("used_memory")
            procs.append(GpuProcess(pid=pid, used_bytes=_mib(used), kind=(p.findtext("type") or "C").strip()))
        mig = gpu.findtext("mig_mode/current_mig")
        out.append(
            Gpu(
                index=int(gpu.findtext("minor_number") or i) if (gpu.findtext("minor_number") or "").strip().isdigit() else i,
                uuid=(gpu.findtext("uuid") or "").strip() or None,
                pci_bus_id=gpu.get("id"),
                name=(gpu.findtext("product_name") or "").strip() or None,
                total_bytes=fbv("total"),
                used_bytes=fbv("used"),
                free_bytes=fbv("free"),
                reserved_bytes=fbv("reserved"),
                mig_mode=(mig.strip().lower() == "enabled") if mig else None,
                processes=procs,
            )
        )
    return out


def run_nvidia_smi(timeout: float = 10.0) -> tuple[list[Gpu] | None, str | None]:
    """Query the nvidia-smi binary when NVML is not importable; (gpus, None) or (None, reason)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, "nvidia-smi is not on PATH"
    try:
        gpus = subprocess.run([exe, f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=timeout)
        apps = subprocess.run([exe, f"--query-compute-apps={APPS_QUERY}", "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"nvidia-smi failed: {exc}"
    if gpus.returncode != 0:
        return None, f"nvidia-smi failed: {gpus.stderr.strip() or gpus.stdout.strip()}"
    parsed = parse_gpu_csv(gpus.stdout)
    if apps.returncode == 0:
        attach_apps(parsed, parse_apps_csv(apps.stdout))
    return parsed, None

"""`oomdoctor collect`: a live snapshot of the GPUs and their processes, into a bundle directory.

Never creates a CUDA context (NVML or nvidia-smi only, no torch import) and works on a machine
without a GPU: what could not be read is written down with the reason.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from oomdoctor.base.errors import InputError, UsageError
from oomdoctor.base.outcomes import GpuEvidence
from oomdoctor.evidence.collected import manifest_header
from oomdoctor.input.kinds import plain_name
from oomdoctor.live import procinfo
from oomdoctor.live.nvml import Nvml
from oomdoctor.live.smi import run_nvidia_smi
from oomdoctor.report.bundle import copy_chunks

if TYPE_CHECKING:
    from typing import Any


def collect(
    out_dir: str,
    logs: Sequence[str] = (),
    nvml_module: Any = None,
    psutil_module: Any = "auto",
    proc_root: str = "/proc",
    env: dict[str, str] | None = None,
    smi: Any = run_nvidia_smi,
    redact: bool = True,
    now: float | None = None,
    containerized: bool | None = None,
    hostname: str | None = None,
) -> tuple[dict[str, Any], GpuEvidence]:
    """Write ``out_dir/manifest.json`` (and copies of ``logs``); return the manifest and whether GPU evidence was read.

    No driver or GPU is not an error: the bundle is written with the reason, and UNAVAILABLE says so.
    """
    _refuse_logs_not_files(logs)  # before anything is written: a refused --log leaves no half bundle
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{out_dir}: cannot create the bundle directory ({exc.strerror or exc})") from None
    _refuse_used_directory(out, out_dir)
    env = dict(os.environ if env is None else env)
    psutil_module = procinfo.load_psutil(psutil_module)
    nvml = Nvml(nvml_module)
    source, unavailable, gpus, driver = None, None, [], None
    if nvml.start():
        driver = nvml.driver_version()
        gpus = nvml.gpus()
        nvml.stop()
        source = "nvml"
    else:
        smi_gpus, reason = smi() if smi else (None, "nvidia-smi fallback disabled")
        if smi_gpus is not None:
            gpus, source = smi_gpus, "nvidia-smi"
        else:
            unavailable = f"{nvml.available.reason if nvml.available is not None else 'NVML unavailable'}; {reason}"
    if containerized is None:
        containerized = procinfo.in_container(proc_root)
    gpu_json = procinfo.gpus_with_processes(gpus, psutil_module, proc_root, containerized)
    host_visible = procinfo.visible_devices(env)
    host_visible["cuda_ordinals"] = _cuda_ordinals(env, gpus) if gpus else []
    copied = []
    for log in logs:
        copied.append(_copy_log(log, out / "logs", redact))
    manifest = {
        **manifest_header("collect"),
        "created_unix": round(now if now is not None else time.time(), 3),
        "host": {"hostname": hostname or socket.gethostname(), "containerized": containerized, "visible_devices": host_visible},
        "gpu_evidence": {"source": source, "unavailable": unavailable, "errors": nvml.errors, "driver_version": driver},
        "gpus": gpu_json,
        "logs": copied,
        "redacted": redact,
    }
    _write_new(out / "manifest.json", (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode(), out_dir)
    return manifest, (GpuEvidence.AVAILABLE if unavailable is None else GpuEvidence.UNAVAILABLE)


def _cuda_ordinals(env: dict[str, str], gpus: list[Any]) -> list[dict[str, Any]]:
    """CUDA ordinal -> physical GPU (UUID, PCI bus id) where the environment makes it certain.

    NVML numbers GPUs by PCI bus id; CUDA does too only with CUDA_DEVICE_ORDER=PCI_BUS_ID (else it
    puts the fastest first), and CUDA_VISIBLE_DEVICES renumbers what it lists from 0.
    """
    by_bus = sorted(gpus, key=lambda g: (g.pci_bus_id or "", g.index))
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    entries = [e.strip() for e in cvd.split(",") if e.strip()] if cvd is not None else [str(i) for i in range(len(by_bus))]
    pci_order = env.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID"
    out = []
    for ordinal, entry in enumerate(entries):
        match = None
        if entry.startswith(("GPU-", "MIG-")):
            match = next((g for g in gpus if g.uuid and g.uuid.startswith(entry)), None)
            certain = match is not None and entry.startswith("GPU-")
        elif entry.isdigit() and int(entry) < len(by_bus):
            match = by_bus[int(entry)]
            certain = pci_order or len({g.name for g in gpus}) == 1
        else:
            certain = False
        out.append({"cuda_ordinal": ordinal, "entry": entry, "uuid": match.uuid if match else None, "pci_bus_id": match.pci_bus_id if match else None, "certain": bool(certain)})
    return out


def _refuse_logs_not_files(logs: Sequence[str]) -> None:
    """UsageError (exit 2) for a --log that is not a regular file: a FIFO, a device or a link to one (/dev/zero,
    /dev/stdout) would block the copy or never end it, and a missing one has nothing to copy."""
    from oomdoctor.input.files import named_file_problem

    for log in logs:
        problem = named_file_problem(log)
        if problem is not None:
            hint = "; collect copies regular files only (save the stream to a file first, or pipe it to `diagnose -`)" if problem.startswith("not a regular") else ""
            raise UsageError(f"--log {log}: {problem}{hint}")


def _refuse_used_directory(out: Path, out_dir: str) -> None:
    """UsageError (exit 2) when ``out`` already holds anything: collect never overwrites evidence.

    An earlier incident's bundle (or any other file) stays as it is; the message says what to do.
    """
    try:
        entries = sorted(p.name for p in out.iterdir())
    except OSError as exc:
        raise InputError(f"{out_dir}: cannot read the bundle directory ({exc.strerror or exc})") from None
    if not entries:
        return
    what = "already holds a bundle (manifest.json)" if "manifest.json" in entries else f"is not empty ({entries[0]}{' ...' if len(entries) > 1 else ''})"
    raise UsageError(f"{out_dir}: {what}; collect never overwrites evidence: give a new or empty directory, e.g. -o {out_dir.rstrip('/') or '/'}/{time.strftime('%Y%m%d-%H%M%S')}")


def _write_new(path: Path, data: bytes, out_dir: str) -> None:
    """Write ``path`` only if it does not exist yet (O_EXCL): a collect racing into the same directory cannot replace it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    except FileExistsError:
        raise UsageError(f"{out_dir}: {path.name} appeared while collecting (another collect?); collect never overwrites evidence") from None
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _copy_log(path: str, dest: Path, redact: bool) -> str:
    dest.mkdir(parents=True, exist_ok=True)
    name = plain_name(path) or "log"
    if not name.endswith((".log", ".txt", ".out", ".err")):
        name += ".log"
    stem, n = name, 1
    while (dest / name).exists():  # two --log files of the same name: each keeps its own copy
        n += 1
        base, dot, ext = stem.rpartition(".")
        name = f"{base}-{n}.{ext}" if dot else f"{stem}-{n}"
    with open(dest / name, "xb") as fh:  # "x": never over an existing file
        for data in copy_chunks(path, redact):
            fh.write(data)
    return f"logs/{name}"

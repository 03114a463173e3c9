"""`oomdoctor run -- <server command>`: a flight recorder around the server.

The child's stdout and stderr pass through byte for byte (and are teed to DIR/server.log); NVML is
sampled into a ring buffer at a bounded rate (no CUDA context); when the child prints an OOM or
exits abnormally, the processes are snapshotted at once and DIR gets a bundle (log, samples,
snapshot) and the diagnosis report. The wrapper forwards SIGINT/SIGTERM/SIGHUP, never kills the
child, and exits with the child's own code.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from oomdoctor import procinfo
from oomdoctor.collected import manifest_header
from oomdoctor.nvml import Nvml

# What in the child's output means "an OOM happened now" (checked on raw bytes, across chunk edges).
TRIGGERS = (
    b"out of memory",
    b"OutOfMemoryError",
    b"Not enough memory",
    b"Loaded weights leave no GPU memory",
    b"No available memory for the cache blocks",
    b"KV cache is needed, which is larger",
    b"CUBLAS_STATUS_ALLOC_FAILED",
)
_OVERLAP = max(len(t) for t in TRIGGERS)
SAMPLES_KIND = "oomdoctor-samples"


class _Sampler(threading.Thread):
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


def run(
    cmd: list[str],
    out_dir: str,
    interval_ms: int = 500,
    nvml_module: Any = None,
    psutil_module: Any = "auto",
    stdout: BinaryIO | None = None,
    stderr: BinaryIO | None = None,
    keep_samples: int = 1200,
    clock: Callable[[], float] = time.time,
) -> int:
    """Run ``cmd`` under the recorder; return the child's exit code (128+N when killed by signal N)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stdout = stdout or sys.stdout.buffer
    stderr = stderr or sys.stderr.buffer
    psutil_module = procinfo.load_psutil(psutil_module)
    nvml = Nvml(nvml_module)
    sampler = _Sampler(nvml, max(interval_ms, 10) / 1000, keep_samples, clock) if nvml.start() else None
    log = open(out / "server.log", "wb")  # noqa: SIM115 - closed below, after both pumps finish
    log_lock = threading.Lock()
    oom_seen = threading.Event()
    snapshot: dict[str, Any] = {}

    def take_snapshot() -> None:
        if snapshot or sampler is None:
            return
        snapshot["gpus"] = procinfo.gpus_with_processes(nvml.gpus(), psutil_module)
        snapshot["t"] = round(clock(), 3)

    try:
        child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    except OSError as exc:
        log.close()
        from oomdoctor.errors import InputError

        raise InputError(f"cannot start {cmd[0]}: {exc.strerror or exc}") from None
    started = clock()

    def pump(src: BinaryIO, dst: BinaryIO) -> None:
        tail = b""
        fd = src.fileno()
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            dst.write(chunk)
            dst.flush()
            with log_lock:
                log.write(chunk)
            window = tail + chunk
            if not oom_seen.is_set() and any(t in window for t in TRIGGERS):
                oom_seen.set()
                # The process list now, while the other process that caused it may still be there.
                take_snapshot()
            tail = window[-_OVERLAP:]

    forwarded: list[int] = []

    def forward(signum: int, frame: Any) -> None:
        forwarded.append(signum)
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            previous[sig] = signal.signal(sig, forward)
    if sampler is not None:
        sampler.start()
    pumps = [threading.Thread(target=pump, args=(child.stdout, stdout), daemon=True), threading.Thread(target=pump, args=(child.stderr, stderr), daemon=True)]
    for t in pumps:
        t.start()
    try:
        while True:
            try:
                code = child.wait()
                break
            except KeyboardInterrupt:
                continue  # forwarded already; keep waiting for the child
        for t in pumps:
            t.join()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if sampler is not None:
            sampler.stop_event.set()
            sampler.join(timeout=5)
        log.close()
    exit_code = code if code >= 0 else 128 - code
    if oom_seen.is_set() or code != 0:
        if not snapshot:
            take_snapshot()
        _write_bundle(out, cmd, started, clock(), code, sampler, nvml, snapshot, oom_seen.is_set())
        _write_report(out, stderr)
    if sampler is not None:
        nvml.stop()
    return exit_code


def _write_bundle(out: Path, cmd: list[str], started: float, ended: float, code: int, sampler: _Sampler | None, nvml: Nvml, snapshot: dict[str, Any], oom: bool) -> None:
    from oomdoctor.redact import redact_text

    unavailable = None if sampler is not None else (nvml.available.reason if nvml.available is not None else "NVML unavailable")
    manifest = {
        **manifest_header("run"),
        "command": redact_text(" ".join(cmd)),
        "started_unix": round(started, 3),
        "ended_unix": round(ended, 3),
        "child_exit_code": code,
        "oom_seen": oom,
        "gpu_evidence": {"source": "nvml" if sampler is not None else None, "unavailable": unavailable, "errors": nvml.errors},
        "gpus": snapshot.get("gpus", []),
        "snapshot_unix": snapshot.get("t"),
        "logs": ["server.log"],
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    samples = list(sampler.samples) if sampler is not None else []
    (out / "samples.json").write_text(json.dumps({"kind": SAMPLES_KIND, "interval_s": sampler.interval_s if sampler else None, "samples": samples, "unavailable": unavailable}, sort_keys=True) + "\n")


def _write_report(out: Path, stderr: BinaryIO) -> None:
    from oomdoctor.api import diagnose, load_rules
    from oomdoctor.errors import OomdoctorError
    from oomdoctor.render import html, json_out
    from oomdoctor.view import build_view

    try:
        rules = load_rules()
        view = build_view(diagnose([str(out)], rules=rules))
        (out / "report.html").write_text(html.render(view, {r.id: r.docs for r in rules}))
        (out / "diagnosis.json").write_text(json_out.render(view))
        note = f"oomdoctor: {view['verdict']['class']}: report at {out / 'report.html'}\n"
    except OomdoctorError as exc:
        note = f"oomdoctor: no report: {exc}\n"
    stderr.write(note.encode())
    stderr.flush()

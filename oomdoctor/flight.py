"""`oomdoctor run -- <server command>`: a flight recorder around the server.

Every run gets its own directory, OUT/<YYYYmmdd-HHMMSS>[-N]/, created exclusively (a second run into
the same OUT never touches an earlier run's files) and locked with fcntl while it records; OUT/latest
is a symlink to the newest one, replaced atomically. The child's stdout and stderr pass through byte
for byte (and are teed to RUN/server.log, which is redacted in place when the child ends unless
``redact=False``); NVML is sampled into a ring buffer at a bounded rate (no CUDA context); when the
child prints an OOM or exits abnormally, the processes are snapshotted at once and RUN gets a bundle
(log, samples, snapshot) and the diagnosis report. A child killed by SIGKILL (exit 137, -9: the
kernel OOM killer's signature) and a rise of the memory cgroup's OOM-kill counter are written to
RUN/recorder.log in words the host-OOM rules read. The wrapper forwards SIGINT/SIGTERM/SIGHUP, never
kills the child, and exits with the child's own code.
"""

from __future__ import annotations

import contextlib
import fcntl
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
from typing import Any, BinaryIO, cast

from oomdoctor import procinfo
from oomdoctor.collected import manifest_header
from oomdoctor.errors import InputError, OutputError, UsageError
from oomdoctor.inputs import OWN_HIDDEN_PREFIX
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
LOCK_NAME = f"{OWN_HIDDEN_PREFIX}-run.lock"
LATEST = "latest"
RECORDER_LOG = "recorder.log"
# Bytes per read of the child's pipes: one syscall and one write per MiB of a chatty server, not per 64 KiB.
READ_BYTES = 1 << 20
# server.log keeps the first and the last this many MB (the startup evidence and the failure).
DEFAULT_KEEP_MB = 64


def _open_unbuffered(path: Path, mode: str) -> BinaryIO:
    """Unbuffered, so that a full disk shows at the write that hit it, not at a later flush."""
    return cast(BinaryIO, open(path, mode, buffering=0))


class BoundedLog:
    """RUN/server.log bounded to the first ``keep`` bytes and a ring of the last ``keep`` bytes.

    The head is written straight to the log; once it is full, later bytes go to a ring file of
    ``keep`` bytes beside it, written in a circle. ``close`` appends one marker line saying how much
    was dropped, then the ring in order (from its first whole line), and removes the ring file. A
    write that fails (disk full, read-only file system, log removed) stops the recording: the
    recorder keeps passing the output through and ``on_error`` is called once with the reason.
    """

    def __init__(self, path: Path, keep: int, on_error: Callable[[str], None], opener: Callable[[Path, str], BinaryIO] | None = None) -> None:
        opener = opener or _open_unbuffered
        self.path, self.keep, self.on_error, self._open = path, max(keep, 1), on_error, opener
        self.head = opener(path, "xb")
        self.written = 0  # bytes offered, in all
        self.ring: BinaryIO | None = None
        self.ring_pos = 0
        self.ring_full = False
        self.failed: str | None = None

    def _fail(self, exc: OSError) -> None:
        if self.failed is None:
            self.failed = exc.strerror or str(exc)
            self.on_error(f"oomdoctor: cannot write {self.path} ({self.failed}); the server's output still passes through, the log stops here")

    def write(self, data: bytes) -> None:
        if self.failed is not None or not data:
            return
        try:
            room = self.keep - self.written
            if room > 0:
                part = data[:room]
                self.head.write(part)
                self.written += len(part)
                data = data[len(part) :]
            if data:
                self._ring_write(data)
        except OSError as exc:
            self._fail(exc)

    def _ring_write(self, data: bytes) -> None:
        if self.ring is None:
            self.ring = self._open(self.path.with_name(f"{OWN_HIDDEN_PREFIX}-{self.path.name}.ring"), "w+b")
        self.written += len(data)
        if len(data) >= self.keep:
            data = data[-self.keep :]
            self.ring.seek(0)
            self.ring.write(data)
            self.ring_pos, self.ring_full = 0, True
            return
        while data:
            n = min(len(data), self.keep - self.ring_pos)
            self.ring.seek(self.ring_pos)
            self.ring.write(data[:n])
            data = data[n:]
            self.ring_pos += n
            if self.ring_pos == self.keep:
                self.ring_pos, self.ring_full = 0, True

    def dropped(self) -> int:
        """Bytes between the head and the ring that the log does not hold."""
        return max(0, self.written - 2 * self.keep)

    def close(self) -> None:
        ring, self.ring = self.ring, None
        try:
            if ring is not None and self.failed is None:
                ring.flush()
                ring.seek(0)
                if self.ring_full:
                    tail = ring.read()
                    tail = tail[self.ring_pos :] + tail[: self.ring_pos]
                else:
                    tail = ring.read(self.ring_pos)
                dropped = self.dropped()
                if dropped:
                    nl = tail.find(b"\n")
                    if 0 <= nl < len(tail) - 1:  # start the kept tail at a whole line
                        dropped += nl + 1
                        tail = tail[nl + 1 :]
                    self.head.write(
                        f"\n[oomdoctor run: {dropped} bytes ({dropped / 1e6:.1f} MB) of server output dropped here; "
                        f"server.log keeps the first and the last {self.keep / 1e6:g} MB (--keep-mb)]\n".encode()
                    )
                self.head.write(tail)
        except OSError as exc:
            self._fail(exc)
        finally:
            if ring is not None:
                with contextlib.suppress(OSError):
                    ring.close()
                with contextlib.suppress(OSError):
                    self.path.with_name(f"{OWN_HIDDEN_PREFIX}-{self.path.name}.ring").unlink()
            try:
                self.head.close()
            except OSError as exc:
                self._fail(exc)


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


def new_run_dir(out: Path, now: float) -> Path:
    """A fresh OUT/<YYYYmmdd-HHMMSS>[-N] directory, created exclusively (concurrent runs get distinct ones)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    for n in range(1, 10000):
        candidate = out / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate
    raise OutputError(f"{out}: cannot create a run directory for {stamp}")


def lock_run_dir(run_dir: Path) -> int:
    """Hold RUN/.oomdoctor-run.lock (fcntl) for the recording; UsageError when another recorder holds it."""
    fd = os.open(run_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise UsageError(f"{run_dir}: another oomdoctor run is recording into this directory") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def point_latest(out: Path, run_dir: Path) -> None:
    """Make OUT/latest a relative symlink to ``run_dir``, replaced atomically (rename over the old link)."""
    tmp = out / f"{OWN_HIDDEN_PREFIX}-{LATEST}.{os.getpid()}.{threading.get_ident()}"
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    try:
        os.symlink(run_dir.name, tmp)
        os.replace(tmp, out / LATEST)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()  # a file system without symlinks: the run directory is still printed


def _discard_run_dir(run_dir: Path) -> None:
    """Remove a run directory this call created and nothing was recorded in (the command did not start)."""
    for name in (LOCK_NAME, "server.log"):
        with contextlib.suppress(OSError):
            (run_dir / name).unlink()
    with contextlib.suppress(OSError):
        run_dir.rmdir()


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
    redact: bool = True,
    oom_kills: Callable[[], tuple[int, str] | None] = procinfo.cgroup_oom_kills,
    keep_mb: float = DEFAULT_KEEP_MB,
    log_opener: Callable[[Path, str], BinaryIO] | None = None,
    textfile_dir: str | None = None,
) -> int:
    """Run ``cmd`` under the recorder in a new run directory under ``out_dir``; return the child's exit code (128+N when killed by signal N).

    ``textfile_dir``: when the server OOMs (or exits abnormally), also write the diagnosis as Prometheus samples to
    ``textfile_dir/oomdoctor.prom`` (node_exporter's textfile collector; replaced atomically).
    """
    root = Path(out_dir)
    try:
        root.mkdir(parents=True, exist_ok=True)
        out = new_run_dir(root, clock())
    except OSError as exc:
        raise OutputError(f"{out_dir}: cannot create the run directory ({exc.strerror or exc})") from None
    lock_fd = lock_run_dir(out)
    try:
        return _record(cmd, root, out, interval_ms, nvml_module, psutil_module, stdout, stderr, keep_samples, clock, redact, oom_kills, int(keep_mb * 1e6), log_opener, textfile_dir)
    finally:
        os.close(lock_fd)  # the lock file stays: removing it would race a recorder that opened it


def _record(
    cmd: list[str],
    root: Path,
    out: Path,
    interval_ms: int,
    nvml_module: Any,
    psutil_module: Any,
    stdout: BinaryIO | None,
    stderr: BinaryIO | None,
    keep_samples: int,
    clock: Callable[[], float],
    redact: bool,
    oom_kills: Callable[[], tuple[int, str] | None],
    keep_bytes: int = DEFAULT_KEEP_MB * 1000 * 1000,
    log_opener: Callable[[Path, str], BinaryIO] | None = None,
    textfile_dir: str | None = None,
) -> int:
    stdout = stdout or sys.stdout.buffer
    stderr = stderr or sys.stderr.buffer
    psutil_module = procinfo.load_psutil(psutil_module)
    nvml = Nvml(nvml_module)
    log = BoundedLog(out / "server.log", keep_bytes, lambda line: _say(stderr, line), log_opener)  # closed below, after both pumps finish
    log_lock = threading.Lock()
    oom_seen = threading.Event()
    snapshot: dict[str, Any] = {}
    kills_before = oom_kills()

    try:
        child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    except OSError as exc:
        log.close()
        _discard_run_dir(out)
        raise InputError(f"cannot start {cmd[0]}: {exc.strerror or exc}") from None
    point_latest(root, out)
    sampler = _Sampler(nvml, max(interval_ms, 10) / 1000, keep_samples, clock) if nvml.start() else None

    def take_snapshot() -> None:
        if snapshot or sampler is None:
            return
        snapshot["gpus"] = procinfo.gpus_with_processes(nvml.gpus(), psutil_module)
        snapshot["t"] = round(clock(), 3)

    started = clock()

    def pump(src: BinaryIO, dst: BinaryIO) -> None:
        tail = b""
        fd = src.fileno()
        while True:
            chunk = os.read(fd, READ_BYTES)
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
    kills_after = oom_kills()
    try:
        if redact:
            try:
                _redact_in_place(out / "server.log")
            except OSError:
                # An unredacted log may hold secrets: it goes rather than stays raw.
                with contextlib.suppress(OSError):
                    (out / "server.log").unlink()
                raise
        host_kill = _host_kill_lines(code, kills_before, kills_after)
        if host_kill:
            (out / RECORDER_LOG).write_text("".join(f"{line}\n" for line in host_kill))
        if oom_seen.is_set() or code != 0 or host_kill:
            if not snapshot:
                take_snapshot()
            _write_bundle(out, cmd, started, clock(), code, sampler, nvml, snapshot, oom_seen.is_set(), kills_before, kills_after)
            _write_report(out, stderr, textfile_dir)
        else:
            _say(stderr, f"oomdoctor: the server exited cleanly; log at {out / 'server.log'}")
    except OSError as exc:
        # Disk full or read-only after the server ran: the exit code is still the server's.
        _say(stderr, f"oomdoctor: cannot write the recording in {out} ({exc.strerror or exc}); the server's exit code is kept")
    if sampler is not None:
        nvml.stop()
    return exit_code


def _redact_in_place(path: Path) -> None:
    """Replace the raw tee with its redacted copy (a temporary file renamed over it); bytes of lines without secrets are kept."""
    from oomdoctor.redact import redact_text

    tmp = path.with_name(f"{OWN_HIDDEN_PREFIX}-{path.name}.redacting")
    try:
        with open(path, "rb") as src, open(tmp, "wb") as dst:
            while True:
                line = src.readline(1 << 20)
                if not line:
                    break
                text = line.decode("utf-8", "surrogateescape")
                red = redact_text(text)
                dst.write(line if red == text else red.encode("utf-8", "surrogateescape"))
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _host_kill_lines(code: int, before: tuple[int, str] | None, after: tuple[int, str] | None) -> list[str]:
    """Lines, in words the host-OOM rules read (torch_oom's host patterns), for a SIGKILL and a cgroup OOM kill."""
    lines: list[str] = []
    if code in (-signal.SIGKILL, 128 + signal.SIGKILL):
        how = "was killed by signal 9 (SIGKILL)" if code < 0 else "exited with status 137 (128 + SIGKILL)"
        lines.append(f"oomdoctor run: the server {how}: exited with code 137, the kernel OOM killer's signature (or another sender of SIGKILL)")
    if before is not None and after is not None and after[0] > before[0]:
        lines.append(f"oomdoctor run: Memory cgroup out of memory: oom-kill: {after[1]} oom_kill went from {before[0]} to {after[0]} while the server ran")
    return lines


def _say(stderr: BinaryIO, line: str) -> None:
    from oomdoctor.cli import escape_controls

    stderr.write((escape_controls(line) + "\n").encode("utf-8", "replace"))
    stderr.flush()


def _write_bundle(
    out: Path,
    cmd: list[str],
    started: float,
    ended: float,
    code: int,
    sampler: _Sampler | None,
    nvml: Nvml,
    snapshot: dict[str, Any],
    oom: bool,
    kills_before: tuple[int, str] | None = None,
    kills_after: tuple[int, str] | None = None,
) -> None:
    from oomdoctor.redact import redact_text

    unavailable = None if sampler is not None else (nvml.available.reason if nvml.available is not None else "NVML unavailable")
    manifest = {
        **manifest_header("run"),
        "command": redact_text(" ".join(cmd)),
        "started_unix": round(started, 3),
        "ended_unix": round(ended, 3),
        "child_exit_code": code,
        "killed_by_signal": -code if code < 0 else None,
        "cgroup_oom_kills": None if kills_before is None or kills_after is None else {"before": kills_before[0], "after": kills_after[0], "source": kills_after[1]},
        "oom_seen": oom,
        "gpu_evidence": {"source": "nvml" if sampler is not None else None, "unavailable": unavailable, "errors": nvml.errors},
        "gpus": snapshot.get("gpus", []),
        "snapshot_unix": snapshot.get("t"),
        "logs": ["server.log", *([RECORDER_LOG] if (out / RECORDER_LOG).exists() else [])],
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    samples = list(sampler.samples) if sampler is not None else []
    (out / "samples.json").write_text(json.dumps({"kind": SAMPLES_KIND, "interval_s": sampler.interval_s if sampler else None, "samples": samples, "unavailable": unavailable}, sort_keys=True) + "\n")


TEXTFILE_NAME = "oomdoctor.prom"


def _write_report(out: Path, stderr: BinaryIO, textfile_dir: str | None = None) -> None:
    from oomdoctor.api import diagnose, load_rules
    from oomdoctor.errors import OomdoctorError
    from oomdoctor.render import html, json_out
    from oomdoctor.view import build_view

    try:
        rules = load_rules()
        view = build_view(diagnose([str(out)], rules=rules))
        (out / "report.html").write_text(html.render(view, {r.id: r.docs for r in rules}))
        (out / "diagnosis.json").write_text(json_out.render(view))
        note = f"oomdoctor: {view['verdict']['class']}: {_first_change(view)}report at {out / 'report.html'}"
    except OomdoctorError as exc:
        _say(stderr, f"oomdoctor: no report: {exc}")
        return
    _say(stderr, note)
    if textfile_dir is not None:
        _write_textfile(view, Path(textfile_dir), stderr)


def _write_textfile(view: dict[str, Any], directory: Path, stderr: BinaryIO) -> None:
    """The diagnosis as samples for node_exporter's textfile collector (atomic); a failure is said, never raised."""
    from oomdoctor.render import prometheus

    path = directory / TEXTFILE_NAME
    try:
        directory.mkdir(parents=True, exist_ok=True)
        prometheus.write_textfile(view, str(path))
    except (OSError, RuntimeError) as exc:
        _say(stderr, f"oomdoctor: cannot write {path} ({getattr(exc, 'strerror', None) or exc})")
        return
    _say(stderr, f"oomdoctor: fleet samples at {path}")


def _first_change(view: dict[str, Any]) -> str:
    """The verdict's first flag change, worded as the text report words it ("raise --x from 0.7 to 0.85; "), or ""."""
    from oomdoctor.render.text import recommendation_head

    for finding in view.get("findings", [])[:1]:
        for rec in finding.get("recommendations", []):
            if rec.get("flag"):
                return f"{recommendation_head(rec)}; "
    return ""

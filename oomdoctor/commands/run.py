"""`oomdoctor run -- <server command>`: a flight recorder around the server.

Every run gets its own directory, OUT/<YYYYmmdd-HHMMSS>[-N]/, created exclusively (a second run into
the same OUT never touches an earlier run's files) and locked with fcntl while it records; OUT/latest
is a symlink to the newest one, replaced atomically. The child's stdout and stderr pass through byte
for byte (and are teed to RUN/server.log, redacted as it is written unless ``redact=False``, so a
secret never reaches the disk); NVML is sampled into a ring buffer at a bounded rate (no CUDA context); when the
child prints an OOM or exits abnormally, the processes are snapshotted at once and RUN gets a bundle
(log, samples, snapshot) and the diagnosis report. A child killed by SIGKILL (exit 137, -9: the
kernel OOM killer's signature) and a rise of the memory cgroup's OOM-kill counter are written to
RUN/recorder.log in words the host-OOM rules read. The server runs in a process group of its own: the
wrapper forwards SIGINT/SIGTERM/SIGHUP/SIGQUIT to that group (the server and every worker it started,
also after the server itself died), takes SIGUSR1/SIGUSR2 without forwarding them (their default
action would end the wrapper, and the server with its pipes), never kills the child, and exits with
the child's own code. (In a terminal the server is so a background job: Ctrl-Z stops the wrapper
alone, and a server that read the terminal would be stopped; servers read none.) A server's death
ends the recording: its pipes are drained while output still comes (a worker of a dead server can hold
them open for as long as it lives), then the report is written; after a clean exit they are read until
they close, as a launcher that leaves the server running needs. When the recorder's own stdout or stderr goes away (a closed pipe, a terminal that hung up),
the server's output on it is dropped, the recorder says so once and keeps recording: killing the
server for want of a reader would lose what it was recording. The pass-through never waits for the
log: when its writer falls behind, what it had no room for is a counted gap in server.log.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, cast

from oomdoctor.base.errors import InputError, OutputError, UsageError
from oomdoctor.commands.run_log import BoundedLog, LogTee
from oomdoctor.commands.run_pumps import Passthrough, Pumps
from oomdoctor.evidence.collected import manifest_header
from oomdoctor.input.files import OWN_HIDDEN_PREFIX
from oomdoctor.input.redact import Redactor
from oomdoctor.live import procinfo
from oomdoctor.live.nvml import Nvml
from oomdoctor.live.sampling import Sampler, Snapshot

SAMPLES_KIND = "oomdoctor-samples"
LOCK_NAME = f"{OWN_HIDDEN_PREFIX}-run.lock"
LATEST = "latest"
RECORDER_LOG = "recorder.log"
# server.log keeps the first and the last this many MB (the startup evidence and the failure).
DEFAULT_KEEP_MB = 64
# Sent on to the server's process group. QUIT too: in a process group of its own, the server no longer
# gets a terminal's Ctrl-\ itself.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
# Neither forwarded nor fatal: by default they end a process, and the wrapper's end would take the server's pipes.
UNFORWARDED = (signal.SIGUSR1, signal.SIGUSR2)
# After the server's exit the pipes are read until they end, or stay quiet this long, or at most this long.
DRAIN_QUIET_S = 1.0
DRAIN_MOST_S = 10.0
# The server's own process group (setpgid in the child before exec; Python 3.10 has no process_group).
_OWN_GROUP: dict[str, Any] = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}


def _default_stream(name: str) -> BinaryIO | None:
    """sys.stdout.buffer / sys.stderr.buffer, or None when Python started with that descriptor closed."""
    stream = getattr(sys, name)
    return None if stream is None else cast(BinaryIO, stream.buffer)


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


class _Signals:
    """The wrapper's signal handlers for one recording (main thread only: Python handles signals there).

    Installed before the server starts, so that a signal in the first moments neither ends the wrapper
    nor is lost: one that comes before the server has a process group is sent on as soon as it has one.
    """

    def __init__(self) -> None:
        self.group: int | None = None
        self.early: list[int] = []
        self.unforwarded: list[str] = []
        self.previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in FORWARDED:
                self.previous[sig] = signal.signal(sig, self._forward)
            for sig in UNFORWARDED:
                self.previous[sig] = signal.signal(sig, self._unforwarded)

    def _forward(self, signum: int, frame: Any) -> None:
        if self.group is None:
            self.early.append(signum)
            return
        # The group outlives its leader while a worker is left in it (the kernel hands out no id a group still
        # has); once it is empty, the signal finds no one.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.group, signum)

    def _unforwarded(self, signum: int, frame: Any) -> None:
        self.unforwarded.append(signal.Signals(signum).name)  # said after the recording: a handler writes nothing

    def started(self, pid: int) -> None:
        self.group = pid
        for signum in self.early:
            self._forward(signum, None)

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


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
    ``textfile_dir/oomdoctor-<server>.prom`` (node_exporter's textfile collector; replaced atomically; ``server_identity``).
    """
    root = Path(out_dir)
    try:
        root.mkdir(parents=True, exist_ok=True)
        out = new_run_dir(root, clock())
    except OSError as exc:
        raise OutputError(f"{out_dir}: cannot create the run directory ({exc.strerror or exc})") from None
    lock_fd = lock_run_dir(out)
    signals = _Signals()  # until the report is written: a TERM then is the server's, not the end of the wrapper
    try:
        return _record(cmd, root, out, signals, interval_ms, nvml_module, psutil_module, stdout, stderr, keep_samples, clock, redact, oom_kills, int(keep_mb * 1e6), log_opener, textfile_dir)
    finally:
        signals.restore()
        os.close(lock_fd)  # the lock file stays: removing it would race a recorder that opened it


def _record(
    cmd: list[str],
    root: Path,
    out: Path,
    signals: _Signals,
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
    if stdout is None:
        stdout = _default_stream("stdout")
    if stderr is None:
        stderr = _default_stream("stderr")
    nvml = Nvml(nvml_module)
    log = BoundedLog(out / "server.log", keep_bytes, lambda line: _say(stderr, line), log_opener)  # closed below, after both pumps finish
    kills_before = oom_kills()

    try:
        child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0, **_OWN_GROUP)
    except OSError as exc:
        log.close()
        _discard_run_dir(out)
        raise InputError(f"cannot start {cmd[0]}: {exc.strerror or exc}") from None
    signals.started(child.pid)
    point_latest(root, out)
    tee = LogTee(log, Redactor() if redact else None)  # closes the log
    sinks = (Passthrough(stdout, "stdout", lambda line: _say(stderr, line)), Passthrough(stderr, "stderr", lambda line: _say(stderr, line)))
    sampler = Sampler(nvml, max(interval_ms, 10) / 1000, keep_samples, clock) if nvml.start() else None
    # After the start, and only with NVML: psutil describes the processes of the snapshot, which NVML alone takes.
    snapshot = Snapshot(nvml, procinfo.load_psutil(psutil_module) if sampler is not None else None, clock, enabled=sampler is not None)

    started = clock()
    pumps = Pumps((cast(BinaryIO, child.stdout), cast(BinaryIO, child.stderr)), sinks, tee.put, snapshot.take_at_oom)
    if sampler is not None:
        sampler.start()
    live = None
    if sampler is not None and textfile_dir is not None:
        from oomdoctor.report.render.prometheus import textfile_name

        server = server_identity(cmd, root)
        live = GrowthExport(sampler, Path(textfile_dir) / textfile_name(server), server, stderr)
        live.start()
    pumps.start()
    try:
        while True:
            try:
                code = child.wait()
                break
            except KeyboardInterrupt:
                continue  # the default handler's (a recorder not on the main thread): keep waiting for the child
        # A server that died (a signal, a failure) and left a worker holding its pipes: the recording ends once they are
        # quiet. One that exited cleanly with its pipes still held is a launcher that left the server running (a script
        # that backgrounds it): recorded until they close, as ever, since the wrapper's exit would take its reader away.
        if code == 0:
            pumps.drain(float("inf"), float("inf"))
        elif not pumps.drain(DRAIN_QUIET_S, DRAIN_MOST_S):
            _say(stderr, "oomdoctor: the server exited, but a process it started still holds the server's output; server.log has what it wrote until it fell quiet")
    finally:
        if live is not None:
            live.stop_event.set()
        if sampler is not None:
            sampler.stop_event.set()
            sampler.join(timeout=5)
        tee.close()
    for name in dict.fromkeys(signals.unforwarded):
        _say(stderr, f"oomdoctor: {name} was not forwarded to the server (only {', '.join(signal.Signals(s).name for s in FORWARDED)} are)")
    if tee.gaps:
        _say(
            stderr,
            f"oomdoctor: the recorder fell behind the server: {tee.gap_bytes} bytes of its output are not in {out / 'server.log'} "
            f"({tee.gaps} gap(s), each marked there); they passed through",
        )
    exit_code = code if code >= 0 else 128 - code
    kills_after = oom_kills()
    try:
        host_kill = _host_kill_lines(code, kills_before, kills_after)
        if host_kill:
            (out / RECORDER_LOG).write_text("".join(f"{line}\n" for line in host_kill))
        failed = bool(pumps.oom_seen.is_set() or code != 0 or host_kill)
        if live is not None:
            live.finish(keep=failed)
        if failed:
            snapshot.take()  # a no-op when the OOM line already took it
            _write_bundle(out, cmd, started, clock(), code, sampler, nvml, snapshot.data, pumps.oom_seen.is_set(), kills_before, kills_after, (tee.gaps, tee.gap_bytes))
            _write_report(out, stderr, textfile_dir, server_identity(cmd, root))
        else:
            _say(stderr, f"oomdoctor: the server exited cleanly; log at {out / 'server.log'}")
    except OSError as exc:
        # Disk full or read-only after the server ran: the exit code is still the server's.
        _say(stderr, f"oomdoctor: cannot write the recording in {out} ({exc.strerror or exc}); the server's exit code is kept")
    if sampler is not None:
        nvml.stop()
    return exit_code


def _host_kill_lines(code: int, before: tuple[int, str] | None, after: tuple[int, str] | None) -> list[str]:
    """Lines, in words the host-OOM rules read (torch_oom's host patterns), for a SIGKILL and a cgroup OOM kill."""
    lines: list[str] = []
    if code in (-signal.SIGKILL, 128 + signal.SIGKILL):
        how = "was killed by signal 9 (SIGKILL)" if code < 0 else "exited with status 137 (128 + SIGKILL)"
        lines.append(f"oomdoctor run: the server {how}: exited with code 137, the kernel OOM killer's signature (or another sender of SIGKILL)")
    if before is not None and after is not None and after[0] > before[0]:
        lines.append(f"oomdoctor run: Memory cgroup out of memory: oom-kill: {after[1]} oom_kill went from {before[0]} to {after[0]} while the server ran")
    return lines


def _say(stderr: BinaryIO | None, line: str) -> None:
    """One line on the recorder's stderr; nothing when that is gone (the recording goes on without it)."""
    from oomdoctor.report.console import escape_controls

    if stderr is None:
        return
    with contextlib.suppress(OSError, ValueError):
        stderr.write((escape_controls(line) + "\n").encode("utf-8", "replace"))
        stderr.flush()


def _write_bundle(
    out: Path,
    cmd: list[str],
    started: float,
    ended: float,
    code: int,
    sampler: Sampler | None,
    nvml: Nvml,
    snapshot: dict[str, Any],
    oom: bool,
    kills_before: tuple[int, str] | None = None,
    kills_after: tuple[int, str] | None = None,
    log_gaps: tuple[int, int] = (0, 0),
) -> None:
    from oomdoctor.input.redact import redact_text

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
        # Output the recorder had no room for (its log writer fell behind): not in server.log, marked there.
        "log_gaps": {"count": log_gaps[0], "bytes": log_gaps[1]},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    samples = list(sampler.samples) if sampler is not None else []
    (out / "samples.json").write_text(json.dumps({"kind": SAMPLES_KIND, "interval_s": sampler.interval_s if sampler else None, "samples": samples, "unavailable": unavailable}, sort_keys=True) + "\n")


# How often `run --textfile` refits the samples while the server is up (the leak alert's resolution).
GROWTH_EXPORT_S = 30.0


class GrowthExport(threading.Thread):
    """While the server runs, the memory-growth gauges from the sampler's ring buffer, rewritten every ``every_s``.

    An alert on ``oomdoctor_projected_full_seconds`` fires before the OOM, not after. The file is the one the
    diagnosis replaces at a failure; on a clean exit it is removed (the server it describes is gone). A
    write that fails is said once and the recording goes on.
    """

    def __init__(self, sampler: Sampler, path: Path, server: str, stderr: BinaryIO | None, every_s: float | None = None) -> None:
        super().__init__(daemon=True)
        self.sampler, self.path, self.server, self.stderr = sampler, path, server, stderr
        self.every_s = GROWTH_EXPORT_S if every_s is None else every_s
        self.stop_event = threading.Event()
        self.written = False
        self._said = False

    def export(self) -> None:
        from oomdoctor.memory import growth
        from oomdoctor.report.render import prometheus

        with self.sampler.lock:
            samples = list(self.sampler.samples)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            prometheus.write_growth_textfile(growth.growth(samples), str(self.path), self.server)
            self.written = True
        except (OSError, RuntimeError) as exc:
            if not self._said:
                self._said = True
                _say(self.stderr, f"oomdoctor: cannot write {self.path} ({getattr(exc, 'strerror', None) or exc})")

    def run(self) -> None:
        while not self.stop_event.wait(self.every_s):
            self.export()

    def finish(self, keep: bool) -> None:
        """Stop; unless ``keep`` (the diagnosis is about to replace it), remove the live file."""
        self.stop_event.set()
        if self.is_alive():
            self.join(timeout=5)
        if not keep and self.written:
            with contextlib.suppress(OSError):
                self.path.unlink()


def server_identity(cmd: list[str], root: Path) -> str:
    """Which server a textfile is for: ``port-N`` from the command's ``--port N`` (two servers on a node listen
    on two ports), else the recording root's name (``--out``)."""
    for i, arg in enumerate(cmd):
        if arg == "--port" and i + 1 < len(cmd) and cmd[i + 1].isdigit():
            return f"port-{cmd[i + 1]}"
        if arg.startswith("--port=") and arg[7:].isdigit():
            return f"port-{arg[7:]}"
    return root.resolve().name or "server"


def _write_report(out: Path, stderr: BinaryIO | None, textfile_dir: str | None = None, server: str = "server") -> None:
    from oomdoctor.api import diagnose, load_rules
    from oomdoctor.base.errors import OomdoctorError
    from oomdoctor.report.console import safe_output
    from oomdoctor.report.render import html, json_out
    from oomdoctor.report.view import build_view

    try:
        rules = load_rules()
        view = build_view(diagnose([str(out)], rules=rules))
        (out / "report.html").write_text(safe_output("html", html.render(view, {r.id: r.docs for r in rules})))  # as diagnose's: no raw escape
        (out / "diagnosis.json").write_text(safe_output("json", json_out.render(view)))
        note = f"oomdoctor: {view['verdict']['class']}: {_first_change(view)}report at {out / 'report.html'}"
    except OomdoctorError as exc:
        _say(stderr, f"oomdoctor: no report: {exc}")
        return
    _say(stderr, note)
    if textfile_dir is not None:
        _write_textfile(view, Path(textfile_dir), stderr, server)


def _write_textfile(view: dict[str, Any], directory: Path, stderr: BinaryIO | None, server: str = "server") -> None:
    """The diagnosis as samples for node_exporter's textfile collector (atomic); a failure is said, never raised."""
    from oomdoctor.commands.diagnose import dating_of
    from oomdoctor.report.render import prometheus

    path = directory / prometheus.textfile_name(server)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        prometheus.write_textfile(view, str(path), server, *dating_of(view))
    except (OSError, RuntimeError) as exc:
        _say(stderr, f"oomdoctor: cannot write {path} ({getattr(exc, 'strerror', None) or exc})")
        return
    _say(stderr, f"oomdoctor: fleet samples at {path}")


def _first_change(view: dict[str, Any]) -> str:
    """The verdict's first flag change, worded as the text report words it ("raise --x from 0.7 to 0.85; "), or ""."""
    from oomdoctor.report.render.text import recommendation_head

    for finding in view.get("findings", [])[:1]:
        for rec in finding.get("recommendations", []):
            if rec.get("flag"):
                return f"{recommendation_head(rec)}; "
    return ""

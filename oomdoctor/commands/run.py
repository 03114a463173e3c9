"""`oomdoctor run -- <server command>`: a flight recorder around the server.

Every run gets its own directory, OUT/<YYYYmmdd-HHMMSS>[-N]/, created exclusively (a second run into
the same OUT never touches an earlier run's files) and locked with fcntl while it records; OUT/latest
is a symlink to the newest one, replaced atomically. The child's stdout and stderr pass through byte
for byte (and are teed to RUN/server.log, redacted as it is written unless ``redact=False``, so a
secret never reaches the disk); NVML is sampled into a ring buffer at a bounded rate (no CUDA context); when the
child prints an OOM or exits abnormally, the processes are snapshotted at once and RUN gets a bundle
(log, samples, snapshot) and the diagnosis report. A child killed by SIGKILL (exit 137, -9: the
kernel OOM killer's signature) and a rise of the memory cgroup's OOM-kill counter are written to
RUN/recorder.log in words the host-OOM rules read. The wrapper forwards SIGINT/SIGTERM/SIGHUP, never
kills the child, and exits with the child's own code. When the recorder's own stdout or stderr goes
away (a closed pipe, a terminal that hung up), the server's output on it is dropped, the recorder says
so once and keeps recording: killing the server for want of a reader would lose what it was recording.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import queue
import select
import signal
import subprocess
import sys
import termios
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, cast

from oomdoctor.base.errors import InputError, OutputError, UsageError
from oomdoctor.evidence.collected import manifest_header
from oomdoctor.input.files import OWN_HIDDEN_PREFIX
from oomdoctor.input.redact import Redactor
from oomdoctor.input.scan import choose
from oomdoctor.live import procinfo
from oomdoctor.live.nvml import Nvml

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
# The child's pipes are grown to this (Linux, best effort; 1 MiB is the default pipe-max-size), and after
# a read that did not find the pipe full a pump waits (PAUSE_S at most) before the next: a chatty server
# then fills the pipe for a few ms and a read takes hundreds of KB, instead of the pump waking on every
# write of the server (a logger writes each line). A reader woken per write (`| cat` here) made the chatty
# benchmark server 2x slower than writing to /dev/null; the recorder without the pause, 1.2x; with it, 1.1x.
# The pause shrinks (to PAUSE_MIN_S) for a server that would fill the pipe sooner. A quiet server's line
# still passes at once: a pump blocked in read returns as soon as it is written; only a line that follows
# another within the pause waits, at most that long.
PIPE_BYTES = 1 << 20
PAUSE_S = 0.004
PAUSE_MIN_S = 0.0005
# Chunks waiting for the log writer; when it falls this far behind, the pumps (and so the server) wait.
QUEUE_CHUNKS = 16
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
                # The ring in order: from the oldest byte to its end, then from its start.
                pos = self.ring_pos
                spans = [(pos, self.keep - pos), (0, pos)] if self.ring_full else [(0, pos)]
                dropped = self.dropped()
                if dropped:
                    skip = _first_line_end(ring, spans)  # start the kept tail at a whole line
                    dropped += skip
                    spans = _after(spans, skip)
                    self.head.write(
                        f"\n[oomdoctor run: {dropped} bytes ({dropped / 1e6:.1f} MB) of server output dropped here; "
                        f"server.log keeps the first and the last {self.keep / 1e6:g} MB (--keep-mb)]\n".encode()
                    )
                for offset, size in spans:
                    _copy(ring, self.head, offset, size)
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


_BLOCK = 1 << 20


def _first_line_end(f: BinaryIO, spans: list[tuple[int, int]]) -> int:
    """Bytes of ``spans`` of ``f`` up to and including the first newline; 0 when none or when it is the last byte."""
    total = sum(size for _, size in spans)
    seen = 0
    for offset, size in spans:
        for at in range(offset, offset + size, _BLOCK):
            f.seek(at)
            block = f.read(min(_BLOCK, offset + size - at))
            nl = block.find(b"\n")
            if nl >= 0:
                end = seen + nl + 1
                return end if end < total else 0
            seen += len(block)
    return 0


def _after(spans: list[tuple[int, int]], skip: int) -> list[tuple[int, int]]:
    """``spans`` without their first ``skip`` bytes."""
    out = []
    for offset, size in spans:
        cut = min(skip, size)
        skip -= cut
        if size > cut:
            out.append((offset + cut, size - cut))
    return out


def _copy(src: BinaryIO, dst: BinaryIO, offset: int, size: int) -> None:
    """Append ``size`` bytes of ``src`` from ``offset`` to ``dst``: in the kernel (copy_file_range) where both are files, else in 1 MiB blocks."""
    try:
        fds: tuple[int, int] | None = (src.fileno(), dst.fileno())
    except (OSError, ValueError):  # io.UnsupportedOperation is both: not a real file (tests)
        fds = None
    if fds is not None and hasattr(os, "copy_file_range"):
        try:
            while size > 0:
                n = os.copy_file_range(fds[0], fds[1], size, offset)
                if n <= 0:
                    break
                offset, size = offset + n, size - n
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM):
                raise
        if size <= 0:
            return
    while size > 0:
        src.seek(offset)
        block = src.read(min(_BLOCK, size))
        if not block:
            return
        dst.write(block)
        offset, size = offset + len(block), size - len(block)


class _LogTee:
    """What the pumps hand RUN/server.log: whole lines in the order they completed, redacted in flight, written by a thread of its own.

    ``put`` only queues the chunk, so the pumps go back to the child's pipes at once. With a
    ``redactor``, each stream's chunks are cut at their last newline and the unfinished line is carried
    to that stream's next chunk, so every line is redacted whole (``Redactor.log_bytes``: the prefilter
    finds the few lines that can hold a secret, one redactor for the whole run keeps PEM blocks that
    span lines and chunks). Each stream keeps its own unfinished line, so the log holds whole lines in
    the order they were completed: a line the other stream cut in two on the terminal is whole in the
    log, and a secret split around such a write is still redacted (a fresh-eyes review found the
    earlier arrival-order flush writing one in clear). A line longer than ``READ_BYTES`` is redacted in
    pieces of that size (the post-exit pass this replaces read lines the same way). ``close`` writes
    what is left and closes the log. If redaction itself ever failed, the log would stop there rather
    than take a line unredacted.
    """

    def __init__(self, log: BoundedLog, redactor: Redactor | None) -> None:
        self.log, self.redactor = log, redactor
        self.carry: dict[int, bytes] = {}  # per stream: its unfinished line
        self.broken: str | None = None
        self.queue: queue.Queue[tuple[int, bytes] | None] = queue.Queue(maxsize=QUEUE_CHUNKS)
        self.thread = threading.Thread(target=self._drain, name="oomdoctor-server-log", daemon=True)
        self.thread.start()

    def put(self, stream: int, chunk: bytes) -> None:
        self.queue.put((stream, chunk))

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()
        try:
            for stream in sorted(self.carry):
                if self.carry[stream] and self.broken is None:
                    self._write(self.carry[stream])
        except Exception as exc:  # noqa: BLE001 - see _drain
            self._stop(exc)
        self.carry = {}
        self.log.close()

    def _drain(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                return
            if self.broken is not None:
                continue  # keep taking chunks, so that the pumps never wait on a writer that stopped
            try:
                self._take(*item)
            except Exception as exc:  # noqa: BLE001 - a bug in redaction must not stop the pass-through nor let raw lines in
                self._stop(exc)

    def _stop(self, exc: Exception) -> None:
        self.broken = f"{type(exc).__name__}: {exc}"
        self.log.on_error(f"oomdoctor: redacting {self.log.path} failed ({self.broken}); the log stops here, the server's output still passes through")
        self.log.failed = self.log.failed or self.broken

    def _take(self, stream: int, chunk: bytes) -> None:
        if self.redactor is None:
            self.log.write(chunk)
            return
        held = self.carry.get(stream, b"")
        data = held + chunk if held else chunk
        cut = data.rfind(b"\n") + 1
        while len(data) - cut >= READ_BYTES:  # a line without end: in pieces
            cut += READ_BYTES
        if cut:
            self._write(data[:cut] if cut < len(data) else data)
        self.carry[stream] = data[cut:]

    def _write(self, data: bytes) -> None:
        assert self.redactor is not None
        self.log.write(self.redactor.log_bytes(data))


class _Passthrough:
    """The recorder's stdout or stderr as the server sees it: every chunk written whole, until the reader goes away.

    A real file descriptor is written with ``os.write`` (nothing is left in a Python buffer to fail again
    at exit); a file object without one (tests) with ``write``. The first write that fails (EPIPE from a
    closed pipe, EIO from a terminal that hung up, a closed file) ends the pass-through of this stream:
    ``on_error`` is called once and later chunks are dropped, while the log keeps recording them.
    """

    def __init__(self, dst: BinaryIO | None, name: str, on_error: Callable[[str], None]) -> None:
        self.dst, self.name, self.on_error = dst, name, on_error
        self.failed = False
        self.fd: int | None = None
        if dst is None:
            self._fail("it is closed")
            return
        try:
            dst.flush()
            self.fd = dst.fileno()
        except (OSError, ValueError):  # io.UnsupportedOperation is both
            self.fd = None

    def _fail(self, why: str) -> None:
        if not self.failed:
            self.failed = True
            self.on_error(f"oomdoctor: cannot write the server's {self.name} ({why}); the server keeps running and server.log keeps recording it")

    def write(self, data: bytes) -> None:
        if self.failed:
            return
        try:
            if self.fd is None:
                assert self.dst is not None
                self.dst.write(data)
                self.dst.flush()
                return
            view = memoryview(data)
            while view:
                try:
                    view = view[os.write(self.fd, view) :]
                except BlockingIOError:  # a non-blocking descriptor someone else set up: wait until it drains
                    select.select([], [self.fd], [])
        except (OSError, ValueError) as exc:
            self._fail(getattr(exc, "strerror", None) or str(exc))


def _grow_pipe(fd: int) -> int:
    """The pipe's buffer in bytes after growing it to PIPE_BYTES (Linux's F_SETPIPE_SZ, best effort; 64 KiB where unknown)."""
    with contextlib.suppress(OSError, AttributeError):
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    try:
        return int(fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ))
    except (OSError, AttributeError):
        return 1 << 16


def _pending(fd: int) -> int:
    """Bytes waiting in a pipe (FIONREAD), 0 where that cannot be asked."""
    try:
        return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, bytes(4)), sys.byteorder, signed=True)
    except OSError:
        return 0


def _default_stream(name: str) -> BinaryIO | None:
    """sys.stdout.buffer / sys.stderr.buffer, or None when Python started with that descriptor closed."""
    stream = getattr(sys, name)
    return None if stream is None else cast(BinaryIO, stream.buffer)


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
    if stdout is None:
        stdout = _default_stream("stdout")
    if stderr is None:
        stderr = _default_stream("stderr")
    nvml = Nvml(nvml_module)
    log = BoundedLog(out / "server.log", keep_bytes, lambda line: _say(stderr, line), log_opener)  # closed below, after both pumps finish
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
    psutil_module = procinfo.load_psutil(psutil_module)  # after the start: importing psutil need not delay the server
    tee = _LogTee(log, Redactor() if redact else None)  # closes the log
    sinks = (_Passthrough(stdout, "stdout", lambda line: _say(stderr, line)), _Passthrough(stderr, "stderr", lambda line: _say(stderr, line)))
    sampler = _Sampler(nvml, max(interval_ms, 10) / 1000, keep_samples, clock) if nvml.start() else None

    def take_snapshot() -> None:
        if snapshot or sampler is None:
            return
        snapshot["gpus"] = procinfo.gpus_with_processes(nvml.gpus(), psutil_module)
        snapshot["t"] = round(clock(), 3)

    started = clock()

    fds = [cast(BinaryIO, child.stdout).fileno(), cast(BinaryIO, child.stderr).fileno()]
    tails = [b"", b""]
    order = threading.Lock()  # one chunk at a time goes to the terminal, the trigger check and the log
    pausing = [False, False]  # a pump in its pause: its pipe may hold output the other pump must not overtake

    def emit(stream: int, chunk: bytes) -> None:
        sinks[stream].write(chunk)  # the server's reader first
        tail = tails[stream]
        if not oom_seen.is_set() and (_has_trigger(tail + chunk[:_OVERLAP]) or _has_trigger(chunk)):
            oom_seen.set()
            # The process list now, while the other process that caused it may still be there.
            try:
                take_snapshot()
            except Exception:  # noqa: BLE001 - the pump must go on (a stopped pump would block the server); the bundle retries
                snapshot.clear()
        tails[stream] = chunk[-_OVERLAP:] if len(chunk) >= _OVERLAP else (tail + chunk)[-_OVERLAP:]
        tee.put(stream, chunk)

    def pump(stream: int) -> None:
        """One pipe, read with blocking reads (never poll: a pipe once polled wakes its reader on every write, ~3%
        of a chatty server's time here), pausing (up to PAUSE_S) after a read that did not find it full.

        The pipe is read with a blocking read only when it was found empty; after a pause, what it
        gathered is read (FIONREAD says how much, so that read cannot block) and emitted while the pump
        still counts as pausing. A pump whose blocking read returns while the other pump pauses first
        takes what the other pipe holds: the server wrote that during the pause, before this chunk. So
        stdout and stderr keep their order in server.log as they did without the pause.
        """
        fd, other = fds[stream], 1 - stream
        full = min(_grow_pipe(fd), READ_BYTES)
        pause = PAUSE_S
        while True:
            chunk = os.read(fd, READ_BYTES)
            if not chunk:
                return
            with order:
                if pausing[other]:
                    waiting = _pending(fds[other])
                    if waiting:
                        emit(other, os.read(fds[other], min(waiting, READ_BYTES)))
                emit(stream, chunk)
                pausing[stream] = len(chunk) < full  # a full pipe: the server may be waiting on it, read again at once
            while pausing[stream]:
                time.sleep(pause)  # let the pipe fill (PIPE_BYTES)
                with order:
                    waiting = _pending(fd)
                    if waiting:
                        emit(stream, os.read(fd, min(waiting, READ_BYTES)))
                    pausing[stream] = 0 < waiting < full
                # The next pause as long as the server, at this pace, takes to fill half the pipe (at most PAUSE_S):
                # a server faster than a pipe per PAUSE_S must not wait on a full one.
                pause = min(PAUSE_S, max(PAUSE_MIN_S, pause * (full / 2) / waiting)) if waiting else PAUSE_S

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
    pumps = [threading.Thread(target=pump, args=(stream,), daemon=True, name=f"oomdoctor-pump-{stream}") for stream in (0, 1)]
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
        tee.close()
    exit_code = code if code >= 0 else 128 - code
    kills_after = oom_kills()
    try:
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


def _has_trigger(data: bytes) -> bool:
    """Whether ``data`` holds one of TRIGGERS: one multi-literal pass (scan.py's backend for its size: hyperscan, RE2, find)."""
    return bool(choose(TRIGGERS, len(data)).anchored_lines(data)) if len(data) > 4 * _OVERLAP else any(t in data for t in TRIGGERS)


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
    sampler: _Sampler | None,
    nvml: Nvml,
    snapshot: dict[str, Any],
    oom: bool,
    kills_before: tuple[int, str] | None = None,
    kills_after: tuple[int, str] | None = None,
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
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    samples = list(sampler.samples) if sampler is not None else []
    (out / "samples.json").write_text(json.dumps({"kind": SAMPLES_KIND, "interval_s": sampler.interval_s if sampler else None, "samples": samples, "unavailable": unavailable}, sort_keys=True) + "\n")


TEXTFILE_NAME = "oomdoctor.prom"


def _write_report(out: Path, stderr: BinaryIO | None, textfile_dir: str | None = None) -> None:
    from oomdoctor.api import diagnose, load_rules
    from oomdoctor.base.errors import OomdoctorError
    from oomdoctor.report.render import html, json_out
    from oomdoctor.report.view import build_view

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


def _write_textfile(view: dict[str, Any], directory: Path, stderr: BinaryIO | None) -> None:
    """The diagnosis as samples for node_exporter's textfile collector (atomic); a failure is said, never raised."""
    from oomdoctor.report.render import prometheus

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
    from oomdoctor.report.render.text import recommendation_head

    for finding in view.get("findings", [])[:1]:
        for rec in finding.get("recommendations", []):
            if rec.get("flag"):
                return f"{recommendation_head(rec)}; "
    return ""

"""The pumps of `oomdoctor run`: the server's stdout and stderr read, passed through, checked for an OOM line and handed to the log."""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import sys
import termios
import threading
import time
from collections.abc import Callable
from typing import BinaryIO

from oomdoctor.base.oom_words import FAILURE_WORDS
from oomdoctor.input.scan_backends import choose

# What in the child's output means "an OOM happened now" (checked on raw bytes, across chunk edges).
TRIGGERS = FAILURE_WORDS
_OVERLAP = max(len(t) for t in TRIGGERS)
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


def _chunk_check() -> Callable[[bytes], bool]:
    """Whether a chunk holds one of TRIGGERS: one multi-literal pass (scan.py's backend: hyperscan, RE2, find), chosen
    once per recording (a pump checks hundreds of chunks a second); a few bytes by ``in``."""
    large = choose(TRIGGERS, READ_BYTES).anchored_lines
    return lambda data: bool(large(data)) if len(data) > 4 * _OVERLAP else any(t in data for t in TRIGGERS)


class Passthrough:
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


class Pumps:
    """The server's two pipes, each read by a thread of its own; every chunk goes to the recorder's own
    stream first, then past the OOM check, then to ``log``, one chunk at a time in the order it was read.

    ``on_oom`` runs once, on a pump's thread, at the first chunk that holds a trigger: it must not
    raise (a stopped pump would block the server on a full pipe). ``pipes`` are the server's stdout
    and stderr as file objects: held here, so that their descriptors stay open (and are never reused)
    while a pump may still be reading them.
    """

    def __init__(self, pipes: tuple[BinaryIO, BinaryIO], sinks: tuple[Passthrough, Passthrough], log: Callable[[int, bytes], None], on_oom: Callable[[], None]) -> None:
        self.pipes = pipes
        self.fds = [pipe.fileno() for pipe in pipes]
        self.sinks, self.log, self.on_oom = sinks, log, on_oom
        self.oom_seen = threading.Event()
        self.tails = [b"", b""]
        self.order = threading.Lock()  # one chunk at a time goes to the terminal, the trigger check and the log
        self.pausing = [False, False]  # a pump in its pause: its pipe may hold output the other pump must not overtake
        self.threads: list[threading.Thread] = []
        self.last_read = time.monotonic()  # when a pump last got output
        self.stopped = False  # the recording ended: what a pump still reads only passes through
        self.has_trigger = _chunk_check()

    def start(self) -> None:
        self.threads = [threading.Thread(target=self._pump, args=(stream,), daemon=True, name=f"oomdoctor-pump-{stream}") for stream in (0, 1)]
        for t in self.threads:
            t.start()

    def drain(self, quiet_s: float, most_s: float) -> bool:
        """After the server's exit: wait until both pipes reached their end, or were quiet for ``quiet_s``, or ``most_s``
        passed; then stop recording. True when both reached their end (no process the server started holds them).

        A worker of a dead server (the OOM killer took the server, not its workers) holds the pipes open for as long as
        it lives: its last words still reach the log while it writes, and the recording ends when it falls quiet. A pump
        still blocked in its read is left there (its thread ends with the process; what it reads only passes through).
        """
        started = time.monotonic()
        while True:
            alive = [t for t in self.threads if t.is_alive()]
            now = time.monotonic()
            if not alive or now - max(self.last_read, started) >= quiet_s or now - started >= most_s:
                break
            alive[0].join(min(0.05, quiet_s))
        self.stopped = True
        # An emit under way finishes (its chunk reaches the log) before the log is closed; one stuck writing to a reader
        # that never reads (a suspended terminal) is not waited for: its put after the close is ignored.
        if self.order.acquire(timeout=1.0):
            self.order.release()
        return not alive

    def _emit(self, stream: int, chunk: bytes) -> None:
        self.last_read = time.monotonic()
        self.sinks[stream].write(chunk)  # the server's reader first
        if self.stopped:
            return
        tail = self.tails[stream]
        if not self.oom_seen.is_set() and (any(t in tail + chunk[:_OVERLAP] for t in TRIGGERS) or self.has_trigger(chunk)):
            self.oom_seen.set()
            self.on_oom()
        self.tails[stream] = chunk[-_OVERLAP:] if len(chunk) >= _OVERLAP else (tail + chunk)[-_OVERLAP:]
        self.log(stream, chunk)

    def _pump(self, stream: int) -> None:
        """One pipe, read with blocking reads (never poll: a pipe once polled wakes its reader on every write, ~3%
        of a chatty server's time here), pausing (up to PAUSE_S) after a read that did not find it full.

        The pipe is read with a blocking read only when it was found empty; after a pause, what it
        gathered is read (FIONREAD says how much, so that read cannot block) and emitted while the pump
        still counts as pausing. A pump whose blocking read returns while the other pump pauses first
        takes what the other pipe holds: the server wrote that during the pause, before this chunk. So
        stdout and stderr keep their order in server.log as they did without the pause.
        """
        fds, order, pausing, emit = self.fds, self.order, self.pausing, self._emit  # locals: read once per chunk
        fd, other = fds[stream], 1 - stream
        full = min(_grow_pipe(fd), READ_BYTES)
        pause = PAUSE_S
        while not self.stopped:  # stopped: never read again (the recorder is done with this descriptor)
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

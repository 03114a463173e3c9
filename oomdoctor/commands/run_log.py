"""RUN/server.log of `oomdoctor run`: whole lines redacted in flight by a writer thread, bounded to the first and the last ``keep`` bytes."""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, cast

from oomdoctor.commands.run_pumps import READ_BYTES
from oomdoctor.input.files import OWN_HIDDEN_PREFIX
from oomdoctor.input.redact import split_long_line
from oomdoctor.input.ring_file import first_line_end, spans_after

if TYPE_CHECKING:
    from oomdoctor.input.redact import Redactor

# Bytes of chunks waiting for the log writer. When a chunk finds no room the oldest ones waiting are
# dropped, never the server's time: the pumps (and so the server) never wait on the writer (issue 24
# saw a server slowed 55x when they did), and the log gets one line saying how much is missing there.
# 32 MiB: a writer that far behind is not catching up, and the recorder's memory stays bounded.
QUEUE_BYTES = 32 << 20


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
                    skip = first_line_end(ring, spans)  # start the kept tail at a whole line
                    dropped += skip
                    spans = spans_after(spans, skip)
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


@dataclass
class _Gap:
    """Chunks of one stream that were dropped: how many bytes, and whether the last one ended a line."""

    lost: int = 0
    at_line_end: bool = True


STREAM_NAMES = ("stdout", "stderr")


class LogTee:
    """What the pumps hand RUN/server.log: whole lines in the order they completed, redacted in flight, written by a thread of its own.

    ``put`` only queues the chunk, so the pumps go back to the child's pipes at once, and it never
    waits: when more than ``max_queued`` bytes would be waiting, the oldest waiting chunks are
    dropped (the newest output, where a failure is, is what the log must keep) and counted (``gaps``,
    ``gap_bytes``), and the log gets one line where they are missing. With a ``redactor``, each
    stream's chunks are cut at their last newline and the unfinished line is carried to that stream's
    next chunk, so every line is redacted whole (``Redactor.log_bytes``: the prefilter finds the few
    lines that can hold a secret, one redactor for the whole run keeps PEM blocks that span lines and
    chunks). Each stream keeps its own unfinished line, so the log holds whole lines in the order they
    were completed: a line the other stream cut in two on the terminal is whole in the log, and a
    secret split around such a write is still redacted (a fresh-eyes review found the earlier
    arrival-order flush writing one in clear). A gap takes whole lines only: the unfinished line before
    it and the rest of the line it cut go with it, so that no piece of a line (a secret's value without
    its key) is written. A line longer than ``READ_BYTES`` is redacted in pieces of about that size, each cut where no
    secret is cut in two (``redact.split_long_line``). ``close`` writes what is left and closes the
    log; a ``put`` after it is ignored. If redaction itself ever failed, the log would stop there rather
    than take a line unredacted.
    """

    def __init__(self, log: BoundedLog, redactor: Redactor | None, max_queued: int = QUEUE_BYTES) -> None:
        self.log, self.redactor, self.max_queued = log, redactor, max_queued
        self.carry: dict[int, bytes] = {}  # per stream: its unfinished line
        self.broken: str | None = None
        self.items: deque[tuple[int, bytes | _Gap] | None] = deque()
        self.queued = 0  # bytes of the chunks in `items`
        self.cut: dict[int, int] = {}  # per stream, after a gap that cut a line: the bytes lost so far, until that line ends
        self.gaps = self.gap_bytes = 0
        self.closed = False
        self.wake = threading.Condition()
        self.last_written = b"\n"  # the last byte written unredacted (--no-redact): a gap's line starts on a line of its own
        self.thread = threading.Thread(target=self._drain, name="oomdoctor-server-log", daemon=True)
        self.thread.start()

    def put(self, stream: int, chunk: bytes) -> None:
        with self.wake:
            if self.closed:
                return  # a pump the recorder stopped waiting for (a worker of a dead server still writing)
            if self.queued + len(chunk) > self.max_queued:
                self._make_room(len(chunk))
            self.items.append((stream, chunk))
            self.queued += len(chunk)
            self.wake.notify()

    def _make_room(self, need: int) -> None:
        """Drop the oldest chunks waiting (the caller holds ``wake``) until half the room is free, so that one gap
        stands for each time the writer fell behind; each stream's dropped chunks become one gap where they were."""
        gaps: dict[int, _Gap] = {}
        while self.items and self.queued + need > self.max_queued // 2:
            item = self.items.popleft()
            assert item is not None  # only close() queues the end, and nothing is put after it
            stream, data = item
            gap = gaps.setdefault(stream, _Gap())
            if isinstance(data, _Gap):  # a gap still waiting: the chunks dropped now continue it
                gap.lost += data.lost
                gap.at_line_end = data.at_line_end
            else:
                self.queued -= len(data)
                gap.lost += len(data)
                gap.at_line_end = data.endswith(b"\n")
        self.items.extendleft(reversed(list(gaps.items())))

    def close(self) -> None:
        with self.wake:
            self.items.append(None)
            self.closed = True
            self.wake.notify()
        self.thread.join()
        try:
            for stream in sorted(self.carry):
                if self.carry[stream] and self.broken is None:
                    self._write(self.carry[stream])
            for stream in sorted(self.cut):
                self._mark_gap(stream, self.cut[stream])
        except Exception as exc:  # noqa: BLE001 - see _drain
            self._stop(exc)
        self.carry, self.cut = {}, {}
        self.log.close()

    def _drain(self) -> None:
        while True:
            with self.wake:
                while not self.items:
                    self.wake.wait()
                item = self.items.popleft()
                if item is not None and isinstance(item[1], bytes):
                    self.queued -= len(item[1])
            if item is None:
                return
            if self.broken is not None:
                continue  # keep taking chunks: a writer that stopped must not fill the queue
            try:
                stream, data = item
                if isinstance(data, _Gap):
                    self._gap(stream, data)
                else:
                    self._take(stream, data)
            except Exception as exc:  # noqa: BLE001 - a bug in redaction must not stop the pass-through nor let raw lines in
                self._stop(exc)

    def _stop(self, exc: Exception) -> None:
        self.broken = f"{type(exc).__name__}: {exc}"
        self.log.on_error(f"oomdoctor: redacting {self.log.path} failed ({self.broken}); the log stops here, the server's output still passes through")
        self.log.failed = self.log.failed or self.broken

    def _gap(self, stream: int, gap: _Gap) -> None:
        """Chunks of ``stream`` were dropped: so is its unfinished line, and, when the last one cut a line, the rest of that line."""
        lost = self.cut.pop(stream, 0) + gap.lost + len(self.carry.pop(stream, b""))
        if gap.at_line_end:
            self._mark_gap(stream, lost)
        else:
            self.cut[stream] = lost

    def _mark_gap(self, stream: int, lost: int) -> None:
        self.gaps += 1
        self.gap_bytes += lost
        if self.redactor is None and self.last_written != b"\n":
            self.log.write(b"\n")
        self.log.write(
            f"[oomdoctor run: {lost} bytes of the server's {STREAM_NAMES[stream]} not recorded here: the recorder fell behind (they passed through)]\n".encode()
        )
        self.last_written = b"\n"
        if self.redactor is not None:
            self.redactor.after_gap()

    def _take(self, stream: int, chunk: bytes) -> None:
        if stream in self.cut:  # the rest of a line a gap cut: dropped up to its end
            end = chunk.find(b"\n") + 1
            if not end:
                self.cut[stream] += len(chunk)
                return
            self._mark_gap(stream, self.cut.pop(stream) + end)
            chunk = chunk[end:]
            if not chunk:
                return
        if self.redactor is None:
            self.log.write(chunk)
            self.last_written = chunk[-1:]
            return
        held = self.carry.get(stream, b"")
        data = held + chunk if held else chunk
        cut = data.rfind(b"\n") + 1
        head, rest = (data[:cut], data[cut:]) if cut < len(data) else (data, b"")
        if len(rest) >= READ_BYTES:  # a line without end: a piece of it now, cut where no secret is cut in two
            piece, rest = split_long_line(rest)
            head += piece
        if head:
            self._write(head)
        self.carry[stream] = rest

    def _write(self, data: bytes) -> None:
        assert self.redactor is not None
        self.log.write(self.redactor.log_bytes(data))

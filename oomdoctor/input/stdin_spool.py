"""Standard input kept in a bounded temporary file, so that '-' can be read twice, and removed on every exit path."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TYPE_CHECKING, Any

from oomdoctor.base.errors import InputError, Terminated
from oomdoctor.input.ring_file import BLOCK_BYTES, first_line_end, spans_after

if TYPE_CHECKING:
    from typing import BinaryIO

    from oomdoctor.input.files import InputStats


# Standard input copied to a temporary file, so that it can be read twice (the events, then the node
# timeline): set by spool_stdin, removed by release_stdin_spool. Empty: stdin is read directly, once.
# Every temporary file is listed here before a byte is written to it, so that every exit path removes it.
STDIN_SPOOL: list[str] = []
# The spool holds at most the first and the last STDIN_KEEP_BYTES of standard input (`kubectl logs -f
# POD | oomdoctor diagnose -` never ends): what lies between is dropped, where one marker line says so.
STDIN_KEEP_BYTES = 64 << 20
# [bytes of standard input in all, bytes dropped from its middle, the cap], once the spool is written.
_STDIN_DROPPED: list[int] = []
# The SIGTERM handler spool_stdin replaced, restored by release_stdin_spool.
_PREVIOUS_SIGTERM: list[Any] = []


def _size_text(n: int) -> str:
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    if n >= 1 << 10 and n % (1 << 10) == 0:
        return f"{n >> 10} KiB"
    return f"{n} bytes"


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated


def _trap_sigterm() -> None:
    """SIGTERM becomes Terminated while the spool exists, so that it is removed (exit 143, not a kill)."""
    import signal

    try:
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            _PREVIOUS_SIGTERM.append(signal.signal(signal.SIGTERM, _on_sigterm))
    except ValueError:  # not the main thread: signals are the embedding program's
        pass


def spool_stdin() -> None:
    """Copy standard input to a temporary file in chunks (memory stays flat) so that '-' can be read again.

    The copy is bounded: the first and the last STDIN_KEEP_BYTES, with one marker line for what was
    dropped between them. A copy that fails (a full disk) is one InputError; on any failure, Ctrl-C or
    SIGTERM the temporary files are removed.
    """
    import tempfile

    if STDIN_SPOOL:
        return
    _trap_sigterm()
    try:
        fd, tmp = tempfile.mkstemp(prefix=".oomdoctor-stdin-")
        STDIN_SPOOL.append(tmp)
        with os.fdopen(fd, "wb") as out:
            total, dropped = _copy_bounded(sys.stdin.buffer, out, STDIN_KEEP_BYTES)
        _STDIN_DROPPED[:] = [total, dropped, STDIN_KEEP_BYTES]
    except OSError as exc:
        where = os.path.dirname(STDIN_SPOOL[0]) if STDIN_SPOOL else tempfile.gettempdir()
        release_stdin_spool()
        raise InputError(
            f"<stdin>: cannot copy standard input to a temporary file in {where} ({exc.strerror or exc}); "
            "free space there, set TMPDIR to a directory with room, or give the log as a file"
        ) from None
    except BaseException:
        release_stdin_spool()
        raise


def _copy_bounded(src: BinaryIO, out: BinaryIO, keep: int) -> tuple[int, int]:
    """Copy ``src`` to ``out``: its first ``keep`` bytes, then (when it is longer than ``2 * keep``) a marker
    line and its last ``keep`` bytes from their first whole line, kept meanwhile in a ring file. Returns
    (bytes read, bytes dropped)."""
    import tempfile

    total = 0
    last = b"\n"
    while total < keep:
        data = src.read(min(BLOCK_BYTES, keep - total))
        if not data:
            return total, 0
        out.write(data)
        total += len(data)
        last = data[-1:]
    data = src.read(BLOCK_BYTES)
    if not data:
        return total, 0
    fd, ring_path = tempfile.mkstemp(prefix=".oomdoctor-stdin-ring-", dir=os.path.dirname(STDIN_SPOOL[0]))
    STDIN_SPOOL.append(ring_path)
    with os.fdopen(fd, "w+b") as ring:
        pos, full, tail = 0, False, 0
        while data:
            total += len(data)
            tail += len(data)
            while data:
                n = min(len(data), keep - pos)
                ring.seek(pos)
                ring.write(data[:n])
                data = data[n:]
                pos += n
                if pos == keep:
                    pos, full = 0, True
            data = src.read(BLOCK_BYTES)
        spans = [(pos, keep - pos), (0, pos)] if full else [(0, pos)]
        dropped = 0
        if full and tail > keep:
            skip = first_line_end(ring, spans)
            dropped = tail - keep + skip
            spans = spans_after(spans, skip)
            out.write(
                (b"" if last == b"\n" else b"\n")
                + f"[oomdoctor: {dropped} bytes of standard input dropped here; the first and the last {_size_text(keep)} are read]\n".encode()
            )
        for offset, size in spans:
            ring.seek(offset)
            while size > 0:
                block = ring.read(min(BLOCK_BYTES, size))
                if not block:
                    break
                out.write(block)
                size -= len(block)
    _unlink(ring_path)
    return total, dropped


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
    if path in STDIN_SPOOL:
        STDIN_SPOOL.remove(path)


def release_stdin_spool() -> None:
    """Remove the spool's temporary files and put the SIGTERM handler back."""
    while STDIN_SPOOL:
        _unlink(STDIN_SPOOL[-1])
    _STDIN_DROPPED.clear()
    if _PREVIOUS_SIGTERM:
        import signal

        with contextlib.suppress(ValueError):  # not the main thread
            signal.signal(signal.SIGTERM, _PREVIOUS_SIGTERM.pop())


def stdin_note(stats: InputStats) -> None:
    """The report says what the spool dropped from the middle of standard input."""
    if _STDIN_DROPPED and _STDIN_DROPPED[1]:
        total, dropped, keep = _STDIN_DROPPED
        stats.warn(
            f"standard input was {total} bytes, over the {_size_text(2 * keep)} it is read to: its first and last {_size_text(keep)} "
            f"were read and {dropped} bytes ({dropped / (1 << 20):.1f} MiB) of standard input were dropped between them (save it to a file to read it all)"
        )

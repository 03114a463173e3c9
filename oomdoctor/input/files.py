"""The input layer: paths to byte chunks of whole lines, with decompression sniffed by magic bytes.

Logs of any size are streamed in fixed chunks, so memory does not grow with the input. A line longer
than MAX_LINE_BYTES is cut there (the rest of it is skipped), so one 200 MB line costs 1 MiB. A
damaged compressed stream yields what was decoded before the damage and is reported as truncated.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from oomdoctor.base.errors import InputError
from oomdoctor.input.kinds import MONITORING_SUFFIXES, is_bundle_dir, is_evidence_file

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import BinaryIO, Protocol

    # Only annotations name it: typing (Protocol) stays off the start-up path.
    class _Decompressor(Protocol):
        """What zlib's decompressobj, bz2.BZ2Decompressor and lzma.LZMADecompressor have in common here."""

        @property
        def unused_data(self) -> bytes: ...

        def decompress(self, data: bytes, max_length: int, /) -> bytes: ...

CHUNK_BYTES = 1 << 20
MAX_LINE_BYTES = 1 << 20
SNIFF_BYTES = 64 << 10

_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"PK\x03\x04", "zip"),
)

# Extensions that a directory walk reads as logs; others (pickles, images) are not logs.
_LOG_SUFFIXES = (".log", ".txt", ".out", ".err", ".gz", ".bz2", ".xz", ".stderr", ".stdout")
# Rotated logs: server.log.1, server.log.2.gz (logrotate's numbers, higher is older) and
# app.log-20260301[.gz] (dateext, older dates first); the live file comes after its rotations.
_ROTATED_RE = re.compile(
    r"^(?P<base>.+?\.(?:log|txt|out|err|stderr|stdout))(?:\.(?P<num>\d{1,6})|-(?P<date>\d{8}(?:\d{2,6})?))?(?:\.(?:gz|bz2|xz))?$",
    re.IGNORECASE,
)
# oomdoctor's own hidden files (`run`'s lock, temporary files of a write in progress): not warned about.
OWN_HIDDEN_PREFIX = ".oomdoctor"
# oomdoctor's own outputs in a bundle directory, which are not evidence and not worth a warning.
_BUNDLE_OWN = ("report.html", "summary.md", "README.txt")

# Kinds of an input that gave nothing: a path that is not there (or not a file), and an input that is
# there but could not be read (binary, empty, an unsupported format). Listed with lines 0 and the reason.
MISSING = "missing"
UNREADABLE = "unreadable"
# A file in a directory input that was not read (not a log's name, a link out of the directory, a
# FIFO or socket): listed with the reason, so that what was left out is never silent.
SKIPPED = "skipped"


@dataclass
class InputStats:
    """What reading one input found: size, line count and damage, reported in the JSON."""

    path: str
    kind: str = "log"
    compression: str | None = None
    bytes_read: int = 0
    lines: int = 0
    unparsed_lines: int = 0
    truncated: bool = False
    long_lines: int = 0
    warnings: list[str] = field(default_factory=list)
    system_hints: dict[str, int] = field(default_factory=dict)
    # A line prefix named a node (kubectl --prefix, srun -l, Ray): the input multiplexes several.
    node_prefixed: bool = False
    # Lines that were pieces of hard-wrapped lines, read joined to the line they were cut from
    # (oomdoctor/input/unwrap.py): blank now, so that line numbers stay the file's; not log content.
    joined_pieces: tuple[int, ...] = ()

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    @property
    def readable(self) -> bool:
        """False for an input listed only to say why nothing was read from it."""
        return self.kind not in (MISSING, UNREADABLE, SKIPPED)

    @property
    def problem(self) -> str:
        """The one-line error of an unread input: "PATH: reason"."""
        return f"{self.path}: {self.warnings[0]}" if self.warnings else f"{self.path}: not read"


def unread_input(path: str, message: str, kind: str = UNREADABLE) -> InputStats:
    """The entry of an input nothing was read from, its one-line error ("PATH: reason") as its own warning."""
    stats = InputStats(path=path, kind=kind)
    stats.warn(message.removeprefix(f"{path}: "))
    return stats


def expand_paths(paths: list[str]) -> tuple[list[str], list[InputStats]]:
    """Resolve CLI paths into readable inputs; returns (inputs, an entry for each of the rest).

    A directory contributes its log-like files, rotated logs in rotation order (oldest first), never
    following a symlink out of the directory; each file of it that is not read gets an entry of kind
    SKIPPED with the reason. A path that is not there gets an entry of kind MISSING.
    """
    found: list[str] = []
    missing: list[InputStats] = []
    for path in paths:
        if path == "-":
            found.append("-")
            continue
        try:
            st = os.stat(path)
        except FileNotFoundError:
            missing.append(unread_input(path, "no such file or directory", MISSING))
            continue
        except OSError as exc:
            missing.append(unread_input(path, f"cannot access ({exc.strerror or exc})", MISSING))
            continue
        if stat.S_ISDIR(st.st_mode):
            logs, skipped = _walk_logs(path)
            if not logs:
                missing.append(unread_input(path, f"directory holds no log files ({', '.join(_LOG_SUFFIXES)})", MISSING))
            found.extend(logs)
            missing.extend(skipped)
        elif stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode):
            found.append(path)
        else:
            missing.append(unread_input(path, "not a regular file", MISSING))
    return found, missing


def rotation_key(name: str) -> tuple:
    """Sort key of a file name in a directory: rotations of one log together, oldest first, the live file last."""
    m = _ROTATED_RE.match(name)
    if m is None:
        return (name, 2, "", 0)
    if m.group("date"):
        return (m.group("base"), 0, m.group("date"), 0)
    if m.group("num"):
        return (m.group("base"), 1, "", -int(m.group("num")))
    return (m.group("base"), 2, "", 0)


def _is_log_name(name: str) -> bool:
    lower = name.lower()
    return lower.endswith(_LOG_SUFFIXES) or lower.endswith(MONITORING_SUFFIXES) or _ROTATED_RE.match(name) is not None


def file_head(path: str, size: int) -> bytes | None:
    """The first ``size`` bytes of a file (to tell what it is), or None when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            return fh.read(size)
    except OSError:
        return None


def is_monitoring_json(path: str) -> bool:
    """A Prometheus HTTP API export (query_range or query result) saved as JSON: read with the logs of a directory."""
    if not path.lower().endswith(".json"):
        return False
    head = file_head(path, SNIFF_BYTES)
    return head is not None and b'"resultType"' in head and (b'"matrix"' in head or b'"vector"' in head)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _file_type(mode: int) -> str:
    """What a non-regular file is, in words ("a FIFO")."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a file"


def entry_problem(path: str, real_root: str, dirs: bool = False) -> str | None:
    """Why an entry found inside a directory (``real_root``: its realpath) must not be read; None when it may be.

    A symlink that leads out of the directory, a broken one, and anything that is not a regular file
    (a FIFO would block the read forever, a link to /dev/zero never ends) are refused without opening
    them; with ``dirs`` a directory inside is accepted too.
    """
    try:
        is_link = stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError as exc:
        return f"cannot access ({exc.strerror or exc})"
    if is_link:
        target = os.path.realpath(path)
        if not _inside(target, real_root):
            return f"symlink leads out of the directory (to {target})"
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "broken symlink" if is_link else "no such file"
    except OSError as exc:
        reason = exc.strerror or str(exc)
        return f"broken symlink ({reason})" if is_link else f"cannot access ({reason})"
    if stat.S_ISREG(mode) or (dirs and stat.S_ISDIR(mode)):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    return f"not a regular file ({_file_type(mode)})"


def _walk_logs(root: str) -> tuple[list[str], list[InputStats]]:
    """The log files under ``root`` in reading order, and an entry for each file left out."""

    real_root = os.path.realpath(root)
    bundle = is_bundle_dir(root)
    logs: list[str] = []
    skipped: list[InputStats] = []
    seen_real: set[str] = set()

    def skip(path: str, reason: str) -> None:
        skipped.append(unread_input(path, f"skipped: {reason}", SKIPPED))

    for dirpath, dirnames, filenames in os.walk(root, followlinks=False, onerror=lambda e: None):
        dirnames.sort()
        for name in list(dirnames):
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                # os.walk does not descend into links; one that points inside is read at its own path.
                target = os.path.realpath(full)
                if not _inside(target, real_root):
                    skip(full, f"symlink leads out of the directory (to {target})")
        files: list[tuple[str, str]] = []
        for name in filenames:
            full = os.path.join(dirpath, name)
            # Never opened: a link out of the directory, a FIFO (the read would block), a device.
            problem = entry_problem(full, real_root)
            if problem is not None:
                skip(full, problem)
                continue
            files.append((name, full))
        # Real files first, so that a link to a file read anyway is dropped rather than the file.
        real_files = {os.path.realpath(full) for _, full in files if not os.path.islink(full)}
        for name, full in sorted(files, key=lambda nf: rotation_key(nf[0])):
            real = os.path.realpath(full)
            if os.path.islink(full) and real in real_files:
                continue
            if not _is_log_name(name) and not is_monitoring_json(full):
                if not (name.startswith(OWN_HIDDEN_PREFIX) or (bundle and (is_evidence_file(full) or name in _BUNDLE_OWN))):
                    skip(full, f"not a log file name ({', '.join(_LOG_SUFFIXES)}, or a rotation such as server.log.1)")
                continue
            if real in seen_real:
                continue
            seen_real.add(real)
            logs.append(full)
    return logs, skipped


# Standard input copied to a temporary file, so that it can be read twice (the events, then the node
# timeline): set by spool_stdin, removed by release_stdin_spool. None: stdin is read directly, once.
_STDIN_SPOOL: list[str] = []


def spool_stdin() -> None:
    """Copy standard input to a temporary file in chunks (memory stays flat) so that '-' can be read again."""
    import shutil
    import tempfile

    if _STDIN_SPOOL:
        return
    fd, tmp = tempfile.mkstemp(prefix=".oomdoctor-stdin-")
    with os.fdopen(fd, "wb") as out:
        shutil.copyfileobj(sys.stdin.buffer, out, CHUNK_BYTES)
    _STDIN_SPOOL.append(tmp)


def release_stdin_spool() -> None:
    while _STDIN_SPOOL:
        try:  # noqa: SIM105 - contextlib stays off the start path (~0.4 ms)
            os.unlink(_STDIN_SPOOL.pop())
        except OSError:
            pass


def _open_raw(path: str) -> BinaryIO:
    if path == "-":
        if _STDIN_SPOOL:
            return open(_STDIN_SPOOL[0], "rb")
        return sys.stdin.buffer
    try:
        return open(path, "rb")
    except PermissionError:
        raise InputError(f"{path}: permission denied") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot open ({exc.strerror or exc})") from None


def _decompressor(kind: str) -> tuple[Callable[[], _Decompressor], tuple[type[BaseException], ...]]:
    """The decompressor of ``kind`` and the errors a damaged stream raises from it."""
    # zlib, bz2 and lzma are imported for the files that need them, not on every plain log's start.
    import zlib

    _STREAM_ERRORS = (OSError, EOFError, zlib.error, ValueError)
    if kind == "gzip":
        return (lambda: zlib.decompressobj(16 + zlib.MAX_WBITS)), _STREAM_ERRORS
    if kind == "bzip2":
        import bz2

        return bz2.BZ2Decompressor, _STREAM_ERRORS
    import lzma

    return lzma.LZMADecompressor, (*_STREAM_ERRORS, lzma.LZMAError)


def _decoded_blocks(raw: BinaryIO, stats: InputStats) -> Iterator[bytes]:
    """Yield decompressed (or plain) byte blocks of the stream, noting truncation in stats."""
    first = raw.read(CHUNK_BYTES)
    kind = next((name for magic, name in _MAGIC if first.startswith(magic)), None)
    if kind in ("zstd", "zip"):
        hint = "zstdcat FILE | oomdoctor diagnose -" if kind == "zstd" else "unzip it first"
        raise InputError(f"{stats.path}: {kind} input is not supported; {hint}")
    stats.compression = kind
    if kind is None:
        data = first
        while data:
            stats.bytes_read += len(data)
            yield data
            data = raw.read(CHUNK_BYTES)
        return
    make, damaged = _decompressor(kind)
    decomp = make()
    data = first
    while True:
        if not data:
            break
        stats.bytes_read += len(data)
        while data:
            try:
                # max_length bounds the output of a decompression bomb to one chunk at a time.
                out = decomp.decompress(data, CHUNK_BYTES)
            except damaged as exc:
                stats.truncated = True
                stats.warn(f"{kind} stream is damaged ({exc}); read what came before the damage")
                return
            if out:
                yield out
            tail = getattr(decomp, "unconsumed_tail", b"")
            if getattr(decomp, "eof", False):
                rest = decomp.unused_data
                # Concatenated members (log rotation appends .gz members) start a new stream.
                data = rest if rest and any(rest.startswith(m) for m, n in _MAGIC if n == kind) else b""
                if data:
                    decomp = make()
                continue
            if tail:
                data = tail
                continue
            if kind != "gzip" and not getattr(decomp, "needs_input", True):
                data = b""
                continue
            data = b""
        data = raw.read(CHUNK_BYTES)
    if not getattr(decomp, "eof", False):
        stats.truncated = True
        stats.warn(f"{kind} stream ends early (truncated file); diagnosed what was read")


def _looks_binary(sample: bytes) -> bool | None:
    """True for binary, False for text, None when the sample is all NUL (decide on later data).

    NUL runs are what copytruncate log rotation leaves at the start of a log, so they are ignored;
    of the rest, text logs hold almost no control bytes (a few ESC for colours) while core dumps,
    pickles and images are full of them.
    """
    text = sample.replace(b"\x00", b"")
    if len(text) < 256:
        return None
    controls = sum(text.count(bytes([b])) for b in (*range(1, 9), 11, 12, *range(14, 27), *range(28, 32)))
    return controls / len(text) > 0.10


def iter_line_chunks(path: str, stats: InputStats) -> Iterator[bytes]:
    """Yield byte chunks that each hold whole lines ending in b"\\n" (the last may be completed).

    NUL bytes are dropped first (they are never line content); lines over MAX_LINE_BYTES are then cut
    to that length and the rest of them is dropped.
    """
    raw = _open_raw(path)
    try:
        carry = b""
        skipping = False
        checked = False
        seen_data = False
        for block in _decoded_blocks(raw, stats):
            seen_data = True
            if not checked:
                verdict = _looks_binary(block[:SNIFF_BYTES])
                if verdict is not None:
                    checked = True
                    if verdict:
                        raise InputError(f"{stats.path}: looks like a binary file, not a text log")
            # NULs go before a line is measured: a NUL run (copytruncate rotation under `nohup server > log`
            # leaves megabytes of them) is not line content and must not push the next line over the cap.
            if b"\x00" in block:
                block = block.replace(b"\x00", b"")
                if not block:
                    continue
            if skipping:
                nl = block.find(b"\n")
                if nl < 0:
                    continue
                block = block[nl + 1 :]
                skipping = False
            buf = carry + block if carry else block
            last_nl = buf.rfind(b"\n")
            if last_nl < 0:
                carry = buf
            else:
                out, carry = buf[: last_nl + 1], buf[last_nl + 1 :]
                if out:
                    yield out
            if len(carry) > MAX_LINE_BYTES:
                stats.long_lines += 1
                stats.warn(f"lines longer than {MAX_LINE_BYTES >> 20} MiB were cut to that length")
                yield carry[:MAX_LINE_BYTES] + b"\n"
                carry = b""
                skipping = True
        if not seen_data:
            if stats.truncated:
                raise InputError(f"{stats.path}: {stats.warnings[-1]}; no text before the damage")
            raise InputError(f"{stats.path}: empty input (0 bytes)")
        if carry:
            # A log still being written ends mid-line; keep that partial line.
            yield carry + b"\n"
    except OSError as exc:
        raise InputError(f"{stats.path}: read failed ({exc.strerror or exc})") from None
    finally:
        if raw is not sys.stdin.buffer:
            raw.close()


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
from typing import TYPE_CHECKING, cast

from oomdoctor.base.errors import InputError
from oomdoctor.input.kinds import MONITORING_SUFFIXES, is_bundle_dir, is_evidence_file
from oomdoctor.input.patterns import LazyRegex
from oomdoctor.input.stdin_spool import STDIN_SPOOL, stdin_note

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any, BinaryIO, Protocol

    # Only annotations name it.
    class _Decompressor(Protocol):
        """What zlib's decompressobj, bz2.BZ2Decompressor and lzma.LZMADecompressor have in common here."""

        @property
        def unused_data(self) -> bytes: ...

        @property
        def eof(self) -> bool: ...

        def decompress(self, data: bytes, max_length: int, /) -> bytes: ...

CHUNK_BYTES = 1 << 20
# glibc serves a block of 128 KiB or more with a mapping of its own until it frees one that large, and from then on
# serves blocks up to that size from its heap. Without this, each chunk read and freed is a new mapping, faulted in
# page by page (36,000 faults and a tenth of the time of a 256 MB log); one larger block freed first (calloc'd, so
# never touched) makes every chunk come from the heap, reused. Once per process; elsewhere it does nothing.
bytes(4 * CHUNK_BYTES)
MAX_LINE_BYTES = 1 << 20
SNIFF_BYTES = 64 << 10

_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
)

# Extensions that a directory walk reads as logs; others (pickles, images) are not logs.
_LOG_SUFFIXES = (".log", ".txt", ".out", ".err", ".gz", ".bz2", ".xz", ".stderr", ".stdout")
# Rotated logs: server.log.1, server.log.2.gz (logrotate's numbers, higher is older) and
# app.log-20260301[.gz] (dateext, older dates first); the live file comes after its rotations. Compiled
# when a directory is walked or a rotated name ordered.
_ROTATED_RE = LazyRegex(None,
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
    # The compressed stream is corrupt (a bad block, a wrong checksum), not only cut short; truncated too.
    damaged: bool = False
    long_lines: int = 0
    warnings: list[str] = field(default_factory=list)
    system_hints: dict[str, int] = field(default_factory=dict)
    # A line prefix named a node (kubectl --prefix, srun -l, Ray): the input multiplexes several.
    node_prefixed: bool = False
    # Lines that were pieces of hard-wrapped lines, read joined to the line they were cut from
    # (oomdoctor/input/unwrap.py): blank now, so that line numbers stay the file's; not log content.
    joined_pieces: tuple[int, ...] = ()
    # The line that says where a cut or damaged stream stops (a cut marker), read after its last line.
    cut_marker: bytes = b""

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
        elif stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode):
            found.append(path)  # a FIFO (<(zcat log.gz)) is read once, to its end
        elif stat.S_ISCHR(st.st_mode):
            # /dev/zero or /dev/urandom (a link named x.csv, say) never ends, and a terminal ends when someone types
            # Ctrl-D: refused by its type, before a byte is read. Standard input is `-`.
            real = os.path.realpath(path)
            missing.append(unread_input(path, f"not a regular file ({real} is a character device, which may never end); save the log to a file, or pipe it in as -"))
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


def named_file_problem(path: str) -> str | None:
    """Why a file given by name (a command's argument, not a directory's entry) cannot be copied or read to its end
    as a file; None for a regular file, or a link to one. A FIFO, a device or a link to one (/dev/zero, /dev/stdout)
    would block the read or never end it; a directory is no file."""
    return entry_problem(path, os.path.realpath(path))


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
            fmt = unsupported_by_name(name)
            if fmt is not None:
                skip(full, unsupported_note(fmt).replace("FILE", full))
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


def _open_raw(path: str, stats: InputStats | None = None) -> BinaryIO:
    if path == "-":
        if STDIN_SPOOL:
            if stats is not None:
                stdin_note(stats)
            return open(STDIN_SPOOL[0], "rb")
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


# Formats oomdoctor does not decompress, by their first bytes: one error naming the format and the command
# that decompresses it, never their bytes read as a text log (an lz4 frame of a log is mostly literal text).
_UNSUPPORTED_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x04\x22\x4d\x18", "lz4"),  # lz4 frame
    (b"\x02\x21\x4c\x18", "lz4"),  # lz4 legacy frame (lz4 -l)
    (b"\x1f\x9d", "compress (.Z)"),
    (b"7z\xbc\xaf\x27\x1c", "7z"),
    (b"Rar!\x1a\x07", "rar"),
    (b"\x89LZO\x00", "lzop"),
)
# Formats with no magic bytes (brotli), or whose header is damaged, known by the file's name instead.
_UNSUPPORTED_SUFFIXES: dict[str, str] = {
    ".zst": "zstd",
    ".zstd": "zstd",
    ".lz4": "lz4",
    ".br": "brotli",
    ".z": "compress (.Z)",
    ".7z": "7z",
    ".rar": "rar",
    ".lzo": "lzop",
    ".sz": "snappy",
}
_DECOMPRESS_HINT = {
    "zstd": "zstdcat FILE | oomdoctor diagnose -",
    "lz4": "lz4cat FILE | oomdoctor diagnose -",
    "brotli": "brotli -dc FILE | oomdoctor diagnose -",
    "compress (.Z)": "zcat FILE | oomdoctor diagnose -",
    "zip": "unzip it first",
    "7z": "7z x FILE first",
    "rar": "unrar x FILE first",
    "lzop": "lzop -dc FILE | oomdoctor diagnose -",
    "snappy": "decompress it first",
}


def unsupported_by_name(name: str) -> str | None:
    """The compression format a file name says oomdoctor cannot read (server.log.1.zst: zstd), or None."""
    lower = name.lower()
    return next((fmt for suffix, fmt in _UNSUPPORTED_SUFFIXES.items() if lower.endswith(suffix)), None)


def unsupported_note(fmt: str) -> str:
    return f"{fmt} input is not supported; {_DECOMPRESS_HINT.get(fmt, 'decompress it first')}"


def _unsupported_format(first: bytes, path: str) -> str | None:
    """The unsupported format of a stream from its first bytes, or from its name when they are not text."""
    fmt = next((name for magic, name in _UNSUPPORTED_MAGIC if first.startswith(magic)), None)
    if fmt is None and len(first) >= 4:
        # zstd: the frame magic, a skippable frame first (pzstd, seekable zstd: 0x184D2A5?) or a v0.1-0.7 frame.
        if first.startswith(b"\x28\xb5\x2f\xfd") or (first[1:4] == b"\x2a\x4d\x18" and first[0] & 0xF0 == 0x50) or (first[1:4] == b"\xb5\x2f\xfd" and 0x1E <= first[0] <= 0x27):
            fmt = "zstd"
        elif first.startswith(b"PK\x03\x04"):
            fmt = "zip"
    if fmt is None:
        by_name = unsupported_by_name(path)
        if by_name is not None:
            try:
                first[:SNIFF_BYTES].decode("utf-8")
            except UnicodeDecodeError as exc:
                # A sample cut inside a multi-byte character is still text.
                if exc.start < min(len(first), SNIFF_BYTES) - 3:
                    fmt = by_name
    return fmt


# How the cut-marker line starts that stands where a compressed stream is truncated or damaged
# (oomdoctor/inference/completeness.py words its reason from it).
STREAM_CUT_PREFIX = "[... oomdoctor: the "


def _cut_here(stats: InputStats, kind: str, damaged: BaseException | None) -> None:
    """Mark the input cut where its compressed stream stops: a warning, the flags, and a cut-marker line."""
    stats.truncated = True
    if damaged is not None:
        stats.damaged = True
        reason = str(damaged).replace("[", "(").replace("]", ")")[:160]
        stats.warn(f"{kind} stream is damaged ({reason}); read what came before the damage")
        what = f"the {kind} stream is damaged here ({reason})"
    else:
        stats.warn(f"{kind} stream ends early (truncated file); diagnosed what was read")
        what = f"the {kind} stream ends early here (a truncated file)"
    # A line the records parser reads as a cut marker: a failure that was not read is inconclusive, not "none".
    stats.cut_marker = f"{STREAM_CUT_PREFIX}{what.removeprefix('the ')}: nothing after this point was read]\n".encode()


def _salvage(saved: Any, data: bytes, damaged: tuple[type[BaseException], ...]) -> bytes:
    """What a zlib stream decodes to before its damage: the failing call's input fed again in small pieces,
    the piece that fails once more byte by byte (a bad checksum fails on the trailer, after the last text)."""
    out: list[bytes] = []
    for at in range(0, len(data), 64):
        # 64 input bytes inflate to at most ~66 KB, and the damage lies within one chunk of output.
        before = saved.copy()
        try:
            out.append(saved.decompress(data[at : at + 64], CHUNK_BYTES))
        except damaged:
            for byte in data[at : at + 64]:
                try:
                    out.append(before.decompress(bytes((byte,)), CHUNK_BYTES))
                except damaged:
                    break
            break
    return b"".join(out)


def _decoded_blocks(raw: BinaryIO, stats: InputStats) -> Iterator[bytes]:
    """Yield decompressed (or plain) byte blocks of the stream, noting truncation and damage in stats."""
    first = raw.read(CHUNK_BYTES)
    unsupported = _unsupported_format(first, stats.path)
    if unsupported is not None:
        raise InputError(f"{stats.path}: {unsupported_note(unsupported)}")
    kind = next((name for magic, name in _MAGIC if first.startswith(magic)), None)
    stats.compression = kind
    if kind is None:
        data = first
        while data:
            stats.bytes_read += len(data)
            yield data
            data = raw.read(CHUNK_BYTES)
        return
    magic = next(m for m, n in _MAGIC if n == kind)
    make, damaged = _decompressor(kind)
    decomp = make()
    data = first
    while data:
        stats.bytes_read += len(data)
        if decomp.eof:
            # A member ended at the end of the last chunk: another member starts here, or what follows is padding.
            if not data.startswith(magic):
                return
            decomp = make()
        while True:
            saved = cast("Any", decomp).copy() if kind == "gzip" else None  # zlib's can be copied; bz2's and lzma's cannot
            try:
                # max_length bounds the output of a decompression bomb to one chunk at a time.
                out = decomp.decompress(data, CHUNK_BYTES)
            except damaged as exc:
                if saved is not None:
                    out = _salvage(saved, data, damaged)
                    if out:
                        yield out
                _cut_here(stats, kind, exc)
                return
            if out:
                yield out
            if decomp.eof:
                rest = decomp.unused_data
                if not rest:
                    break
                if not rest.startswith(magic):
                    return  # padding after the last member (NULs from a copy tool): not a damage
                # Concatenated members (log rotation appends .gz members) start a new stream.
                decomp = make()
                data = rest
                continue
            # zlib hands back what it did not consume; bz2 and lzma keep it and say whether they need input.
            data = getattr(decomp, "unconsumed_tail", b"")
            if not data and getattr(decomp, "needs_input", True):
                break
        data = raw.read(CHUNK_BYTES)
    if not decomp.eof:
        _cut_here(stats, kind, None)


# Control bytes a text log holds almost none of (not tab, newline, carriage return or ESC).
_CONTROL_BYTES = bytes([*range(1, 9), 11, 12, *range(14, 27), *range(28, 32)])


def _looks_binary(sample: bytes) -> bool | None:
    """True for binary, False for text, None when the sample is all NUL (decide on later data).

    NUL runs are what copytruncate log rotation leaves at the start of a log, so they are ignored;
    of the rest, text logs hold almost no control bytes (a few ESC for colours) while core dumps,
    pickles and images are full of them.
    """
    text = sample.replace(b"\x00", b"")
    if len(text) < 256:
        return None
    controls = len(text) - len(text.translate(None, _CONTROL_BYTES))  # one pass, not one count per byte value
    return controls / len(text) > 0.10


# How far back from MAX_LINE_BYTES a cut line may end at a word's end instead.
_CUT_BACK_BYTES = 4096


def _cut_at_a_word_end(line: bytes) -> bytes:
    """The first MAX_LINE_BYTES of a line, less the word the cut falls in when a space is near: a token cut
    in two (hf_..., AKIA...) is no longer one the secret rules know, and its first part would reach the
    bundle's copy in clear."""
    head = line[:MAX_LINE_BYTES]
    if line[MAX_LINE_BYTES : MAX_LINE_BYTES + 1] in (b" ", b"\t"):
        return head
    end = max(head.rfind(b" ", MAX_LINE_BYTES - _CUT_BACK_BYTES), head.rfind(b"\t", MAX_LINE_BYTES - _CUT_BACK_BYTES))
    return head[:end] if end > 0 else head


def iter_line_chunks(path: str, stats: InputStats) -> Iterator[bytes]:
    """Yield byte chunks that each hold whole lines ending in b"\\n" (the last may be completed).

    NUL bytes are dropped first (they are never line content); lines over MAX_LINE_BYTES are then cut
    to that length and the rest of them is dropped.
    """
    raw = _open_raw(path, stats)
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
            last_nl = block.rfind(b"\n")  # the carry holds none: it is what followed the last one
            if last_nl < 0:
                carry += block
            else:
                # One copy of the block: the carry and the block's whole lines joined, not the two
                # concatenated and then cut at the last newline.
                out = b"".join((carry, memoryview(block)[: last_nl + 1])) if carry else block[: last_nl + 1]
                carry = block[last_nl + 1 :]
                if out:
                    yield out
            if len(carry) > MAX_LINE_BYTES:
                stats.long_lines += 1
                stats.warn(f"lines longer than {MAX_LINE_BYTES >> 20} MiB were cut to that length")
                yield _cut_at_a_word_end(carry) + b"\n"
                carry = b""
                skipping = True
        if not seen_data:
            if stats.truncated:
                raise InputError(f"{stats.path}: {stats.warnings[-1]}; no text before the damage")
            raise InputError(f"{stats.path}: empty input (0 bytes)")
        tail = carry + b"\n" if carry else b""  # a log still being written ends mid-line; keep that partial line
        if tail or stats.cut_marker:
            yield tail + stats.cut_marker
    except OSError as exc:
        raise InputError(f"{stats.path}: read failed ({exc.strerror or exc})") from None
    finally:
        if raw is not sys.stdin.buffer:
            raw.close()


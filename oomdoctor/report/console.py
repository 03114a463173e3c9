"""What the commands write to the terminal and to report files: escaped, one line per message, atomic.

Every command writes through these.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TYPE_CHECKING

from oomdoctor.base.errors import ExitCode, OutputError

if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import NoReturn

# Terminal safety: every C0 and C1 control character but tab and newline (and DEL), from log text or
# file names, is written as a visible escape, so an OSC title or clipboard write (OSC 52), a DCS
# string or a BEL in a log never reaches the terminal raw.
_CONTROLS = (*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0))
_TEXT_ESCAPES = {c: f"\\x{c:02x}" for c in _CONTROLS}
# JSON escapes C0 itself; C1 and DEL can stand only inside its strings, where \u00XX is the same character.
_JSON_ESCAPES = {c: f"\\u{c:04x}" for c in (0x7F, *range(0x80, 0xA0))}


def escape_controls(text: str) -> str:
    """``text`` with every control character except tab and newline written as ``\\xNN``."""
    return text.translate(_TEXT_ESCAPES)


def safe_output(fmt: str, text: str) -> str:
    """A rendered report as it may be written to a terminal or a file: no raw control character."""
    return text.translate(_JSON_ESCAPES) if fmt == "json" else escape_controls(text)


def echo(text: str, err: bool = False, nl: bool = True) -> None:
    """Write ``text`` (already escaped) to stdout or stderr and flush, as click.echo does (nothing when that stream was closed at start)."""
    stream = sys.stderr if err else sys.stdout
    if stream is None:
        return
    stream.write(text + "\n" if nl else text)
    stream.flush()


def message_line(kind: str, message: str) -> str:
    """``oomdoctor: KIND: MESSAGE`` as it may reach the terminal: secrets redacted (a message may quote an
    input's line, with or without --no-redact), control characters escaped."""
    from oomdoctor.input.secret_rules import redact_secrets  # only when there is something to say

    return escape_controls(redact_secrets(f"oomdoctor: {kind}: {message}"))


def warn(message: str) -> None:
    echo(message_line("warning", message), err=True)


def fail(message: str, code: ExitCode) -> NoReturn:
    echo(message_line("error", message), err=True)
    sys.exit(int(code))


@contextlib.contextmanager
def atomic_target(path: str) -> Iterator[str]:
    """A temporary path beside ``path`` to write; renamed over ``path`` (mode as the umask gives) when the block ends
    without an exception, removed when it raises. An interrupted write leaves no partial output."""
    import tempfile

    from oomdoctor.input.files import OWN_HIDDEN_PREFIX

    # A symlink (to a file, or to where one will be) stays a symlink: the file it points to is replaced.
    directory, name = os.path.split(os.path.realpath(path))
    fd, tmp = tempfile.mkstemp(prefix=f"{OWN_HIDDEN_PREFIX}-{name}.", suffix=".partial", dir=directory)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, os.path.realpath(path))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_atomic(path: str, content: str) -> None:
    """Write a report through ``atomic_target``; OutputError when it cannot be written.

    A character device, FIFO or socket (``-o /dev/stdout``, ``/dev/null``, a named pipe), or a symlink to
    one, is written straight through: it cannot be replaced and must not be (any user may write
    /dev/stdout; only root could create a file beside it). A symlink to a regular file stays a symlink:
    the file it points to is replaced (atomic_target).
    """
    try:
        if _is_stream(path):
            # "a": no O_TRUNC, so `-o /dev/stdout >> log` appends as the shell asked (a device or pipe ignores it).
            with open(path, "a", encoding="utf-8", errors="backslashreplace") as fh:
                fh.write(content)
            return
        with atomic_target(path) as tmp, open(tmp, "w", encoding="utf-8", errors="backslashreplace") as fh:
            # backslashreplace: a file name that is not UTF-8 (a surrogate escape) is written as \udcff, not a crash.
            fh.write(content)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write ({exc.strerror or exc})") from None


def _is_stream(path: str) -> bool:
    """``path`` is (or is a symlink to) a character device, FIFO or socket: what is written to it is not a file."""
    import stat

    try:
        mode = os.stat(path).st_mode  # follows symlinks
    except OSError:
        return False
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        return True
    # /dev/stdout -> /proc/self/fd/1 when the shell redirected it to a file (> out.txt): that is the
    # shell's open file, written through it, not a file to replace under it.
    hop = os.path.abspath(path)
    for _ in range(40):
        if hop.startswith(("/proc/", "/dev/fd/")):
            return True
        if not os.path.islink(hop):
            return False
        hop = os.path.join(os.path.dirname(hop), os.readlink(hop))
    return False


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask

"""What the commands write to the terminal and to report files: escaped, one line per message, atomic.

Every command writes through these.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from oomdoctor.base.errors import ExitCode, OutputError

if TYPE_CHECKING:
    from types import TracebackType
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


def warn(message: str) -> None:
    echo(escape_controls(f"oomdoctor: warning: {message}"), err=True)


def fail(message: str, code: ExitCode) -> NoReturn:
    echo(escape_controls(f"oomdoctor: error: {message}"), err=True)
    sys.exit(int(code))


# A class, not contextlib.contextmanager: importing contextlib costs ~0.4 ms of a plain diagnose's start.
class atomic_target:  # used as a function: ``with atomic_target(path) as tmp``
    """A temporary path beside ``path`` to write; renamed over ``path`` (mode as the umask gives) when the block ends
    without an exception, removed when it raises. An interrupted write leaves no partial output."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.tmp = ""

    def __enter__(self) -> str:
        import tempfile

        from oomdoctor.input.files import OWN_HIDDEN_PREFIX

        directory, name = os.path.split(os.path.abspath(self.path))
        fd, self.tmp = tempfile.mkstemp(prefix=f"{OWN_HIDDEN_PREFIX}-{name}.", suffix=".partial", dir=directory)
        os.close(fd)
        return self.tmp

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc_type is None:
            try:
                os.chmod(self.tmp, 0o666 & ~_umask())
                os.replace(self.tmp, self.path)
                return
            except BaseException:
                self._discard()
                raise
        self._discard()

    def _discard(self) -> None:
        try:  # noqa: SIM105 - contextlib stays off the start path (~0.4 ms)
            os.unlink(self.tmp)
        except OSError:
            pass


def write_atomic(path: str, content: str) -> None:
    """Write a report through ``atomic_target``; OutputError when it cannot be written."""
    try:
        with atomic_target(path) as tmp, open(tmp, "w", encoding="utf-8", errors="backslashreplace") as fh:
            # backslashreplace: a file name that is not UTF-8 (a surrogate escape) is written as \udcff, not a crash.
            fh.write(content)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write ({exc.strerror or exc})") from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask

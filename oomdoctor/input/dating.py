"""Where the year of a year-less log comes from: a bundle's manifest, a dated line of the input, the file's mtime.

vLLM stamps its lines ``INFO 01-01 10:00:00``: month and day, no year. A fleet signal needs the incident's
Unix time, and the time of diagnosis is not it (an old log diagnosed today would page as a fresh OOM).
The strongest reference first: the recording times a bundle's manifest holds (``run``, ``collect``), then a
full-date stamp anywhere in the input's head (a Docker or Kubernetes prefix, an SGLang line, a traceback's
``[2026-...]``), then the file's modification time (a log is last written at or after its incident).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from oomdoctor.base import timestamps
from oomdoctor.base.errors import OomdoctorError
from oomdoctor.input.kinds import BUNDLE_KIND

# How much of a log is read for a dated line: the head, where launch lines and prefixes carry the date.
HEAD_BYTES = 1 << 20
_MANIFEST_BYTES = 1 << 20
_MANIFEST_TIMES = ("ended_unix", "snapshot_unix", "created_unix", "started_unix")
_DATED = re.compile(rb"(?<!\d)(?:19|20)\d\d-[01]\d-[0-3]\d[ T][0-2]\d:[0-5]\d:[0-5]\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?")


@dataclass(frozen=True, slots=True)
class Reference:
    """A Unix time the incident's year is read from, and where it came from (``manifest``, ``log``, ``mtime``)."""

    unix: float
    source: str

    @property
    def not_after(self) -> bool:
        # A file's mtime bounds the incident from above; the other two are beside it.
        return self.source == "mtime"


def reference(path: str) -> Reference | None:
    """The best reference time for ``path`` (a log file or a bundle directory); None for stdin or an unreadable path."""
    if not path or path == "-":
        return None
    if os.path.isdir(path):
        found = _manifest(os.path.join(path, "manifest.json"))
        return found or _mtime(path)
    # A log inside a bundle (server.log of `run`, logs/x.log of `collect`): the bundle's manifest dates it.
    parent = os.path.dirname(os.path.abspath(path))
    for folder in (parent, os.path.dirname(parent)):
        found = _manifest(os.path.join(folder, "manifest.json"))
        if found is not None:
            return found
    return _dated_line(path) or _mtime(path)


def _manifest(path: str) -> Reference | None:
    try:
        with open(path, "rb") as fh:
            data = json.loads(fh.read(_MANIFEST_BYTES))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("kind") != BUNDLE_KIND:
        return None
    for key in _MANIFEST_TIMES:
        value = data.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return Reference(float(value), "manifest")
    return None


def _dated_line(path: str) -> Reference | None:
    from oomdoctor.input.files import InputStats, iter_line_chunks

    read = 0
    try:
        for chunk in iter_line_chunks(path, InputStats(path=path)):
            m = _DATED.search(chunk)
            if m:
                unix = timestamps.epoch_seconds(m.group(0).decode("ascii"))
                if unix is not None:
                    return Reference(unix, "log")
            read += len(chunk)
            if read >= HEAD_BYTES:
                break
    except (OSError, OomdoctorError):  # an unreadable or damaged input has no dated line; its mtime may still say
        return None
    return None


def _mtime(path: str) -> Reference | None:
    try:
        return Reference(os.stat(path).st_mtime, "mtime")
    except OSError:
        return None


# A stamp at a line's start or after a level word (vLLM's "INFO 09-30 18:01:20", SGLang's "[2026-03-02 10:00:06").
_STAMP = re.compile(rb"(?<![\d-])(?:(?:19|20)\d\d-)?[01]\d-[0-3]\d[ T][0-2]\d:[0-5]\d:[0-5]\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?")
# How far a log is read for the stamp before its failure line (the failure is usually near the end of a
# log this size; beyond it the incident stays undated rather than the read unbounded).
SCAN_BYTES = 64 << 20


def stamp_before(path: str, line: int) -> str | None:
    """The last timestamp on lines 1..``line`` of ``path``: when a failure's own lines (a traceback) carry none,
    the server's last stamped line before it is the incident's time to the second or so."""
    from oomdoctor.input.files import InputStats, iter_line_chunks

    found: bytes | None = None
    seen = read = 0
    try:
        for chunk in iter_line_chunks(path, InputStats(path=path)):
            for raw in chunk.split(b"\n")[:-1] if chunk.endswith(b"\n") else chunk.split(b"\n"):
                seen += 1
                if seen > line:
                    return found.decode("ascii") if found else None
                m = _STAMP.search(raw, 0, 200)
                if m:
                    found = m.group(0)
            read += len(chunk)
            if read >= SCAN_BYTES:
                return None
    except (OSError, OomdoctorError):
        return None
    return found.decode("ascii") if found else None

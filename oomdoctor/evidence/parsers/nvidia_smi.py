"""nvidia-smi output pasted into a log or a bug report: the default table and the CSV queries.

Read from the lines the scanner hands over (a table beside a traceback, in an issue's code block, or a
file that is nothing else), as ``nvidia-smi`` prints them:

- the default table (``nvidia-smi``): its header (driver and CUDA versions), one block per GPU (index,
  name, bus id; then used / total MiB), and the process table (GPU, PID, type, name, MiB). Drivers
  since about 450 add the GI / CI columns; drivers since 530 widen the table to 89 columns and, where
  a figure is wider than its column, print its first digits and ``...`` ("11242... |", recorded on the
  lent H200 with driver 580.159.04: tests/fixtures/gpu-recorded/nvidia-smi-foreign.txt);
- ``--query-compute-apps=pid,process_name,used_memory --format=csv`` (what oomdoctor's own advice asks
  for) and ``--query-gpu=... --format=csv``: a header line naming the columns (``pid, process_name,
  used_gpu_memory [MiB]``), then one row per process or GPU. Without the header (``noheader``) only the
  compute-apps row of three columns ending in MiB can be told apart, and is read.

A table cut anywhere still gives what it holds: a GPU block without its memory line is a GPU of
unknown memory, a memory line whose GPU line was cut is a GPU of unknown name, a process row whose
figure was cut is a process of unknown memory. Every snapshot (a header, or a CSV header) is numbered,
so that two tables pasted one after the other (before and after a restart) stay apart. Pure: lines
in, events out.
"""

from __future__ import annotations

import re

from oomdoctor.base.evidence import Event, Line, LineRef
from oomdoctor.base.units import MIB
from oomdoctor.evidence.parsers.pasted import SMI_ANCHORS
from oomdoctor.input.patterns import lazy

KIND_SMI_DRIVER = "smi_driver"
KIND_SMI_GPU = "smi_gpu"
KIND_SMI_PROCESS = "smi_process"
KIND_SMI_NO_PROCESSES = "smi_no_processes"
KINDS = frozenset({KIND_SMI_DRIVER, KIND_SMI_GPU, KIND_SMI_PROCESS, KIND_SMI_NO_PROCESSES})

# The literals the scanner must find for these lines to be read at all (pasted.ANCHORS lists them):
# the header, a GPU block's first line (its bus id; the domain is eight hex digits, zero on every
# machine but a few virtual ones, whose GPU line is still read as the line after a memory line or the
# other GPU's rows), its memory line, the process rows (MiB, or a figure cut to "...") and the CSV
# headers and rows.
# The scanner's literals for this parser live in pasted.py, which routes lines here without importing it.
ANCHORS: tuple[bytes, ...] = SMI_ANCHORS

_HEADER_RE = lazy("NVIDIA-SMI", r"NVIDIA-SMI\s+(?P<smi>[\d.]+)(?:\s+Driver\s+Version:\s*(?P<driver>[\d.]+))?(?:\s+CUDA\s+Version:\s*(?P<cuda>[\d.]+|N/A))?")
_BUS = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]"
# "|   0  NVIDIA H200                    On  |   00000000:00:06.0 Off |" (persistence On/Off; WDDM/TCC on Windows).
_GPU_RE = lazy(":", rf"^\|\s*(?P<index>\d+)\s+(?P<name>\S.*?)\s+(?:On|Off|WDDM|TCC)\s*\|\s*(?P<bus>{_BUS})\b")
# "| N/A   38C    P0             81W /  700W |  112437MiB / 143771MiB |": the power cell tells it from MIG rows.
_MEMORY_RE = lazy(
    "MiB",
    r"^\|[^|]*?(?:\d+W|N/A|ERR!)\s*/\s*(?:\d+W|N/A|ERR!)\s*\|\s*(?P<used>\d+)MiB\s*/\s*(?:(?P<total>\d+)MiB)?",
)
# "|    0   N/A  N/A             542      C   /opt/torch/.venv/bin/python3          11242... |" (GI/CI since ~450),
# "|    0     12345      C   python                                     15000MiB |" (before).
_PROCESS_RE = lazy(
    None,
    r"^\|\s*(?P<gpu>\d+|N/A)\s+(?:(?:\d+|N/A)\s+(?:\d+|N/A)\s+)?(?P<pid>\d+)\s+(?P<type>C\+G|M\+C|C|G|M)\s+(?P<name>\S.*?)"
    r"(?:\s+(?:(?P<mem>\d+MiB|N/A)|(?P<shown>\d*)\.\.\.|(?P<cut>\d+M?i?)$))?\s*\|?\s*$",
)
_NO_PROCESSES_RE = lazy("No running processes found", r"No running processes found")
_CSV_HEADER_RE = lazy(None, r"^\s*(?:[\w.]+(?:\s*\[[^\]]*\])?\s*,\s*)+[\w.]+(?:\s*\[[^\]]*\])?\s*$")
# A compute-apps row without its header: "12345, python3, 75620 MiB".
_APPS_ROW_RE = lazy("MiB", r"^\s*(?P<pid>\d+)\s*,\s*(?P<name>[^,]+?)\s*,\s*(?P<mem>\d+)\s*MiB\s*$")
# No card has 2**44 MiB: a longer figure is corrupt and reads as unknown (as live.smi does).
_MAX_MIB = 1 << 44
# The columns that make a CSV header one of nvidia-smi's queries (others are any CSV a log may hold).
_KNOWN_COLUMNS = frozenset({"pid", "memory.total", "memory.used", "used_memory", "used_gpu_memory"})
_NA = {"", "[n/a]", "n/a", "[not found]", "not supported", "[not supported]", "[insufficient permissions]"}


def _mib(text: str | None) -> int | None:
    """'75620MiB', '75620 MiB', '75620' (nounits) to bytes; None for N/A, a cut figure or nonsense."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d{1,16})(?:\.\d+)?\s*(?:MiB)?\s*", text)
    if m is None:
        return None
    value = int(m.group(1))
    return value * MIB if value < _MAX_MIB else None


def _text(text: str | None) -> str | None:
    return None if text is None or text.strip().lower() in _NA else text.strip()


class NvidiaSmiParser:
    """Incremental: ``feed`` one line at a time, ``finish`` at the end of the input."""

    def __init__(self) -> None:
        self._snapshot = 0
        # The GPU line waiting for its memory line, the next line (index, name, bus id, ref).
        self._gpu: tuple[int, str | None, str, LineRef] | None = None
        # The CSV header in force (column names, units dropped; its line, and how many rows it had):
        # rows follow it line after line.
        self._columns: list[str] | None = None
        self._header: LineRef | None = None
        self._rows = 0
        self._last_line = -1

    def _flush_gpu(self) -> list[Event]:
        if self._gpu is None:
            return []
        index, name, bus, ref = self._gpu
        self._gpu = None
        return [Event(KIND_SMI_GPU, (ref,), {"snapshot": self._snapshot, "index": index, "name": name, "bus_id": bus, "source": "table"})]

    def feed(self, line: Line) -> list[Event]:
        # The scanner hands over anchored lines only: a GPU line's memory line and a CSV header's rows
        # are the lines right after it, so a gap ends them (a later line that looks alike is not a row).
        adjacent = line.ref.line == self._last_line + 1
        self._last_line = line.ref.line
        out = [] if adjacent else self._flush_gpu() + self._end_csv()
        msg = line.msg.strip()
        if not msg or (msg.endswith("|") and not msg.startswith(("|", "+"))):
            # The rest of a row a narrower terminal wrapped ("          0 |"), or the blank line left
            # where input.unwrap joined that rest to its row: the table goes on.
            return out + (self._end_csv() if not msg else [])
        if msg.startswith(("|", "+")):
            return out + self._end_csv() + self._table_line(line, msg)
        return out + self._flush_gpu() + self._csv_line(line, msg)

    def _end_csv(self) -> list[Event]:
        """The CSV in force ends; a compute-apps header with no row under it says no process held the GPUs."""
        header, columns, rows = self._header, self._columns, self._rows
        self._header, self._columns, self._rows = None, None, 0
        if header is not None and columns is not None and "pid" in columns and rows == 0:
            return [Event(KIND_SMI_NO_PROCESSES, (header,), {"snapshot": self._snapshot})]
        return []

    def _table_line(self, line: Line, msg: str) -> list[Event]:
        header = _HEADER_RE.search(msg)
        if header is not None:
            out = self._flush_gpu()
            self._snapshot += 1
            values = {"snapshot": self._snapshot, "smi_version": header.group("smi"), "driver_version": header.group("driver")}
            cuda = header.group("cuda")
            if cuda and cuda != "N/A":
                values["cuda_version"] = cuda
            return [*out, Event(KIND_SMI_DRIVER, (line.ref,), values)]
        gpu = _GPU_RE.search(msg)
        if gpu is not None:
            out = self._flush_gpu()
            self._snapshot = self._snapshot or 1  # a paste that starts below the header
            self._gpu = (int(gpu.group("index")), gpu.group("name").strip() or None, gpu.group("bus"), line.ref)
            return out
        memory = _MEMORY_RE.search(msg)
        if memory is not None:
            self._snapshot = self._snapshot or 1
            pending, self._gpu = self._gpu, None
            index, name, bus = pending[:3] if pending is not None else (None, None, None)
            refs = (pending[3], line.ref) if pending is not None else (line.ref,)
            values = {"snapshot": self._snapshot, "index": index, "name": name, "bus_id": bus, "used_bytes": _mib(memory.group("used")), "total_bytes": _mib(memory.group("total")), "source": "table"}
            return [Event(KIND_SMI_GPU, refs, values)]
        if _NO_PROCESSES_RE.search(msg):
            return [*self._flush_gpu(), Event(KIND_SMI_NO_PROCESSES, (line.ref,), {"snapshot": self._snapshot})]
        process = _PROCESS_RE.search(msg)
        if process is None:
            return []
        gpu_text = process.group("gpu")
        values = {
            "snapshot": self._snapshot,
            "gpu": int(gpu_text) if gpu_text.isdigit() else None,
            "pid": int(process.group("pid")),
            "type": process.group("type"),
            "name": process.group("name").strip(),
            # N/A (no permission, a container's view), cut by the paste: a process of unknown memory,
            # its PID and name are still the evidence.
            "used_bytes": _mib(process.group("mem")),
            "source": "table",
        }
        shown = process.group("shown")
        if shown:
            # "11242..." is a figure wider than the column: its first digits, and at least one more.
            values["used_at_least_bytes"] = int(shown) * 10 * MIB
        return [*self._flush_gpu(), Event(KIND_SMI_PROCESS, (line.ref,), values)]

    def _csv_line(self, line: Line, msg: str) -> list[Event]:
        if "," not in msg:
            return self._end_csv()
        if _CSV_HEADER_RE.search(msg):
            columns = [re.sub(r"\s*\[.*\]$", "", c.strip()) for c in msg.split(",")]
            if any(c in _KNOWN_COLUMNS for c in columns):
                out = self._end_csv()
                self._columns, self._header = columns, line.ref
                self._snapshot += 1
                return out
        if self._columns is not None and self._header is not None:
            rows = self._csv_row(line, msg, self._columns)
            if not rows:
                return self._end_csv()
            self._rows += 1
            # The header says what each cell is: the row cites it too.
            return [Event(e.kind, (*e.refs, self._header), e.values) for e in rows]
        bare = _APPS_ROW_RE.search(msg)
        if bare is None:
            return []
        values = {"snapshot": self._snapshot, "gpu": None, "pid": int(bare.group("pid")), "type": "C", "name": _text(bare.group("name")), "used_bytes": _mib(bare.group("mem")), "source": "csv"}
        return [Event(KIND_SMI_PROCESS, (line.ref,), values)]

    def _csv_row(self, line: Line, msg: str, columns: list[str]) -> list[Event]:
        # A process name holding a comma shifts the cells after it: only the cells before it line up,
        # so a row with more cells than columns keeps its first and its last (the figure) in place.
        cells = [c.strip() for c in msg.split(",")]
        if len(cells) > len(columns):
            cells = [*cells[: len(columns) - 1], cells[-1]]
        d = dict(zip(columns, cells, strict=False))
        if "pid" in d:
            if not d["pid"].isdigit():
                return []
            values = {
                "snapshot": self._snapshot,
                "gpu": None,
                "pid": int(d["pid"]),
                "type": "C",
                "name": _text(d.get("process_name")),
                "used_bytes": _mib(d.get("used_gpu_memory", d.get("used_memory"))),
                "source": "csv",
            }
            values.update({key: _text(d[key]) for key in ("gpu_uuid", "gpu_bus_id", "gpu_name") if _text(d.get(key))})
            return [Event(KIND_SMI_PROCESS, (line.ref,), values)]
        index = d.get("index", "")
        gpu = {
            "snapshot": self._snapshot,
            "index": int(index) if index.isdigit() else None,
            "name": _text(d.get("name")),
            "bus_id": _text(d.get("pci.bus_id")),
            "used_bytes": _mib(d.get("memory.used")),
            "total_bytes": _mib(d.get("memory.total")),
            "source": "csv",
        }
        gpu.update({key: _text(d[key]) for key in ("uuid", "driver_version") if _text(d.get(key))})
        if gpu["used_bytes"] is None and gpu["total_bytes"] is None:
            return []
        return [Event(KIND_SMI_GPU, (line.ref,), gpu)]

    def finish(self) -> list[Event]:
        return self._flush_gpu() + self._end_csv()


def read_text(text: str, path: str) -> list[Event]:
    """Every event of a saved nvidia-smi output (a .csv file given to diagnose), each line cited by its number."""
    parser = NvidiaSmiParser()
    out: list[Event] = []
    for number, raw in enumerate(text.splitlines(), 1):
        out += parser.feed(Line(ref=LineRef(path=path, line=number, text=raw[:4000]), msg=raw))
    return out + parser.finish()

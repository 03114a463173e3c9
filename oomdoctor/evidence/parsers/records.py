"""Failure records and their surroundings, whatever the engine: tracebacks, exception lines, cut marks.

A *record* is one traceback (with its chained causes) up to the exception line that ends it, or an
engine's "... hit an exception:" header. A record that never reaches its exception line is *open*:
when the input stops inside it, the paste was cut and the evidence is incomplete. Context lines
(serving traffic, loader progress, graph capture progress) are events of their own; the phase step
reads them. Pure: lines in, events out.
"""

from __future__ import annotations

import re

from oomdoctor.base.evidence import Event, Line, LineRef
from oomdoctor.base.oom_words import ALLOCATOR_WORDS
from oomdoctor.evidence.parsers.frames import FRAME_ANCHORS, FRAME_ANYWHERE, frame_of
from oomdoctor.input.patterns import lazy
from oomdoctor.input.scan import BEFORE_LINES

KIND_RECORD = "failure_record"
KIND_CUT = "cut_marker"
KIND_CONTEXT = "context_line"
KIND_CLEAN_END = "clean_end"

ANCHORS: tuple[bytes, ...] = (
    b"Traceback",
    *FRAME_ANCHORS,
    b"hit an exception",
    b"During handling of the above",
    b"direct cause of the following",
    b"[...",
    b"[\xe2\x80\xa6",
    b"<snip",
    b"snip>",
    b"--snip",
    b"truncated",
    b"omitted",
    b"Application shutdown complete",
    b"Shutting down",
    b"Exiting",
    # Progress bars that say which phase the server was in when a pasted traceback starts mid-way.
    b"Capturing",
    b"checkpoint shards",
    b"loading shards",
    b"while processing method",
    b"Error executing method",
    b"stage process",
    b"Stage ",
    b"CUDA error",
    b"Failed: Cuda error",
    b".cuh:",
)

# Failure lines whose preceding lines are read as context too (the scanner reads BEFORE_LINES of them):
# the serving traffic or loader progress printed just before a failure says which phase it hit.
BEFORE_ANCHORS: tuple[bytes, ...] = (
    b"Traceback",
    b"hit an exception",
    *ALLOCATOR_WORDS,
    b"while processing method",
    b"Error executing method",
    # A clean end's lines above say whether an error came first (uvicorn shuts down after the engine died too).
    b"Application shutdown complete",
    b"Shutting down gracefully",
    b"Exiting normally",
)

_TRACEBACK_RE = lazy("Traceback", r"Traceback \(most recent call last\)")
# The lines of an exception's message after its first (PyTorch's CUDA error adds three) that the record waits
# through for a chain header.
MESSAGE_LINES = 6
# The statement under a frame names the call in progress; when a paste is cut after it, that callee
# is the deepest frame we will ever see ("cuda_graph_memory_bytes = self.model_runner.capture_model()").
_CALLEE_RE = lazy("(", r"([A-Za-z_]\w*)\s*\(")
_HIT_RE = lazy("hit an exception", r"(?P<who>[\w.]+) hit an exception:?\s*(?P<rest>.*)$")
_CHAIN_RE = lazy(None, r"During handling of the above exception|The above exception was the direct cause")
# The line that ends a traceback: an exception class (dotted path allowed) at the start of the message.
_EXC_LINE_RE = lazy(
    None,
    # Ray names the remote cause in parentheses: "ray.exceptions.RayTaskError(OutOfMemoryError): ray::f() (pid=N, ...)".
    r"^(?P<name>(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*)?(?:Error|Exception|Exit|Interrupt|Failure|Warning|Fault|Timeout|Abort)(?:\([A-Z]\w*\))?)(?:\s*:\s*(?P<msg>.*))?$",
)
_CUT_RE = lazy(
    None,
    r"^\s*(?:\[\s*(?:\.\.\.|…)[^\]]*\]|\(\s*(?:\.\.\.|…)[^)]*\)|<\s*snip[^>]*>|-+\s*snip\s*-+|\.\.\.\s*\(?\d*\s*(?:lines?\s*)?(?:omitted|truncated|cut)\)?"
    r"|\[?\s*(?:output\s*)?truncated\s*\]?|\.\.\.|…)\s*$",
    re.I,
)
_OOM_TEXT_RE = lazy(None, r"out\s*of\s*memory|OutOfMemory|ALLOC_FAILED|NO_MEMORY", re.I)
# vLLM's worker wrappers name the method that failed before (or instead of) the traceback.
_WORKER_METHOD_RE = lazy(None, r"Exception in worker \S+ while processing method (?P<method>\w+)|Error executing method '(?P<method2>\w+)'")
# A CUDA error printed by C++ code, with no Python traceback of its own (FlashMLA/FlashInfer kernels,
# NCCL, custom ops): "CUDA error (csrc/x.cu:93): no kernel image is available for execution on the
# device", "CUDA error: an illegal memory access was encountered". An out-of-memory one is the torch
# parser's driver OOM; any other is a named terminal error, not an OOM.
_CUDA_ERROR_RE = lazy("CUDA error", r"^(?:\w+Error:\s*)?CUDA error(?:\s*\([^)]*\))?:\s*(?P<msg>(?!out of memory).+)$", re.I)
# vLLM's CUDACHECK in its own kernels (csrc/custom_all_reduce.cuh, 0.5-0.34: printf("Failed: Cuda error %s:%d
# '%s'\n", __FILE__, __LINE__, cudaGetErrorString(e)), then exit): "Failed: Cuda error /workspace/csrc/
# custom_all_reduce.cuh:164 'invalid argument'"; relays (dynamo) drop "Cuda error". An out-of-memory one is
# the torch parser's driver OOM.
_CUDACHECK_RE = lazy(("Failed: Cuda error", ".cuh:"), r"Failed: (?:Cuda error )?(?P<where>\S+\.cuh?:\d+) '(?P<msg>(?!out of memory)[^']+)'", re.I)
_CLEAN_END_RE = lazy(("shutdown complete", "Shutting down", "Exiting"), r"Application shutdown complete|Shutting down gracefully|Exiting normally")


class RecordParser:
    """Incremental: ``feed`` one line at a time, ``finish`` at the end of the input.

    While not ``pending`` it reads only lines holding one of ANCHORS, NEEDLES or (lower-cased)
    FOLDED_NEEDLES (pipeline/events.py routes the others past it): every pattern above holds one of them.
    """

    ANCHORS = ANCHORS
    # What it reads on a line without an anchor: a cut mark ("...", "(…)", "<SNIP>", "[Truncated]").
    NEEDLES: tuple[str, ...] = ("...", "…", "Error: ", "Exception: ")
    FOLDED_NEEDLES: tuple[str, ...] = ("snip", "truncated")
    REPEATING: tuple[tuple[bytes, str], ...] = ()

    def __init__(self) -> None:
        # Open records per rank: {refs, frames, chain, opened_by}
        self._open: dict[str | None, dict] = {}
        # The last exception line outside a record (a paste that starts at it, a relay's copy): (its line, name, message).
        self._bare_error: tuple[LineRef, str, str] | None = None

    @property
    def pending(self) -> bool:
        """A record is open (on some rank): its next lines are frames, source lines or its exception."""
        return bool(self._open)

    def _emit(self, rank: str | None, complete: bool, exc: str | None = None, exc_msg: str | None = None, end: LineRef | None = None) -> list[Event]:
        rec = self._open.pop(rank, None)
        if rec is None:
            return []
        refs = rec["refs"] + ([end] if end is not None else [])
        chain = tuple((n, m) for n, m, *_ in rec["chain"]) + (((exc, exc_msg or ""),) if exc else ())
        values = {
            "frames": tuple(rec["frames"][-40:]),
            "all_frames": len(rec["frames"]),
            "complete": complete,
            "opened_by": rec["opened_by"],
            "first_line": refs[0].line,
            "last_line": refs[-1].line,
            "chain": chain,
        }
        if exc:
            values["exception"] = exc
            values["exception_message"] = (exc_msg or "")[:500]
            values["is_oom"] = bool(_OOM_TEXT_RE.search(exc + " " + (exc_msg or "")))
        # The first exception of a chain is the cause; an OOM anywhere in the chain is an OOM.
        values["chain_has_oom"] = any(_OOM_TEXT_RE.search(f"{n} {m}") for n, m in chain)
        return [Event(KIND_RECORD, (refs[0], refs[-1]) if len(refs) > 1 else (refs[0],), values)]

    def _open_record(self, line: Line, opened_by: str) -> None:
        self._open[line.ref.rank] = {"refs": [line.ref], "frames": [], "chain": [], "opened_by": opened_by}

    def _after_exception_line(self, line: Line, rec: dict, stripped: str, out: list[Event]) -> bool:
        """The line after a record's exception line; True when it belongs to the record.

        The record stays open for one more line: a chain header ("During handling of the above
        exception") continues it, a blank line is passed over, anything else closes it (into ``out``)
        and is then read as a line of its own.
        """
        if _CHAIN_RE.search(line.msg):
            rec["chain"].append(rec.pop("ended"))
            rec["chaining"] = True
            rec["refs"][1:] = [line.ref]
            return True
        if not stripped:
            return True
        if self._continues_message(line, stripped, rec):
            # A message of several lines (PyTorch's CUDA errors add "CUDA kernel errors might be asynchronously
            # reported ...", "For debugging consider passing CUDA_LAUNCH_BLOCKING=1"): Python prints the chain
            # header after it, so the record waits for it past these lines.
            rec["continued"] = rec.get("continued", 0) + 1
            return True
        name, text, ref = rec.pop("ended")
        out.extend(self._emit(line.ref.rank, True, name, text, ref))
        return False

    @staticmethod
    def _continues_message(line: Line, stripped: str, rec: dict) -> bool:
        """Whether a line after an exception line is more of its message: no stamp of its own (a log line has one),
        not the start of another record or exception, within MESSAGE_LINES of it."""
        if rec.get("continued", 0) >= MESSAGE_LINES or line.ts is not None or line.system:
            return False
        if stripped.startswith(("Traceback", "File ")) or "hit an exception" in stripped or "method" in stripped:
            return False
        return not (_EXC_LINE_RE.match(stripped) or _CUDA_ERROR_RE.match(stripped) or _CUT_RE.match(stripped))

    def _open_worker_method(self, line: Line, wm: re.Match[str], rec: dict | None, out: list[Event]) -> None:
        """The header of a worker's failure without its message: a record whose only frame is the method."""
        if rec is not None:
            out.extend(self._emit(line.ref.rank, complete=False))
        self._open_record(line, "worker_method")
        self._open[line.ref.rank]["frames"].append(("<method>", wm.group("method") or wm.group("method2")))

    def _open_hit_exception(self, line: Line, hit: re.Match[str], rec: dict | None, out: list[Event]) -> None:
        """An engine's "X hit an exception:" header opens a record (closing an open one as cut)."""
        if rec is not None:
            out.extend(self._emit(line.ref.rank, complete=False))
        self._open_record(line, "hit_exception")
        rest = hit.group("rest").strip()
        em = _EXC_LINE_RE.match(rest) if rest else None
        if em:
            # "X hit an exception: RuntimeError: ..." on one line: a whole (frameless) record.
            out.extend(self._emit(line.ref.rank, True, em.group("name"), em.group("msg"), line.ref))

    def feed(self, line: Line) -> list[Event]:
        out: list[Event] = []
        msg = line.msg
        rank = line.ref.rank
        rec = self._open.get(rank)
        stripped = msg.strip()
        if rec is not None and rec.get("ended") is not None:
            if self._after_exception_line(line, rec, stripped, out):
                return out
            rec = None
        if "method" in msg:
            wm = _WORKER_METHOD_RE.search(msg)
            if wm and not _OOM_TEXT_RE.search(msg):
                self._open_worker_method(line, wm, rec, out)
                return out
        if "File " in msg and msg.count('File "') > 1:
            joined = FRAME_ANYWHERE.findall(msg)
            if joined:
                if rec is None:
                    self._open_record(line, "frames")
                    rec = self._open[rank]
                rec["frames"].extend(joined)
                rec["refs"][1:] = [line.ref]
                return out
        if "File " in msg:
            frame = frame_of(msg)
            if frame:
                if rec is None:
                    # Frames without their header line: the paste starts inside a traceback.
                    self._open_record(line, "frames")
                    rec = self._open[rank]
                rec["frames"].append(frame)
                rec["refs"][1:] = [line.ref]
                return out
        if "Traceback" in msg and _TRACEBACK_RE.search(msg):
            hit = "hit an exception" in msg and _HIT_RE.search(msg)
            if rec is not None and rec.get("chaining"):
                rec["chaining"] = False
                rec["refs"][1:] = [line.ref]
                return out
            if rec is not None:
                # A new traceback before the last one reached its exception line: that one was cut.
                out.extend(self._emit(rank, complete=False))
            self._open_record(line, "hit_exception" if hit else "traceback")
            return out
        if "hit an exception" in msg:
            hit = _HIT_RE.search(msg)
            if hit:
                self._open_hit_exception(line, hit, rec, out)
                return out
        if rec is not None and rec["frames"] and msg.startswith("    ") and not stripped.startswith(("^", "~", "File ")):
            callees = _CALLEE_RE.findall(stripped)
            if callees:
                rec["frames"].append(("<source>", callees[-1] if len(callees) == 1 else callees[0]))
            return out
        if rec is not None and not msg.startswith((" ", "\t")):
            em = _EXC_LINE_RE.match(stripped)
            if em:
                rec["ended"] = (em.group("name"), em.group("msg") or "", line.ref)
                rec["refs"][1:] = [line.ref]
                return out
        if rec is None and ("CUDA error" in msg or "Failed: " in msg) and not _OOM_TEXT_RE.search(msg):
            ce = _CUDA_ERROR_RE.match(stripped) if "CUDA error" in msg else None
            ce = ce or _CUDACHECK_RE.search(stripped)
            if ce:
                values = {
                    "frames": (),
                    "all_frames": 0,
                    "complete": True,
                    "opened_by": "cuda_error",
                    "first_line": line.ref.line,
                    "last_line": line.ref.line,
                    "chain": (("CUDA error", ce.group("msg")),),
                    "exception": "CUDA error",
                    "exception_message": ce.group("msg")[:500],
                    "is_oom": False,
                    "chain_has_oom": False,
                }
                out.append(Event(KIND_RECORD, (line.ref,), values))
                return out
        if stripped and _CUT_RE.match(stripped):
            out.append(Event(KIND_CUT, (line.ref,), {"text": stripped[:80]}))
            return out
        out.extend(self._end_of_run(line, stripped, outside=rec is None))
        return out

    def _end_of_run(self, line: Line, stripped: str, outside: bool) -> list[Event]:
        """An exception line outside a record (kept), or a clean end: the error's if one came just before it."""
        msg = line.msg
        if outside and not msg.startswith((" ", "\t")) and ("Error" in msg or "Exception" in msg):
            em = _EXC_LINE_RE.match(stripped)
            if em and em.group("msg") and em.group("name").endswith(("Error", "Exception")):
                self._bare_error = (line.ref, em.group("name"), em.group("msg"))
        if not _CLEAN_END_RE.search(msg):
            return []
        err = self._bare_error
        if err is not None and 0 < line.ref.line - err[0].line <= BEFORE_LINES and err[0].path == line.ref.path:
            # The server stopped after an error: the end is the error's, not a clean one.
            return [Event(KIND_CLEAN_END, (line.ref, err[0]), {"after_error": err[1], "error_message": err[2][:500]})]
        return [Event(KIND_CLEAN_END, (line.ref,), {})]

    def finish(self) -> list[Event]:
        out: list[Event] = []
        for rank in list(self._open):
            rec = self._open[rank]
            ended = rec.pop("ended", None)
            if ended is not None:
                out.extend(self._emit(rank, True, *ended))
            else:
                out.extend(self._emit(rank, complete=False))
        return out

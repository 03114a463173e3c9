"""PyTorch OOM evidence: the caching-allocator message (three eras), driver-level and host OOMs,
and the traceback frames that tell where the allocation failed.

Field patterns allow any whitespace (``\\s*``) between words: pasted messages are hard-wrapped
mid-word or re-wrapped by hand, and continuation lines are joined without a separator.
"""

from __future__ import annotations

import functools
import re
from collections import deque
from typing import TYPE_CHECKING

from oomdoctor.base.evidence import Event, Line, LineRef, ProcessUsage
from oomdoctor.base.oom_words import ALLOCATOR_WORDS, SIZE
from oomdoctor.evidence import phase as phase_tables
from oomdoctor.evidence.parsers import oom_signatures as sig
from oomdoctor.evidence.parsers.captures import named, typed
from oomdoctor.evidence.parsers.frames import FRAME_ANCHORS, frame_of
from oomdoctor.input.patterns import LazyRegex, lazy

if TYPE_CHECKING:
    import re

KIND_OOM = "torch_oom"
KIND_DRIVER_OOM = "driver_oom"
KIND_HOST_OOM = "host_oom"
KIND_GGML_BUFFER = "ggml_buffer"

ANCHORS: tuple[bytes, ...] = (
    *ALLOCATOR_WORDS,
    b"CUDA calloc",
    b"Traceback",
    *FRAME_ANCHORS,
    b"Killed",
    b"NO_MEMORY",
    b"can't allocate memory",
    b"exit code",
    b"exitcode",
    b"OOMKilled",
    b"SIGKILL",
    b"Tried to allocate",
    b"insufficient GPU memory",
    b"cudaMalloc",
    b"would exceed allowed memory",
    b"Not enough memory to handle",
    b"Cannot allocate memory",
    b"memory pressure",
    b"running low on memory",
    b"Memory on the node",
    b"ray-oom-prevention",
    b"OUT_OF_MEMORY",
    b"cudaErrorMemoryAllocation",
    b"oom-kill event",
    b"oom_kill",
    b"Out Of Memory",
    b"result 'oom-kill'",
    b"killed by the OOM killer",
    b" killed ",
    b"alloc_buffer: failed to allocate buffer",
    b"unable to allocate CPU buffer",
    b"Cuda Error",
    b"Cuda error",
    b"Failed: Cuda error",
    b"in function ggml_cuda_pool",
    b"killed as a result of limit of",
    b"signal: killed",
    # The host's own allocation failures (host_allocation) and the kill reports that name no "exit code".
    b"DefaultCPUAllocator",
    b"MemoryError",
    b"bad_alloc",
    b"paging file is too small",
    b"os error 1455",
    b"code 137",
    b"status 137",
    b"signal: Killed",
    # A runtime's own failed allocation of device memory (AWS Neuron's "Failed to alloc DEVICE memory", the last
    # resort's statement); not every "failed to allocate" (llama.cpp's compute-buffer lines are ggml's).
    b"alloc DEVICE memory",
    b"allocate device memory",
    b"allocate GPU memory",
    # Other runtimes' device OOMs (oom_signatures.DRIVER_PATTERNS) and ollama's host check.
    b"OOM when allocating",
    b"memory allocation of",
    b"unable to allocate",
    b"more system memory",
    b"too large for system",
    b"A worker died or was killed",
    b"killed by SIGKILL by OOM killer",
    b"reaped process",
    b"memory users:",
    b"HSA_STATUS_ERROR_OUT_OF_RESOURCES",
    b"MEM(GB)",
    b"Attempting to allocate",
)

_SIZE = SIZE

# --- the allocator message -------------------------------------------------------------------
# The words of the caching allocator's warning before it raises (below); the message's start, its hint and the
# parser's hold of it all read them.
_WARNING_WORDS = r"memory\s*allocation\s*failed\s*with\s*OOM"
_OOM_START_RE = named(None,
    # Device words of the allocator forks: ROCm (HIP), Ascend (NPU), Intel (XPU; DPCPP in old IPEX), Cambricon
    # (MLU), Moore Threads (MUSA), Apple ("MPS backend out of memory").
    # A whole word only: "NVIDIA MPS out of memory" is the Multi-Process Service, and Apple's always says "backend".
    r"(?<![A-Za-z])(?P<backend_str>CUDA|HIP|NPU|XPU|MLU|MUSA|DPCPP|MPS(?=\s*backend))\s*(?:backend\s*)?out\s*of\s*memory\b"
    r"|(?<![A-Za-z])Out\s*of\s*memory\.\s*Tried\s*to\s*allocate"
    # The allocator body without its header (a re-wrapped or cut paste): a byte size, then the device clause.
    # SGLang's token pool says "Try to allocate N tokens" and never matches.
    r"|(?<![A-Za-z])Tried\s*to\s*allocate\s*\d+(?:\.\d+)?\s*(?:bytes|[KMGT]i?B)\s*[.(]?\s*\(?\s*(?:GPU|NPU|XPU|MLU|device)\s*\d+\s*(?:has|;)"
    # The caching allocator's own warning (c10 CUDACachingAllocator.cpp, TORCH_WARN, PyTorch 2.8 and later), printed
    # when a device allocation fails, before the OutOfMemoryError (or alone when a caller catches it, or a paste kept
    # only it): "memory allocation failed with OOM on device 5 while trying to allocate 671088640 bytes (free:
    # 513736704, total: 85095874560)".
    rf"|(?<![A-Za-z]){_WARNING_WORDS}\s*on\s*device\b"
)
# Every match of _OOM_START_RE holds one of these, and they are found fast: the full pattern, with its
# look-behind tried at every position, took ~100 us on a 300-character line that holds no OOM.
_OOM_START_HINT = lazy(("memory", "allocate"), rf"out\s*of\s*memory|Out\s*of\s*memory|Tried\s*to\s*allocate|{_WARNING_WORDS}")
_OOM_COMPLETE_RE = lazy(None,
    r"reserved\s*by\s*PyTorch\s*but\s*unallocated|reserved\s*in\s*total\s*by\s*PyTorch\s*\)|\bcached\s*\)"
    r"|See\s*documentation|PYTORCH_(?:CUDA_)?ALLOC_CONF|PYTORCH_MPS_HIGH_WATERMARK_RATIO|total:\s*\d+\s*\)"
)
# Group names say unit and output key (captures.py): a *_size group is "2.00 GiB" read as capacity_bytes.
# A request is read as a request (``_ask``): one larger than any card is the diagnosis, not a misprint.
_REQUESTED_RE = named("allocate", rf"Tried\s*to\s*allocate\s*(?P<requested_ask>{_SIZE})")
# Era 2 spells "capacity"; era 1 printed "capacty". PyTorch 2.3 printed the device index as a character
# (PR 123984): that control character is the index (GPU 3 printed \x03); a blank one (GPU 9, a tab) or
# one a paste dropped leaves it unknown. Intel's first in-tree XPU allocator printed no "of which ... is free".
_ERA2_RE = named("total",
    rf"(?:GPU|NPU|XPU|MLU|device)\s*(?P<device_n>\d+)?(?P<device_char_str>[\x00-\x1f])?\s*has\s*a\s*total\s*capac(?P<era2_flag>i)?ty\s*of\s*(?P<capacity_size>{_SIZE})"
    rf"(?:\s*of\s*which\s*(?P<free_size>{_SIZE})\s*is\s*free)?"
)
# Intel's extension (IPEX) printed the era-0 form without "free". Before "reserved in total by PyTorch"
# (PyTorch <= 1.3, and old torch_npu) the last figure was "cached": reserved minus allocated, not the total.
_ERA0_RE = named("total",
    rf"\(\s*(?:GPU|NPU|XPU|MLU)\s*(?P<device_n>\d+)\s*;\s*(?P<capacity_size>{_SIZE})\s*total\s*capac(?:i)?ty\s*;\s*"
    rf"(?:(?P<allocated_size>{_SIZE})\s*already\s*allocated\s*;\s*)?(?:{_SIZE}\s*current\s*active\s*;\s*)?(?:(?P<free_size>{_SIZE})\s*free\s*;\s*)?"
    rf"(?:(?P<allowed_size>{_SIZE})\s*allowed\s*;\s*)?(?P<reserved_size>{_SIZE})\s*(?:reserved\s*in\s*total\s*by\s*PyTorch|(?P<cached_flag>cached))"
)
_WARNING_START_RE = lazy(None, _WARNING_WORDS)
# The allocator warning's figures, in bytes: the device, the request, and the device's free and total memory.
_WARNING_FIGURES_RE = named("OOM",
    r"OOM\s*on\s*device\s*(?P<device_n>\d+)\s*while\s*trying\s*to\s*allocate\s*(?P<requested_bytes>\d+)\s*bytes"
    r"(?:\s*\(\s*free:\s*(?P<free_bytes>\d+)\s*,\s*total:\s*(?P<capacity_bytes>\d+)\s*\))?"
)
# "Process has X" without a PID (a redacted or cut paste) is a process of unknown identity, not this one.
_PROCESS_RE = named("memory", rf"(?:Process\s*(?P<pid_n>\d+)|(?P<this_flag>this\s*process)|Process)\s*has\s*(?P<used_size>{_SIZE})\s*memory\s*in\s*use")
_ALLOWED_RE = named("allowed", rf"(?P<allowed_size>{_SIZE})\s*allowed\s*;")
_ALLOCATED_RE = named("allocated", rf"Of\s*the\s*allocated\s*memory\s*(?P<allocated_size>{_SIZE})\s*is\s*allocated\s*by\s*PyTorch")
_PRIVATE_RE = named("private", rf"with\s*(?P<private_pool_size>{_SIZE})\s*allocated\s*in\s*private\s*pools")
_UNALLOCATED_RE = named("unallocated", rf"and\s*(?P<reserved_unallocated_size>{_SIZE})\s*is\s*reserved\s*by\s*PyTorch\s*but\s*unallocated")
# The order parse_oom_message has always listed an era-0 message's implausible sizes in.
_ERA0_IMPLAUSIBLE_ORDER = ("capacity_bytes", "free_bytes", "allocated_bytes", "reserved_bytes", "allowed_bytes")
_EXC_RE = lazy(None, r"([A-Za-z_][\w.]*(?:Error|Exception))\s*(?::|\(\s*['\"])\s*(?:[\w ]+:\s*)?$")

_WRAPPERS: tuple[tuple[str, LazyRegex], ...] = (
    ("cuda_graph_capture", lazy(None, r"Capture cuda graph failed|CUDA graph capture failed|capture failed", re.I)),
    ("repr", lazy(None, r"OutOfMemoryError\(\s*['\"]")),
    ("json_body", lazy(None, r"\{\s*\"(?:error|detail|message)\"")),
    ("worker", lazy(None, r"Worker failed with error")),
    ("engine", lazy(None, r"EngineGenerateError|EngineDeadError|MQEngineDeadError")),
    ("pytest", lazy(None, r"^FAILED \S+::")),
)

_TRACEBACK_RE = lazy("Traceback", r"Traceback \(most recent call last\)")
# A traceback's exception line naming PyTorch's OOM class, with its colon (not a source line: those are
# indented; not the bare class name a bug report quotes in prose). Ray re-raises a remote task's exception
# as RayTaskError with the cause's class name in parentheses: "ray.exceptions.RayTaskError(OutOfMemoryError):
# ray::RayWorkerWrapper.execute_method() (pid=341, ...)" is torch's OOM in a worker (Ray's own memory-monitor
# kill is a bare ray.exceptions.OutOfMemoryError, the host parser's).
_OOM_EXCEPTION_LINE_RE = lazy("OutOfMemoryError", r"(?P<exc>torch\.(?:cuda\.)?OutOfMemoryError|(?:ray\.exceptions\.)?Ray\w*Error\(OutOfMemoryError\)):")
_METHOD_RE = lazy("processing method", r"while processing method (\w+)")

def _oom_start(text: str) -> re.Match[str] | None:
    """Where the allocator message starts in ``text`` (``_OOM_START_RE``), tried only where its hint is."""
    return _OOM_START_RE.search(text) if _OOM_START_HINT.search(text) else None


def _wrapper_of(text: str) -> str | None:
    return next((name for name, pattern in _WRAPPERS if pattern.search(text)), None)


def classify_frames(frames: tuple[tuple[str, str], ...]) -> tuple[str, str | None]:
    """Stage and phase (v1 vocabulary) of a failed allocation from its traceback frames (file, function).

    The frame table is data (``data/phases.toml``, read by the phase step); this keeps the coarse
    v1 names rules use: stage weight_loading / kv_pool / cuda_graph / encoder / forward, and for a
    forward pass its phase, prefill or decode.
    """
    found = phase_tables.classify_frames(frames)
    if found is None:
        return "unknown", None
    stage = phase_tables.legacy_stage(found)
    if found == "profiling":
        return "profile", None  # vLLM's facts turn this into a forward pass in its profile phase
    if found in ("prefill", "decode"):
        return stage, found
    if stage in ("forward", "cuda_graph"):
        # A graph capture or a generic forward: the deepest prefill/decode frame names the pass.
        for rule in phase_tables.tables().frames:
            if rule.phase in ("prefill", "decode") and rule.func is not None and any(rule.func.search(func) for _, func in frames):
                return stage, rule.phase
    return stage, None


def parse_oom_message(text: str) -> dict:
    """Numbers of one (joined) allocator OOM message; absent clauses are simply missing keys."""
    return dict(_parsed_oom_message(text))


# A server whose every request fails prints the same message thousands of times (300,000 lines took
# minutes): each distinct text is parsed once. Its values are ints, strings and tuples; callers get a copy.
@functools.lru_cache(maxsize=256)
def _parsed_oom_message(text: str) -> dict:
    values: dict = {}
    bad: list[str] = []

    def sizes(m: re.Match[str], order: tuple[str, ...] | None = None) -> dict:
        # typed() with the implausible sizes (None in its values) listed in ``bad``.
        found: dict[str, str] = {}
        v = typed(m, found)
        bad.extend(found[k] for k in (order or found) if k in found)
        return v

    m = _OOM_START_RE.search(text)
    values["backend"] = (typed(m)["backend"] if m else None) or "CUDA"
    requested = _REQUESTED_RE.search(text)
    if requested:
        values.update(sizes(requested))
    era2 = _ERA2_RE.search(text)
    era0 = _ERA0_RE.search(text)
    if era2:
        v = sizes(era2)
        values["era"] = 2 if v.pop("era2") else 1
        char = v.pop("device_char", None)
        if v.get("device") is None and char:
            v["device"] = ord(char)
        values.update(v)  # device, capacity_bytes, free_bytes
    elif era0:
        v = sizes(era0, _ERA0_IMPLAUSIBLE_ORDER)
        values["era"] = 0
        values["device"] = v.get("device")
        values["capacity_bytes"] = v.get("capacity_bytes")
        values["free_bytes"] = v.get("free_bytes")
        allocated, reserved = v.get("allocated_bytes"), v.get("reserved_bytes")
        if allocated is not None:
            values["allocated_bytes"] = allocated
        if reserved is not None and v.get("cached"):
            # "X cached" is what the allocator holds beyond what is allocated.
            values["reserved_unallocated_bytes"] = reserved
            if allocated is not None:
                values["reserved_bytes"] = allocated + reserved
        elif reserved is not None:
            values["reserved_bytes"] = reserved
            if allocated is not None:
                values["reserved_unallocated_bytes"] = max(reserved - allocated, 0)
        if era0.group("allowed_size"):
            values["allowed_bytes"] = v.get("allowed_bytes")  # None when implausible: then no other "allowed" is read
    elif (warning := _WARNING_FIGURES_RE.search(text)) is not None:
        values.update(typed(warning))  # device, requested_bytes, free_bytes, capacity_bytes
    processes: list[ProcessUsage] = []
    for pm in _PROCESS_RE.finditer(text):
        p = sizes(pm)
        if p["used_bytes"] is None:
            continue
        processes.append(ProcessUsage(pid=p["pid"], used_bytes=p["used_bytes"], is_self=bool(p["this"])))
    if processes:
        values["processes"] = tuple(processes)
    if "allowed_bytes" not in values:
        allowed_m = _ALLOWED_RE.search(text)
        if allowed_m:
            values.update(sizes(allowed_m))
    for pattern in (_ALLOCATED_RE, _PRIVATE_RE, _UNALLOCATED_RE):
        found = pattern.search(text)
        if found:
            values.update(sizes(found))
    values["wrapper"] = _wrapper_of(text)
    values["complete"] = bool(_OOM_COMPLETE_RE.search(text))
    if bad:
        values["implausible"] = tuple(bad)
    return {k: v for k, v in values.items() if v is not None}


class TorchParser:
    """Incremental parser: ``feed`` one line at a time, ``finish`` at the end; no I/O.

    While not ``pending`` it reads only lines holding one of ANCHORS, NEEDLES or (lower-cased)
    FOLDED_NEEDLES (pipeline/events.py routes the others past it): every pattern above holds one of them.
    """

    ANCHORS = ANCHORS
    # What it reads on a line without an anchor: the allocator message with other blanks between its
    # words (_OOM_START_HINT), cuBLAS's other status, a cgroup's kill, exit codes and signals of a kill.
    NEEDLES: tuple[str, ...] = ("memory", "allocate", "CUBLAS_STATUS_NOT_INITIALIZED", "oom-kill:", "exit", "signal 9")
    FOLDED_NEEDLES: tuple[str, ...] = ("cusolver_status_alloc_failed",)
    REPEATING: tuple[tuple[bytes, str], ...] = ()

    def __init__(self) -> None:
        self._frames: dict[str | None, deque[tuple[str, str]]] = {}
        # (line refs, joined message, rank, exception name, wrapper seen before the message)
        self._pending: tuple[list[LineRef], str, str | None, str | None, str | None] | None = None
        # Allocator warnings not yet followed by an allocator message (_emit_pending).
        self._warnings: list[Event] = []

    @property
    def pending(self) -> bool:
        """An allocator message is being joined with the lines after it."""
        return self._pending is not None

    def _frames_of(self, rank: str | None) -> deque[tuple[str, str]]:
        frames = self._frames.get(rank)
        if frames is None:
            frames = self._frames[rank] = deque(maxlen=80)
        return frames

    def _emit_pending(self) -> list[Event]:
        if self._pending is None:
            return []
        refs, text, rank, exc, wrapper = self._pending
        self._pending = None
        values = parse_oom_message(text)
        if wrapper:
            values["wrapper"] = wrapper
        if exc:
            values["exception"] = exc
        frames = tuple(self._frames_of(rank))
        method = _METHOD_RE.search(refs[0].text)
        if method:
            # vLLM's multiprocess workers print "... while processing method load_model: <OOM>" and the
            # traceback only after the message.
            frames = (*frames, ("", method.group(1)))
        stage, phase = classify_frames(frames)
        values["stage"] = stage
        if phase:
            values["phase"] = phase
        values["frames"] = frames[-40:]
        values["message"] = text[:2000]
        event = Event(KIND_OOM, tuple(refs), values)
        if _WARNING_START_RE.match(text):
            # The allocator's warning comes before the traceback and the OutOfMemoryError that carry the frames and
            # every figure: it is held, and a message after it (the same failure's) replaces it. Alone (a paste that
            # kept only the warning) it is the failure, at the end of the input.
            self._warnings.append(event)
            return []
        self._warnings.clear()
        return [event]

    @staticmethod
    def _continues(line: Line, rank: str | None) -> bool:
        msg = line.msg.strip()
        if not msg or line.ts is not None or line.ref.rank != rank:
            return False
        return not (msg.startswith(("Traceback", "File ", "During handling", "The above exception", "[")) or _oom_start(msg))

    def feed(self, line: Line) -> list[Event]:
        out: list[Event] = []
        msg = line.msg
        if self._pending is not None:
            refs, text, rank, exc, wrapper = self._pending
            if self._continues(line, rank) and len(refs) < 6:
                # Blanks at the end of a piece are a console's padding, not the message's.
                text = text.rstrip() + msg.strip()
                refs.append(line.ref)
                self._pending = (refs, text, rank, exc, wrapper)
                if _OOM_START_RE.search(text) and _OOM_COMPLETE_RE.search(text):
                    out.extend(self._emit_pending())
                return out
            out.extend(self._emit_pending())

        if "File " in msg:
            frame = frame_of(msg)
            if frame:
                self._frames_of(line.ref.rank).append(frame)
                return out
        if "Traceback" in msg and _TRACEBACK_RE.search(msg):
            self._frames_of(line.ref.rank).clear()

        start = _oom_start(msg)
        if start:
            head = msg[: start.start()]
            exc_m = _EXC_RE.search(head)
            text = msg[start.start():]
            pending_refs = [line.ref]
            # The wrapper is named by what precedes the message on its line; parse_oom_message sees only the message.
            self._pending = (pending_refs, text, line.ref.rank, exc_m.group(1) if exc_m else None, _wrapper_of(head))
            if _OOM_COMPLETE_RE.search(text):
                out.extend(self._emit_pending())
            return out

        bare = _OOM_EXCEPTION_LINE_RE.match(msg.strip())
        if bare:
            # The exception line itself, its allocator message cut off or not yet printed: an OOM whose
            # numbers are missing (the message is incomplete), read with the frames above it.
            self._pending = ([line.ref], msg.strip()[bare.end() :].strip(), line.ref.rank, bare.group("exc"), None)
            return out

        for pattern, source in sig.DRIVER_DISPATCH.candidates(msg):
            dm = pattern.search(msg)
            if dm:
                out.append(self._driver_oom(line, msg, source, dm.groupdict()))
                return out
        if "in function ggml_cuda_pool" in msg:
            pm = sig.GGML_POOL_RE.search(msg)
            if pm:
                out.append(Event(KIND_GGML_BUFFER, (line.ref,), {"usage": "compute", "buffer": pm.group("func"), "size_bytes": None}))
                return out
        if "failed to allocate" in msg:
            gm = sig.GGML_BUFFER_RE.search(msg)
            if gm:
                usage = sig.GGML_USAGE.get(gm.group("func"), "tensors")
                out.append(Event(KIND_GGML_BUFFER, (line.ref,), {"usage": usage, "buffer": gm.group("buffer"), "size_bytes": int(gm.group("size"))}))
                # Not the end of the line's news: a relay (ollama's "llama runner process has terminated: ...") joins
                # the runner's stderr lines into one, and the host's own refusal may stand beside the buffer's.
        for pattern, (source, strength) in sig.HOST_DISPATCH.candidates(msg):
            hm = pattern.search(msg)
            if hm:
                values: dict[str, object] = {"source": source, "strength": strength}
                if source == "kernel_oom_killer":
                    values["pid"] = int(hm.group(1))
                    values["process_name"] = hm.group(2)
                    if hm.group(3):
                        values["rss_bytes"] = int(hm.group(3)) * 1024
                if source == "cpu_allocator" and hm.group(1):
                    values["requested_bytes"] = int(hm.group(1))
                out.append(Event(KIND_HOST_OOM, (line.ref,), values))
                return out
        return out

    def stated_oom(self, line: Line) -> list[Event]:
        """The last resort (oom_signatures.OOM_STATEMENT_RE): an OOM stated by a runtime no table knows, with no numbers.

        Asked only for a line no parser and no catalogue entry read (pipeline/events.py): SGLang's "Out of memory.
        Try to lower your batch size." is the SGLang parser's, "Decode out of memory happened" the catalogue's. A
        line this parser holds as part of an allocator message it is still joining is not one either.
        """
        statement = line.msg.strip()
        if self._pending is not None or not sig.OOM_STATEMENT_RE.search(statement):
            return []
        # llama.cpp names the function on each line it logs ("llama_init_from_model: failed to allocate compute buffers:
        # out of memory"): its flags, not PyTorch's, are the levers then (advice/generic.is_llama_cpp).
        source = "ggml_statement" if sig.LLAMA_CPP_TAG_RE.match(statement) else "oom_statement"
        return [self._driver_oom(line, statement, source)]

    def _driver_oom(self, line: Line, msg: str, source: str, figures: dict[str, str | None] | None = None) -> Event:
        """A device OOM without the allocator's numbers (but those its own message gives), its stage from the frames
        above it (or the message's own)."""
        frames = tuple(self._frames_of(line.ref.rank))
        stage, phase = classify_frames(frames)
        driver: dict[str, object] = {"source": source, "stage": stage, "frames": frames[-40:]}
        driver.update((key, int(value)) for key, value in (figures or {}).items() if value is not None)
        if stage == "unknown" and source in sig.SOURCE_STAGE:
            stage = phase = driver["stage"] = sig.SOURCE_STAGE[source]
            driver["stage_source"] = "message"
        if sig.ASYNC_CALL_RE.search(msg):
            driver["call"] = "cudaMallocAsync"
        if phase:
            driver["phase"] = phase
        return Event(KIND_DRIVER_OOM, (line.ref,), driver)

    def finish(self) -> list[Event]:
        out = self._emit_pending()
        out.extend(self._warnings)
        self._warnings = []
        return out

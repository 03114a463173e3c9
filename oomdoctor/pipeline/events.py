"""One input read into its events: the scanned lines through every parser, into a store bounded however long the log."""

from __future__ import annotations

import functools
import re
from collections import OrderedDict, deque
from typing import TYPE_CHECKING

from oomdoctor.base.evidence import KIND_REPEATS, Event
from oomdoctor.base.oom_words import FAILURE_WORDS
from oomdoctor.evidence import phase as phase_step
from oomdoctor.evidence.parsers import engine_messages as em
from oomdoctor.evidence.parsers import pasted
from oomdoctor.evidence.parsers import records as rc
from oomdoctor.evidence.parsers import sglang as sg
from oomdoctor.evidence.parsers import torch_oom as tt
from oomdoctor.evidence.parsers import vllm as vl
from oomdoctor.evidence.runs import COLLAPSED_RUNS, RUN_MARKER_KINDS, RunSegmenter, is_oom_event
from oomdoctor.input.files import InputStats, iter_line_chunks
from oomdoctor.input.issue_input import issue_chunks
from oomdoctor.input.paste import repaired
from oomdoctor.input.scan import Reading, scan_lines

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Protocol

    from oomdoctor.base.evidence import Line, LineRef
    from oomdoctor.inference.nodes import NodeScan

    class _Parser(Protocol):
        def feed(self, line: Line) -> list[Event]: ...

        def finish(self) -> list[Event]: ...


ANCHORS: tuple[bytes, ...] = tuple(dict.fromkeys(sg.ANCHORS + vl.ANCHORS + tt.ANCHORS + rc.ANCHORS + em.anchors() + pasted.ANCHORS))
# Each anchor's bit in a scanned line's mask (looked up once per parser of every input, 128 rank files included).
_ANCHOR_BITS: dict[bytes, int] = {a: 1 << i for i, a in enumerate(ANCHORS)}
_FRAME_PREFIXES = ("File ", "Traceback", "During handling", "The above exception")
# Events that cite a line for its place in a failure's shape (a traceback's end, an engine's failure notice), not
# for a message of their own: the catalogue still reads such a line.
_STRUCTURAL_KINDS = frozenset({rc.KIND_RECORD, vl.KIND_ENGINE_FAILED})


# Kinds that repeat for as long as a server runs (one per retraction, preemption, failed encoder
# request, tqdm redraw); of these only the first and the most recent are kept, with a count, so that
# memory stays flat on logs of days.
_REPEATING = {
    sg.KIND_RETRACT,
    sg.KIND_GRAPH_BAR,
    sg.KIND_KV_ALLOC_DETAIL,
    sg.KIND_OMNI_ENCODER_FAIL,
    sg.KIND_CAPTURE_ADVICE,
    vl.KIND_PREEMPT,
    vl.KIND_KV_AVAILABLE,
    tt.KIND_OOM,
    tt.KIND_DRIVER_OOM,
    tt.KIND_HOST_OOM,
    rc.KIND_RECORD,
    rc.KIND_CUT,
    rc.KIND_CONTEXT,
    em.KIND_ENGINE_NOTICE,
}
# Of a compacted run's start line only the values an old incident's class can hang on are kept.
_SLIM_KEEP = frozenset({"mem_fraction_static", "tp_size", "gpu_memory_utilization", "version", "v1"})
_KEEP_FIRST = 16
_KEEP_LAST = 64
_UNPARSED_WINDOW = 64
# Log lines (not frames, not failures) that said nothing, kept to read their repeats no more.
_QUIET_KEPT = 4096
_FAILURE_WORDS = tuple(w.decode() for w in FAILURE_WORDS)
_FULL_RUNS = 64


class _EventStore:
    """Events in log order, with repeating kinds bounded to their first and last occurrences.

    A crash loop restarts the server thousands of times; only the last _FULL_RUNS runs keep all
    their events, older ones keep their start line (and the other lines runs.RunSegmenter reads)
    and their OOM events (enough to list them as incidents), so memory stays bounded however long
    the log. Run starts are RunSegmenter's, the same that split_runs cuts at.
    """

    def __init__(self) -> None:
        self.kept: list[Event] = []
        self.tail: dict[str, deque[Event]] = {}
        self.counts: dict[str, int] = {}
        self.run_starts: list[int] = []  # indexes into kept
        self.segmenter = RunSegmenter()  # the same run starts split_runs finds
        # The last compacted run: its signature and the index of its start event, so that an identical
        # next one is collapsed into it (a counter) instead of kept: memory stays constant in a crash loop.
        self.last_signature: tuple | None = None
        self.last_start: int = -1

    @staticmethod
    def _slim(event: Event) -> Event:
        """A run-marker event without its long config text (its kind and short values stay)."""
        # One ref (the first), short text, no long strings or traceback frames: enough to segment the
        # run and to classify its OOM, a constant size however long the original record was.
        return Event(
            event.kind,
            (event.ref._replace(text=event.ref.text[:160]),),
            {k: v for k, v in event.values.items() if k in _SLIM_KEEP or (event.kind not in RUN_MARKER_KINDS and k not in ("frames", "message") and (not isinstance(v, str) or len(v) < 200))},
        )

    def _compact_oldest_full_run(self) -> None:
        i = len(self.run_starts) - _FULL_RUNS - 2  # the newest run (being read) and _FULL_RUNS before it stay whole
        start, end = self.run_starts[i], self.run_starts[i + 1]
        # The run's start line and the other lines the segmenter reads are kept for segmentation only
        # (their long config text is not), so split_runs cuts the slimmed events where it cut the whole ones.
        segment = self.kept[start:end]
        slim = [self._slim(e) for j, e in enumerate(segment) if j == 0 or e.kind in RUN_MARKER_KINDS or is_oom_event(e)]
        signature = _signature(slim)
        if signature == self.last_signature and self.last_start >= 0 and self.last_start == (self.run_starts[i - 1] if i > 0 else -1):
            # The same run again: count it on the previous compacted run's start event, keep nothing.
            head = self.kept[self.last_start]
            head.values[COLLAPSED_RUNS] = head.values.get(COLLAPSED_RUNS, 0) + 1
            del self.kept[start:end]
            del self.run_starts[i]
            self.run_starts[i:] = [s - len(segment) for s in self.run_starts[i:]]
            return
        removed = len(segment) - len(slim)
        self.kept[start:end] = slim
        self.run_starts[i + 1 :] = [s - removed for s in self.run_starts[i + 1 :]]
        self.last_signature, self.last_start = signature, start

    def add(self, event: Event) -> None:
        kind = event.kind
        if self.segmenter.feed(kind):
            self.run_starts.append(len(self.kept))
            if len(self.run_starts) > _FULL_RUNS + 1:
                self._compact_oldest_full_run()
        n = self.counts.get(kind, 0) + 1
        self.counts[kind] = n
        if kind not in _REPEATING or n <= _KEEP_FIRST:
            self.kept.append(event)
            return
        self.tail.setdefault(kind, deque(maxlen=_KEEP_LAST)).append(event)

    def counted(self, kind: str, n: int) -> None:
        """``n`` occurrences of ``kind`` that were counted, not read (input/scan.py Reading)."""
        self.counts[kind] = self.counts.get(kind, 0) + n

    def events(self) -> list[Event]:
        out = list(self.kept)
        for kind, tail in self.tail.items():
            out.extend(tail)
            dropped = self.counts[kind] - _KEEP_FIRST - len(tail)
            if dropped > 0:
                out.append(Event(KIND_REPEATS, (tail[0].ref,), {"kind": kind, "dropped": dropped, "total": self.counts[kind]}))
        out.sort(key=lambda e: e.ref.line)
        return out


def _signature(events: list[Event]) -> tuple:
    """What makes two compacted runs the same incident: their kinds and values, not their lines."""
    return tuple((e.kind, tuple(sorted((k, repr(v)) for k, v in e.values.items() if k != COLLAPSED_RUNS))) for e in events)


class _Route:
    """Which lines a parser reads: every line while it is ``pending``, else the lines holding one of its
    ANCHORS (the scanner's bits), NEEDLES or FOLDED_NEEDLES (lower-cased): a parser declares them with
    every pattern it tries on a line holding one (evidence/parsers/sglang.py). A parser that declares
    no ANCHORS or no ``pending`` reads every line."""

    __slots__ = ("folded", "mask", "needles", "parser")

    def __init__(self, parser: _Parser) -> None:
        self.parser = parser
        own = getattr(parser, "ANCHORS", None)
        self.mask = -1 if own is None or not hasattr(parser, "pending") else sum(_ANCHOR_BITS[a] for a in own)
        self.needles: tuple[str, ...] = getattr(parser, "NEEDLES", ())
        self.folded: tuple[str, ...] = getattr(parser, "FOLDED_NEEDLES", ())

    def wants(self, line: Line) -> bool:
        """Whether the parser reads ``line`` now."""
        return self.holds(line) or getattr(self.parser, "pending", True)

    def holds(self, line: Line) -> bool:
        """Whether ``line`` holds what the parser reads on a line of its own."""
        if line.anchors & self.mask:
            return True
        msg = line.msg
        if any(n in msg for n in self.needles):
            return True
        if self.folded:
            # Lower-casing is how their patterns' IGNORECASE compares only on ASCII text.
            if not msg.isascii():
                return True
            low = msg.lower()
            return any(n in low for n in self.folded)
        return False


@functools.cache
def _context_needles(kinds: tuple[type, ...]) -> tuple[bool, re.Pattern[bytes] | None, re.Pattern[bytes] | None]:
    """Whether one of the parser classes reads every line, and one search each for their needles and (lower-cased)
    folded needles and the phase step's: built once per process, not once per input (a 128-rank incident)."""
    needles = {n.encode() for k in kinds for n in getattr(k, "NEEDLES", ())}
    folded = {n.encode() for k in kinds for n in getattr(k, "FOLDED_NEEDLES", ())} | {n.encode() for n, _ in phase_step.tables().context_needles}
    everything = any(not hasattr(k, "ANCHORS") for k in kinds)
    # One search for any of them (an alternation of literals: a few times faster than a test per literal).
    case = re.compile(b"|".join(re.escape(n) for n in sorted(needles))) if needles else None
    lower = re.compile(b"|".join(re.escape(n) for n in sorted(folded))) if folded else None
    return everything, case, lower


def _context_worth(parsers: tuple[_Parser, ...]) -> Callable[[bytes], bool]:
    """Whether a line without an anchor may say something to a parser or the phase step by itself.

    The two searches are built when the first such line is asked about: a small log often has none
    (every line after an anchored one is read for an open record), and building them costs ~1 ms."""
    kinds = tuple(type(p) for p in parsers)
    searches: list[tuple[bool, re.Pattern[bytes] | None, re.Pattern[bytes] | None]] = []

    def worth(physical: bytes) -> bool:
        if not physical.isascii() or b"\x1b" in physical or b"^[" in physical:
            return True  # colour codes may split a word the message holds once they are stripped
        if not searches:
            searches.append(_context_needles(kinds))
        everything, case, lower = searches[0]
        return everything or (case is not None and case.search(physical) is not None) or (lower is not None and lower.search(physical.lower()) is not None)

    return worth


@functools.cache
def _repeating(declared: tuple[tuple[tuple[bytes, str], ...], ...]) -> dict[bytes, str]:
    """The literals of the lines that repeat (the parsers' REPEATING), each with its event kind: built once per
    process, not once per input."""
    repeating: dict[bytes, str] = {a: kind for pairs in declared for a, kind in pairs}
    # The catalogue's notices repeat too (a retraction, a preemption, a progress bar's redraw); a literal a
    # dedicated parser already counts keeps that parser's kind.
    repeating.update({a: em.KIND_ENGINE_NOTICE for a in em.notice_anchors() if a not in repeating})
    return repeating


def _busy(parsers: tuple[_Parser, ...]) -> bool:
    """Whether a parser holds a record open (a parser without ``pending`` reads every line: always)."""
    return any(getattr(p, "pending", True) for p in parsers)


class _QuietLines:
    """Log lines of their own that said nothing (no event, no phase) while every parser was idle: the same words
    again, while they are idle, say nothing again and are not parsed (a warning a busy server prints every step:
    118,000 of vLLM's graph-profiling notice in 256 MB took a minute one by one). Never a failure's words nor an
    exception's: the torch parser holds an allocator warning until the error that follows it, the record parser
    the last exception line until a shutdown shows whether the run ended with it."""

    def __init__(self, busy: Callable[[], bool]) -> None:
        self.busy = busy
        self.lines: set[tuple[str, int]] = set()

    def key(self, line: Line) -> tuple[str, int] | None:
        """The words and anchors of a log line of its own, if it is one that may say nothing again now."""
        msg = line.msg
        if line.replayed or "Error" in msg or "Exception" in msg or any(w in msg for w in _FAILURE_WORDS) or self.busy():
            return None
        return (line.msg, line.anchors)

    def remember(self, key: tuple[str, int]) -> None:
        """The line of ``key``, read with every parser idle, said nothing and left them idle."""
        if len(self.lines) < _QUIET_KEPT and not self.busy():
            self.lines.add(key)


class _RepeatedFailures:
    """A failure line printed again word for word on the next line (a retry loop, a `while true` wrapper, a
    stuck worker's 300,000 OOM lines) says nothing new: each such line is counted on the failure it
    repeats, as a repeats event of each failure kind the first one gave, and is not parsed again."""

    def __init__(self) -> None:
        self.total = 0
        self._reset()

    def _reset(self) -> None:
        self.key: tuple[str, str | None, str | None] | None = None  # (message, rank, node) of the last failure line
        self.last = -1
        self.kinds: tuple[str, ...] = ()
        self.n = 0
        self.first: LineRef | None = None

    def begin(self, line: Line, read: list[Event]) -> None:
        """After a line was parsed: it is the one later lines may repeat if it gave a failure of its own."""
        kinds = tuple(dict.fromkeys(e.kind for e in read if is_oom_event(e) and e.refs[-1].line == line.ref.line))
        if kinds and line.anchored and not line.replayed:
            self._reset()
            self.key, self.last, self.kinds = (line.msg, line.ref.rank, line.node), line.ref.line, kinds

    def counts(self, line: Line, parsers: tuple[_Parser, ...]) -> bool:
        """Whether ``line`` repeats the failure line just above it (no parser holding a record open): counted."""
        if self.key is None or line.ref.line != self.last + 1 or line.replayed or (line.msg, line.ref.rank, line.node) != self.key:
            return False
        if any(getattr(p, "pending", True) for p in parsers):
            return False
        self.last = line.ref.line
        self.n += 1
        self.total += 1
        if self.first is None:
            self.first = line.ref
        return True

    def end(self, store: _EventStore) -> None:
        """A line that is not a repeat ends the run: its count goes into the store."""
        if self.n and self.first is not None:
            for kind in self.kinds:
                store.add(Event(KIND_REPEATS, (self.first,), {"kind": kind, "dropped": self.n, "total": self.n + 1}))
        if self.key is not None:
            self._reset()


def read_events(path: str, stats: InputStats, node_scan: NodeScan | None = None) -> list[Event]:
    """Scan one input and run every parser over its lines; pure apart from reading the input.

    With ``node_scan`` (an input of a multi-input incident), the node step's lines are read on the
    same pass: the input is read once.
    """
    torch = tt.TorchParser()
    parsers = (sg.SGLangParser(), vl.VLLMParser(), torch, rc.RecordParser(), pasted.PastedParser())
    # The catalogue's engine messages fill the gaps: a line a dedicated parser read is theirs. What neither reads, an
    # out-of-memory statement in an error's form, is the last resort's (TorchParser.stated_oom).
    catalogue = em.EngineMessageParser()
    routes = tuple(_Route(p) for p in parsers)
    repeating = _repeating(tuple(getattr(p, "REPEATING", ()) for p in parsers))
    busy = functools.partial(_busy, parsers)
    reading = Reading(ANCHORS, busy, _context_worth(parsers), repeating, _KEEP_FIRST, _KEEP_LAST, em.notice_texts)
    store = _EventStore()
    counter = [0]
    # Anchored lines no event has cited yet; a wrapped message cites its first line only once its
    # last line is read, so a line is counted as unparsed when it leaves this window uncited.
    pending: OrderedDict[int, None] = OrderedDict()
    unparsed = 0
    display = "<stdin>" if path == "-" else path

    def cite(events: list[Event]) -> None:
        for e in events:
            store.add(e)
            for r in e.refs:
                pending.pop(r.line, None)

    def reversed_note() -> None:
        stats.warn("timestamps go back in time (a newest-first console export): read oldest first; line numbers count from the end")

    def issue_note(reported: list[Event]) -> None:
        stats.kind = "issue"
        stats.warn("read as a bug report: only its code blocks, <details> and quoted logs are evidence; stated flags are marked as reported")
        for e in reported:
            store.add(e)

    def dedent_note(columns: int) -> None:
        stats.warn(f"every line is indented by the same {columns} column(s) (an indented paste): read without them")

    def joined(pieces: tuple[int, ...]) -> None:
        # Lines a repair left blank (their text joined to the line before): not log lines to the completeness step.
        stats.joined_pieces = tuple(sorted({*stats.joined_pieces, *pieces}))

    def unwrap_note(width: int, pieces: tuple[int, ...]) -> None:
        joined(pieces)
        stats.warn(f"lines are cut at column {width} (a terminal's hard wrap): each cut line is read joined to its rest")

    def columns_note(records: int, pieces: tuple[int, ...]) -> None:
        joined(pieces)
        stats.warn(f"{records} record(s) laid out in a console handler's columns (rich): each read as the lines it logged")

    repeats = _RepeatedFailures()
    quiet = _QuietLines(busy)
    chunks = repaired(issue_chunks(iter_line_chunks(path, stats), path, display, issue_note), reversed_note, dedent_note, unwrap_note, columns_note)
    for line in scan_lines(chunks, display, ANCHORS, counter, rc.BEFORE_ANCHORS, reading, node_scan):
        if repeats.counts(line, parsers):
            continue
        repeats.end(store)
        if line.system:
            stats.system_hints[line.system] = stats.system_hints.get(line.system, 0) + 1
        if line.node:
            stats.node_prefixed = True
        # Traceback frames and their indented source lines are context, not unparsed evidence.
        own = (
            line.anchored
            and not line.msg.startswith("    ")
            and not line.msg.lstrip().startswith(_FRAME_PREFIXES)
            and "Traceback (most recent call last)" not in line.msg
        )
        if own:
            pending[line.ref.line] = None
            if len(pending) > _UNPARSED_WINDOW:
                pending.popitem(last=False)
                unparsed += 1
        key = quiet.key(line) if own else None
        if key is not None and key in quiet.lines:
            reading.said_nothing = True
            continue
        if line.replayed:
            # Read after the lines that follow it: as a line on its own, by parsers of its own.
            read = [e for route in routes if route.holds(line) for e in type(route.parser)().feed(line)]
        else:
            read = [e for route in routes if route.wants(line) for e in route.parser.feed(line)]
        cite(read)
        said = bool(read)
        # A traceback's record, or an engine's "it failed" notice, cites a line for its shape, not for what it says:
        # an engine's own failure message inside it ("... MQEngineDeadError: ... RuntimeError('Aborted due to the lack
        # of CPU swap space ...')") is still the catalogue's to read.
        if not any(r.line == line.ref.line and r.path == line.ref.path for e in read if e.kind not in _STRUCTURAL_KINDS for r in e.refs):
            read = catalogue.feed(line) or (torch.stated_oom(line) if line.anchored else [])
            cite(read)
            said = said or bool(read)
        repeats.begin(line, read)
        # A line that says which phase the server was in (progress bars, serving traffic) is context
        # evidence, cited like any other event.
        context_rule = phase_step.classify_context(line.msg) if not line.msg.startswith(" ") else None
        if context_rule is not None:
            cite([Event(rc.KIND_CONTEXT, (line.ref,), {"phase": context_rule.phase, "after_failure": context_rule.after_failure, **({"fallback": True} if context_rule.fallback else {})})])
        elif key is not None and not said:
            quiet.remember(key)
    repeats.end(store)
    if repeats.total:
        stats.warn(f"{repeats.total} line(s) repeat the failure line just above them word for word: read once, counted")
    for parser in parsers:
        cite(parser.finish())
    for anchor, n in reading.dropped.items():
        store.counted(repeating[anchor], n)
    stats.lines = counter[0]
    stats.unparsed_lines = unparsed + len(pending)
    return store.events()

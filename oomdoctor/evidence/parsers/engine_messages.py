"""The engines' own failure messages, recognised from the knowledge catalogue (data/knowledge/recognizer.json).

tools/knowledge/ reads every released SGLang, vLLM and relative, and keeps the messages they raise or log
as an error about memory, each as a template with typed placeholders, the function it sits in and the
phase and class it implies. Here each template becomes a pattern (placeholders become typed captures),
routed by its longest literal piece: that literal is one of the scanner's anchors, and a line reaches
the pattern only when it holds a word of that literal. A new engine release is a rerun of the extractor.

A message cut or re-wrapped in a paste still counts when its literal is whole: the event then carries
no values (``matched`` says "literal" rather than "template").
"""

from __future__ import annotations

import functools
import json
import os
import re
from typing import TYPE_CHECKING, NamedTuple

from oomdoctor.base.built_in import DATA_DIR
from oomdoctor.base.evidence import Event, Line
from oomdoctor.input.patterns import LazyRegex

if TYPE_CHECKING:
    from typing import Any

KIND_ENGINE_MESSAGE = "engine_message"
# A catalogue line that is not a failure: a progress bar's description, a retraction or preemption
# warning. It repeats for as long as the server runs, so it is a repeating kind (pipeline/events.py).
KIND_ENGINE_NOTICE = "engine_notice"

_PLACEHOLDER = LazyRegex(None, r"\{([a-z_][a-z0-9_]*):(int|float|str)\}")
_VALUE = {"int": r"-?\d[\d,]*", "float": r"-?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?", "str": r".*?"}
_WORD = re.compile(r"[A-Za-z_][\w-]*")


class Entry(NamedTuple):
    """One catalogue failure message."""

    engine: str
    template: str
    anchor: str
    phase: str
    klass: str
    memory_failure: bool
    site: str
    releases: str
    notice: bool = False


def template_pattern(template: str) -> str:
    """A regular expression for a template: its literal pieces exact (runs of blanks as any blanks),
    each placeholder a capture of its type, named by position (``v0``, ``v1``: a name may repeat)."""
    out, pos = [], 0
    for i, m in enumerate(_PLACEHOLDER.finditer(template)):
        out.append(r"\s+".join(re.escape(w) for w in template[pos : m.start()].split(" ")))
        last = m.end() == len(template)
        out.append(f"(?P<v{i}>{'.*' if last and m.group(2) == 'str' else _VALUE[m.group(2)]})")
        pos = m.end()
    out.append(r"\s+".join(re.escape(w) for w in template[pos:].split(" ")))
    return "".join(out)


def _key_word(anchor: str) -> str:
    """The word a line must hold for the anchor to be tried: the anchor's longest word."""
    return max(_WORD.findall(anchor), key=len)


class _Table(NamedTuple):
    entries: tuple[Entry, ...]
    by_word: dict[str, tuple[int, ...]]


@functools.cache
def table() -> _Table:
    with open(os.path.join(DATA_DIR, "knowledge", "recognizer.json"), encoding="utf-8") as fh:
        raw = json.load(fh)
    entries = tuple(
        Entry(e["engine"], e["template"], e["anchor"], e["phase"], e["class"], e["memory_failure"], e["site"], e["releases"], e.get("notice", False))
        for e in raw
    )
    by_word: dict[str, list[int]] = {}
    for i, e in enumerate(entries):
        by_word.setdefault(_key_word(e.anchor), []).append(i)
    return _Table(entries, {w: tuple(ids) for w, ids in by_word.items()})


@functools.cache
def _compiled(template: str) -> re.Pattern[str]:
    return re.compile(template_pattern(template))


# Every match of _KV_SHORTAGE_RE (below) holds one of these: its needles, and the scanner's literals for it (with
# oom_words.ENGINE_WORDS's "Not enough memory"), one list so the two cannot disagree.
_KV_SHORTAGE_WORDS: tuple[str, ...] = (
    "ot enough", "nsufficient", "o available", "o free", "o enough", "allocate buffer for", "allocate KV", "allocate kv", "allocate the KV", "allocate the kv",
    "cache is needed", "cache needs", "cache requires", "cache required",
)


@functools.cache
def anchors() -> tuple[bytes, ...]:
    """The scanner's literals for the catalogue's messages (one per distinct literal), and the KV-shortage wording's."""
    return tuple(dict.fromkeys([*(e.anchor.encode() for e in table().entries), *(w.encode() for w in _KV_SHORTAGE_WORDS + _KV_EXHAUSTED_WORDS)]))


@functools.cache
def notice_anchors() -> tuple[bytes, ...]:
    """The literals of the notices: lines holding only such literals repeat and are counted by the scanner."""
    return tuple(dict.fromkeys(e.anchor.encode() for e in table().entries if e.notice))


@functools.cache
def notice_texts() -> tuple[bytes, ...]:
    """Each notice's fixed text: its template with every placeholder a newline, which no literal holds. A scanner
    literal inside it is the notice's own word ("not enough" in vLLM's preemption warning), not news on its line."""
    return tuple(_PLACEHOLDER.compiled.sub("\n", e.template).encode() for e in table().entries if e.notice)


def _values(entry: Entry, m: re.Match[str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for i, ph in enumerate(_PLACEHOLDER.finditer(entry.template)):
        text = m.group(f"v{i}")
        name, kind = ph.group(1), ph.group(2)
        if text is None:
            continue
        if name in values:
            # The same expression name twice ("Initial free memory {gib} GiB, current free memory {gib} GiB"):
            # the second value is kept too, as name_2, name_3 ...
            n = 2
            while f"{name}_{n}" in values:
                n += 1
            name = f"{name}_{n}"
        if kind == "str":
            values[name] = text.strip()
            continue
        try:
            values[name] = int(text.replace(",", "")) if kind == "int" else float(text.replace(",", ""))
        except ValueError:
            continue
    return values


def recognise(msg: str) -> tuple[Entry, dict[str, Any], str] | None:
    """The catalogue message a log line's text is, its values, and how it matched ("template" or "literal")."""
    found = table()
    words = set(_WORD.findall(msg)) & found.by_word.keys()
    if not words:
        return None
    whole: list[tuple[Entry, re.Match[str]]] = []
    literal: Entry | None = None
    for i in sorted({i for w in words for i in found.by_word[w]}):
        entry = found.entries[i]
        if entry.anchor not in msg:
            continue
        m = _compiled(entry.template).search(msg)
        if m is not None:
            whole.append((entry, m))
        elif literal is None:
            literal = entry  # the literal alone: a message cut or wrapped in the paste
    if whole:
        # Of two templates that match ("Prefill out of memory." and the same with "Try to allocate N
        # tokens"; "{phase} out of memory" and "Decode out of memory"), the one with more literal text.
        entry, m = max(whole, key=lambda em: len(_PLACEHOLDER.sub("", em[0].template)))
        return entry, _values(entry, m), "template"
    return (literal, {}, "literal") if literal is not None else None


# The one failure every engine words alike, for an engine no catalogue holds (FreeToken's "AssertionError: Not
# enough memory for KV cache, try reducing --num-pages"): an exception line saying there is not enough memory for
# the KV cache (or its blocks). Hand-written, as the pasted layouts are: it is a wording, not one engine's text.
_KV_SHORTAGE_RE = LazyRegex(
    _KV_SHORTAGE_WORDS,
    # An exception class as Python and C++ print it (a capital, or ERROR/FATAL), so prose ("the error: ...") is not one.
    r"(?:^|\s)(?P<exc>(?:[A-Za-z_][\w.]*)?(?:Error|Exception|Fatal|Failure|ERROR|FATAL))\s*:\s*(?:[^:]{0,40}:\s*)?"
    r"(?:[Nn]ot enough|[Ii]nsufficient|[Nn]o (?:available|free|enough)) (?:GPU |gpu |device )?memory\b[^.]{0,30}?\bfor (?:the )?"
    r"(?:KV[ -]?[Cc]ache|kv[ -]?cache|cache blocks|KV blocks)"
    # The KV cache's own allocation failing: llama.cpp's "llama_kv_cache_init: failed to allocate buffer for kv cache"
    # (ollama relays it inside "failed to initialize the context: ..."), another engine's "failed to allocate KV cache".
    r"|\bfailed to allocate (?:the )?(?:buffer for (?:the )?)?(?:KV|kv)[ -]?cache\b"
    # An exception saying the KV cache needs more than is available, in any engine's words and order ("1.75 GiB KV cache
    # is needed, available 0.13 GiB", "the KV cache requires 3 GiB but only 1 GiB is free"); vLLM's own "To serve at
    # least one request ..." is the catalogue's, read before this.
    r"|(?:^|\s)(?:[A-Za-z_][\w.]*)?(?:Error|Exception)\s*:(?=.*\b(?:KV|kv) cache (?:is needed|needs|requires|required)\b)(?=.*\b(?:available|free)\b)",
)
# The KV cache running out while serving, in the words of engines no catalogue holds: llama.cpp's server giving up
# on a batch ("failed to decode the batch: KV cache is full - try increasing it via the context size", before 2025
# "failed to decode the batch, n_batch = 1, ret = 1" after its "failed to find free space in the KV cache, retrying"),
# its "failed to find KV cache slot for ubatch of size 512" (since llama.cpp's KV cache became its "memory", 2025:
# "decode: failed to find a memory slot for batch of size 32"), ollama's runner ("could not find a kv cache slot"),
# others' "KV cache exhausted: no free blocks". A retry on a smaller batch is not yet the failure.
_KV_EXHAUSTED_WORDS: tuple[str, ...] = (
    "failed to decode the batch", "KV cache slot", "kv cache slot", "memory slot for batch", "KV cache exhausted", "kv cache exhausted", "enough cache entries",
    "failed to decode, ret = 1",
)
_KV_EXHAUSTED_RE = LazyRegex(
    _KV_EXHAUSTED_WORDS,
    r"failed to decode the batch(?::\s*KV cache is full|, n_batch = 1\b)|failed to find (?:a )?KV cache slot|failed to find a memory slot for u?batch|could not find a kv cache slot"
    r"|\b(?:KV|kv) cache (?:is )?exhausted"
    # A sequence cache's entries (one a running sequence) all taken: TurboMind's "[TM][ERROR] No enough cache entries."
    # (lmdeploy's LlamaCacheManager), "not enough cache entries" in plainer English.
    r"|\b(?:[Nn]o|[Nn]ot) enough cache entries\b"
    # llama.cpp's llama_decode returns 1 for "could not find a KV slot for the batch" (llama.h; other codes are other
    # errors) and logs it as "llama_decode: failed to decode, ret = 1" (llama-box, LM Studio and ollama relay it).
    r"|\bllama_decode: failed to decode, ret = 1\b",
)
_KV_EXHAUSTED = Entry("an engine outside the catalogue", "", "", "kv_alloc", "kv_exhaustion", True, "its own line", "")
_KV_SHORTAGE = Entry("an engine outside the catalogue", "", "", "kv_pool", "startup_kv", True, "its own line", "")


def _kv_shortage(msg: str) -> tuple[Entry, dict[str, Any], str] | None:
    """The KV cache without room at start-up (_KV_SHORTAGE_RE) or run out while serving (_KV_EXHAUSTED_RE), from any engine."""
    m = _KV_SHORTAGE_RE.search(msg)
    if m is not None:
        text, entry = msg[m.start("exc") if m.group("exc") else 0 :].strip(), _KV_SHORTAGE
    elif _KV_EXHAUSTED_RE.search(msg) is not None:
        text, entry = msg.strip(), _KV_EXHAUSTED
    else:
        return None
    return entry._replace(template=text.replace("{", "{{").replace("}", "}}")[:300]), {}, "statement"


class EngineMessageParser:
    """Engine failure messages of the catalogue, one event per line that is one."""

    def feed(self, line: Line) -> list[Event]:
        if not line.anchored:
            return []
        found = recognise(" ".join(line.msg.split())) or _kv_shortage(line.msg)
        if found is None:
            return []
        entry, values, matched = found
        return [
            Event(
                KIND_ENGINE_NOTICE if entry.notice else KIND_ENGINE_MESSAGE,
                (line.ref,),
                {
                    "engine": entry.engine,
                    "template": entry.template,
                    "phase": entry.phase,
                    "class": entry.klass,
                    "memory_failure": entry.memory_failure,
                    "site": entry.site,
                    "releases": entry.releases,
                    "matched": matched,
                    "values": values,
                },
            )
        ]

    def finish(self) -> list[Event]:
        return []

"""The recognizer of the engines' own failure messages (parsers/engine_messages, data/knowledge/recognizer.json).

Every catalogue entry, rendered with sample values, is recognised as itself with its phase and class:
bare, and after each damage a real paste shows (the scanner and its prefix splitting included).
"""

from __future__ import annotations

import json
import re
import sys

import pytest
from test_input_columns import rich_layout

from oomdoctor.base.evidence import LineRef
from oomdoctor.evidence.parsers import engine_messages as em
from oomdoctor.evidence.parsers import records as rc
from oomdoctor.input.files import InputStats
from oomdoctor.pipeline.events import read_events

from conftest import REPO

ENTRIES = em.table().entries
SAMPLE = {"int": "4096", "float": "12.50", "str": "worker-3"}
_PH = re.compile(r"\{([a-z_][a-z0-9_]*):(int|float|str)\}")


def rendered(entry: em.Entry) -> str:
    return _PH.sub(lambda m: SAMPLE[m.group(2)], entry.template)


def _same(found: em.Entry, entry: em.Entry) -> bool:
    """The entry itself, or one that reads the same line with the same phase and class (the catalogue keeps
    one entry per engine, and a general template can match a specific one's line)."""
    return found.template == entry.template or (found.klass, found.phase) == (entry.klass, entry.phase)


def test_the_table_is_what_the_tool_writes_from_the_catalogue() -> None:
    sys.path.insert(0, str(REPO / "tools" / "knowledge"))
    try:
        import recognizer
    finally:
        sys.path.pop(0)
    messages = json.loads((REPO / "oomdoctor" / "data" / "knowledge" / "messages.json").read_text(encoding="utf-8"))
    committed = (REPO / "oomdoctor" / "data" / "knowledge" / "recognizer.json").read_text(encoding="utf-8")
    assert committed == recognizer.render(recognizer.build(messages)), "run `python tools/knowledge/recognizer.py`"
    assert len(ENTRIES) >= 100 and sum(e.memory_failure for e in ENTRIES) >= 60


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.anchor[:40])
def test_every_entry_is_recognised_with_its_values(entry: em.Entry) -> None:
    found = em.recognise(rendered(entry))
    assert found is not None
    got, values, matched = found
    assert _same(got, entry) and matched == "template"
    for ph in _PH.finditer(got.template):
        if ph.group(2) == "int":
            assert values.get(ph.group(1)) == 4096
        elif ph.group(2) == "float":
            assert values.get(ph.group(1)) == pytest.approx(12.5)


def test_a_line_that_is_none_of_them_is_not_recognised() -> None:
    for text in ("Decode batch. #running-req: 5, #token: 100, token usage: 0.10", "Not enough", "KV cache is", ""):
        assert em.recognise(text) is None


def test_a_cut_message_is_recognised_by_its_literal_without_values() -> None:
    entry = next(e for e in ENTRIES if e.template.startswith("To serve at least one request"))
    got, values, matched = em.recognise(rendered(entry)[:90]) or (None, None, None)
    assert got is not None and got.klass == "startup_kv" and matched == "literal" and values == {}


GENERIC = (rc.KIND_RECORD, rc.KIND_CUT, rc.KIND_CONTEXT, rc.KIND_CLEAN_END)

# The damage real pastes show, each a function from a message line to the line(s) as pasted.
TRANSFORMS = {
    "ansi": lambda line: [f"\x1b[31mERROR\x1b[0m \x1b[1m{line}\x1b[0m"],
    "docker_compose": lambda line: [f"sglang-1  | [2026-10-02 09:20:11 TP0] {line}"],
    "kubectl_prefix": lambda line: [f"[pod/sglang-0/sglang-leader] [2026-10-02 09:20:11 TP0] {line}"],
    "rank_prefix": lambda line: [f"[rank0]: {line}"],
    "markdown_quote": lambda line: [f"> {line}"],
    "python_logging": lambda line: [f"2026-10-02 09:20:11,123 - ERROR - scheduler.py:412 - {line}"],
    "exception_line": lambda line: [f"RuntimeError: {line}"],
    "repr_inside_error": lambda line: [f"RuntimeError: Worker failed with error '{line}', please check the stack trace above for the root cause"],
    # rich's RichHandler: the message wrapped in its column, the path column at the right (input/columns.py).
    "rich_columns": lambda line: rich_layout(line).rstrip("\n").split("\n"),
}


@pytest.mark.parametrize("transform", sorted(TRANSFORMS))
def test_every_entry_survives_each_damage(transform: str, tmp_path) -> None:
    """One property per transform over all entries: read through the scanner, the message is still found,
    with the entry's phase and class."""
    lost = []
    for i, entry in enumerate(ENTRIES):
        log = tmp_path / f"{i}.log"
        log.write_text("\n".join(TRANSFORMS[transform](rendered(entry))) + "\n", encoding="utf-8")
        events = read_events(str(log), InputStats(path=str(log)))
        ours = [e for e in events if e.kind == em.KIND_ENGINE_MESSAGE]
        if ours and (ours[0].get("class"), ours[0].get("phase")) == (entry.klass, entry.phase):
            continue
        # A dedicated parser may read the line itself (its event wins the line); a generic failure record
        # or context line is not a reading of the message.
        if not [e for e in events if e.kind not in (em.KIND_ENGINE_MESSAGE, *GENERIC)]:
            lost.append(entry.anchor)
    assert lost == []


def test_a_hard_wrap_keeps_the_literal_when_it_fits_the_first_piece(tmp_path) -> None:
    """Hard wraps at 80/100/120 columns: a message whose literal lies in the first piece is still found."""
    for width in (80, 100, 120):
        for i, entry in enumerate(ENTRIES):
            line = rendered(entry)
            if line.find(entry.anchor) + len(entry.anchor) > width:
                continue
            log = tmp_path / f"w{width}_{i}.log"
            log.write_text("\n".join(line[k : k + width] for k in range(0, len(line), width)) + "\n", encoding="utf-8")
            events = read_events(str(log), InputStats(path=str(log)))
            assert events, (width, entry.anchor)


def test_a_dedicated_parser_keeps_its_line() -> None:
    """SGLang's startup message is read by the SGLang parser (with its figures): no catalogue event for it."""
    from oomdoctor.base.evidence import Line
    from oomdoctor.evidence.parsers.engine_messages import EngineMessageParser

    line = "Not enough memory. Please try to increase --mem-fraction-static."
    assert em.recognise(line) is not None  # the catalogue knows it
    ev = EngineMessageParser().feed(Line(LineRef("x", 1, None, line), line))
    assert ev and ev[0].get("class") == "startup_kv"


@pytest.mark.parametrize(
    "line, text",
    [
        # FreeToken#97, behind its relay's "stdout/INFO" tag: an engine no catalogue holds.
        ("stdout/INFO  AssertionError: Not enough memory for KV cache, try reducing --num-pages", "AssertionError: Not enough memory for KV cache, try reducing --num-pages"),
        ("RuntimeError: Insufficient GPU memory for the KV cache", "RuntimeError: Insufficient GPU memory for the KV cache"),
        ("ValueError: not enough memory for the KV cache", "ValueError: not enough memory for the KV cache"),
        ("RuntimeError: failed to allocate KV cache", "RuntimeError: failed to allocate KV cache"),
        # vLLM's KV check in fewer words than its catalogued template (olmocr#269's paste).
        ("ValueError: 1.75 GiB KV cache is needed, available 0.13 GiB", "ValueError: 1.75 GiB KV cache is needed, available 0.13 GiB"),
        ("RuntimeError: the KV cache requires 3.00 GiB but only 1.20 GiB is free", "RuntimeError: the KV cache requires 3.00 GiB but only 1.20 GiB is free"),
        # llama.cpp's KV allocation at context creation, as ollama relays it.
        (
            "llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache",
            "llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache",
        ),
    ],
)
def test_an_exception_saying_the_kv_cache_has_no_memory_is_a_startup_kv_failure_in_any_engine(line: str, text: str, tmp_path) -> None:
    log = tmp_path / "x.log"
    log.write_text(line + "\n")
    (found,) = [e for e in read_events(str(log), InputStats(path=str(log))) if e.kind == em.KIND_ENGINE_MESSAGE]
    assert (found.get("class"), found.get("phase"), found.get("matched"), found.get("memory_failure")) == ("startup_kv", "kv_pool", "statement", True)
    assert found.get("template") == text


@pytest.mark.parametrize(
    "line",
    [
        "the error: not enough memory for kv cache is common",  # prose: no exception class
        "AssertionError: Not enough memory left on the host",  # not the KV cache
        "llama_kv_cache_unified:      CUDA0 KV buffer size =  7168.00 MiB",  # the KV cache allocated
        "INFO 1.75 GiB KV cache is needed for this request",  # a size, not an exception
        "ValueError: KV cache requires a block size of 16",  # a requirement that is no memory shortage
    ],
)
def test_prose_or_another_shortage_is_not_that_failure(line: str, tmp_path) -> None:
    log = tmp_path / "x.log"
    log.write_text(line + "\n")
    assert [e for e in read_events(str(log), InputStats(path=str(log))) if e.kind == em.KIND_ENGINE_MESSAGE] == []


@pytest.mark.parametrize(
    "line",
    [
        "srv  update_slots: failed to decode the batch: KV cache is full - try increasing it via the context size, i = 0, n_batch = 512, ret = 1",
        "update_slots : failed to decode the batch, n_batch = 1, ret = 1",  # llama.cpp before 2025 (llama.cpp#4185)
        "decode: failed to find KV cache slot for ubatch of size 512",
        # The same check since llama.cpp's KV cache became its "memory" (llama-context.cpp, 2025).
        "738.50.638.082 W decode: failed to find a memory slot for batch of size 32",
        "panic: failed to decode batch: could not find a kv cache slot (length: 6656)",  # ollama#10127
        "ERROR phase_continue_prefills::run_standard: Prefill chunk error: KV cache exhausted: no free blocks",
        # llama.cpp's llama_decode return code 1: no KV slot for the batch (gpustack/llama-box#25's server).
        "10.05.651.308 E llama_decode: failed to decode, ret = 1",
        # TurboMind's sequence cache, every entry a running sequence (InternLM/lmdeploy#277).
        "  what():  [TM][ERROR] No enough cache entries. Assertion fail: /opt/tritonserver/lmdeploy/src/turbomind/models/llama/LlamaCacheManager.cc:62",
    ],
)
def test_the_kv_cache_run_out_while_serving_in_any_engines_words(line: str, tmp_path) -> None:
    log = tmp_path / "x.log"
    log.write_text(line + "\n")
    (found,) = [e for e in read_events(str(log), InputStats(path=str(log))) if e.kind == em.KIND_ENGINE_MESSAGE]
    assert (found.get("class"), found.get("phase"), found.get("memory_failure")) == ("kv_exhaustion", "kv_alloc", True)


@pytest.mark.parametrize(
    "line",
    [
        # A retry on a smaller batch is not the failure yet, nor is a batch that failed with room to spare.
        "update_slots : failed to find free space in the KV cache, retrying with smaller n_batch = 256",
        "update_slots : failed to decode the batch, n_batch = 512, ret = -1",
        "W srv        decode: failed to find free space in the KV cache, retrying with smaller batch size, off = 2016, n_batch = 512, ret = 1",
        # Another kind of slot: a memory slot of an allocator table, not a batch's room in the cache.
        "failed to find a memory slot in the registration table",
        # llama_decode's other return codes are other errors (-1: an invalid batch, 2: aborted).
        "llama_decode: failed to decode, ret = -1",
        "llama_decode: failed to decode, ret = 2",
        # A cache's entries counted, not run out.
        "prefix cache: 128 cache entries evicted, enough cache entries remain",
    ],
)
def test_a_retry_or_another_decode_failure_is_not_kv_exhaustion(line: str, tmp_path) -> None:
    log = tmp_path / "x.log"
    log.write_text(line + "\n")
    assert [e for e in read_events(str(log), InputStats(path=str(log))) if e.kind == em.KIND_ENGINE_MESSAGE] == []


def test_a_request_refused_for_a_pre_allocated_cache_too_small_is_the_engines_memory_failure() -> None:
    """vLLM refuses a prompt whose media item needs more encoder tokens than the encoder cache it pre-allocated
    (vllm/v1/engine/input_processor.py, 0.16-0.34; vllm-project/vllm#34040 relays it inside a client's JSON error):
    a memory budget too small, in the engine's words. Near miss: the same cache's sizing notice at startup."""
    refused = em.recognise(
        "The decoder prompt contains a(n) image item with length 6042, which exceeds the pre-allocated encoder cache size 4800. "
        "Please reduce the input size or increase the encoder cache size by setting --limit-mm-per-prompt at startup."
    )
    assert refused is not None
    entry, values, _ = refused
    assert (entry.klass, entry.memory_failure, values.get("mm_encoder_cache_size")) == ("encoder_starvation", True, 4800)
    sizing = em.recognise("Encoder cache will be initialized with a budget of 8192 tokens, and profiled with 4 image items of the maximum feature size.")
    assert sizing is None or not sizing[0].memory_failure

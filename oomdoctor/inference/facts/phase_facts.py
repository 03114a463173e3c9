"""The phase step and evidence completeness (DESIGN §2.1), as facts rules and the verdict read."""

from __future__ import annotations

import re

from oomdoctor.base.evidence import KIND_REPEATS, Event
from oomdoctor.base.oom_words import ALLOCATOR_WORDS
from oomdoctor.evidence import phase
from oomdoctor.evidence.parsers import records as rc
from oomdoctor.evidence.parsers import torch_oom as tt
from oomdoctor.inference import completeness
from oomdoctor.inference.facts.common import ALLOCATOR_OOM_KINDS, allocator_failed
from oomdoctor.inference.facts.store import Facts

_SERVING_PHASES = ("serving", "prefill", "decode", "sampling")
# A traceback through a training loop (not an inference script or server): only then is training advice given.
_TRAINING_RE = re.compile(r"(?i)\btrain\w*|finetun|fine_tun|backward|optimizer|trainer|training_step")
# The flag each stage the phase step finds sets.
_STAGE_FLAGS = {"weight_loading": "weight_load_oom", "cuda_graph": "capture_oom", "encoder": "encoder_oom"}


# How many lines may lie between a whole exception and a cut traceback after it for the first to be the
# second's cause: Python's blank line, chain header and blank line, and a logger's own line ("Error in ...").
_CAUSE_GAP_LINES = 5


# A logger's place in the code as its line prefix shows it (vLLM's "[serving_chat.py:251]", SGLang's "scheduler.py:2547]").
_WRITER_RE = re.compile(r"\b[\w.-]+\.py:\d+\]")


def _same_writer(above: Event, cut: Event) -> bool:
    """Whether two records were written by the same process and logger: the same input and rank, and the same
    code location in their prefixes where either line shows one (an API server's handled error is not the
    engine's fatal one)."""
    a, c = above.refs[-1], cut.refs[0]
    if a.path != c.path or a.rank != c.rank:
        return False
    wa, wc = _WRITER_RE.search(a.text or ""), _WRITER_RE.search(c.text or "")
    return (wa is None and wc is None) or (wa is not None and wc is not None and wa.group() == wc.group())


def phase_facts(f: Facts, events: list[Event], oom_idx: list[int], line_counts: dict[str, int], joined_pieces: dict[str, tuple[int, ...]] | None = None) -> None:
    records = [e for e in events if e.kind == rc.KIND_RECORD]
    ooms = [events[i] for i in oom_idx if events[i].kind in ALLOCATOR_OOM_KINDS]
    if oom_idx:
        failure_i = oom_idx[0]
    else:
        # No OOM evident: the failure is the last record (cut or not) of the run, if any.
        last = records[-1] if records else None
        failure_i = events.index(last) if last is not None else len(events) - 1
    # Without an OOM or a record there is no failure line: the phase is where the input ends, its last
    # event included (infer reads "one past the end" as no failure line).
    phase_i = len(events) if not oom_idx and not records else failure_i
    found = phase.infer(events, phase_i, ooms[0] if ooms else None, records)
    f.set("phase", found.name, found.ref)
    f.set("phase_source", found.source, found.ref)
    f.set("phase_from_other_ranks", found.detail == phase.OTHER_RANKS_AFTER)
    # Serving traffic or a forward frame before the failure means the server was up.
    if found.name in _SERVING_PHASES and not f.get("server_ready"):
        f.set("server_ready", True, found.ref)
    _stage_facts(f, found)
    path = (events[failure_i].ref.path if events else None) or ""
    _completeness_facts(f, events, records, ooms, path, line_counts, (joined_pieces or {}).get(path, ()))
    frames = [fr for e in events if e.kind in (*ALLOCATOR_OOM_KINDS, rc.KIND_RECORD) for fr in (e.get("frames") or ())]
    f.set("training_script", any(_TRAINING_RE.search(f"{p} {func}") for p, func in frames))
    terminal = next((r for r in reversed(records) if r.get("complete") and not r.get("chain_has_oom")), None)
    if terminal is not None and not oom_idx:
        f.set("terminal_exception", terminal.get("exception"), terminal.ref)
        f.set("terminal_exception_message", terminal.get("exception_message"), terminal.ref)
    # A traceback cut before its exception line, raised while handling an exception the paste does show: that
    # earlier exception is the failure's cause (the first of a chain is), and when it is no OOM, neither is the
    # failure ("CUDA error: operation not permitted when stream is capturing", then SGLang's capture handler).
    cut = records[-1] if records and not records[-1].get("complete") and not oom_idx else None
    if cut is not None and cut.get("chain") and not cut.get("chain_has_oom"):
        cause, message = cut.get("chain")[0]
        f.set("cut_record_cause", cause, cut.ref)
        f.set("cut_record_cause_message", message[:300], cut.ref)
        f.set("cut_record_cause_chained", True, cut.ref)
    elif cut is not None and len(records) > 1:
        # The same when the chain header was lost between the two (a logger that prefixes every line and drops
        # the blank ones, a paste that skipped it): a whole non-OOM record that ended just above the cut one.
        above = records[-2]
        gap = (cut.get("first_line") or 0) - (above.get("last_line") or 0)
        if above.get("complete") and not above.get("chain_has_oom") and above.get("exception") and 0 < gap <= _CAUSE_GAP_LINES and _same_writer(above, cut):
            end = above.refs[-1]
            f.set("cut_record_cause", above.get("exception"), end)
            f.set("cut_record_cause_message", (above.get("exception_message") or "")[:300], end)
            f.set("cut_record_cause_chained", False, end)
    ends = [e for e in events if e.kind == rc.KIND_CLEAN_END]
    if ends and not ends[-1].get("after_error"):
        f.set("clean_end", True)
    elif ends and f.get("terminal_exception") is None and not oom_idx:
        # The server shut down just after an exception line with no traceback in the input: the run ended with it.
        f.set("terminal_exception", ends[-1].get("after_error"), ends[-1].refs[-1])
        f.set("terminal_exception_message", ends[-1].get("error_message"), ends[-1].refs[-1])


def _stage_facts(f: Facts, found: phase.Phase) -> None:
    """The phase step decides the OOM's stage where the stage sources said nothing (no milestones, frames
    after the message), and wherever it read frames or an engine line (a profiling pass over the
    multimodal encoder is an encoder failure, whatever the v1 frame markers said)."""
    # A profiling pass is a forward pass sized by the engine's batch limits (v1: stage forward, phase profile).
    stage = "forward" if found.stage == "profile" else found.stage
    decisive = found.source in ("engine", "frames") and stage != f.get("oom_stage") and found.stage not in ("startup", "unknown")
    if not ((f.get("oom_stage") in (None, "unknown") or decisive) and found.name != "unknown" and allocator_failed(f)):
        return
    f.set("oom_stage", stage, found.ref)
    f.set("oom_stage_source", "traceback" if found.source in ("frames", "engine") else "timeline")
    if found.name in ("prefill", "decode"):
        f.set("oom_phase", found.name)
    elif found.stage == "profile":
        f.set("oom_phase", "profile")
    flag = _STAGE_FLAGS.get(found.stage)
    if flag:
        f.set(flag, True, found.ref)


_OOM_WORDS = tuple(w.decode() for w in ALLOCATOR_WORDS)


def _completeness_facts(
    f: Facts, events: list[Event], records: list[Event], ooms: list[Event], path: str, line_counts: dict[str, int], pieces: tuple[int, ...] = ()
) -> None:
    cuts = [e for e in events if e.kind == rc.KIND_CUT]
    in_path = [r for r in records if r.ref.path == path]
    startup_failure = f.get("startup_kv_error") or f.get("capture_oom") or f.get("kv_alloc_failed") or f.get("req_slots_failed")
    whole_oom = any(e.get("complete", True) for e in ooms) or bool(startup_failure)
    # ggml's allocator line belongs to its failed cudaMalloc's message, as the OOM's own lines do: not log around it;
    # nor is the count of a failure line repeated word for word (pipeline/events.py): the same message again; nor a
    # context line that states the OOM itself (TGI's "Request failed during generation: ... CUDA out of memory").
    context = sum(
        1
        for e in events
        if e.kind not in (*ALLOCATOR_OOM_KINDS, tt.KIND_GGML_BUFFER, rc.KIND_RECORD, rc.KIND_CUT, KIND_REPEATS)
        and not (e.kind == rc.KIND_CONTEXT and any(w in e.ref.text for w in _OOM_WORDS))
    )
    done = completeness.assess(events, in_path, [c for c in cuts if c.ref.path == path], line_counts.get(path, 0), whole_oom, context, pieces)
    f.set("evidence_status", done.status, done.ref)
    if done.reason:
        f.set("evidence_reason", done.reason)
    f.set("failure_record_open", done.record_open)

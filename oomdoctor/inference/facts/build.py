"""build_facts: the facts of one run's incident, from its events and any collected evidence.

The builders run in a fixed order because later ones read what earlier ones found (the budget needs
pre and post, the vLLM window needs the card, the phase step refines the stage). Which source wins
where two give the same fact is not decided by that order but by ``store.PRECEDENCE``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomdoctor.evidence.parsers import records as rc
from oomdoctor.evidence.parsers import sglang as sg
from oomdoctor.evidence.parsers import torch_oom as tt
from oomdoctor.evidence.runs import Run, dedupe_ooms, implies_kv_failure, is_oom_event
from oomdoctor.inference.facts import derived, sglang, torch
from oomdoctor.inference.facts.common import failure_flags, resolve_system
from oomdoctor.inference.facts.engine_messages import engine_message_facts
from oomdoctor.inference.facts.phase_facts import phase_facts
from oomdoctor.inference.facts.store import Facts
from oomdoctor.input.issue_input import KIND_REPORTED

# = inference.facts.pasted.KINDS, spelled out so a log without them imports neither parser.
# Evidence files whose contents are read as the same lines pasted into a log are (oomdoctor.evidence.collected).
_LINE_READ_KINDS = frozenset({"apps", "gpustat", "engine_metrics"})
_PASTED_KINDS = frozenset({"smi_driver", "smi_gpu", "smi_process", "smi_no_processes", "env_fact", "env_gpu", "engine_metric"})

if TYPE_CHECKING:
    from typing import Any


def build_facts(
    run: Run,
    force: bool = False,
    system: str | None = None,
    hint: str | None = None,
    collected: Any = (),
    line_counts: dict[str, int] | None = None,
    joined_pieces: dict[str, tuple[int, ...]] | None = None,
) -> Facts | None:
    """Facts for the incident of one run, or None when the run shows no OOM (unless ``force``).

    ``system`` overrides the system detected from the log (the --system option); ``hint`` is the
    system the line prefixes point to, used when no event names one.
    """
    events = dedupe_ooms(run.events)
    detected, source = resolve_system(events, system, hint)
    # A bare "Killed" or exit 137 is weak alone, but in a plain script's log it is the only trace; so it is in a
    # server's log without a traceback (a server that fails kills its own process tree after printing one, or
    # after "Received sigquit from a child process": SGLang's kill_process_tree, so there the child's failure is it).
    kill_is_trace = detected == "torch" or not any(e.kind in (rc.KIND_RECORD, sg.KIND_SIGQUIT) for e in events)
    oom_idx = [
        i
        for i, e in enumerate(events)
        if is_oom_event(e) or (kill_is_trace and e.kind == tt.KIND_HOST_OOM)
    ] or [i for i, e in enumerate(events) if implies_kv_failure(e)]
    unbalanced = [e for e in events if e.kind == sg.KIND_UNBALANCED]
    ready_before = any(e.kind in (sg.KIND_READY, sg.KIND_SUMMARY) for e in events)
    if not oom_idx and not (unbalanced and not ready_before) and not force:
        return None
    if not events:
        return None
    f = Facts(events=events, run=run.number)
    first_i = oom_idx[0] if oom_idx else (events.index(unbalanced[0]) if unbalanced else len(events) - 1)
    first = events[first_i]
    f.first_line = first.ref
    f.time = first.ref.ts
    f.set("system", detected)
    f.set("system_source", source)
    f.set("oom_evident", bool(oom_idx), first.ref)
    sglang.server_args_facts(f, events)
    # The builders a log may not need are imported when it does (each import is start-up time).
    if any(e.kind == KIND_REPORTED for e in events):
        from oomdoctor.inference.facts.reported import reported_facts

        reported_facts(f, events)
    sglang.startup_facts(f, events, first_i)
    torch.torch_facts(f, events, oom_idx)
    sglang.error_facts(f, events)
    engine_message_facts(f, events)
    failure_flags(f)
    # A --query-compute-apps CSV given as a file is read as the same rows pasted into the log are.
    # So are gpustat --json and an engine's /metrics scrape (or Prometheus query) given as files.
    saved = [e for item in collected if item.get("kind") in _LINE_READ_KINDS for e in item.get("events", ())]
    if saved or any(e.kind in _PASTED_KINDS for e in events):
        # nvidia-smi output or an environment report beside the log: the card's capacity, before the budget reads it.
        from oomdoctor.inference.facts.pasted import pasted_facts

        pasted_facts(f, events + saved)
    derived.budget_facts(f)
    derived.foreign_facts(f, events)
    if detected == "vllm":
        from oomdoctor.inference.facts import vllm

        vllm.vllm_facts(f, events, first_i)
    if collected:
        from oomdoctor.inference.facts.collected import collected_facts

        collected_facts(f, list(collected))
    from oomdoctor.inference.facts.priors import prior_facts

    # After every source of the card's capacity: the model's expected weights are read against it.
    prior_facts(f, events)
    phase_facts(f, events, oom_idx, line_counts or {}, joined_pieces or {})
    return f

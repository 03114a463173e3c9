"""What every system shares: which system a log came from, event look-ups, the startup timeline, and
the failure flags the classes read (encoder, capture, weight-loading OOM)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomdoctor.base.evidence import KIND_REPEATS, Event, LineRef
from oomdoctor.evidence import phase
from oomdoctor.evidence.parsers import engine_messages as em
from oomdoctor.evidence.parsers import sglang as sg
from oomdoctor.evidence.parsers import torch_oom as tt
from oomdoctor.evidence.parsers import vllm as vl
from oomdoctor.inference.facts.store import Facts

if TYPE_CHECKING:
    from typing import Any

_VLLM_KINDS = {v for k, v in vars(vl).items() if k.startswith("KIND_")}
_SGLANG_KINDS = {v for k, v in vars(sg).items() if k.startswith("KIND_")}
_TORCH_KINDS = {tt.KIND_OOM, tt.KIND_DRIVER_OOM, tt.KIND_HOST_OOM}
# The allocator OOMs (PyTorch's message, a driver or runtime OOM): the failures an allocation reports itself,
# as against the engines' own memory failures (evidence/runs.is_oom_event counts both).
ALLOCATOR_OOM_KINDS = (tt.KIND_OOM, tt.KIND_DRIVER_OOM)

_FRAME_SYSTEMS = (("vllm", ("/vllm/", "vllm_ascend", "/vllm_omni/")), ("sglang", ("/sglang/", "sglang_omni")))

def min_event(events: list[Event], key: str) -> Event | None:
    """The worst rank's reading: SGLang takes the minimum free memory across ranks."""
    with_value = [e for e in events if e.get(key) is not None]
    return min(with_value, key=lambda e: e.get(key)) if with_value else None


def first(events: list[Event], kind: str) -> Event | None:
    return next((e for e in events if e.kind == kind), None)


def occurrences(events: list[Event], kind: str) -> int:
    """How many events of a kind the log held, counting those the event store left out."""
    kept = sum(1 for e in events if e.kind == kind)
    return kept + sum(e.get("dropped", 0) for e in events if e.kind == KIND_REPEATS and e.get("kind") == kind)


def last_value(events: list[Event], kind: str, key: str) -> tuple[Any, LineRef | None]:
    for e in reversed(events):
        if e.kind == kind and e.get(key) is not None:
            return e.get(key), e.ref
    return None, None


def timeline_stage(events: list[Event], index: int) -> str:
    """Where the server was when event ``index`` happened, from the startup milestones before it.

    The milestones are the phase step's table (data/phases.toml [[milestones]]), named here in the
    v1 stage vocabulary rules use (oom_stage).
    """
    return phase.legacy_stage(phase.milestone_phase(events, index)[0])


def _system_from_frames(events: list[Event]) -> str | None:
    counts = {name: 0 for name, _ in _FRAME_SYSTEMS}
    for e in events:
        for path, _func in e.get("frames") or ():
            for name, needles in _FRAME_SYSTEMS:
                if any(n in path for n in needles):
                    counts[name] += 1
    best = max(counts, key=lambda k: counts[k])
    return best if counts[best] else None


def _catalogue_engine(event: Event) -> str | None:
    """The serving system whose released code holds a catalogue line (vLLM-Omni and vLLM-Ascend are vLLM's)."""
    if event.kind not in (em.KIND_ENGINE_MESSAGE, em.KIND_ENGINE_NOTICE):
        return None
    engine = str(event.get("engine") or "")
    return "vllm" if engine.startswith("vllm") else "sglang" if engine.startswith("sglang") else None


def detect_system(events: list[Event]) -> str:
    """The serving system a run's log came from; the workers' torch tracebacks do not make it 'torch'.

    A line of an engine's own catalogue names it too: vLLM's "CUDA out of memory occurred when warming up sampler"
    pasted without vLLM's prefix is still vLLM's."""
    engines = [_catalogue_engine(e) for e in events]
    vllm = sum(1 for e in events if e.kind in _VLLM_KINDS) + engines.count("vllm")
    sglang = sum(1 for e in events if e.kind in _SGLANG_KINDS) + engines.count("sglang")
    if vllm or sglang:
        return "vllm" if vllm > sglang else "sglang"
    if any(e.kind in _TORCH_KINDS for e in events):
        return "torch"
    return "unknown"


def resolve_system(events: list[Event], system: str | None, hint: str | None) -> tuple[str, str]:
    """(system, how it was decided): the --system option, the events, the line prefixes, or traceback paths."""
    detected = system or detect_system(events)
    # "fallback": no engine line; the engine may still be one (a plain torch traceback from a server).
    source = "option" if system else ("events" if detected != "unknown" else "fallback")
    if detected in ("torch", "unknown") and hint and system is None:
        detected, source = hint, "prefix"
    if detected in ("torch", "unknown") and system is None:
        # No engine line and no prefix style: the traceback's file paths still name the engine.
        from_frames = _system_from_frames(events)
        if from_frames:
            detected, source = from_frames, "frames"
    return detected, source


def allocator_failed(f: Facts) -> bool:
    """An allocator or driver OOM message was seen."""
    return bool(f.get("torch_oom") or f.get("driver_oom"))


def failure_flags(f: Facts) -> None:
    """The OOM's kind from its stage and the engine's error lines, and the startup errors as booleans."""
    # An encoder OOM is a torch OOM in an encoder frame, or a caught per-request encoder failure
    # that coincides with an OOM message.
    encoder = f.get("oom_stage") == "encoder" or (f.get("encoder_request_failed") and allocator_failed(f))
    f.set("encoder_oom", bool(encoder), f.ref("encoder_request_failed"), f.ref("oom_line") or f.ref("oom_stage"))
    if f.get("capture_failed") and f.get("capture_error_is_oom"):
        f.set("capture_oom", True, f.ref("capture_failed"), f.ref("torch_oom"))
    elif f.get("oom_stage") == "cuda_graph":
        f.set("capture_oom", True, f.ref("oom_stage"))
    else:
        f.set("capture_oom", False)
    f.set("weight_load_oom", f.get("oom_stage") == "weight_loading" and allocator_failed(f), f.ref("oom_stage"))
    f.offer("startup_kv_error", bool(f.get("startup_kv_error", False)), f.ref("startup_kv_error"), source="sglang_errors")
    f.set("kv_alloc_failed", bool(f.get("kv_alloc_failed", False)), f.ref("kv_alloc_failed"))
    f.set("req_slots_failed", bool(f.get("req_slots_failed", False)), f.ref("req_slots_failed"))

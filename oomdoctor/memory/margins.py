"""The margin a set of flag changes leaves, by the same arithmetic that produced the set.

Two measures, each with its working:

- A runtime OOM's gap: the failed allocation against the memory free at the failure, both as the
  changes leave them. Lowering the memory fraction (SGLang's y of pre, vLLM's u of total, Omni's
  encoder reserve of the card) frees its share once the KV pool exists; a smaller prefill chunk (or
  batched-token budget) shrinks a prefill's or profile run's allocation in proportion, fewer running
  requests (or sequences) a decode step's; expandable segments make the allocator's reserved but
  unallocated fragments usable. Sharding, FP8 weights or KV and a shorter context move the fraction's
  window, not the allocation: they count for nothing here. Any other change has an effect this model
  does not know, and the margin is then unknown rather than guessed.
- A startup budget: how far the fraction sits inside its window, in bytes: the KV beyond one
  max-length request, and (SGLang) the activation room beyond the engine's own reserve.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from oomdoctor.base.units import floor_to, gib_text
from oomdoctor.memory import budget
from oomdoctor.memory.derivation import Derived, Step

if TYPE_CHECKING:
    from typing import Any

_g = gib_text

# The flags whose value the failed allocation grows with, and the phases of the server where it does.
SCALING_FLAGS: dict[str, tuple[str, ...]] = {
    "--chunked-prefill-size": ("prefill",),
    "--max-num-batched-tokens": ("prefill", "profile"),
    "--max-running-requests": ("decode",),
    "--max-num-seqs": ("decode",),
}
# Changes that move the fraction's window but not the runtime allocation nor the memory free beside it.
WINDOW_ONLY_FLAGS = (*budget.TP_FLAGS, *budget.CONTEXT_FLAGS, "--quantization", "--kv-cache-dtype", "--pp-size", "--pipeline-parallel-size")
# Phases and stages before the KV pool exists: lowering the fraction then frees nothing of the failure's memory.
BEFORE_KV_POOL = ("weight_loading", "weight_creation", "kv_pool", "profile", "startup")
ALLOCATOR_SETTING = "PYTORCH_CUDA_ALLOC_CONF"


class Gap(NamedTuple):
    """A runtime OOM's figures: what the failed allocation asked, what was free, and what the flags stood at.

    ``fraction_base_bytes`` is what one unit of the fraction is (pre for SGLang's y, the total for vLLM's
    u); ``limits`` the current value of each scaling flag the log gives; ``phase`` the server's phase at
    the failure (prefill, decode, profile, ...) or None.
    """

    requested_bytes: int
    free_bytes: int
    fraction_flag: str | None = None
    fraction: float | None = None
    fraction_base_bytes: int | None = None
    phase: str | None = None
    stage: str | None = None
    limits: dict[str, int] | None = None
    reserved_unallocated_bytes: int | None = None
    encoder_reserve: float | None = None
    encoder_base_bytes: int | None = None
    # The log shows the KV pool sized before the failure (a warm-up pass after it runs the profile's code).
    kv_pool_built: bool = False

    @property
    def fraction_frees(self) -> bool:
        """Whether lowering the fraction frees memory for this failure (the KV pool exists by then)."""
        return self.kv_pool_built or (self.phase not in BEFORE_KV_POOL and self.stage not in BEFORE_KV_POOL)


class Margin(NamedTuple):
    """What a set leaves: ``bytes`` (None when unknown, with ``unknown`` saying why), what it measures, its working."""

    bytes: int | None
    measures: str
    steps: tuple[Step, ...] = ()
    unknown: str = ""
    # A runtime gap's two sides after the changes: the memory free and the allocation that has to fit in it.
    free_bytes: int | None = None
    allocation_bytes: int | None = None

    @property
    def leaves_some(self) -> bool | None:
        """True when the set leaves a positive margin, False when none, None when the model cannot tell."""
        return None if self.bytes is None else self.bytes > 0

    def to_json(self) -> dict[str, Any]:
        return {
            "bytes": self.bytes,
            "measures": self.measures,
            "unknown": self.unknown,
            "free_bytes": self.free_bytes,
            "allocation_bytes": self.allocation_bytes,
            "derivation": [s.to_json() for s in self.steps],
        }


GAP_MEASURES = "free memory after the changes minus the allocation that failed, as the changes leave it"
WINDOW_MEASURES = "the KV beyond one max-length request, or the activation room beyond SGLang's reserve, whichever is smaller"
VLLM_WINDOW_MEASURES = "the KV beyond one max-length request"


def _fraction_freed(gap: Gap, flag: str, value: Any) -> tuple[int, Step] | None:
    """Memory a fraction change frees at the failure (negative when it takes some), or None when the change is no fraction."""
    if flag == gap.fraction_flag and gap.fraction is not None and gap.fraction_base_bytes:
        name = "y" if flag == budget.FRACTION_FLAGS["sglang"] else "u"
        if not gap.fraction_frees:
            return 0, Step(f"memory freed by {flag} {float(value):g}", f"none: the OOM came before the KV pool ({gap.phase or gap.stage})", 0, "bytes")
        freed = round((gap.fraction - float(value)) * gap.fraction_base_bytes)
        base = "pre" if name == "y" else "total"
        return freed, Step(f"memory freed by {name} {gap.fraction:g} -> {float(value):g}", f"({gap.fraction:g} - {float(value):g}) * {base} {_g(gap.fraction_base_bytes)}", freed, "bytes")
    if flag == "--encoder-mem-reserve" and gap.encoder_reserve is not None and gap.encoder_base_bytes:
        freed = round((float(value) - gap.encoder_reserve) * gap.encoder_base_bytes)
        return freed, Step(
            "memory the thinker gives the encoder", f"({float(value):g} - {gap.encoder_reserve:g}) * capacity {_g(gap.encoder_base_bytes)}", freed, "bytes"
        )
    return None


def _scaled(gap: Gap, flag: str, value: Any, requested: int) -> tuple[int | None, Step | None, str]:
    """The allocation after a scaling flag's change: (bytes, step, why unknown)."""
    phases = SCALING_FLAGS[flag]
    current = (gap.limits or {}).get(flag)
    if gap.phase not in phases:
        return None, None, f"{flag} bounds the {' and '.join(phases)} allocation, and the failure's phase is {gap.phase or 'not known'}"
    if not current or not isinstance(value, int) or value <= 0:
        return None, None, f"the {flag} in use is not in the log"
    after = requested * value // current
    return after, Step(f"the failed allocation at {flag} {value}", f"{_g(requested)} * {value} / {current}", after, "bytes"), ""


def _apply(gap: Gap, flag: str, value: Any, requested: int, free: int) -> tuple[int | None, int, Step | None, str]:
    """One change's effect: (allocation after, free after, step, why unknown); allocation None when unknown."""
    freed = _fraction_freed(gap, flag, value)
    if freed is not None:
        return requested, free + freed[0], freed[1], ""
    if flag in SCALING_FLAGS:
        after, step, unknown = _scaled(gap, flag, value, requested)
        return after, free, step, unknown
    if flag == ALLOCATOR_SETTING and "expandable_segments:True" in str(value):
        if gap.reserved_unallocated_bytes is None:
            return None, free, None, "the OOM message gives no reserved-but-unallocated figure"
        return requested, free + gap.reserved_unallocated_bytes, Step(
            "usable with expandable segments", f"reserved but unallocated {_g(gap.reserved_unallocated_bytes)}", gap.reserved_unallocated_bytes, "bytes"
        ), ""
    if flag in WINDOW_ONLY_FLAGS:
        return requested, free, None, ""
    return None, free, None, f"what {flag} does to the failed allocation is not modelled"


def _walk(gap: Gap, changes: tuple[tuple[str, Any], ...]) -> tuple[int | None, int, list[Step], str]:
    """(the allocation after the changes or None when unknown, free after them, the working, why unknown)."""
    requested: int | None = gap.requested_bytes
    free = gap.free_bytes
    steps = [Step("the failed allocation", "Tried to allocate", gap.requested_bytes, "bytes"), Step("free at the failure", "of which ... is free", gap.free_bytes, "bytes")]
    for flag, value in changes:
        if requested is None:
            break
        if value is None:
            return None, free, steps, f"{flag} has no value"
        requested, free, step, unknown = _apply(gap, flag, value, requested, free)
        if step is not None:
            steps.append(step)
        if requested is None:
            return None, free, steps, unknown
    return requested, free, steps, ""


def gap_margin(gap: Gap, changes: tuple[tuple[str, Any], ...]) -> Margin:
    """The margin a set of changes leaves on a runtime OOM: free after them minus the allocation after them."""
    requested, free, steps, unknown = _walk(gap, changes)
    if requested is None:
        return Margin(None, GAP_MEASURES, tuple(steps), unknown)
    margin = free - requested
    steps.append(Step("margin: free after the set minus the allocation after it", f"{_g(free)} - {_g(requested)}", margin, "bytes"))
    return Margin(margin, GAP_MEASURES, tuple(steps), free_bytes=free, allocation_bytes=requested)


def closing_fraction(gap: Gap, changes: tuple[tuple[str, Any], ...]) -> Derived | None:
    """The fraction that, with the other changes of a set, leaves room for one more allocation of the new size.

    The same margin lowering the fraction alone keeps (budget.runtime_margin_bytes: the allocation's size,
    at least 512 MiB), rounded down to 0.01. None when the fraction frees nothing for this failure or an
    other change's effect is unknown.
    """
    if gap.fraction_flag is None or gap.fraction is None or not gap.fraction_base_bytes or not gap.fraction_frees:
        return None
    requested, free, steps, _ = _walk(gap, tuple((flag, value) for flag, value in changes if flag != gap.fraction_flag))
    if requested is None:
        return None
    keep = budget.runtime_margin_bytes(requested)
    raw = gap.fraction - (requested + keep - free) / gap.fraction_base_bytes
    value = floor_to(raw, 0.01)
    name = "y" if gap.fraction_flag == budget.FRACTION_FLAGS["sglang"] else "u"
    base = "pre" if name == "y" else "total"
    return Derived(
        value,
        (
            *steps,
            Step("room for one more allocation of that size (at least 512 MiB)", f"max({_g(requested)}, 512 MiB)", keep, "bytes"),
            Step(
                f"{name} that leaves it",
                f"{gap.fraction:g} - ({_g(requested)} + {_g(keep)} - {_g(free)}) / {base} {_g(gap.fraction_base_bytes)} = {raw:.4f}, rounded down",
                value,
                "fraction",
            ),
        ),
    )


def window_margin(b: budget.FractionBudget, fraction: float) -> Margin:
    """How far a fraction sits inside its window, in bytes (the smaller side for SGLang)."""
    if b.system == "vllm":
        kv = budget.vllm_kv_budget_bytes(b.base_bytes, fraction, b.non_kv_bytes)
        extra = kv - b.kv_floor_bytes
        step = Step("KV beyond one max-length request", f"{fraction:g} * {_g(b.base_bytes)} - non-KV {_g(b.non_kv_bytes)} - {_g(b.kv_floor_bytes)}", extra, "bytes")
        return Margin(extra, VLLM_WINDOW_MEASURES, (step,))
    weights = b.weights_bytes or 0
    kv_extra = round(fraction * b.base_bytes) - weights - b.kv_floor_bytes
    room = budget.sglang_dynamic_region_bytes(b.base_bytes, fraction) - b.reserve_bytes
    steps = (
        Step("KV beyond one max-length request", f"{fraction:g} * {_g(b.base_bytes)} - {_g(weights)} - {_g(b.kv_floor_bytes)}", kv_extra, "bytes"),
        Step("activation room beyond SGLang's reserve", f"(1 - {fraction:g}) * {_g(b.base_bytes)} - {_g(b.reserve_bytes)}", room, "bytes"),
        Step("margin: the smaller of the two", f"min({_g(kv_extra)}, {_g(room)})", min(kv_extra, room), "bytes"),
    )
    return Margin(min(kv_extra, room), WINDOW_MEASURES, steps)

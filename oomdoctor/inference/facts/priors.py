"""Priors from what the paste names and the allocator's own shares: the model's expected weights per GPU
(oomdoctor.memory.model_size, from its name, dtype, quantization and TP/PP) against the card, and how
much of the card PyTorch held and left reserved-but-unallocated. The differential reads them when no
rule decides; ``prior-weights-exceed-card`` when even the low end of the estimate exceeds the card."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomdoctor.base.units import GIB
from oomdoctor.evidence.parsers import records as rc
from oomdoctor.evidence.parsers import sglang as sg
from oomdoctor.evidence.parsers import vllm as vl
from oomdoctor.inference.facts.common import ALLOCATOR_OOM_KINDS
from oomdoctor.input.patterns import LazyRegex
from oomdoctor.memory import model_size

if TYPE_CHECKING:
    from oomdoctor.base.evidence import Event
    from oomdoctor.inference.facts.store import Facts

_START_KINDS = (sg.KIND_SERVER_ARGS, vl.KIND_ARGS, vl.KIND_ENGINE_CONFIG)

# The model's own code in a failure's traceback names its architecture, as a model name does: vLLM's
# model_executor/models/<arch>.py, SGLang's srt/models/<arch>.py, lmdeploy's pytorch/models/<arch>.py,
# transformers' (or a checkpoint's remote code's) modeling_<arch>.py. The engines keep helpers in the
# same folders (utils.py, interfaces.py), so only a name that says multimodal is read: a helper's name
# says nothing, and taking it for a text-only model's would count against the encoder.
_MODEL_CODE = LazyRegex(("models", "modeling_"), r"(?:(?<=[/\\]models[/\\])|(?<=modeling_))(\w+)\.py$")


def _argument(events: list[Event], key: str) -> str | None:
    for e in events:
        if e.kind in _START_KINDS and isinstance(e.get(key), str):
            return str(e.get(key))
    return None


def prior_facts(f: Facts, events: list[Event]) -> None:
    _allocator_shares(f)
    _activation_sized(f)
    _model_code(f, events)
    model = f.get("model_path")
    if not isinstance(model, str) or not model.strip():
        return
    prior = model_size.prior_of(model, _argument(events, "dtype"), _argument(events, "quantization"))
    ref = f.ref("model_path")
    f.set("model_named_multimodal", prior.multimodal, ref)
    if prior.params is None:
        return
    f.set("model_params", f"{prior.params / 1e9:g}B" if prior.params >= 1e9 else f"{prior.params / 1e6:g}M", ref)
    estimate = model_size.weights_per_rank(prior, f.get("tp_size") or 1, f.get("pp_size") or 1)
    if estimate is None:
        return
    value, low, high = estimate
    f.set("expected_weights_bytes", value.value, ref, derivation=value)
    f.set("expected_weights_low_bytes", low, ref)
    f.set("expected_weights_high_bytes", high, ref)
    capacity = f.get("capacity_bytes")
    if capacity:
        refs = (ref, f.ref("capacity_bytes"))
        f.set("expected_weights_share", round(value.value / capacity, 3), *refs)
        f.set("expected_weights_low_share", round(low / capacity, 3), *refs)
        f.set("expected_weights_high_share", round(high / capacity, 3), *refs)


def _model_code(f: Facts, events: list[Event]) -> None:
    """Whether the failure's traceback runs a multimodal model's own code (the innermost such frame)."""
    for e in reversed(events):
        if e.kind not in ALLOCATOR_OOM_KINDS and e.kind != rc.KIND_RECORD:
            continue
        for path, _func in reversed(e.get("frames") or ()):
            m = _MODEL_CODE.search(path)
            if m and model_size.names_multimodal(m.group(1)):
                f.set("model_code_multimodal", True, e.ref)
                f.set("model_code_arch", m.group(1), e.ref)
                return


def _allocator_shares(f: Facts) -> None:
    capacity, allocated, unallocated = f.get("capacity_bytes"), f.get("allocated_bytes"), f.get("reserved_unallocated_bytes")
    if not capacity:
        return
    refs = (f.ref("allocated_bytes") or f.ref("oom_line"),)
    if allocated is not None:
        f.set("allocated_share", round(allocated / capacity, 4), *refs)
    if unallocated is not None:
        f.set("unallocated_share", round(unallocated / capacity, 4), *refs)
    requested = f.get("requested_bytes")
    if requested is not None and f.get("torch_oom"):
        # Only PyTorch's caching allocator asks for one tensor at a time; an engine's own cudaMalloc (TensorRT-LLM's
        # or llama.cpp's KV pool) may ask for a whole pool at once.
        f.set("request_share", round(requested / capacity, 4), f.ref("requested_bytes") or refs[0])


# One PyTorch request of this share of the card, or this size whatever the card, is an activation's shape
# (data/differential.toml argues the figures: the largest parameter, one layer's KV cache).
ACTIVATION_SHARE = 0.2
ACTIVATION_BYTES = 16 * GIB


def _activation_sized(f: Facts) -> None:
    """Whether the failed request is too large for a weight or one layer's KV cache (and not larger than the card)."""
    requested = f.get("requested_bytes")
    if requested is None or not f.get("torch_oom") or f.get("request_exceeds_card"):
        return
    share = f.get("request_share")
    f.set("request_activation_sized", requested >= ACTIVATION_BYTES or (share is not None and share >= ACTIVATION_SHARE), f.ref("requested_bytes"))

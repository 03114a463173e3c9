"""What a model's name and launch arguments imply about its weights per GPU, with the uncertainty shown.

A model's name usually states its parameter count (``Qwen2.5-72B-Instruct``, ``gemma-3-12b-it``,
``Llama-3.1-8B``; a mixture of experts its total before its active count, ``Qwen3-30B-A3B``,
``Qwen3-235B-A22B``; ``Mixtral-8x7B`` the experts times their size, an upper bound since attention is
shared), and the launch arguments or the name its storage (bf16 / fp16: 2 bytes a parameter; fp8 /
int8: 1; AWQ / GPTQ / int4 / NVFP4 / MXFP4: half a byte plus the scales). The weights of one rank are
then ``params * bytes / (tp * pp)``. A name rounds its count (``7B`` is 6.7 to 7.6 billion), a
checkpoint may keep embeddings, norms or a vision tower in 16 bits, and ``auto`` means the
checkpoint's dtype (2 bytes, unless the checkpoint itself is quantized): the estimate is a range,
and every step of it is shown. A local ``config.json`` (``oomdoctor plan``) is exact; this is what
a paste alone allows.
"""

from __future__ import annotations

from typing import NamedTuple

from oomdoctor.base.units import format_bytes
from oomdoctor.input.patterns import LazyRegex
from oomdoctor.memory.derivation import Derived, Step

# (pattern over the lower-cased name and arguments, bytes per parameter, what it is). First match wins:
# the 4-bit formats before the 8-bit ones ("w4a8" stores 4-bit weights).
_STORAGE: tuple[tuple[LazyRegex, float, str], ...] = (
    (LazyRegex(None, r"mxfp4|nvfp4|fp4\b"), 0.5, "4-bit floating point (MXFP4 / NVFP4)"),
    (LazyRegex(None, r"\bawq\b|gptq|\bint4\b|-int4|w4a16|w4a8|bnb-4bit|4bit|\bq4"), 0.5, "4-bit integer (AWQ / GPTQ / int4)"),
    (LazyRegex(None, r"fp8|\bint8\b|-int8|w8a8|w8a16|8bit|\bq8"), 1.0, "8-bit (fp8 / int8)"),
    (LazyRegex(None, r"float32|fp32"), 4.0, "float32"),
    (LazyRegex(None, r"bfloat16|float16|bf16|fp16|half"), 2.0, "16-bit (bf16 / fp16)"),
)
# Scales, zero points and the layers a quantized checkpoint keeps in 16 bits (embeddings, norms, the
# head): a few percent for 8-bit formats, up to a fifth more for 4-bit ones.
_QUANT_OVERHEAD = {0.5: 1.2, 1.0: 1.05}
# How far a name's rounded count strays: "7B" models hold 6.7-7.6 billion, "70B" 70.6, "8B" 8.0-8.3.
_NAME_LOW, _NAME_HIGH = 0.9, 1.1

# Compiled when a model name is first read.
_MOE = LazyRegex(None, r"(?:^|[-_/. ])(\d+(?:\.\d+)?)b-a\d+(?:\.\d+)?b(?![a-z0-9])")
_EXPERTS = LazyRegex(None, r"(?:^|[-_/. ])(\d+)x(\d+(?:\.\d+)?)b(?![a-z0-9])")
_COUNT = LazyRegex(None, r"(?:^|[-_/. ])(\d+(?:\.\d+)?)([bm])(?![a-z0-9])")
_MULTIMODAL = LazyRegex(None, r"(?:^|[-_/. ])(?:vl|vlm|vision|llava|omni|pixtral|internvl|minicpm-v|qwen\d?(?:\.\d)?-?vl|mllama|idefics|molmo|phi-\d(?:\.\d)?-vision)(?:$|[-_/. \d])")


class ModelPrior(NamedTuple):
    """Parameters a name states (with how), bytes each, and whether the name says multimodal."""

    params: float | None
    params_how: str
    bytes_per_param: float
    storage: str
    storage_known: bool
    multimodal: bool


def _name(model: str) -> str:
    return model.strip().rstrip("/").rsplit("/", 1)[-1].lower()


def params_of(model: str) -> tuple[float | None, str]:
    """Total parameters the model's name states, and from which part of it."""
    name = _name(model)
    m = _MOE.search(name)
    if m:
        return float(m.group(1)) * 1e9, f"'{m.group(0).strip('-_/. ')}': a mixture of experts, its total count"
    m = _EXPERTS.search(name)
    if m:
        return int(m.group(1)) * float(m.group(2)) * 1e9, f"'{m.group(0).strip('-_/. ')}': experts times their size (an upper bound: attention is shared)"
    counts = [(float(v) * (1e9 if unit == "b" else 1e6), f"{v}{unit.upper()}") for v, unit in _COUNT.findall(name)]
    if not counts:
        return None, "the name states no parameter count"
    value, text = max(counts)
    return value, f"'{text}' in the name"


def names_multimodal(model: str) -> bool:
    """Whether a model's name (or an architecture's, as its model code's file names it) is a multimodal model's."""
    return bool(_MULTIMODAL.search(_name(model)))


def prior_of(model: str, dtype: str | None = None, quantization: str | None = None) -> ModelPrior:
    """What a model name and its dtype / quantization arguments say about its weights."""
    params, how = params_of(model)
    said = " ".join(str(x) for x in (quantization, dtype, _name(model)) if x and str(x).lower() not in ("none", "auto"))
    for pattern, size, what in _STORAGE:
        if pattern.search(said.lower()):
            return ModelPrior(params, how, size, what, True, names_multimodal(model))
    return ModelPrior(params, how, 2.0, "16-bit assumed (dtype auto: the usual bf16 checkpoint)", False, names_multimodal(model))


def weights_per_rank(prior: ModelPrior, tp: int = 1, pp: int = 1) -> tuple[Derived, int, int] | None:
    """Expected weight bytes on one rank, with its low and high ends; None without a parameter count."""
    if prior.params is None:
        return None
    ranks = max(tp, 1) * max(pp, 1)
    overhead = _QUANT_OVERHEAD.get(prior.bytes_per_param, 1.0)
    value = prior.params * prior.bytes_per_param * overhead / ranks
    low = value * _NAME_LOW / (overhead if prior.storage_known else 1.0)
    # Unknown storage: the checkpoint may be 16-bit (the estimate) or quantized without saying so. A
    # 4-bit checkpoint says so in its name in practice (-AWQ, -GPTQ, -Int4); one shipped natively in
    # FP8 (DeepSeek-V3, some Qwen3 releases) may not: the low end is half.
    if not prior.storage_known:
        low = value * _NAME_LOW * 0.5
    high = value * _NAME_HIGH
    steps = (
        Step("parameters", prior.params_how, prior.params, "count"),
        Step("bytes per parameter", prior.storage + (f", x{overhead} for scales and 16-bit layers" if overhead != 1.0 else ""), prior.bytes_per_param * overhead, "bytes"),
        Step("ranks sharing the weights", f"tp {max(tp, 1)} x pp {max(pp, 1)}", ranks, "count"),
        Step("weights per rank", "parameters x bytes / ranks", round(value), "bytes"),
        Step("range", f"the name rounds its count ({_NAME_LOW}-{_NAME_HIGH}x)" + ("" if prior.storage_known else "; the checkpoint may be FP8 without saying so (down to 0.5x)"), f"{format_bytes(low)} to {format_bytes(high)}", "text"),
    )
    return Derived(round(value), steps), round(low), round(high)

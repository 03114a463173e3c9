"""Memory arithmetic: the budget formulas of DESIGN §1 the advice applies, each result carrying its derivation.

All sizes are int bytes; fractions are floats. A ``Derived`` value (``derivation``) keeps the steps
that produced it so that reports can print the working next to every recommended number. The
allocator arithmetic on an OOM message is ``oom_arithmetic``'s, the figures facts derive from log
lines ``log_figures``'.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

from oomdoctor.base.units import GIB, MIB, ceil_to, floor_to, format_bytes, gib_text
from oomdoctor.memory.derivation import Derived, Step

if TYPE_CHECKING:
    from typing import Any

# SGLang never leaves less than this for activations on a card over 60 GiB (the "big-GPU floor" of
# its auto-tune, log_formats.md §1.6, and the 80 GB tier reserve of Era B at TP=1).
SGLANG_BIG_GPU_RESERVE_BYTES = 10 * GIB
SGLANG_BIG_GPU_THRESHOLD_BYTES = 60 * GIB
# A KV pool too small for one request is useless; without the model's cell size we ask for this much.
DEFAULT_KV_FLOOR_BYTES = 1 * GIB
# What a fresh process spends before the server's first free-memory reading: the CUDA context and
# allocator bookkeeping, and with TP > 1 NCCL's buffers. SGLang's pre = capacity - these (- others).
CUDA_CONTEXT_BYTES = 600 * MIB
# What NCCL and vLLM's custom all-reduce hold per rank with tensor parallelism, beyond the context: vllm#10511
# shows non-torch memory of 1.79 GiB at TP=1 and 3.58 GiB at TP=2 on one H100 (so about 2 GiB).
NCCL_BUFFERS_BYTES = 2 * GIB
NCCL_BYTES = 512 * MIB

_g = gib_text


# --- SGLang: the split of pre-load free memory -----------------------------------------------------


def sglang_weights_bytes(pre_bytes: int, post_bytes: int) -> int:
    """Weights (and LoRA/draft preallocations): free before load minus free after."""
    return pre_bytes - post_bytes


def sglang_dynamic_region_bytes(pre_bytes: int, mfs: float) -> int:
    """The (1-y)*pre left for activations, CUDA graphs and everything allocated later."""
    return round(pre_bytes * (1.0 - mfs))


def sglang_kv_budget_bytes(pre_bytes: int, post_bytes: int, mfs: float) -> int:
    """SGLang's rest_memory: post - (1-y)*pre, equal to y*pre - weights."""
    return post_bytes - sglang_dynamic_region_bytes(pre_bytes, mfs)


def sglang_kv_derivation(pre_bytes: int, post_bytes: int, mfs: float, label: str = "") -> Derived:
    """kv at a given y, with the steps that show it."""
    weights = sglang_weights_bytes(pre_bytes, post_bytes)
    dynamic = sglang_dynamic_region_bytes(pre_bytes, mfs)
    kv = post_bytes - dynamic
    tag = f" at y={mfs:g}" if not label else f" {label}"
    return Derived(
        kv,
        (
            Step(f"dynamic reserve (1-y)*pre{tag}", f"(1 - {mfs:g}) * {_g(pre_bytes)}", dynamic, "bytes"),
            Step(f"KV budget y*pre - W{tag}", f"{mfs:g} * {_g(pre_bytes)} - {_g(weights)} = {_g(kv)}", kv, "bytes"),
        ),
    )


def kv_tokens(kv_bytes: int, cell_bytes: int) -> int:
    """KV tokens a budget holds; never negative."""
    if cell_bytes <= 0:
        raise ValueError("cell_bytes must be positive")
    return max(kv_bytes, 0) // cell_bytes


# How kv_floor words its steps: (label, formula) for the engine's own figure, for context x cell
# bytes, and for the 1 GiB assumption. SGLang's floor is the window's low end; vLLM's is the KV its
# --gpu-memory-utilization must hold.
_KV_FLOOR_WORDS: dict[str, tuple[tuple[str, str], tuple[str, str], tuple[str, str]]] = {
    "sglang": (
        ("one max-length request's KV (the engine's own figure)", "max seq len {ctx}"),
        ("one max-length request's KV", "context_len {ctx} * {cell} bytes/token"),
        ("one request's KV (assumed)", "1 GiB: the log gives no per-token KV size before the pool is built"),
    ),
    "vllm": (
        ("KV for one max-length request (vLLM's own figure)", "max seq len {ctx}"),
        ("KV for one max-length request", "{ctx} tokens * {cell} bytes/token"),
        ("KV for one request (assumed)", "1 GiB: the log gives no per-token KV size"),
    ),
}


def kv_floor(context_len: int | None, cell_bytes: int | None, engine_bytes: int | None = None, system: str = "sglang") -> Derived:
    """The KV of one max-length request: the engine's own figure, else context_len * cell bytes, else 1 GiB.

    The least KV pool worth having (SGLang's window starts there; vLLM's u must hold it).
    """
    engine, product, assumed = _KV_FLOOR_WORDS[system]
    if engine_bytes is not None:
        return Derived(engine_bytes, (Step(engine[0], engine[1].format(ctx=context_len), engine_bytes, "bytes"),))
    if context_len and cell_bytes:
        value = context_len * cell_bytes
        return Derived(value, (Step(product[0], product[1].format(ctx=context_len, cell=cell_bytes), value, "bytes"),))
    return Derived(DEFAULT_KV_FLOOR_BYTES, (Step(assumed[0], assumed[1], DEFAULT_KV_FLOOR_BYTES, "bytes"),))


def kv_floor_assumed(context_len: int | None, cell_bytes: int | None, engine_bytes: int | None = None) -> bool:
    """Whether ``kv_floor`` falls back to its assumed 1 GiB (no engine figure, no context x cell)."""
    return engine_bytes is None and not (context_len and cell_bytes)


def cell_bytes_mha(kv_heads_per_rank: int, head_dim: int, v_head_dim: int, layers: int, dtype_bytes: float) -> int:
    """Per-token KV bytes of MHA/GQA: H*(d_k+d_v)*L*b."""
    return int(kv_heads_per_rank * (head_dim + v_head_dim) * layers * dtype_bytes)


def cell_bytes_mla(kv_lora_rank: int, qk_rope_head_dim: int, layers: int, dtype_bytes: float) -> int:
    """Per-token KV bytes of MLA: (kv_lora_rank + rope dim)*L*b, not split across TP ranks."""
    return int((kv_lora_rank + qk_rope_head_dim) * layers * dtype_bytes)


# --- SGLang: its own default for y (auto-tune) ------------------------------------------------------


def _tier_defaults(gpu_mem_mib: float, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) SGLang picks from capacity (Era C / current)."""
    gib = gpu_mem_mib / 1024
    if gib < 20:
        return 2048, 8
    if gib < 35:
        return 4096, (48 if tp < 4 else 160)
    if gib < 60:
        return 4096, (32 if tp < 4 else 160)
    if gib < 160:
        return 8192, (256 if tp < 4 else 512)
    return 16384, 512


def _era_b_reserve_mib(gpu_mem_mib: float, world: int) -> float:
    """SGLang Era B: the activation reserve by capacity tier and tp*pp, in MiB."""
    gib = gpu_mem_mib / 1024
    if gib < 35:
        return (2.8 + world / 10) * 1024
    if gib < 90:
        return (9.5 + world / 2) * 1024
    if gib < 160:
        return (12 + world / 2) * 1024
    return 32 * 1024


def _current_reserve_mib(activation_tokens: int, cuda_graph_bs: int, tp: int, pp: int) -> tuple[float, str]:
    """SGLang current era: activations + CUDA graphs + per-rank overhead, in MiB, and the formula."""
    reserve = 512 + activation_tokens * 1.5 + cuda_graph_bs * 2 + tp * pp / 8 * 1024
    return reserve, f"512 + {activation_tokens}*1.5 + {cuda_graph_bs}*2 + {tp}*{pp}/8*1024"


def sglang_autotune_mfs(
    capacity_bytes: int,
    tp: int = 1,
    pp: int = 1,
    era: str = "current",
    chunked_prefill_size: int | None = None,
    cuda_graph_max_bs: int | None = None,
    dp_attention_size: int = 0,
) -> Derived:
    """The mem_fraction_static SGLang chooses by itself for a card (log_formats.md §1.6).

    ``era``: "A" (TP-only table), "B" (capacity tiers), "current" (reserve from activations and
    graphs with a 10 GiB floor on big cards). The value is chosen from *capacity*, then applied to
    pre-load free memory, so it matches the applied split only on an empty GPU.
    """
    gpu_mem_mib = capacity_bytes / MIB
    steps: list[Step] = [Step("card capacity", f"{capacity_bytes} bytes / 2^20", round(gpu_mem_mib, 1), "mib")]
    if era == "A":
        world = tp * pp
        table = ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87), (1, 0.88))
        value = next(v for n, v in table if world >= n)
        steps.append(Step("Era A default by TP size", f"tp*pp={world}", value, "fraction"))
        return Derived(value, tuple(steps))
    if era == "B":
        p = tp * pp
        gib = gpu_mem_mib / 1024
        reserve = _era_b_reserve_mib(gpu_mem_mib, p)
        if dp_attention_size:
            reserve += 4 * 1024
        steps.append(Step("Era B tier reserve (MiB)", f"capacity tier {gib:.0f} GiB, tp*pp={p}", round(reserve, 1), "mib"))
    else:
        default_chunk, default_bs = _tier_defaults(gpu_mem_mib, tp)
        chunk = chunked_prefill_size if chunked_prefill_size and chunked_prefill_size > 0 else default_chunk
        bs = cuda_graph_max_bs if cuda_graph_max_bs and cuda_graph_max_bs > 0 else default_bs
        reserve, formula = _current_reserve_mib(max(chunk, 2048), bs, tp, pp)
        if dp_attention_size:
            reserve += bs * dp_attention_size * 3 + (bs * dp_attention_size * 1.5 if bs > 300 else 0)
            formula += f" + DP attention {bs}*{dp_attention_size}*3"
        steps.append(Step("activation + graph reserve (MiB)", formula, round(reserve, 1), "mib"))
        floor_mib = SGLANG_BIG_GPU_RESERVE_BYTES // MIB
        if capacity_bytes > SGLANG_BIG_GPU_THRESHOLD_BYTES and reserve < floor_mib:
            reserve = floor_mib
            steps.append(Step("big-GPU floor (MiB)", f"max(reserve, {floor_mib // 1024}*1024) on cards over {SGLANG_BIG_GPU_THRESHOLD_BYTES // GIB} GiB", reserve, "mib"))
    value = round((gpu_mem_mib - reserve) / gpu_mem_mib, 3)
    steps.append(Step("auto mem_fraction_static", f"round(({gpu_mem_mib:.0f} - {reserve:.0f}) / {gpu_mem_mib:.0f}, 3)", value, "fraction"))
    return Derived(value, tuple(steps))


def sglang_min_activation_reserve_bytes(capacity_hint_bytes: int, tp: int = 1, pp: int = 1) -> Derived:
    """The least SGLang itself leaves for activations on a card of this size.

    On cards over 60 GiB that is the 10 GiB big-GPU floor. Below, the smaller of the Era B tier
    reserve and the current-era formula with the tier's own default chunked prefill and graph batch size
    (the eras disagree on small cards; the smaller one is what some SGLang release really ran with).
    """
    if capacity_hint_bytes > SGLANG_BIG_GPU_THRESHOLD_BYTES:
        return Derived(
            SGLANG_BIG_GPU_RESERVE_BYTES,
            (Step("SGLang activation reserve", "10 GiB big-GPU floor of its auto-tune (card over 60 GiB)", SGLANG_BIG_GPU_RESERVE_BYTES, "bytes"),),
        )
    p = tp * pp
    era_b_mib = _era_b_reserve_mib(capacity_hint_bytes / MIB, p)
    chunk, bs = _tier_defaults(capacity_hint_bytes / MIB, tp)
    current_mib, _ = _current_reserve_mib(max(chunk, 2048), bs, tp, pp)
    reserve = round(min(era_b_mib, current_mib) * MIB)
    return Derived(
        reserve,
        (
            Step(
                "SGLang activation reserve",
                f"min(Era B tier {era_b_mib:.0f} MiB, current 512 + {max(chunk, 2048)}*1.5 + {bs}*2 + {p}/8*1024 = {current_mib:.0f} MiB)",
                reserve,
                "bytes",
            ),
        ),
    )


# --- SGLang: choosing y -----------------------------------------------------------------------------


class Window(NamedTuple):
    """The feasible y: enough static room for weights + one request, enough dynamic room for the reserve."""

    low: float
    high: float
    steps: tuple[Step, ...]

    @property
    def feasible(self) -> bool:
        return self.low <= self.high


def sglang_feasible_window(pre_bytes: int, weights_bytes: int, kv_floor_bytes: int, reserve_bytes: int) -> Window:
    """y_low = (W + kv_floor)/pre, y_high = 1 - reserve/pre."""
    low = (weights_bytes + kv_floor_bytes) / pre_bytes
    high = 1.0 - reserve_bytes / pre_bytes
    steps = (
        Step("lowest y (weights + one request's KV)", f"({_g(weights_bytes)} + {_g(kv_floor_bytes)}) / {_g(pre_bytes)}", round(low, 4), "fraction"),
        Step("highest y (keeps SGLang's activation reserve)", f"1 - {_g(reserve_bytes)} / {_g(pre_bytes)}", round(high, 4), "fraction"),
    )
    return Window(low, high, steps)


def choose_in_window(window: Window) -> float | None:
    """The value to recommend: the largest multiple of 0.05 in the window, else of 0.01, else of
    0.001 (a window narrower than 0.01 is still a window), else None.

    Round steps are what people type, and stopping at the step below the top leaves part of the
    window as margin for measurement noise between runs.
    """
    for step in (0.05, 0.01, 0.001):
        candidate = floor_to(window.high, step)
        if candidate >= window.low - 1e-9 and 0.0 < candidate < 1.0:
            return candidate
    return None


def raise_in_window(window: Window, current: float) -> float | None:
    """A raise from ``current`` inside the window: the largest multiple of 0.05, else 0.01, else 0.001
    that is inside it and above ``current``; None when the window's top is not above it."""
    for step in (0.05, 0.01, 0.001):
        candidate = floor_to(window.high, step)
        if candidate > current + 1e-9 and candidate >= window.low - 1e-9 and 0.0 < candidate < 1.0:
            return candidate
    return None


def lowered_fraction(current: float, base_bytes: int, shortfall_bytes: int, margin_bytes: int, name: str, base: str) -> Derived:
    """A memory fraction (y of pre, u of total) lowered by the shortfall plus a margin, rounded down to 0.01."""
    freed = shortfall_bytes + margin_bytes
    raw = current - freed / base_bytes
    value = floor_to(raw, 0.01)
    return Derived(
        value,
        (
            Step(f"memory to move out of the {name} share", f"shortfall {_g(shortfall_bytes)} + margin {_g(margin_bytes)}", freed, "bytes"),
            Step(f"lowered {name}", f"{current:g} - {_g(freed)} / {base} {_g(base_bytes)} = {raw:.4f}, rounded down", value, "fraction"),
        ),
    )


def sglang_lowered_mfs(mfs: float, pre_bytes: int, shortfall_bytes: int, margin_bytes: int) -> Derived:
    """y lowered so the dynamic region (1-y)*pre grows by the shortfall plus a margin."""
    d = lowered_fraction(mfs, pre_bytes, shortfall_bytes, margin_bytes, "y", "pre")
    dynamic = Step("dynamic reserve at the lowered y", f"(1 - {d.value:g}) * {_g(pre_bytes)}", sglang_dynamic_region_bytes(pre_bytes, d.value), "bytes")
    return Derived(d.value, (*d.steps, dynamic))


def runtime_margin_bytes(requested_bytes: int) -> int:
    """Room for one more allocation of the size that failed, at least 512 MiB."""
    return max(requested_bytes, 512 * MIB)


def pow2_floor(n: int) -> int:
    """Largest power of two not above n (n >= 1)."""
    return 1 << (max(int(n), 1).bit_length() - 1)


def round_down_multiple(n: float, multiple: int) -> int:
    """n rounded down to a multiple, never below the multiple itself."""
    return max(multiple, math.floor(n / multiple) * multiple)


def halved_batch_size(n: int) -> int:
    """Half a batch size (CUDA graph capture sizes, max seqs): a multiple of 8 from 16 up, else n // 2 (at least 1)."""
    return round_down_multiple(n / 2, 8) if n >= 16 else max(n // 2, 1)


def describe(n_bytes: int | None) -> str:
    """Bytes for a sentence."""
    return format_bytes(n_bytes)



# --- vLLM: --gpu-memory-utilization is a fraction of *total* memory ----------------------------------

# Room kept on top of a computed need, so that run-to-run noise in the profile does not bring the
# same error back.
VLLM_MARGIN_BYTES = 512 * MIB


def vllm_instance_budget_bytes(total_bytes: int, util: float) -> int:
    """What vLLM may use at --gpu-memory-utilization u: u*total."""
    return round(total_bytes * util)


def vllm_kv_budget_bytes(total_bytes: int, util: float, non_kv_bytes: int) -> int:
    """vLLM's KV budget: u*total - (weights + activation peak + non-torch [+ graphs])."""
    return vllm_instance_budget_bytes(total_bytes, util) - non_kv_bytes


def vllm_kv_derivation(total_bytes: int, util: float, non_kv_bytes: int) -> Derived:
    kv = vllm_kv_budget_bytes(total_bytes, util, non_kv_bytes)
    return Derived(
        kv,
        (
            Step(f"instance budget u*total at u={util:g}", f"{util:g} * {_g(total_bytes)}", round(total_bytes * util), "bytes"),
            Step(f"KV budget at u={util:g}", f"{util:g} * {_g(total_bytes)} - non-KV {_g(non_kv_bytes)} = {_g(kv)}", kv, "bytes"),
        ),
    )


def vllm_util_for_kv(total_bytes: int, non_kv_bytes: int, kv_needed_bytes: int, margin_bytes: int = VLLM_MARGIN_BYTES) -> Derived:
    """The u whose budget holds the non-KV memory plus kv_needed, rounded up to 0.01."""
    raw = (non_kv_bytes + kv_needed_bytes + margin_bytes) / total_bytes
    value = ceil_to(raw, 0.01)
    return Derived(
        value,
        (
            Step(
                "u that holds non-KV memory + one request's KV + margin",
                f"({_g(non_kv_bytes)} + {_g(kv_needed_bytes)} + {_g(margin_bytes)}) / {_g(total_bytes)} = {raw:.4f}, rounded up",
                value,
                "fraction",
            ),
        ),
    )


def vllm_max_safe_util(free_at_start_bytes: int, total_bytes: int, margin_bytes: int = VLLM_MARGIN_BYTES) -> Derived:
    """The largest u vLLM's startup check accepts on this GPU now: (free - margin)/total, rounded down."""
    raw = (free_at_start_bytes - margin_bytes) / total_bytes
    value = floor_to(raw, 0.01)
    return Derived(
        value,
        (Step("largest u the free memory allows", f"({_g(free_at_start_bytes)} - {_g(margin_bytes)}) / {_g(total_bytes)} = {raw:.4f}, rounded down", value, "fraction"),),
    )


def vllm_max_model_len(kv_bytes: int, cell_bytes: int, block_size: int = 16) -> int:
    """Tokens one request can hold in a KV budget, rounded down to a whole block."""
    if cell_bytes <= 0 or kv_bytes <= 0:
        return 0
    return (kv_bytes // cell_bytes) // block_size * block_size


def vllm_lowered_util(util: float, total_bytes: int, shortfall_bytes: int, margin_bytes: int) -> Derived:
    """u lowered so (1-u)*total grows by the shortfall plus a margin."""
    return lowered_fraction(util, total_bytes, shortfall_bytes, margin_bytes, "u", "total")



# --- One feasibility check for every recommendation ---------------------------------------------------
#
# The window of the memory fraction (SGLang's y, vLLM's u) is made of a few quantities; a set of flag
# changes moves some of them (TP shards the weights, FP8 halves weights or the KV floor, a shorter
# context shrinks one request's KV, the Omni encoder reserve comes out of the thinker's y). The set is
# feasible when the fraction it leaves lies inside the window it leaves: the same formulas as the window
# the report prints, re-evaluated with the changes applied together.

FRACTION_FLAGS = {"sglang": "--mem-fraction-static", "vllm": "--gpu-memory-utilization"}
TP_FLAGS = ("--tp-size", "--tensor-parallel-size")
CONTEXT_FLAGS = ("--context-length", "--max-model-len")
# Equal within what the arithmetic rounds away (fractions are printed to 4 decimals).
WINDOW_EPSILON = 1e-9


class FractionBudget(NamedTuple):
    """The quantities a fraction window is computed from, per rank.

    SGLang: window [(W + F)/pre, 1 - R/pre]; vLLM: [(NK + F + margin)/total rounded up, the largest
    u the free memory allows]. W weights, F one request's KV, R SGLang's activation reserve, NK vLLM's
    non-KV memory (weights included).
    """

    system: str
    fraction: float | None
    base_bytes: int  # pre (SGLang) or total (vLLM)
    weights_bytes: int | None
    kv_floor_bytes: int
    reserve_bytes: int = 0  # SGLang's activation reserve
    non_kv_bytes: int = 0  # vLLM
    max_util: float | None = None  # vLLM: the largest u the free memory allows
    tp: int = 1
    pp: int = 1
    capacity_hint_bytes: int = 0
    cell_bytes: int | None = None
    context_len: int | None = None
    encoder_reserve: float | None = None
    # One request's KV is not known (only assumed): kv_floor_bytes is 0 and what changes it is unknown.
    kv_floor_unknown: bool = False

    @property
    def flag(self) -> str:
        return FRACTION_FLAGS[self.system]


class SetCheck(NamedTuple):
    """A set of changes re-evaluated: the fraction it leaves, the window it leaves, and whether one is in the other."""

    feasible: bool | None  # None: the budget cannot say (the fraction, or what a change does, is unknown)
    fraction: float | None
    low: float | None
    high: float | None
    steps: tuple[Step, ...]
    budget: FractionBudget | None = None  # the budget with the changes applied


def fraction_window(b: FractionBudget) -> tuple[float, float]:
    """(lowest, highest) fraction under this budget: the window the report prints."""
    if b.system == "vllm":
        low = vllm_util_for_kv(b.base_bytes, b.non_kv_bytes, b.kv_floor_bytes).value
        return low, b.max_util if b.max_util is not None else 0.0
    w = sglang_feasible_window(b.base_bytes, b.weights_bytes or 0, b.kv_floor_bytes, b.reserve_bytes)
    return w.low, w.high


def in_window(value: float, low: float, high: float) -> bool:
    return low - WINDOW_EPSILON <= value <= high + WINDOW_EPSILON


def _apply_tp(b: FractionBudget, new_tp: int) -> tuple[FractionBudget | None, Step]:
    if b.weights_bytes is None or new_tp <= b.tp:
        return None, Step("weights per rank at the new TP", "weights unknown", None, "text")
    weights = b.weights_bytes * b.tp // new_tp
    step = Step(f"weights per rank at TP {new_tp}", f"{_g(b.weights_bytes)} * {b.tp} / {new_tp}", weights, "bytes")
    if b.system == "vllm":
        return b._replace(weights_bytes=weights, non_kv_bytes=b.non_kv_bytes - b.weights_bytes + weights, tp=new_tp), step
    # One request's KV is kept as it is: MLA does not split it, and the floor is often the 1 GiB assumption.
    pre = b.base_bytes - (NCCL_BYTES if b.tp == 1 else 0)
    reserve = sglang_min_activation_reserve_bytes(b.capacity_hint_bytes or b.base_bytes, new_tp, b.pp).value
    return b._replace(weights_bytes=weights, base_bytes=pre, reserve_bytes=reserve, tp=new_tp), step


def _apply_quantization(b: FractionBudget) -> tuple[FractionBudget | None, Step]:
    if b.weights_bytes is None:
        return None, Step("FP8 weights", "weights unknown", None, "text")
    weights = b.weights_bytes // 2
    step = Step("weights in FP8 (half of 16-bit)", f"{_g(b.weights_bytes)} / 2", weights, "bytes")
    if b.system == "vllm":
        return b._replace(weights_bytes=weights, non_kv_bytes=b.non_kv_bytes - b.weights_bytes + weights), step
    return b._replace(weights_bytes=weights), step


def _apply_context(b: FractionBudget, tokens: int) -> tuple[FractionBudget | None, Step]:
    if b.kv_floor_unknown and not b.cell_bytes:
        # The window already counts no KV for the request: a shorter context cannot lower it further.
        return b, Step("one request's KV at the shorter context", "per-token KV size unknown; the window counts none", "unchanged", "text")
    if b.cell_bytes:
        floor = tokens * b.cell_bytes
        return b._replace(kv_floor_bytes=floor, context_len=tokens), Step("one request's KV at the shorter context", f"{tokens} tokens * {b.cell_bytes} bytes/token", floor, "bytes")
    if b.context_len:
        floor = b.kv_floor_bytes * tokens // b.context_len
        return b._replace(kv_floor_bytes=floor, context_len=tokens), Step("one request's KV at the shorter context", f"{_g(b.kv_floor_bytes)} * {tokens} / {b.context_len}", floor, "bytes")
    return None, Step("one request's KV at the shorter context", "per-token KV size unknown", None, "text")


def apply_change(b: FractionBudget, flag: str, value: Any) -> tuple[FractionBudget | None, Step | None]:
    """The budget after one flag change (None: what it does to the window is unknown), and the step that shows it.

    A flag that moves nothing in the window (batch and chunk limits, graphs, allocator settings)
    returns the budget unchanged and no step.
    """
    if flag == b.flag:
        return b._replace(fraction=float(value)), Step(f"{flag} in this set", f"{flag} {float(value):g}", float(value), "fraction")
    if flag in TP_FLAGS:
        return _apply_tp(b, int(value))
    if flag == "--quantization":
        return _apply_quantization(b)
    if flag == "--kv-cache-dtype" and str(value).startswith("fp8"):
        if b.kv_floor_unknown:
            # As for a shorter context: the window's low end counts no KV, so FP8 leaves it where it is.
            return b, Step("one request's KV in FP8", "per-token KV size unknown; the window counts none", "unchanged", "text")
        floor = b.kv_floor_bytes // 2
        return b._replace(kv_floor_bytes=floor), Step("one request's KV in FP8", f"{_g(b.kv_floor_bytes)} / 2", floor, "bytes")
    if flag in CONTEXT_FLAGS:
        return _apply_context(b, int(value))
    if flag == "--encoder-mem-reserve":
        if b.fraction is None or b.encoder_reserve is None:
            return None, Step("the thinker's fraction", "current fraction or encoder reserve unknown", None, "text")
        fraction = round(b.fraction - (float(value) - b.encoder_reserve), 6)
        return b._replace(fraction=fraction, encoder_reserve=float(value)), Step(
            "the thinker's fraction after the encoder reserve", f"{b.fraction:g} - ({float(value):g} - {b.encoder_reserve:g})", fraction, "fraction"
        )
    return b, None


def check_set(b: FractionBudget, changes: tuple[tuple[str, Any], ...]) -> SetCheck:
    """Apply every change of a set, then test the fraction it leaves against the window it leaves."""
    steps: list[Step] = []
    current: FractionBudget | None = b
    for flag, value in changes:
        if current is None or value is None:
            break
        current, step = apply_change(current, flag, value)
        if step is not None:
            steps.append(step)
    if current is None or any(v is None for _, v in changes):
        return SetCheck(None, None, None, None, tuple(steps))
    low, high = fraction_window(current)
    name = "u" if b.system == "vllm" else "y"
    if current.fraction is None:
        steps.append(Step(f"window of {name} with these changes", f"[{low:.4f}, {high:.4f}]; the applied {name} is unknown", None, "text"))
        return SetCheck(None, None, low, high, tuple(steps), current)
    ok = in_window(current.fraction, low, high)
    steps.append(
        Step(
            f"{name} inside its window with these changes",
            f"{low:.4f} <= {current.fraction:g} <= {high:.4f}",
            "yes" if ok else "no",
            "text",
        )
    )
    return SetCheck(ok, current.fraction, low, high, tuple(steps), current)


def completing_fraction(system: str, fraction: float, low: float, high: float) -> float | None:
    """The fraction that brings a set back inside its window, None when the window is empty.

    Above it: the top rounded down to 0.01. Below it: SGLang's choice in the window (choose_in_window),
    vLLM's least u that holds the need (the window's low end, already rounded up to 0.01).
    """
    if low > high + WINDOW_EPSILON:
        return None
    if fraction > high:
        value = floor_to(high, 0.01)
        return value if value >= low - WINDOW_EPSILON and value > 0 else choose_in_window(Window(low, high, ()))
    if fraction < low:
        return low if system == "vllm" else choose_in_window(Window(low, high, ()))
    return fraction


def longest_context(b: FractionBudget, fraction: float) -> int | None:
    """The longest context (a multiple of 1024 tokens) whose one request still fits at this fraction, or None."""
    if not b.cell_bytes or b.weights_bytes is None:
        return None
    held = b.non_kv_bytes + VLLM_MARGIN_BYTES if b.system == "vllm" else b.weights_bytes
    room = int(fraction * b.base_bytes) - held
    tokens = room // b.cell_bytes // 1024 * 1024
    return tokens if tokens >= 1024 else None

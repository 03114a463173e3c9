"""Named recommenders: from the facts and budget of an incident to flag changes with values.

Rules name these by id; each returns zero or more recommendations, every value carrying the steps
that produced it. A recommender that lacks the numbers it needs returns a recommendation without a
value rather than guessing one.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from oomdoctor.base.units import GIB, ceil_to, floor_to, format_bytes
from oomdoctor.inference.facts import Facts
from oomdoctor.memory import budget
from oomdoctor.memory.budget import Step

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

    Recommender = Callable[[Facts], list["Recommendation"]]  # defined below

# A recommendation's role among its finding's: the one set to paste, an alternative to it, or a change
# the budget shows does not work (listed with why, never pasted).
# A companion is a change another one needs (its ``with``), shown only as part of that set.
PRIMARY, ALTERNATIVE, NOT_WORKABLE, COMPANION = "primary", "alternative", "not_workable", "companion"


@dataclass(frozen=True, slots=True)
class Recommendation:
    """Change ``flag`` in ``direction`` to ``value``; ``why`` says why, ``derivation`` shows how.

    ``companions`` are the changes it needs to form one consistent set (TP 2 *with* the fraction the
    new window allows); ``feasible`` is the budget's verdict on that set (None where the budget does not
    decide it); ``cost`` is what the change gives up. ``direction`` "run" is a command, not a flag.
    """

    flag: str
    value: Any
    direction: str
    why: str
    current: Any = None
    derivation: tuple[Step, ...] = field(default_factory=tuple)
    role: str = ALTERNATIVE
    cost: str = ""
    feasible: bool | None = None
    companions: tuple[Recommendation, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "flag": self.flag,
            "value": self.value,
            "direction": self.direction,
            "current": self.current,
            "why": self.why,
            "derivation": [s.to_json() for s in self.derivation],
            "role": self.role,
            "cost": self.cost,
            "feasible": self.feasible,
            "with": [c.to_json() for c in self.companions],
            "paste": self.paste,
        }

    @property
    def paste(self) -> str | None:
        """The change as it is pasted: a launch flag, an ``export`` line, a command, or a commented script setting."""
        return paste_line(self.flag, self.value, self.direction)

    @property
    def paste_set(self) -> list[str]:
        """The paste lines of the whole set: this change and its companions."""
        return [line for line in (self.paste, *(c.paste for c in self.companions)) if line]


def _shell_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (dict, list)):
        import json  # a dict or list flag value is rare; the diagnose path stays without json

        value = json.dumps(value)
    return shell_word(str(value))


# Characters a POSIX shell reads literally in an unquoted word.


def shell_word(text: str) -> str:
    """``text`` as one word a POSIX shell reads back unchanged."""
    return shlex.quote(text)


def paste_line(flag: str, value: Any, direction: str) -> str | None:
    """One change, ready to paste: ``--flag value`` (JSON and spaces quoted for the shell), ``export NAME=value``,
    the command itself for "run", ``# in your script: name = value`` for a script setting; None without a value."""
    if direction == "run":
        return flag
    if value is None or value is False:
        return None
    if flag.startswith("--"):
        return flag if value is True else f"{flag} {_shell_value(value)}"
    if flag.isupper():
        return f"export {flag}={_shell_value(value)}"
    return f"# in your script: {flag} = {value}"


_REGISTRY: dict[str, Recommender] = {}


def recommender(name: str) -> Callable[[Recommender], Recommender]:
    def register(fn: Recommender) -> Recommender:
        _REGISTRY[name] = fn
        return fn

    return register


def known_advice() -> tuple[str, ...]:
    return tuple(sorted(_REGISTRY))


def registry() -> Mapping[str, Recommender]:
    """The shipped recommenders by name: what the pipeline is given explicitly (oomdoctor.api.diagnose)."""
    return dict(_REGISTRY)


def recommend(advice_ids: tuple[str, ...], facts: Facts, recommenders: Mapping[str, Recommender] | None = None) -> list[Recommendation]:
    """The named recommenders' advice, each checked against the incident's own budget and given its role."""
    table = _REGISTRY if recommenders is None else recommenders
    out: list[Recommendation] = []
    for advice_id in advice_ids:
        out.extend(table[advice_id](facts))
    return settle(out, facts)


def _g(n: float | None) -> str:
    return format_bytes(n)


@recommender("raise-mem-fraction-static")
def raise_mem_fraction_static(f: Facts) -> list[Recommendation]:
    """startup_kv: the y that fits one request's KV and keeps SGLang's activation reserve."""
    mfs, pre, post = f.get("mem_fraction_static"), f.get("pre_bytes"), f.get("post_bytes")
    window = f.get("_window")
    # The value needs pre, post and the window they give. The y in use only explains it where the engine's
    # message means a KV budget <= 0 (then every y in the window is above it); a sliding-window pool's or a
    # hybrid state pool's error leaves a positive budget, so there the y in use is needed to know a value is a raise.
    kind = f.get("startup_kv_error_kind")
    swa = kind == "swa_pool"
    budget_at_most_zero = kind in ("not_enough_memory", "weights_leave_no_kv", "profiled_negative", "legacy_profile_negative")
    if not pre or post is None or window is None or (mfs is None and not budget_at_most_zero):
        suggested = f.get("sglang_suggested_mfs")
        if suggested is not None:
            return [
                Recommendation(
                    "--mem-fraction-static",
                    round(suggested + 0.05, 2) if suggested + 0.05 < 0.96 else suggested,
                    "raise",
                    "SGLang's own message gives the minimum viable value; the log lacks the avail mem lines to size the KV pool above it.",
                    current=mfs,
                    derivation=(Step("SGLang's suggested minimum", "from 'Raise --mem-fraction-static above X'", suggested, "fraction"),),
                )
            ]
        return [
            Recommendation(
                "--mem-fraction-static",
                None,
                "raise",
                _no_value_why(swa, have_window=bool(pre) and post is not None and window is not None, have_mfs=mfs is not None),
                current=mfs,
            )
        ]
    steps: list[Step] = [
        Step("pre: free before weights (worst rank)", "Load weight begin. avail mem", pre, "bytes"),
        Step("post: free after weights (worst rank)", "Load weight end. avail mem", post, "bytes"),
        *f.derivations["weights_bytes"].steps,
        *(budget.sglang_kv_derivation(pre, post, mfs).steps if mfs is not None else ()),
        *f.derivations["kv_floor_bytes"].steps,
        *f.derivations["activation_reserve_bytes"].steps,
        *window.steps,
    ]
    choice = budget.choose_in_window(window)
    if choice is not None and f.get("weights_fit_undecided"):
        return [_sglang_undecided_mfs(f, mfs, pre, post, choice, steps)]
    if choice is None:
        return [
            Recommendation(
                "--mem-fraction-static",
                None,
                "raise",
                (
                    f"No y works: weights {_g(f.get('weights_bytes'))} plus one request's KV {_g(f.get('kv_floor_bytes'))} "
                    f"need y >= {window.low:.3f}, but keeping SGLang's {_g(f.get('activation_reserve_bytes'))} activation reserve "
                    f"needs y <= {window.high:.3f}. Shard or shrink the model instead (see the other recommendations)."
                ),
                current=mfs,
                derivation=tuple(steps),
            )
        ]
    finer = False
    if mfs is not None and choice <= mfs:
        # The round value is no raise (a sliding-window pool's error at a y already near the top): a finer
        # step above the y in use, if the window's top leaves one.
        above = budget.raise_in_window(window, mfs)
        if above is not None:
            choice, finer = above, True
    if mfs is not None and choice <= mfs:
        return [
            Recommendation(
                "--mem-fraction-static",
                None,
                "raise",
                (
                    f"y={mfs:g} leaves no step of 0.001 below {window.high:.4f}, the most that keeps SGLang's "
                    f"{_g(f.get('activation_reserve_bytes'))} activation reserve, so no raise is left; "
                    + ("reduce --max-running-requests or lower SGLANG_SWA_EVICTION_INTERVAL (SGLang's advice), or shard the model." if swa else "shard or shrink the model instead.")
                ),
                current=mfs,
                derivation=tuple(steps),
            )
        ]
    at_choice = budget.sglang_kv_derivation(pre, post, choice)
    steps.extend(at_choice.steps)
    rule = "largest multiple of 0.05 (else 0.01, else 0.001) inside the window" + (f" and above {mfs:g}" if finer else "")
    steps.append(Step("recommended y", rule, choice, "fraction"))
    at_current = (
        f"At y={mfs:g} the static share y*pre is smaller than the weights, so the KV budget is {_g(f.get('kv_budget_bytes'))}"
        if mfs is not None
        else "At the y in use (the log has no server_args line) the engine found no room for the KV cache"
    )
    why = (
        f"{at_current}; raising y (not lowering it) grows the KV pool: at y={choice:g} it is "
        f"{_g(at_choice.value)}, and (1-y)*pre = {_g(budget.sglang_dynamic_region_bytes(pre, choice))} stays for activations."
    )
    return [Recommendation("--mem-fraction-static", choice, "raise", why, current=mfs, derivation=tuple(steps))]


def _no_value_why(swa: bool, have_window: bool, have_mfs: bool) -> str:
    """Why raise-mem-fraction-static gives no value: what the log lacks for one."""
    if have_window and swa:
        return (
            "The sliding-window (SWA) pool's fixed share left no room for the full KV pool; raise y, or as SGLang says reduce "
            "--max-running-requests or lower SGLANG_SWA_EVICTION_INTERVAL. The log lacks the server_args line (the y in use) to compute a value."
        )
    if have_window:
        return "The engine's message leaves the KV budget positive but too small; raise y. The log lacks the server_args line (the y in use) to compute a value."
    lacks = ", and the server_args line that gives the y in use." if not have_mfs else "."
    return "The KV budget y*pre - weights was not positive; raise y. The log lacks 'Load weight begin/end ... avail mem=' lines to compute the value" + lacks


def _tp_flag(f: Facts) -> str:
    return "--tensor-parallel-size" if f.get("system") == "vllm" else "--tp-size"


@recommender("scale-out-weights")
def scale_out_weights(f: Facts) -> list[Recommendation]:
    """weights_dont_fit: more tensor parallelism, or quantized weights."""
    tp = f.get("tp_size") or 1
    weights, pre = f.get("weights_bytes"), f.get("pre_bytes")
    steps: tuple[Step, ...] = ()
    why = "The weights alone leave no room for KV cache and activations on this GPU; shard them over more GPUs."
    if weights and pre:
        share = weights / pre
        steps = (Step("weights' share of pre-load free memory", f"{_g(weights)} / {_g(pre)}", round(share, 4), "ratio"),)
        why = f"The weights take {share:.0%} of the memory free before loading ({_g(weights)} of {_g(pre)}); doubling TP halves the per-GPU share."
    if f.get("system") == "torch":
        return [
            Recommendation(
                "torch_dtype",
                "bfloat16",
                "set",
                why.replace("doubling TP halves the per-GPU share", "load in bf16 or a quantized format, or shard with device_map / FSDP"),
                derivation=steps,
            )
        ]
    return [
        Recommendation(_tp_flag(f), tp * 2, "raise", why, current=tp, derivation=steps),
        Recommendation(
            "--quantization",
            "fp8",
            "set",
            "FP8 weights take about half the memory of BF16 (on GPUs with FP8 support); or serve a pre-quantized checkpoint.",
        ),
    ]


@recommender("kv-cache-fp8")
def kv_cache_fp8(f: Facts) -> list[Recommendation]:
    if f.get("kv_cache_dtype") not in (None, "auto", "bfloat16", "float16"):
        return []
    return [
        Recommendation(
            "--kv-cache-dtype",
            "fp8" if f.get("system") == "vllm" else "fp8_e4m3",
            "set",
            "An FP8 KV cache holds twice the tokens in the same memory, so a smaller KV budget still serves full-length requests.",
            current=f.get("kv_cache_dtype"),
        )
    ]


@recommender("lower-mem-fraction-static")
def lower_mem_fraction_static(f: Facts) -> list[Recommendation]:
    """runtime OOMs: lower y so (1-y)*pre grows by the shortfall plus room for one more such allocation."""
    mfs, pre = f.get("mem_fraction_static"), f.get("pre_bytes")
    requested, free = f.get("requested_bytes"), f.get("free_bytes")
    if mfs is None or not pre or requested is None or free is None:
        missing = [n for n, v in (("mem_fraction_static", mfs), ("pre_bytes", pre), ("requested_bytes", requested), ("free_bytes", free)) if v is None]
        return [
            Recommendation(
                "--mem-fraction-static",
                None,
                "lower",
                f"Give activations more room by lowering y; to compute by how much, the log would need: {', '.join(missing)}.",
                current=mfs,
            )
        ]
    shortfall = max(requested - free, 0)
    margin = budget.runtime_margin_bytes(requested)
    lowered = budget.sglang_lowered_mfs(mfs, pre, shortfall, margin)
    steps = [
        Step("requested by the failed allocation", "Tried to allocate", requested, "bytes"),
        Step("free on the GPU at the failure", "of which ... is free", free, "bytes"),
        Step("shortfall", f"{_g(requested)} - {_g(free)}", shortfall, "bytes"),
        Step("margin: one more allocation of that size (at least 512 MiB)", f"max({_g(requested)}, 512 MiB)", margin, "bytes"),
        *lowered.steps,
    ]
    value = lowered.value
    # Whether the value is workable (not below what the weights plus one request need) is settle()'s check.
    why = (
        f"The forward pass needed {_g(requested)} with {_g(free)} free: the dynamic region (1-y)*pre was too small. "
        f"Lowering y from {mfs:g} to {value:g} moves {_g(shortfall + margin)} from the KV pool to activations."
    )
    if value <= 0:
        return []
    return [Recommendation("--mem-fraction-static", value, "lower", why, current=mfs, derivation=tuple(steps))]


@recommender("lower-chunked-prefill-size")
def lower_chunked_prefill_size(f: Facts) -> list[Recommendation]:
    """Prefill activations scale with the chunk; halve it (SGLang docs suggest 4096 or 2048)."""
    if f.get("oom_phase") == "decode":
        return []
    chunk = f.get("chunked_prefill_size")
    if chunk is None or chunk <= 0:
        return [
            Recommendation(
                "--chunked-prefill-size",
                4096,
                "set",
                "Prefill activations grow with the tokens prefilled at once; chunking them at 4096 bounds that peak.",
                current=chunk,
            )
        ]
    value = max(budget.pow2_floor(chunk // 2), 512)
    if value >= chunk:
        return []
    return [
        Recommendation(
            "--chunked-prefill-size",
            value,
            "lower",
            f"Prefill activation memory grows about linearly with the chunk; halving {chunk} to {value} halves that peak at some cost in prefill throughput.",
            current=chunk,
            derivation=(Step("halved chunk, a power of two", f"{chunk} / 2", value, "tokens"),),
        )
    ]


def _halve(f: Facts, fact: str, flag: str, why: str, unit: str, default_hint: int | None = None) -> list[Recommendation]:
    current = f.get(fact)
    if current is None:
        return [Recommendation(flag, default_hint, "lower" if default_hint is None else "set", why, current=None)]
    value = max(current // 2, 1)
    return [Recommendation(flag, value, "lower", why, current=current, derivation=(Step("halved", f"{current} // 2", value, unit),))]


@recommender("lower-max-running-requests")
def lower_max_running_requests(f: Facts) -> list[Recommendation]:
    if f.get("oom_phase") == "prefill" and not (f.get("kv_alloc_failed") or f.get("req_slots_failed")):
        return []
    return _halve(f, "max_running_requests", "--max-running-requests", "Fewer concurrent requests halve the per-step demand on the KV pool and on decode activations.", "count")


@recommender("lower-cuda-graph-max-bs")
def lower_cuda_graph_max_bs(f: Facts) -> list[Recommendation]:
    """cuda_graph: capture fewer batch sizes, under the flag name this SGLang version uses."""
    flag = f.get("cuda_graph_flag", "--cuda-graph-max-bs")
    current = f.get("cuda_graph_max_bs")
    failing = f.get("capture_last_bs")
    steps: list[Step] = []
    if failing and (not current or failing <= current):
        value = budget.halved_batch_size(failing)
        steps.append(Step("batch size being captured when memory ran out", "Capturing batches (bs=N ...)", failing, "count"))
        steps.append(Step("half of it (multiple of 8)", f"{failing} / 2", value, "count"))
    elif current:
        value = budget.halved_batch_size(current)
        steps.append(Step("half the configured maximum (multiple of 8)", f"{current} / 2", value, "count"))
    else:
        value = 16
        steps.append(Step("SGLang's own example value", "e.g. 16", value, "count"))
    why = (
        f"Graph capture ran out of memory; each captured batch size keeps its own buffers in the dynamic region. "
        f"Capturing up to {value} instead of {current if current else 'the default'} needs less of it. "
        f"({flag} is this version's spelling.)"
    )
    if current and value >= current:
        return [Recommendation(flag, None, "lower", f"Graph capture ran out of memory; capture fewer batch sizes than {current} with {flag}.", current=current)]
    return [Recommendation(flag, value, "lower", why, current=current, derivation=tuple(steps))]


@recommender("expandable-segments")
def expandable_segments(f: Facts) -> list[Recommendation]:
    """fragmentation: free + reserved-unallocated would have served the request."""
    requested, unalloc, free = f.get("requested_bytes"), f.get("reserved_unallocated_bytes"), f.get("free_bytes")
    steps: tuple[Step, ...] = ()
    if requested is not None and unalloc is not None:
        steps = (
            Step("requested", "Tried to allocate", requested, "bytes"),
            Step("reserved by PyTorch but unallocated", "free pieces of partly used segments", unalloc, "bytes"),
            Step("free on the device", "of which ... is free", free if free is not None else "n/a", "bytes"),
        )
    why = (
        f"PyTorch held {_g(unalloc)} reserved but unallocated, at least the {_g(requested)} requested, yet in pieces too small "
        "to serve it. Expandable segments let the allocator grow segments instead of splitting them."
    )
    return [Recommendation("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", "set", why, derivation=steps)]


@recommender("reserve-encoder-memory")
def reserve_encoder_memory(f: Facts) -> list[Recommendation]:
    """encoder_starvation: reserve room for the encoder (Omni) or shrink the static share (SGLang VLM)."""
    requested, free, capacity = f.get("requested_bytes"), f.get("free_bytes"), f.get("capacity_bytes")
    if f.get("omni"):
        current = f.get("encoder_mem_reserve", 0.05)
        if requested is None or free is None or not capacity:
            return [
                Recommendation(
                    "--encoder-mem-reserve",
                    ceil_to(current + 0.05, 0.01),
                    "raise",
                    "The encoder stage ran out of memory; reserve more of the GPU for it (the OOM numbers were not in the log, so this is one 0.05 step).",
                    current=current,
                )
            ]
        need = max(requested - free, 0) + budget.runtime_margin_bytes(requested)
        value = ceil_to(current + need / capacity, 0.01)
        steps = (
            Step("encoder shortfall plus one more such allocation", f"{_g(requested)} - {_g(free)} + margin", need, "bytes"),
            Step("as a fraction of the card", f"{_g(need)} / {_g(capacity)}", round(need / capacity, 4), "ratio"),
            Step("new reserve", f"{current:g} + {need / capacity:.4f}, rounded up to 0.01", value, "fraction"),
        )
        why = (
            f"The encoder needed {_g(requested)} with {_g(free)} free: the thinker's static share left it too little. "
            f"Raising encoder_mem_reserve from {current:g} to {value:g} lowers the thinker's mem_fraction_static by the same amount."
        )
        return [Recommendation("--encoder-mem-reserve", value, "raise", why, current=current, derivation=steps)]
    recs = [
        replace(r, why="SGLang keeps no explicit reserve for the vision/audio encoder; its activations come out of (1-y)*pre. " + r.why)
        for r in lower_mem_fraction_static(f)
    ]
    recs.append(
        Recommendation(
            "SGLANG_VLM_CACHE_SIZE_MB",
            None,
            "lower",
            "Cap image/video size per request (fewer pixels or frames) so one encoder batch fits; a smaller embedding cache frees room too.",
        )
    )
    return recs


# --- vLLM --------------------------------------------------------------------------------------------


def _vllm_need(f: Facts) -> tuple[int | None, list[Step]]:
    need = budget.kv_floor(f.get("max_model_len"), f.get("cell_bytes"), f.get("kv_needed_bytes"), system="vllm")
    return need.value, list(need.steps)


def _sglang_undecided_mfs(f: Facts, mfs: float | None, pre: int, post: int, choice: float, steps: list[Step]) -> Recommendation:
    """The y for a startup KV failure when one request's KV size is only assumed.

    The window then counts no KV for the request (what the log proves: weights and the activation
    reserve), and the choice is its top, the largest KV pool the GPU allows; the text names the
    per-token KV size as what decides whether one request fits in it.
    """
    at_choice = budget.sglang_kv_derivation(pre, post, choice)
    steps = [*steps, *at_choice.steps, Step("recommended y", "largest multiple of 0.05 (else 0.01, else 0.001) inside the window", choice, "fraction")]
    at_current = f"At y={mfs:g} the KV budget is {_g(f.get('kv_budget_bytes'))}" if mfs is not None else "At the y in use (not in the log) the KV cache did not fit"
    why = (
        f"{at_current}; raising y (not lowering it) grows the KV pool: at y={choice:g}, "
        f"near the most this GPU allows while keeping SGLang's {_g(f.get('activation_reserve_bytes'))} activation reserve, it is "
        f"{_g(at_choice.value)}. Whether one request's KV fits in it depends on the model's per-token KV size, which the log does not give "
        "(the check assumed 1 GiB): if it does not, shard or shrink the model instead."
    )
    return Recommendation("--mem-fraction-static", choice, "raise", why, current=mfs, derivation=tuple(steps))


@recommender("vllm-raise-gpu-memory-utilization")
def vllm_raise_util(f: Facts) -> list[Recommendation]:
    """startup_kv on vLLM: the u whose budget holds non-KV memory plus one max-length request."""
    util, total, non_kv = f.get("gpu_memory_utilization"), f.get("capacity_bytes"), f.get("non_kv_bytes")
    need, steps = _vllm_need(f)
    if not total or non_kv is None or need is None:
        return [
            Recommendation(
                "--gpu-memory-utilization",
                None,
                "raise",
                "The KV budget u*total - (weights + activations + non-torch) could not hold one request; raise u. The log lacks the profile numbers to compute the value.",
                current=util,
            )
        ]
    steps = [
        Step("total GPU memory", "from vLLM's profile / startup check / OOM message", total, "bytes"),
        *f.derivations.get("non_kv_bytes", budget.Derived(non_kv, (Step("non-KV memory (weights + activation peak + non-torch)", "vLLM profile", non_kv, "bytes"),))).steps,
        *steps,
    ]
    if util is not None:
        steps.extend(budget.vllm_kv_derivation(total, util, non_kv).steps)
    needed = budget.vllm_util_for_kv(total, non_kv, need)
    steps.extend(needed.steps)
    cap = f.get("max_safe_util")
    if cap is not None:
        steps.extend(f.derivations["max_safe_util"].steps)
    if cap is not None and needed.value > cap and f.get("weights_fit_undecided"):
        # The needed u rests on the assumed 1 GiB of KV; the largest u the GPU allows does not.
        at_cap = budget.vllm_kv_budget_bytes(total, cap, non_kv)
        steps.append(Step(f"KV budget at the largest u ({cap:g})", f"{cap:g} * {_g(total)} - {_g(non_kv)}", at_cap, "bytes"))
        why = (
            f"The KV budget at u={util} is {_g(f.get('kv_budget_bytes'))}. At u={cap:g}, the most the GPU allows, it is {_g(at_cap)}. Whether "
            f"one request of {f.get('max_model_len') or 'max-model-len'} tokens fits in it depends on the model's per-token KV size, which the log "
            "does not give (the check assumed 1 GiB): if it does not, lower --max-model-len or shard the model."
        )
        return [Recommendation("--gpu-memory-utilization", cap, "raise", why, current=util, derivation=tuple(steps))]
    if cap is not None and needed.value > cap:
        return []
    at_new = budget.vllm_kv_budget_bytes(total, needed.value, non_kv)
    steps.append(Step(f"KV budget at u={needed.value:g}", f"{needed.value:g} * {_g(total)} - {_g(non_kv)}", at_new, "bytes"))
    why = (
        f"One request of {f.get('max_model_len')} tokens needs {_g(need)} of KV but the budget at u={util} holds {_g(f.get('kv_budget_bytes'))}. "
        f"u is a fraction of the whole GPU for weights, activations and KV together; at u={needed.value:g} the KV budget is {_g(at_new)}."
    )
    return [Recommendation("--gpu-memory-utilization", needed.value, "raise", why, current=util, derivation=tuple(steps))]


@recommender("vllm-lower-max-model-len")
def vllm_lower_max_model_len(f: Facts) -> list[Recommendation]:
    """startup_kv on vLLM: the longest context the current KV budget holds."""
    length, estimate, kv, cell = f.get("max_model_len"), f.get("estimated_max_len"), f.get("kv_budget_bytes"), f.get("cell_bytes")
    capacity_tokens = f.get("kv_capacity_tokens")
    steps: list[Step] = []
    if estimate:
        raw = estimate
        steps.append(Step("vLLM's estimate of the longest context that fits", "Based on the available memory ...", estimate, "tokens"))
    elif capacity_tokens and (not length or capacity_tokens < length):
        raw = capacity_tokens
        steps.append(Step("tokens the KV cache holds (vLLM's figure)", "maximum number of tokens that can be stored in KV cache", capacity_tokens, "tokens"))
    elif kv and cell and kv > 0:
        raw = budget.vllm_max_model_len(kv, cell, f.get("block_size") or 16)
        steps.append(Step("tokens the KV budget holds", f"{_g(kv)} / {cell} bytes per token, whole blocks", raw, "tokens"))
    else:
        # The fact carries the engine message's name ("vllm_no_cache_blocks": no blocks at all).
        if f.get("startup_kv_error_kind") == "vllm_no_cache_blocks":
            return []
        return [Recommendation("--max-model-len", None, "lower", "A shorter maximum context needs less KV for one request.", current=length)]
    value = (raw // 1024) * 1024 if raw >= 2048 else raw
    steps.append(Step("rounded down to a multiple of 1024", f"{raw} -> {value}", value, "tokens"))
    if not value:
        return []
    why = f"Keep u and serve at most {value} tokens per request: the current KV budget holds one request of that length."
    return [Recommendation("--max-model-len", value, "lower", why, current=length, derivation=tuple(steps))]


@recommender("vllm-util-for-free-memory")
def vllm_util_for_free_memory(f: Facts) -> list[Recommendation]:
    """The startup check refused u*total: the largest u that fits what is free, and what the gap means."""
    util, total, free, deficit = f.get("gpu_memory_utilization"), f.get("capacity_bytes"), f.get("free_at_start_bytes"), f.get("startup_free_deficit_bytes")
    if not total or free is None or util is None:
        return []
    safe = budget.vllm_max_safe_util(free, total)
    steps = [
        Step("requested u*total", f"{util:g} * {_g(total)}", f.get("requested_budget_bytes"), "bytes"),
        Step("free on the device at startup", "Free memory on device (free/total)", free, "bytes"),
        Step("shortfall", "requested - free", deficit, "bytes"),
        *safe.steps,
    ]
    if deficit is not None and deficit < 256 * 1024 * 1024:
        value = floor_to(util - 0.01, 0.01)
        why = (
            f"The GPU is only {_g(deficit)} short of u*total: tens of MB is what a PyTorch/vLLM accounting regression over-counts, "
            f"not a foreign process. Lowering u by one step to {value:g} passes the check."
        )
        steps.append(Step("one step lower", f"{util:g} - 0.01", value, "fraction"))
    else:
        value = safe.value
        why = (
            f"Something else holds about {_g(deficit)} on this GPU. Freeing it is the fix; until then u={value:g} fits the free memory "
            "(the KV pool shrinks by the same amount, and the other process can still grow into it)."
        )
    if value <= 0:
        return []
    return [Recommendation("--gpu-memory-utilization", value, "lower", why, current=util, derivation=tuple(steps))]


@recommender("vllm-lower-gpu-memory-utilization")
def vllm_lower_util(f: Facts) -> list[Recommendation]:
    """runtime OOMs on vLLM: leave the shortfall plus one more allocation outside u*total."""
    util, total, requested, free = f.get("gpu_memory_utilization"), f.get("capacity_bytes"), f.get("requested_bytes"), f.get("free_bytes")
    if util is None or not total or requested is None or free is None:
        return [
            Recommendation(
                "--gpu-memory-utilization",
                None,
                "lower",
                "Leave more of the GPU outside vLLM's budget for activations and graphs; the log lacks the numbers to compute by how much.",
                current=util,
            )
        ]
    shortfall = max(requested - free, 0)
    margin = budget.runtime_margin_bytes(requested)
    lowered = budget.vllm_lowered_util(util, total, shortfall, margin)
    why = (
        f"An allocation of {_g(requested)} failed with {_g(free)} free: what vLLM leaves outside u*total was too small. "
        f"u={lowered.value:g} leaves {_g(shortfall + margin)} more."
    )
    steps = (Step("requested", "Tried to allocate", requested, "bytes"), Step("free", "of which ... is free", free, "bytes"), *lowered.steps)
    return [Recommendation("--gpu-memory-utilization", lowered.value, "lower", why, current=util, derivation=steps)]


@recommender("vllm-lower-max-num-batched-tokens")
def vllm_lower_batched_tokens(f: Facts) -> list[Recommendation]:
    if f.get("oom_phase") == "decode":
        return []
    return _halve(f, "max_num_batched_tokens", "--max-num-batched-tokens", "Prefill (and vLLM's profile run) activations grow with the tokens batched per step.", "tokens", 2048)


@recommender("vllm-lower-max-num-seqs")
def vllm_lower_max_num_seqs(f: Facts) -> list[Recommendation]:
    if f.get("oom_phase") in ("prefill", "profile"):
        return []
    return _halve(f, "max_num_seqs", "--max-num-seqs", "Fewer sequences per step need less decode activation memory, and fewer CUDA graph batch sizes are captured.", "count")


@recommender("vllm-cuda-graph")
def vllm_cuda_graph(f: Facts) -> list[Recommendation]:
    """cuda_graph on vLLM: capture fewer sizes, or run eager."""
    recs: list[Recommendation] = []
    largest = f.get("max_capture_size")
    if largest:
        value = budget.halved_batch_size(largest)
        recs.append(
            Recommendation(
                "--max-num-seqs",
                value,
                "lower",
                f"vLLM captures graphs up to batch size {largest}; capping the batch at {value} captures half as many sizes.",
                current=f.get("max_num_seqs"),
                derivation=(Step("half the largest capture size (multiple of 8)", f"{largest} / 2", value, "count"),),
            )
        )
    else:
        recs.extend(_halve(f, "max_num_seqs", "--max-num-seqs", "Capture sizes follow max_num_seqs; fewer sizes need less graph memory.", "count"))
    recs.append(
        Recommendation(
            "--enforce-eager",
            True,
            "set",
            "Skips CUDA graph capture altogether (the 1-3 GiB of graph memory per GPU vLLM warns about), at a decode-speed cost.",
            current=f.get("enforce_eager"),
        )
    )
    return recs


@recommender("vllm-encoder-limits")
def vllm_encoder_limits(f: Facts) -> list[Recommendation]:
    return [
        Recommendation(
            "--limit-mm-per-prompt",
            '{"image": 1}',
            "set",
            "vLLM sizes the encoder's profile run by the most images/videos a prompt may carry; fewer per prompt need less encoder memory.",
        ),
        Recommendation(
            "--mm-processor-kwargs",
            '{"max_pixels": 1003520}',
            "set",
            "Caps the pixels per image (Qwen-VL style processors), which bounds the vision tower's activations.",
        ),
        *vllm_lower_max_num_seqs(f),
    ]


# --- plain PyTorch scripts ------------------------------------------------------------------------------


@recommender("script-memory")
def script_memory(f: Facts) -> list[Recommendation]:
    """An activation/batch OOM in a training or inference script."""
    requested, free, allocated = f.get("requested_bytes"), f.get("free_bytes"), f.get("allocated_bytes")
    recs: list[Recommendation] = []
    if requested is not None and free is not None and allocated:
        shortfall = max(requested - free, 0)
        keep = max(0.0, 1 - (shortfall + budget.runtime_margin_bytes(requested)) / allocated)
        scale = floor_to(keep, 0.05)
        needed = shortfall + budget.runtime_margin_bytes(requested)
        why = (
            f"Activations scale with the batch; at most about {scale:.0%} of the current batch fits (the allocation lacked {_g(shortfall)})."
            if scale > 0
            # Seen on a real H200 recording: "at most about 0%" is no advice. Say what the arithmetic does show.
            else f"Lowering the batch alone cannot be sized from these figures: the shortfall plus one more such allocation ({_g(needed)}) "
            f"is more than all PyTorch holds ({_g(allocated)}), so the {_g(requested)} request itself must shrink (shorter sequences or chunks), "
            "or memory held outside this allocation must be freed."
        )
        recs.append(
            Recommendation(
                "batch_size",
                None,
                "lower",
                why,
                derivation=(
                    Step("shortfall plus one more such allocation", f"{_g(requested)} - {_g(free)} + margin", shortfall + budget.runtime_margin_bytes(requested), "bytes"),
                    Step("share of allocated memory to keep", f"1 - that / allocated {_g(allocated)}, rounded down to 0.05", scale, "ratio"),
                ),
            )
        )
    else:
        recs.append(Recommendation("batch_size", None, "lower", "Activations scale with the batch size; halve it."))
    if f.get("training_script"):
        # Training advice only where the traceback shows training; an inference script or server has no backward pass.
        recs.append(
            Recommendation(
                "gradient_checkpointing",
                True,
                "set",
                "Activation checkpointing recomputes activations in the backward pass instead of keeping them (training only).",
            )
        )
    recs.append(
        Recommendation(
            "PYTORCH_CUDA_ALLOC_CONF",
            "expandable_segments:True",
            "set",
            "Cheap to try first: it removes the fragmentation share of the peak (PYTORCH_ALLOC_CONF in newer torch).",
        )
    )
    return recs


# --- Feasibility and roles ------------------------------------------------------------------------------

# What each change gives up, by flag (and direction where it matters): shown next to every "or".
_COSTS: dict[str, str] = {
    "--tp-size": "hardware: twice the GPUs per replica",
    "--tensor-parallel-size": "hardware: twice the GPUs per replica",
    "--quantization": "quality: FP8 weights",
    "--kv-cache-dtype": "quality: FP8 KV cache",
    "--context-length": "capability: shorter longest request",
    "--max-model-len": "capability: shorter longest request",
    "--chunked-prefill-size": "throughput: slower prefill",
    "--max-num-batched-tokens": "throughput: slower prefill",
    "--max-running-requests": "throughput: fewer concurrent requests",
    "--max-num-seqs": "throughput: fewer concurrent requests",
    "--cuda-graph-max-bs": "throughput: larger decode batches run without CUDA graphs",
    "--cuda-graph-max-bs-decode": "throughput: larger decode batches run without CUDA graphs",
    "--enforce-eager": "throughput: no CUDA graphs, slower decode",
    "--encoder-mem-reserve": "throughput: a smaller KV pool for the thinker",
    "--limit-mm-per-prompt": "capability: fewer images per prompt",
    "--mm-processor-kwargs": "quality: fewer pixels per image",
    "SGLANG_VLM_CACHE_SIZE_MB": "capability: smaller images or fewer frames",
    "PYTORCH_CUDA_ALLOC_CONF": "none",
    "batch_size": "throughput: smaller batches",
    "gradient_checkpointing": "throughput: activations are recomputed",
    "torch_dtype": "quality: lower precision",
}


def cost_of(flag: str, direction: str) -> str:
    if flag in budget.FRACTION_FLAGS.values():
        return "throughput: a smaller KV pool (fewer tokens at once)" if direction == "lower" else "none: inside the window"
    return _COSTS.get(flag, "none" if direction == "run" else "")


def fraction_budget(f: Facts) -> budget.FractionBudget | None:
    """The incident's window as a budget a set of changes can be re-evaluated in (None when the log lacks it).

    When whether one request's KV fits rests on the assumed 1 GiB alone (weights_fit_undecided), the
    window is checked without it: what the log proves (weights, activations, reserve) still bounds
    it, and the recommendation's text names the per-token KV size as what would decide the rest.
    """
    system = f.get("system")
    tp, pp = f.get("tp_size") or 1, f.get("pp_size") or 1
    undecided = bool(f.get("weights_fit_undecided"))
    if system == "sglang":
        pre, weights, floor, reserve = f.get("pre_bytes"), f.get("weights_bytes"), f.get("kv_floor_bytes"), f.get("activation_reserve_bytes")
        floor = 0 if undecided and floor is not None else floor
        if not pre or weights is None or floor is None or reserve is None:
            return None
        return budget.FractionBudget(
            "sglang", f.get("mem_fraction_static"), pre, weights, floor, reserve_bytes=reserve, tp=tp, pp=pp,
            capacity_hint_bytes=max(f.get("capacity_bytes") or 0, pre), cell_bytes=f.get("cell_bytes"), context_len=f.get("context_len"),
            encoder_reserve=f.get("encoder_mem_reserve", 0.05) if f.get("omni") else None, kv_floor_unknown=undecided,
        )
    if system == "vllm":
        total, non_kv, cap = f.get("capacity_bytes"), f.get("non_kv_bytes"), f.get("max_safe_util")
        if not total or non_kv is None or cap is None:
            return None
        need = 0 if undecided else budget.kv_floor(f.get("max_model_len"), f.get("cell_bytes"), f.get("kv_needed_bytes"), system="vllm").value
        return budget.FractionBudget(
            "vllm", f.get("gpu_memory_utilization"), total, f.get("weights_bytes"), need, non_kv_bytes=non_kv, max_util=cap, tp=tp, pp=pp,
            cell_bytes=f.get("cell_bytes"), context_len=f.get("max_model_len"), kv_floor_unknown=undecided,
        )
    return None


def changes_of(r: Recommendation) -> tuple[tuple[str, Any], ...]:
    """The flag changes a recommendation makes, its companions included."""
    return ((r.flag, r.value), *((c.flag, c.value) for c in r.companions))


def _moves_fraction(r: Recommendation, b: budget.FractionBudget) -> bool:
    return r.flag == b.flag or r.flag == "--encoder-mem-reserve"


def _cap_lowered(r: Recommendation, b: budget.FractionBudget) -> Recommendation:
    """A lowered fraction above the window's top is lowered to the top instead (more room, never less)."""
    if r.flag != b.flag or r.direction != "lower" or not isinstance(r.value, float):
        return r
    low, high = budget.fraction_window(b)
    if r.value <= high + budget.WINDOW_EPSILON:
        return r
    capped = floor_to(high, 0.01)
    if capped < low - budget.WINDOW_EPSILON or capped <= 0:
        return r
    step = Step("capped at the window's top (SGLang's own activation reserve)" if b.system == "sglang" else "capped at the largest u the free memory allows",
                f"min({r.value:g}, {high:.4f}) rounded down to 0.01", capped, "fraction")
    why = r.why + f" {r.value:g} would still be above the highest workable value {high:.3f}, so the recommendation is {capped:g}, which leaves more room than needed."
    return replace(r, value=capped, why=why, derivation=(*r.derivation, step))


def _completed(r: Recommendation, b: budget.FractionBudget) -> Recommendation:
    """Check a recommendation as a set; a set that leaves the fraction outside its window gets the fraction that brings it back."""
    check = budget.check_set(b, changes_of(r))
    if check.feasible is not False or _moves_fraction(r, b) or check.fraction is None or check.low is None or check.high is None:
        return replace(r, feasible=check.feasible, derivation=(*r.derivation, *check.steps))
    target = budget.completing_fraction(b.system, check.fraction, check.low, check.high)
    if target is None:
        return replace(r, feasible=False, derivation=(*r.derivation, *check.steps))
    direction = "lower" if target < check.fraction else "raise"
    companion = Recommendation(
        b.flag,
        target,
        direction,
        f"With {r.flag} {format_value(r.value)} the workable {b.flag} is {check.low:.3f} to {check.high:.3f}; {format_value(b.fraction)} is outside it, {target:g} is inside.",
        current=b.fraction,
        derivation=check.steps,
        role=COMPANION,
        cost=cost_of(b.flag, direction),
        feasible=True,
    )
    recheck = budget.check_set(b, changes_of(replace(r, companions=(*r.companions, companion))))
    return replace(r, companions=(*r.companions, companion), feasible=recheck.feasible, derivation=(*r.derivation, *recheck.steps))


def _structural(blocked: Recommendation, b: budget.FractionBudget, f: Facts, present: set[str]) -> list[Recommendation]:
    """When no value of the flag works alone: TP, FP8 weights, FP8 KV, a shorter context, each checked *with* it."""
    base = replace(blocked, role=COMPANION, companions=(), feasible=None, derivation=())
    tp_flag = _tp_flag(f)
    fraction_after = budget.check_set(b, changes_of(base)).fraction
    candidates: list[tuple[str, Any, str, str]] = [
        (tp_flag, b.tp * 2, "raise", f"Sharding the weights over {b.tp * 2} GPUs halves their share of each GPU."),
        ("--quantization", "fp8", "set", "FP8 weights take about half the memory of 16-bit ones."),
    ]
    if str(f.get("kv_cache_dtype") or "auto") in ("auto", "bfloat16", "float16"):
        candidates.append(("--kv-cache-dtype", "fp8" if b.system == "vllm" else "fp8_e4m3", "set", "An FP8 KV cache halves one request's KV."))
    shorter = budget.longest_context(b, fraction_after) if fraction_after is not None else None
    ctx_flag = "--max-model-len" if b.system == "vllm" else "--context-length"
    if shorter is not None and (b.context_len is None or shorter < b.context_len):
        candidates.append((ctx_flag, shorter, "lower" if b.context_len else "set", f"At most {shorter} tokens per request: one request's KV then fits beside the weights."))
    out = []
    for flag, value, direction, why in candidates:
        if flag in present:
            continue
        check = budget.check_set(b, ((flag, value), *changes_of(base)))
        verdict = "works" if check.feasible else "is not enough" if check.feasible is False else "cannot be checked from the log"
        out.append(
            Recommendation(
                flag,
                value,
                direction,
                f"{why} Together with {base.flag} {format_value(base.value)} it {verdict} on this budget"
                + (f" (workable {b.flag} {check.low:.3f} to {check.high:.3f})." if check.low is not None and check.high is not None else "."),
                current=b.tp if flag == tp_flag else (b.context_len if flag == ctx_flag else None),
                derivation=check.steps,
                cost=cost_of(flag, direction),
                feasible=check.feasible,
                companions=(base,),
            )
        )
    return out


def _no_single_value(r: Recommendation, b: budget.FractionBudget) -> Recommendation:
    low, high = budget.fraction_window(b)
    check = budget.check_set(b, changes_of(r))
    at = check.fraction if check.fraction is not None else r.value
    why = r.why + (
        f" No single {r.flag} value works on this budget: it would leave {b.flag} at {at:g}, outside the workable {low:.3f} to {high:.3f}"
        " (weights plus one request below, SGLang's activation reserve above); see the alternatives."
        if b.system == "sglang"
        else f" No single {r.flag} value works on this budget: {at:g} is outside the workable {low:.3f} to {high:.3f}; see the alternatives."
    )
    return replace(r, why=why, feasible=False, derivation=(*r.derivation, *check.steps))


def settle(recs: list[Recommendation], f: Facts) -> list[Recommendation]:
    """Every recommendation re-evaluated by the budget that produced the window, then given its role.

    The primary is the first workable recommendation with a value (with the companions that make it a
    consistent set); a set the budget rejects is never primary. When a fraction change cannot work on its
    own, the structural alternatives (TP, FP8 weights, FP8 KV, a shorter context) are added, checked with it.
    """
    b = fraction_budget(f)
    if b is None:
        out = [replace(r, cost=r.cost or cost_of(r.flag, r.direction)) for r in recs]
    else:
        out = []
        blocked: Recommendation | None = None
        for r in recs:
            r = replace(_cap_lowered(r, b), cost=r.cost or cost_of(r.flag, r.direction))
            if r.value is None:
                out.append(r)
                continue
            checked = _completed(r, b)
            if checked.feasible is False and _moves_fraction(r, b):
                blocked = blocked or r
                checked = _no_single_value(r, b)
            out.append(checked)
        if blocked is not None:
            out.extend(_structural(blocked, b, f, {r.flag for r in out}))
    # The first workable change with a value; one that costs nothing (an allocator setting, a value inside
    # the window) before one that gives something up.
    workable = [i for i, r in enumerate(out) if r.value is not None and r.feasible is not False]
    primary = next((i for i in workable if out[i].cost.startswith("none")), workable[0] if workable else None)
    return [
        replace(r, role=PRIMARY if i == primary else NOT_WORKABLE if r.feasible is False else ALTERNATIVE)
        for i, r in enumerate(out)
    ]


def startup_foreign_actions(f: Facts) -> list[Recommendation]:
    """Memory held before the server started: find the holder and free it (no flag of the server fixes it)."""
    foreign = f.get("startup_foreign_bytes")
    if not foreign:
        return []
    why = (
        f"About {_g(foreign)} was in use on this GPU before the server loaded its weights, and the OOM message names no process for it. "
        "List what holds it, stop it (or start the server on an empty GPU with CUDA_VISIBLE_DEVICES), then restart the server: "
        "SGLang sizes every region from the memory free at startup, and the other tenant can grow into the activation room."
    )
    return [
        Recommendation(
            "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv",
            None,
            "run",
            why,
            derivation=f.derivations["startup_foreign_bytes"].steps if "startup_foreign_bytes" in f.derivations else (),
            role=PRIMARY,
            cost="none",
        )
    ]


def format_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


__all__ = ["GIB", "Recommendation", "floor_to", "known_advice", "recommend"]

"""`oomdoctor plan`: the memory budget before launch, from a Hugging Face config.json (no network).

Weights come from the safetensors index when it is there (exact), else from a parameter count of
the config; KV bytes per token from the attention layout (MHA/GQA or MLA); then the same window of
--mem-fraction-static (or --gpu-memory-utilization) that diagnose uses after a failure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from oomdoctor import __version__
from oomdoctor.base.errors import InputError
from oomdoctor.base.limits import memory_budget, read_capped
from oomdoctor.base.units import GIB, gib_text
from oomdoctor.input.kinds import read_json
from oomdoctor.memory import budget
from oomdoctor.memory.derivation import Derived, Step
from oomdoctor.memory.gpus import gpu_table
from oomdoctor.report.render.text import step_value as format_step_value

if TYPE_CHECKING:
    from typing import Any

# How close to the window the engine's own default may be and still be called "at the edge" rather than
# outside: the CUDA context (and NCCL) the window assumes is an estimate (0.3-1 GiB in practice), which
# moves both ends of the window by about this much.
EDGE_TOLERANCE = 0.01

# What a fresh server spends before SGLang's first free-memory reading (pre = capacity - this):
# budget.CUDA_CONTEXT_BYTES and, with TP > 1, budget.NCCL_BYTES.
# The version of `plan --format json`'s keys, as diagnose's JSON carries its own: a key is renamed or
# removed only with a new version.
PLAN_SCHEMA_VERSION = 1

# vLLM's non-weight, non-KV memory: the profile run's activation peak and non-torch allocations.
VLLM_ACTIVATION_BYTES = 2 * GIB

_DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "int8": 1, "int4": 0.5, "auto": None}


@dataclass
class Model:
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    v_head_dim: int
    vocab: int
    dtype_bytes: float
    mla: tuple[int, int] | None = None  # (kv_lora_rank, qk_rope_head_dim)
    weights_bytes: int | None = None
    weights_source: str = ""
    max_context: int | None = None
    notes: list[str] = field(default_factory=list)


def _text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The language model's config inside multimodal wrappers (Qwen3-Omni thinker, LLaVA, Qwen-VL...)."""
    for key in ("thinker_config", "llm_config", "language_config"):
        if isinstance(cfg.get(key), dict):
            return _text_config(cfg[key])
    if isinstance(cfg.get("text_config"), dict) and "num_hidden_layers" in cfg["text_config"]:
        return cfg["text_config"]
    return cfg


# Caps on what plan reads (README "Input caps"), checked before reading: a model's config.json is a few
# kilobytes, the largest safetensors index (a 671B MoE) about ten megabytes.
MAX_CONFIG_BYTES = 16 << 20
MAX_INDEX_BYTES = 64 << 20


def read_config_json(path: Path, max_bytes: int = MAX_CONFIG_BYTES, what: str = "a model config.json") -> Any:
    """Parsed JSON of a config (or index) file: at most ``max_bytes`` read (however large or endless the file:
    /dev/zero, a FIFO), parsed inside the memory budget, at most MAX_JSON_DEPTH deep; InputError otherwise."""
    if not path.exists():
        raise InputError(f"{path}: no such file (give a model directory or its config.json)")
    with memory_budget(str(path), what):
        data = read_capped(str(path), max_bytes, what)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(f"{path}: not a readable config.json (not UTF-8 text)") from None
        del data
        return read_json(text, str(path), finite=False)


def load_model(path: str) -> Model:
    p = Path(path)
    cfg_path = p / "config.json" if p.is_dir() else p
    raw = read_config_json(cfg_path)
    if not isinstance(raw, dict):
        raise InputError(f"{cfg_path}: not a model config")
    c = _text_config(raw)
    try:
        layers = int(c["num_hidden_layers"])
        hidden = int(c["hidden_size"])
        heads = int(c["num_attention_heads"])
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{cfg_path}: config lacks {exc} (num_hidden_layers, hidden_size, num_attention_heads are needed)") from None
    kv_heads = int(c.get("num_key_value_heads") or heads)
    head_dim = int(c.get("head_dim") or hidden // heads)
    dtype = str(c.get("torch_dtype") or raw.get("torch_dtype") or "bfloat16").replace("torch.", "")
    dtype_bytes = _DTYPE_BYTES.get(dtype) or 2
    mla = None
    v_head_dim = head_dim
    if c.get("kv_lora_rank"):
        mla = (int(c["kv_lora_rank"]), int(c.get("qk_rope_head_dim", 64)))
        v_head_dim = int(c.get("v_head_dim", head_dim))
    model = Model(
        name=str(raw.get("_name_or_path") or (raw.get("architectures") or [cfg_path.parent.name])[0]),
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=v_head_dim,
        vocab=int(c.get("vocab_size", 0) or 0),
        dtype_bytes=dtype_bytes,
        mla=mla,
        max_context=c.get("max_position_embeddings"),
    )
    index = cfg_path.parent / "model.safetensors.index.json"
    if index.is_file():
        try:
            total = read_config_json(index, MAX_INDEX_BYTES, "a safetensors index")["metadata"]["total_size"]
            model.weights_bytes, model.weights_source = int(total), "safetensors index (total_size)"
        except (InputError, OSError, ValueError, KeyError, TypeError, OverflowError):
            model.notes.append("model.safetensors.index.json unreadable; weights estimated from the config")
    if model.weights_bytes is None:
        model.weights_bytes, model.weights_source = _estimate_weights(c, model), "parameter count from config.json"
        if raw is not c:
            model.notes.append("the estimate counts the language model only; encoders add to it")
    q = raw.get("quantization_config") or c.get("quantization_config")
    if isinstance(q, dict) and model.weights_source.startswith("parameter"):
        bits = q.get("bits") or (8 if "fp8" in str(q.get("quant_method", "")) else None)
        if bits:
            model.weights_bytes = int(model.weights_bytes * bits / 8 / dtype_bytes)
            model.notes.append(f"quantized weights ({q.get('quant_method')}, {bits}-bit)")
    return model


def _estimate_weights(c: dict[str, Any], m: Model) -> int:
    h, layers = m.hidden, m.layers
    if m.mla:
        q_rank = int(c.get("q_lora_rank") or 0)
        qk_head = int(c.get("qk_nope_head_dim", 128)) + m.mla[1]
        q = (h * q_rank + q_rank * m.heads * qk_head) if q_rank else h * m.heads * qk_head
        attn = q + h * (m.mla[0] + m.mla[1]) + m.mla[0] * m.heads * (int(c.get("qk_nope_head_dim", 128)) + m.v_head_dim) + m.heads * m.v_head_dim * h
    else:
        attn = h * m.heads * m.head_dim + 2 * h * m.kv_heads * m.head_dim + m.heads * m.head_dim * h
    experts = int(c.get("n_routed_experts") or c.get("num_experts") or c.get("num_local_experts") or 0)
    if experts:
        moe_inter_raw = c.get("moe_intermediate_size") or c.get("intermediate_size")
        if moe_inter_raw is None:
            raise InputError(f"{m.name}: a MoE config ({experts} experts) lacks moe_intermediate_size and intermediate_size")
        moe_inter = int(moe_inter_raw)
        shared = int(c.get("n_shared_experts") or 0) * 3 * h * moe_inter
        mlp = experts * 3 * h * moe_inter + shared + h * experts
        dense_layers = int(c.get("first_k_dense_replace") or 0)
        dense = 3 * h * int(c.get("intermediate_size", moe_inter))
        per_layers = dense_layers * (attn + dense) + (layers - dense_layers) * (attn + mlp)
    else:
        per_layers = layers * (attn + 3 * h * int(c.get("intermediate_size", 4 * h)))
    embed = m.vocab * h * (1 if c.get("tie_word_embeddings") else 2)
    return int((per_layers + embed) * m.dtype_bytes)


def cell_bytes(m: Model, tp: int, kv_dtype_bytes: float) -> Derived:
    """KV bytes per token on one rank."""
    if m.mla:
        value = budget.cell_bytes_mla(m.mla[0], m.mla[1], m.layers, kv_dtype_bytes)
        return Derived(value, (Step("KV bytes per token (MLA, not split by TP)", f"({m.mla[0]} + {m.mla[1]}) * {m.layers} layers * {kv_dtype_bytes:g} B", value, "bytes_per_token"),))
    per_rank = max(1, m.kv_heads // tp)
    value = budget.cell_bytes_mha(per_rank, m.head_dim, m.v_head_dim, m.layers, kv_dtype_bytes)
    return Derived(
        value,
        (Step("KV bytes per token (MHA/GQA, per rank)", f"{per_rank} KV heads * ({m.head_dim} + {m.v_head_dim}) * {m.layers} layers * {kv_dtype_bytes:g} B", value, "bytes_per_token"),),
    )


def plan(
    model: Model,
    capacity_bytes: int,
    gpu_name: str,
    tp: int = 1,
    context_len: int | None = None,
    kv_cache_dtype: str = "auto",
    system: str = "sglang",
    at: float | None = None,
    suggest: bool = True,
    smi_total_bytes: int | None = None,
) -> dict[str, Any]:
    """The budget at launch: the feasible window, the recommended and auto values, tokens, and what fits.

    ``capacity_bytes`` is the card's total as CUDA reports it (what the engines measure free memory
    against); ``smi_total_bytes`` nvidia-smi's memory.total, which SGLang's auto-tune reads (default:
    the same). ``at`` also evaluates one given value of the flag (the one a launch script pins, say).
    When the model does not fit, ``shorter_context`` is the longest context at which it does (on this GPU and TP).
    """
    if model.weights_bytes is None:
        raise ValueError(f"{model.name}: weights unknown (load_model fills them in)")
    weights = model.weights_bytes
    kv_bytes = _DTYPE_BYTES.get(kv_cache_dtype) or model.dtype_bytes
    ctx = int(context_len or model.max_context or 8192)
    weights_rank = weights // tp
    cell = cell_bytes(model, tp, kv_bytes)
    one_request = ctx * cell.value
    overhead = budget.CUDA_CONTEXT_BYTES + (budget.NCCL_BYTES if tp > 1 else 0)
    pre = capacity_bytes - overhead
    steps: list[Step] = [
        Step("card capacity", gpu_name, capacity_bytes, "bytes"),
        Step("pre: free before weights (estimated)", f"capacity - CUDA context {gib_text(budget.CUDA_CONTEXT_BYTES)}{f' - NCCL {gib_text(budget.NCCL_BYTES)}' if tp > 1 else ''}", pre, "bytes"),
        Step("weights per rank", f"{gib_text(weights)} ({model.weights_source}) / tp {tp}", weights_rank, "bytes"),
        *cell.steps,
        Step("one max-length request's KV", f"{ctx} tokens * {cell.value} B", one_request, "bytes"),
    ]
    result: dict[str, Any] = {
        "schema_version": PLAN_SCHEMA_VERSION,
        "tool": {"name": "oomdoctor", "version": __version__},
        "system": system,
        "model": model.name,
        "gpu": gpu_name,
        "capacity_bytes": capacity_bytes,
        "tp_size": tp,
        "context_len": ctx,
        "weights_bytes": model.weights_bytes,
        "weights_per_rank_bytes": weights_rank,
        "weights_source": model.weights_source,
        "cell_bytes": cell.value,
        "attention": "mla" if model.mla else "mha/gqa",
        "pre_bytes": pre,
        "notes": list(model.notes),
    }
    if system == "vllm":
        non_kv = weights_rank + VLLM_ACTIVATION_BYTES + (budget.NCCL_BYTES if tp > 1 else 0)
        steps.append(Step("non-KV memory (weights + estimated activation peak and non-torch)", f"weights + {VLLM_ACTIVATION_BYTES / GIB:.1f} GiB", non_kv, "bytes"))
        low = budget.vllm_util_for_kv(capacity_bytes, non_kv, one_request)
        high = budget.vllm_max_safe_util(capacity_bytes - budget.CUDA_CONTEXT_BYTES, capacity_bytes)
        steps += [*low.steps, *high.steps]
        feasible = low.value <= high.value
        rec = low.value if feasible else None
        if feasible and high.value >= 0.9 >= low.value:
            rec = 0.9
        default = 0.9

        def kv_at(fraction: float) -> int:  # u, --gpu-memory-utilization
            return budget.vllm_kv_budget_bytes(capacity_bytes, fraction, non_kv)

        result.update({"flag": "--gpu-memory-utilization", "window": [low.value, high.value], "default": default, "default_source": "vLLM's default"})
    else:
        reserve = budget.sglang_min_activation_reserve_bytes(capacity_bytes, tp)
        window = budget.sglang_feasible_window(pre, weights_rank, one_request, reserve.value)
        steps += [*reserve.steps, *window.steps]
        feasible = window.feasible
        rec = budget.choose_in_window(window)
        # SGLang's auto-tune picks its default from nvidia-smi's memory.total (get_nvgpu_memory_capacity).
        auto = budget.sglang_autotune_mfs(smi_total_bytes or capacity_bytes, tp=tp)
        steps += list(auto.steps)
        default = auto.value

        def kv_at(fraction: float) -> int:  # y, --mem-fraction-static
            return budget.sglang_kv_budget_bytes(pre, pre - weights_rank, fraction)

        result.update({"flag": "--mem-fraction-static", "window": [round(window.low, 4), round(window.high, 4)], "default": default, "default_source": "SGLang's auto-tune (current era)"})
    low_w, high_w = result["window"]
    result["feasible"] = bool(feasible and rec is not None)
    result["recommended"] = rec
    result["default_in_window"] = low_w <= default <= high_w
    result["default_position"] = default_position(default, low_w, high_w)
    result["kv_at_default_bytes"] = kv_at(default)
    if rec is not None:
        kv = kv_at(rec)
        tokens = budget.kv_tokens(kv, cell.value)
        steps.append(Step(f"KV budget at {rec:g}", f"{result['flag']} {rec:g}", kv, "bytes"))
        result.update({"kv_bytes": kv, "kv_tokens": tokens, "max_concurrency": round(tokens / ctx, 2)})
    if at is not None:
        kv = kv_at(at)
        result["at"] = {"value": at, "kv_bytes": kv, "kv_tokens": budget.kv_tokens(kv, cell.value), "feasible": bool(low_w <= at <= high_w)}
        steps.append(Step(f"KV budget at {at:g}", f"{result['flag']} {at:g}", kv, "bytes"))
    if suggest and not result["feasible"]:
        shorter = _shorter_context(model, capacity_bytes, gpu_name, tp, ctx, kv_cache_dtype, system, cell.value, float(high_w), weights_rank, pre, smi_total_bytes)
        if shorter is not None:
            result["shorter_context"] = shorter
            steps.append(Step("longest context that fits", f"{shorter['flag']} {shorter['value']}: one request's KV beside the weights inside the window", shorter["value"], "tokens"))
    result["derivation"] = [s.to_json() for s in steps]
    return result


def default_position(default: float, low: float, high: float) -> str:
    """"inside", "at the edge" (within EDGE_TOLERANCE of an end the CUDA-context estimate moves), or "outside"."""
    if low <= default <= high:
        return "inside"
    if low - EDGE_TOLERANCE <= default <= high + EDGE_TOLERANCE and low <= high + EDGE_TOLERANCE:
        return "at the edge"
    return "outside"


def _shorter_context(
    model: Model, capacity_bytes: int, gpu_name: str, tp: int, ctx: int, kv_cache_dtype: str, system: str, cell: int, high: float, weights_rank: int, pre: int,
    smi_total_bytes: int | None = None,
) -> dict[str, Any] | None:
    """The longest context (a multiple of 1024 below ``ctx``) at which the model fits, checked by planning it again."""
    if cell <= 0:
        return None
    if system == "vllm":
        non_kv = weights_rank + VLLM_ACTIVATION_BYTES + (budget.NCCL_BYTES if tp > 1 else 0)
        room = int(high * capacity_bytes) - non_kv - budget.VLLM_MARGIN_BYTES
    else:
        room = int(high * pre) - weights_rank
    tokens = min(room // cell, ctx - 1) // 1024 * 1024
    while tokens >= 1024:
        p = plan(model, capacity_bytes, gpu_name, tp, tokens, kv_cache_dtype, system, suggest=False, smi_total_bytes=smi_total_bytes)
        if p["feasible"]:
            return {"flag": "--max-model-len" if system == "vllm" else "--context-length", "value": tokens, "recommended": p["recommended"], "kv_tokens": p.get("kv_tokens")}
        tokens -= 1024
    return None


def what_fits(model: Model, context_len: int | None, kv_cache_dtype: str, system: str, tp_sizes: tuple[int, ...] = (1, 2, 4, 8)) -> list[dict[str, Any]]:
    """For each known GPU, the smallest TP size at which the model fits, if any."""
    out = []
    for g in gpu_table():
        for tp in tp_sizes:
            p = plan(model, g.capacity_bytes, g.name, tp, context_len, kv_cache_dtype, system, smi_total_bytes=g.smi_total_bytes)
            if p["feasible"]:
                out.append({"gpu": g.name, "tp_size": tp, "recommended": p["recommended"], "kv_tokens": p.get("kv_tokens")})
                break
    return out


def _position_words(p: dict[str, Any]) -> str:
    position = p.get("default_position") or ("inside" if p["default_in_window"] else "outside")
    if position == "at the edge":
        return f"at the edge of the window: within {EDGE_TOLERANCE:g} of it, less than the CUDA-context estimate's uncertainty"
    return "inside the window" if position == "inside" else "OUTSIDE the window"


def render_text(p: dict[str, Any], fits: list[dict[str, Any]]) -> str:
    g = gib_text
    lines = [
        f"PLAN: {p['model']} on {p['gpu']} ({g(p['capacity_bytes'])}), tp={p['tp_size']}, context {p['context_len']}, {p['system']}",
        *([f"  capacity {g(p['capacity_bytes'])} as CUDA reports it" + (f" (estimated: {p['capacity_note']})" if p["capacity_source"] == "estimated" else "")]
          if p.get("capacity_source") in ("log", "measured", "estimated") else []),
        f"  weights {g(p['weights_bytes'])} ({p['weights_source']}), {g(p['weights_per_rank_bytes'])} per rank; KV {p['cell_bytes']} B/token ({p['attention']})",
        f"  feasible {p['flag']}: {p['window'][0]:.3f} to {p['window'][1]:.3f}" + ("" if p["feasible"] else "  -> EMPTY: the model does not fit"),
        f"  {p['default_source']}: {p['default']:g} ({_position_words(p)}; KV there {g(p['kv_at_default_bytes'])})",
    ]
    shorter = p.get("shorter_context")
    if shorter:
        lines.append(
            f"  shorter context: {shorter['flag']} {shorter['value']} fits here ({p['flag']} {shorter['recommended']:g}, {shorter['kv_tokens']} KV tokens)"
            f" -- the usual fix; or a bigger GPU / more TP below"
        )
    if p.get("at"):
        a = p["at"]
        lines.append(f"  at {p['flag']} {a['value']:g}: KV {g(a['kv_bytes'])} ({a['kv_tokens']} tokens) -> {'feasible' if a['feasible'] else 'INFEASIBLE'}")
    if p["recommended"] is not None:
        lines.append(f"  recommended: {p['flag']} {p['recommended']:g} -> KV {g(p['kv_bytes'])}, {p['kv_tokens']} tokens, {p['max_concurrency']}x max-length requests")
    for n in p["notes"]:
        lines.append(f"  note: {n}")
    lines.append("  derivation:")
    for s in p["derivation"]:
        lines.append(f"    - {s['step']}: {s['formula']} -> {format_step_value(s['value'], s.get('unit', ''))}")
    if not p["feasible"]:
        lines.append("  fits on:" if fits else "  fits on: no known GPU at TP <= 8")
        for f in fits:
            lines.append(f"    {f['gpu']} at tp={f['tp_size']} ({p['flag']} {f['recommended']:g}, {f['kv_tokens']} KV tokens)")
    return "\n".join(lines) + "\n"

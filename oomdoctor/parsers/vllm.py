"""vLLM (V0 and V1) evidence: engine config, the memory profile, KV sizing, and memory errors.

Patterns follow the templates in log_formats.md §3 (V1-V10). vLLM prints ``GiB`` (V0's "Loading model
weights took X GB" also divides by 2**30), token counts with thousands separators, and some numbers
negative.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from oomdoctor.evidence import Event, Line
from oomdoctor.patterns import LazyRegex, lazy
from oomdoctor.units import gib_to_bytes
from oomdoctor.units import optional_gib_to_bytes as _gib
from oomdoctor.units import optional_number as _num

KIND_ARGS = "vllm_args"
KIND_ENGINE_CONFIG = "vllm_engine_config"
KIND_WEIGHTS = "vllm_weights"
KIND_PROFILE_TOTAL = "vllm_profile_total"
KIND_PROFILE_BREAKDOWN = "vllm_profile_breakdown"
KIND_PROFILE_V1 = "vllm_profile_v1"
KIND_INITIAL_FREE = "vllm_initial_free"
KIND_KV_AVAILABLE = "vllm_kv_available"
KIND_KV_TOKENS = "vllm_kv_tokens"
KIND_CONCURRENCY = "vllm_concurrency"
KIND_GPU_BLOCKS = "vllm_gpu_blocks"
KIND_GRAPH_BEGIN = "vllm_graph_begin"
KIND_GRAPH_DONE = "vllm_graph_done"
KIND_GRAPH_ESTIMATE = "vllm_graph_estimate"
KIND_FREE_LESS = "vllm_free_less_than_requested"
KIND_NO_CACHE_BLOCKS = "vllm_no_cache_blocks"
KIND_ONE_REQUEST = "vllm_one_request_does_not_fit"
KIND_PROFILE_ASSERT = "vllm_profile_assert"
KIND_PREEMPT = "vllm_preempt"
KIND_ENGINE_FAILED = "vllm_engine_failed"
KIND_MM_PROFILE = "vllm_mm_profile"
KIND_READY = "vllm_ready"
KIND_CHUNKED = "vllm_chunked_prefill"
KIND_LOAD_START = "vllm_load_start"
KIND_PROFILE_V0_RESULTS = "vllm_profile_v0_results"
KIND_PROFILE_HEADER = "vllm_profile_header"

ANCHORS: tuple[bytes, ...] = (
    b"non-default args",
    b"args: Namespace(",
    b"LLM engine",
    b"GiB",
    b"weights took",
    b"Starting to load model",
    b"memory profiling",
    b"Memory profiling",
    b"KV cache size",
    b"Maximum concurrency",
    b"GPU blocks",
    b"cuda blocks",
    b"CUDA graph",
    b"cudagraph",
    b"Free memory on device",
    b"No available memory for the cache blocks",
    b"max seq len",
    b"estimated maximum model length",
    b"is preempted by",
    b"failed to start",
    b"initialization failed",
    b"died unexpectedly",
    b"EngineDeadError",
    b"profile run",
    b"Application startup complete",
    b"Starting vLLM API server",
    b"max_num_batched_tokens=",
)

_F = r"(-?\d+(?:\.\d+)?)"
_N = r"(\d[\d,]*)"

_PATTERNS: tuple[tuple[str, LazyRegex], ...] = (
    (KIND_ARGS, lazy('args', r"non-default args: (\{.*\})|^args: Namespace\((?P<ns>.*)\)")),
    (KIND_ENGINE_CONFIG, lazy('LLM engine', r"Initializing an? (?:V1 )?LLM engine(?: \(v(?P<version>[\w.+-]+)\))? with config: (?P<rest>.*)")),
    (KIND_WEIGHTS, lazy('took', rf"(?:Model loading took {_F} ?GiB|Loading model weights took {_F} ?GB)")),
    (
        KIND_PROFILE_TOTAL,
        lazy('total_gpu_memory (', rf"total_gpu_memory \({_F} ?GiB\) x gpu_memory_utilization \({_F}\) = {_F} ?GiB"),
    ),
    (
        KIND_PROFILE_BREAKDOWN,
        lazy('model weights take',
            rf"model weights take {_F} ?GiB; non_torch_memory takes {_F} ?GiB; PyTorch activation peak memory takes {_F} ?GiB; "
            rf"the rest of the memory reserved for KV Cache is {_F} ?GiB"
        ),
    ),
    (
        KIND_PROFILE_V0_RESULTS,
        lazy('Memory profiling results',
            rf"Memory profiling results:.*?total_gpu_memory={_F} ?GiB.*?peak_torch_memory={_F} ?GiB.*?non_torch_memory={_F} ?GiB, "
            rf"kv_cache_size={_F} ?GiB, gpu_memory_utilization={_F}"
        ),
    ),
    (
        KIND_PROFILE_V1,
        lazy('Total non KV cache memory',
            rf"Total non KV cache memory: {_F} ?GiB; torch peak memory increase: {_F} ?GiB; non-torch forward increase memory: {_F} ?GiB;"
            rf"(?: total consumed \(from mem_get_info\): {_F} ?GiB;)? weights memory: {_F} ?GiB"
        ),
    ),
    (
        KIND_PROFILE_ASSERT,
        lazy('Error in memory profiling', rf"Error in memory profiling\. Initial free memory {_F}(?: GiB)?, current free memory {_F}(?: GiB)?"),
    ),
    (KIND_PROFILE_HEADER, lazy('Memory profiling takes', rf"^Memory profiling takes {_F} seconds\s*$")),
    (KIND_INITIAL_FREE, lazy('Initial free memory', rf"Initial free memory:? {_F} GiB[;,] (?:Requested memory: {_F} \(util\), {_F} GiB)?")),
    (KIND_KV_AVAILABLE, lazy('Available KV cache memory', rf"Available KV cache memory: {_F} GiB")),
    (KIND_KV_TOKENS, lazy('GPU KV cache size', rf"GPU KV cache size: {_N} tokens(?:, Maximum concurrency for {_N} tokens per request: {_F}x)?")),
    (KIND_CONCURRENCY, lazy('Maximum concurrency', rf"Maximum concurrency for {_N} tokens per request: {_F}x")),
    (KIND_GPU_BLOCKS, lazy('blocks:', r"# (?:GPU|cuda) blocks: (\d+)")),
    (KIND_GRAPH_DONE, lazy('Graph capturing finished', rf"Graph capturing finished in {_F} secs?, took {_F} GiB")),
    (KIND_GRAPH_ESTIMATE, lazy('Estimated CUDA graph memory', rf"Estimated CUDA graph memory: {_F} GiB total")),
    (KIND_GRAPH_BEGIN, lazy(None, r"Capturing the model for CUDA graphs|CUDA graphs can take additional|Capturing CUDA graphs? (?:shapes|\()|Capturing cudagraphs?|Profiling CUDA graph memory")),
    (
        KIND_FREE_LESS,
        lazy('Free memory on device',
            rf"Free memory on device(?: (?P<dev>[\w:]+))? \({_F}/{_F} GiB\) on startup is less than desired GPU memory utilization \({_F}, {_F} GiB\)"
        ),
    ),
    (KIND_NO_CACHE_BLOCKS, lazy('No available memory for the cache blocks', r"No available memory for the cache blocks")),
    (
        KIND_ONE_REQUEST,
        lazy(None,
            # 2024-2025 wrote "(16.00 GiB KV cache is needed"; 2026 dropped the parenthesis.
            rf"To serve at least one request with the models?'s max seq len \({_N}\),\s*\(?{_F} GiB KV cache is needed, which is larger than "
            rf"the available KV cache memory \({_F} GiB\)\.(?: Based on the available memory, the estimated maximum model length is {_N}\.)?"
            rf"|The model's max seq len \({_N}\) is larger than the maximum number of tokens that can be stored in KV cache \({_N}\)"
            # The same message cut by a paste: only its last sentence is left.
            rf"|(?:the )?estimated maximum model length is {_N}\."
        ),
    ),
    (KIND_PREEMPT, lazy('is preempted by', r"is preempted by PreemptionMode\.(\w+) mode because there is not enough KV cache space.*?total_num_cumulative_preemption=(\d+)")),
    (KIND_ENGINE_FAILED, lazy(None, r"EngineCore failed to start|WorkerProc hit an exception|Engine core initialization failed|died unexpectedly|EngineDeadError|EngineCore encountered a fatal error")),
    (KIND_MM_PROFILE, lazy(None, r"Starting profile run for multi-modal models|Encoder cache will be initialized")),
    (KIND_READY, lazy(None, r"Application startup complete|Starting vLLM API server")),
    (KIND_CHUNKED, lazy('Chunked prefill is enabled', r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)")),
    (KIND_LOAD_START, lazy('Starting to load model', r"Starting to load model (\S+)")),
)

_DICT_ITEM_RE = lazy("'", r"'(\w+)': ('(?:[^'\\]|\\.)*'|\"[^\"]*\"|\[[^\]]*\]|[\w.+-]+)")
_CONFIG_ITEM_RE = lazy("=", r"(?<![\w.])(\w+)=('(?:[^'\\]|\\.)*'|[\w.+/-]+)")
_CAPTURE_SIZES_RE = lazy("capture_sizes", r"['\"]?(?:cudagraph_capture_sizes|capture_sizes)['\"]?\s*[:=]\s*\[([\d,\s]*)\]")
_MAX_CAPTURE_RE = lazy("capture_size", r"['\"]?max_(?:cudagraph_)?capture_size['\"]?\s*[:=]\s*(\d+)")

_ARG_KEYS = {
    "model",
    "gpu_memory_utilization",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "enforce_eager",
    "kv_cache_dtype",
    "quantization",
    "limit_mm_per_prompt",
    "max_seq_len",
    "block_size",
    "enable_chunked_prefill",
}


def _gib_required(text: str) -> int:
    """A GiB figure from a group the pattern always fills (``_gib`` is for optional groups)."""
    return gib_to_bytes(float(text))


def _int(text: str | None) -> int | None:
    return int(text.replace(",", "")) if text else None


def _literal(raw: str) -> Any:
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return raw


def _config_values(text: str, pattern: LazyRegex) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key, raw in pattern.findall(text):
        if key in _ARG_KEYS and key not in values:
            value = _literal(raw)
            if raw in ("True", "False"):
                value = raw == "True"
            values[key] = value
    sizes = _CAPTURE_SIZES_RE.search(text)
    if sizes:
        nums = [int(n) for n in re.findall(r"\d+", sizes.group(1))]
        if nums:
            values["max_capture_size"] = max(nums)
    else:
        mcs = _MAX_CAPTURE_RE.search(text)
        if mcs:
            values["max_capture_size"] = int(mcs.group(1))
    return values


# Error messages long enough to be hard-wrapped by a terminal ("... (4.26 GiB KV cach" / "e is needed");
# a line that starts one but does not match whole is joined with the next lines before giving up.
_WRAPPABLE = lazy(None, r"To serve at least one request|Free memory on device|The model's max seq len|No available memory for the cache")
_MAX_JOIN = 4


class VLLMParser:
    """Incremental parser for vLLM lines: ``feed`` one line at a time, ``finish`` at the end."""

    def __init__(self) -> None:
        self._pending: tuple[list, str] | None = None

    def _match(self, msg: str, refs: tuple) -> list[Event]:
        for kind, pattern in _PATTERNS:
            m = pattern.search(msg)
            if m is None:
                continue
            values = self._values(kind, m)
            if values is None:
                continue
            return [Event(kind, refs, values)]
        return []

    def feed(self, line: Line) -> list[Event]:
        msg = line.msg
        if self._pending is not None:
            refs, text = self._pending
            # A terminal wrap continues on a line of its own: no timestamp, no logger prefix.
            if line.ts is None and len(refs) < _MAX_JOIN and not msg.lstrip().startswith(("File ", "Traceback")):
                refs.append(line.ref)
                joined = text + msg
                events = self._match(joined, tuple(refs))
                if events:
                    self._pending = None
                    return events
                self._pending = (refs, joined)
                return []
            self._pending = None
        events = self._match(msg, (line.ref,))
        if not events and _WRAPPABLE.search(msg):
            self._pending = ([line.ref], msg)
        return events

    @staticmethod
    def _values(kind: str, m: re.Match[str]) -> dict[str, Any] | None:
        g = m.groups()
        if kind == KIND_ARGS:
            if m.group("ns") is not None:
                return _config_values(m.group("ns"), _CONFIG_ITEM_RE)
            return _config_values(m.group(1), _DICT_ITEM_RE)
        if kind == KIND_ENGINE_CONFIG:
            values = _config_values(m.group("rest"), _CONFIG_ITEM_RE)
            values["version"] = m.group("version")
            values["v1"] = "V1 LLM engine" in m.group(0)
            return values
        if kind == KIND_WEIGHTS:
            return {"weights_bytes": _gib(g[0] or g[1]), "era": "V1" if g[0] else "V0"}
        if kind == KIND_PROFILE_TOTAL:
            return {"total_bytes": _gib(g[0]), "gpu_memory_utilization": _num(g[1]), "requested_bytes": _gib(g[2])}
        if kind == KIND_PROFILE_BREAKDOWN:
            return {"weights_bytes": _gib(g[0]), "non_torch_bytes": _gib(g[1]), "activation_peak_bytes": _gib(g[2]), "kv_bytes": _gib(g[3])}
        if kind == KIND_PROFILE_V0_RESULTS:
            # peak_torch_memory includes the weights; non-KV = peak torch + non-torch.
            return {
                "total_bytes": _gib(g[0]),
                "non_kv_bytes": _gib_required(g[1]) + _gib_required(g[2]),
                "non_torch_bytes": _gib(g[2]),
                "kv_bytes": _gib(g[3]),
                "gpu_memory_utilization": _num(g[4]),
            }
        if kind == KIND_PROFILE_V1:
            return {
                "non_kv_bytes": _gib(g[0]),
                "activation_peak_bytes": _gib(g[1]),
                "non_torch_bytes": _gib(g[2]),
                "weights_bytes": _gib(g[4]),
            }
        if kind == KIND_INITIAL_FREE:
            values = {"free_at_start_bytes": _gib(g[0])}
            if g[1] is not None:
                values["gpu_memory_utilization"] = _num(g[1])
                values["requested_bytes"] = _gib(g[2])
            return values
        if kind == KIND_KV_AVAILABLE:
            return {"kv_bytes": _gib(g[0])}
        if kind == KIND_KV_TOKENS:
            values = {"kv_tokens": _int(g[0])}
            if g[1]:
                values["max_model_len"] = _int(g[1])
                values["concurrency"] = _num(g[2])
            return values
        if kind == KIND_CONCURRENCY:
            return {"max_model_len": _int(g[0]), "concurrency": _num(g[1])}
        if kind == KIND_GPU_BLOCKS:
            return {"gpu_blocks": int(g[0])}
        if kind == KIND_GRAPH_DONE:
            return {"graph_bytes": _gib(g[1])}
        if kind == KIND_GRAPH_ESTIMATE:
            return {"graph_bytes": _gib(g[0])}
        if kind == KIND_FREE_LESS:
            return {
                "free_at_start_bytes": _gib(g[1]),
                "total_bytes": _gib(g[2]),
                "gpu_memory_utilization": _num(g[3]),
                "requested_bytes": _gib(g[4]),
                "device": m.group("dev"),
            }
        if kind == KIND_ONE_REQUEST:
            if g[0] is not None:
                return {
                    "max_model_len": _int(g[0]),
                    "needed_bytes": _gib(g[1]),
                    "available_bytes": _gib(g[2]),
                    "estimated_max_len": _int(g[3]),
                }
            if g[4] is not None:
                return {"max_model_len": _int(g[4]), "kv_capacity_tokens": _int(g[5])}
            return {"estimated_max_len": _int(g[6])}
        if kind == KIND_PROFILE_ASSERT:
            a, b = float(g[0]), float(g[1])  # both groups are required by the pattern
            if "GiB" in m.group(0):
                return {"initial_free_bytes": gib_to_bytes(a), "current_free_bytes": gib_to_bytes(b)}
            return {"initial_free_bytes": int(a), "current_free_bytes": int(b)}
        if kind == KIND_PREEMPT:
            return {"mode": g[0], "cumulative": int(g[1])}
        if kind == KIND_CHUNKED:
            return {"max_num_batched_tokens": int(g[0])}
        return {}

    def finish(self) -> list[Event]:
        self._pending = None
        return []

"""vLLM (V0 and V1) evidence: engine config, the memory profile, KV sizing, and memory errors.

Patterns follow the templates in log_formats.md §3 (V1-V10). vLLM prints ``GiB`` (V0's "Loading model
weights took X GB" also divides by 2**30), token counts with thousands separators, and some numbers
negative.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from oomdoctor.base.evidence import Event, Line
from oomdoctor.base.units import gib_to_bytes
from oomdoctor.evidence.parsers.captures import COUNT, NUM, named, present, typed
from oomdoctor.evidence.parsers.python_values import python_value
from oomdoctor.input.patterns import Dispatch, LazyRegex, lazy

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    _Shape = Callable[[dict[str, Any]], dict[str, Any]]

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
KIND_STARTUP_SUMMARY = "vllm_startup_summary"

ANCHORS: tuple[bytes, ...] = (
    b"non-default args",
    b"args: Namespace(",
    b"LLM engine",
    b"GiB",
    b"weights took",
    b"Model loading took",  # 0.8.0-0.8.2 printed "... took X GB and Y seconds": no "GiB" to anchor it
    b"Starting to load model",
    b"memory profiling",
    b"Memory profiling",
    b"KV cache size",
    b"Maximum concurrency",
    b"GPU blocks",
    b"cuda blocks",
    b"CUDA blocks",
    b"NPU blocks",
    b"XPU blocks",
    b"HPU blocks",
    b"rocm blocks",  # V0 0.7.3-0.11.0 printed the platform's device_name: rocm, xpu, hpu, tpu, neuron
    b"xpu blocks",
    b"hpu blocks",
    b"tpu blocks",
    b"TPU blocks",
    b"neuron blocks",
    b"Graph capturing finished",  # 0.4.1-0.6.3: "Graph capturing finished in 14 secs." (no size)
    b"Encoder cache will be initialized",  # V1's multimodal profiling (0.7.0+)
    b"CUDA graph",
    b"cudagraph",
    b"Free memory on device",
    b"No available memory for the cache blocks",
    b"max seq len",
    b"estimated maximum model length",
    b"is preempted by",
    b"failed to start",
    b"EngineCore initialization failed",
    b"EngineCore_0 initialization failed",
    b"initialization failed",
    b"died unexpectedly",
    b"EngineDeadError",
    b"profile run",
    b"Application startup complete",
    b"Starting vLLM API server",
    b"max_num_batched_tokens=",
)

_F = NUM
_N = COUNT



def _args(v: dict[str, Any]) -> dict[str, Any]:
    if v["namespace"] is not None:
        return _config_values(v["namespace"], _CONFIG_ITEM_RE)
    return _config_values(v["args_dict"], _DICT_ITEM_RE)


def _engine_config(v: dict[str, Any]) -> dict[str, Any]:
    values = _config_values(v["rest"], _CONFIG_ITEM_RE)
    values["version"] = v["version"]
    values["v1"] = v["v1"]
    return values


def _profile_assert(v: dict[str, Any]) -> dict[str, Any]:
    # Printed in GiB since 2025; before that the numbers were bytes.
    a, b = v["initial_free"], v["current_free"]  # both present, or both absent (the oldest wording)
    if a is None or b is None:
        return {}
    if v["initial_gib"] or v["current_gib"]:
        return {"initial_free_bytes": gib_to_bytes(a), "current_free_bytes": gib_to_bytes(b)}
    return {"initial_free_bytes": int(a), "current_free_bytes": int(b)}


def _startup_summary(v: dict[str, Any]) -> dict[str, Any]:
    values = present(v)
    if "activation_peak2_bytes" in values:  # the 0.27+ wording's place for the same figure
        values["activation_peak_bytes"] = values.pop("activation_peak2_bytes")
    return values


def _one_request(v: dict[str, Any]) -> dict[str, Any]:
    if v["max_model_len"] is not None:
        return {
            "max_model_len": v["max_model_len"],
            "needed_bytes": v["needed_bytes"],
            "available_bytes": v["available_bytes"],
            "estimated_max_len": v["estimated_max_len"],
        }
    if v["stored_max_model_len"] is not None:
        return {"max_model_len": v["stored_max_model_len"], "kv_capacity_tokens": v["kv_capacity_tokens"]}
    return {"estimated_max_len": v["cut_estimated_max_len"]}


def _weights(v: dict[str, Any]) -> dict[str, Any]:
    for key, era in (("v1_weights_bytes", "V1"), ("v0_weights_bytes", "V0"), ("either_weights_bytes", None)):
        if v[key] is not None:
            return {"weights_bytes": v[key], "era": era} if era else {"weights_bytes": v[key]}
    return {}


# (kind, pattern, shape): the first pattern found in a line makes its event. Values are ``typed(match)``
# (each group's name says its unit and output key, see captures.py), passed through ``shape`` when the
# kind needs more than that: ``present`` drops the keys of optional clauses the line lacks.
_PATTERNS: tuple[tuple[str, LazyRegex, _Shape | None], ...] = (
    (KIND_ARGS, named('args', r"non-default args: (?P<args_dict_str>\{.*\})|^args: Namespace\((?P<namespace_str>.*)\)"), _args),
    (
        KIND_ENGINE_CONFIG,
        # 0.7.1-0.10.2 printed "Initializing a V0 LLM engine (v...)" for V0 runs.
        named('LLM engine', r"Initializing an? (?:V0 |(?P<v1_flag>V1 ))?LLM engine(?: \(v(?P<version_str>[\w.+-]+)\))? with config: (?P<rest_str>.*)"),
        _engine_config,
    ),
    (
        KIND_WEIGHTS,
        # "Model loading took X GB and Y seconds" (bytes / 2^30, so GiB) is what V0's model runner printed
        # from ~0.6 to 0.8 and V1's gpu_model_runner printed at first; later V1 prints GiB. The GB form
        # names no era.
        named(
            'took',
            # XPU's V0 runner (0.8.3-0.9.2) printed "Loading model weights took X GiB".
            rf"(?:Model loading took (?:(?P<v1_weights_gib>{_F}) ?GiB|(?P<either_weights_gib>{_F}) ?GB)|Loading model weights took (?P<v0_weights_gib>{_F}) ?Gi?B)",
        ),
        _weights,
    ),
    (
        KIND_PROFILE_TOTAL,
        named('total_gpu_memory (',
            rf"total_gpu_memory \((?P<total_gib>{_F}) ?GiB\) x gpu_memory_utilization \((?P<gpu_memory_utilization_f>{_F})\) = (?P<requested_gib>{_F}) ?GiB"
        ),
        None,
    ),
    (
        KIND_PROFILE_BREAKDOWN,
        named('model weights take',
            rf"model weights take (?P<weights_gib>{_F}) ?GiB; non_torch_memory takes (?P<non_torch_gib>{_F}) ?GiB; "
            rf"PyTorch activation peak memory takes (?P<activation_peak_gib>{_F}) ?GiB; "
            rf"the rest of the memory reserved for KV Cache is (?P<kv_gib>{_F}) ?GiB"
        ),
        None,
    ),
    (
        KIND_PROFILE_V0_RESULTS,
        named('Memory profiling results',
            rf"Memory profiling results:.*?total_gpu_memory=(?P<total_gib>{_F}) ?GiB(?:,? ?initial_memory_usage=(?P<initial_gib>{_F}) ?GiB)?"
            rf".*?peak_torch_memory=(?P<peak_torch_gib>{_F}) ?GiB"
            # 0.6.4 as released separated the fields with a blank only; a later dev build with ", ".
            rf".*?non_torch_memory=(?P<non_torch_gib>{_F}) ?GiB,? ?kv_cache_size=(?P<kv_gib>{_F}) ?GiB,? ?gpu_memory_utilization=(?P<gpu_memory_utilization_f>{_F})"
        ),
        # peak_torch_memory includes the weights; non-KV = peak torch + non-torch. initial_memory_usage is the
        # card's used memory when profiling began (weights, this process's context, and anyone else's).
        lambda v: {
            "total_bytes": v["total_bytes"],
            "non_kv_bytes": v["peak_torch_bytes"] + v["non_torch_bytes"],
            "non_torch_bytes": v["non_torch_bytes"],
            "peak_torch_bytes": v["peak_torch_bytes"],
            "kv_bytes": v["kv_bytes"],
            "gpu_memory_utilization": v["gpu_memory_utilization"],
            **({"initial_used_bytes": v["initial_bytes"]} if v.get("initial_bytes") is not None else {}),
        },
    ),
    (
        KIND_PROFILE_V1,
        named('Total non KV cache memory',
            # 0.9.1-0.26 printed "non-torch forward increase memory"; 0.27+ "total consumed (from mem_get_info)" instead.
            rf"Total non KV cache memory: (?P<non_kv_gib>{_F}) ?GiB; torch peak memory increase: (?P<activation_peak_gib>{_F}) ?GiB; ?"
            rf"(?:non-torch forward increase memory: (?P<non_torch_gib>{_F}) ?GiB; ?)?"
            rf"(?:total consumed \(from mem_get_info\): (?P<total_consumed_gib>{_F}) ?GiB; ?)?weights memory: (?P<weights_gib>{_F}) ?GiB"
        ),
        present,
    ),
    (
        KIND_PROFILE_ASSERT,
        named('Error in memory profiling',
            # 0.4.1-0.5.3 printed no numbers: "Error in memory profiling. This happens when the GPU memory was not properly cleaned up ..."
            rf"Error in memory profiling\.(?: Initial free memory (?P<initial_free_f>{_F})(?P<initial_gib_flag> GiB)?, "
            rf"current free memory (?P<current_free_f>{_F})(?P<current_gib_flag> GiB)?| This happens when the GPU memory was not properly cleaned up)"
        ),
        _profile_assert,
    ),
    (KIND_PROFILE_HEADER, named('Memory profiling takes', rf"^Memory profiling takes {_F} seconds\s*$"), None),
    (
        KIND_INITIAL_FREE,
        named('Initial free memory',
            rf"Initial free memory:? (?P<free_at_start_gib>{_F}) GiB[;,] "
            rf"(?:Requested memory: (?P<gpu_memory_utilization_f>{_F}) \(util\), (?P<requested_gib>{_F}) GiB"
            # --kv-cache-memory-bytes (0.10.2+): the KV size is the user's, and profiling is skipped.
            rf"|reserved (?P<kv_reserved_gib>{_F}) ?GiB memory for KV Cache)?"
        ),
        present,
    ),
    (KIND_KV_AVAILABLE, named('Available KV cache memory', rf"Available KV cache memory: (?P<kv_gib>{_F}) GiB"), None),
    (
        KIND_KV_TOKENS,
        # 0.30+: the accelerator's name ("XPU", "TPU"). Not read: a CPU KV line (offloading), and 0.32+'s
        # "GPU + host" (hisparse), which may count host tokens: neither is the device's pool.
        named('KV cache size',
            rf"(?<![\w+])(?:GPU|XPU|TPU|HPU|NPU) KV cache size: (?P<kv_tokens_n>{_N}) tokens"
            rf"(?:, Maximum concurrency for (?P<max_model_len_n>{_N}) tokens per request: (?P<concurrency_f>{_F})x)?"
        ),
        present,
    ),
    (
        KIND_CONCURRENCY,
        named('Maximum concurrency', rf"Maximum concurrency for (?P<max_model_len_n>{_N}) tokens per request: (?P<concurrency_f>{_F})x"),
        None,
    ),
    (KIND_GPU_BLOCKS, named('blocks:', r"# (?:GPU|cuda|CUDA|NPU|XPU|HPU|rocm|xpu|hpu|tpu|TPU|neuron) blocks: (?P<gpu_blocks_n>\d+)"), None),
    (KIND_GRAPH_DONE, named('Graph capturing finished', rf"Graph capturing finished in {_F} secs?(?:, took (?P<graph_gib>{_F}) GiB)?"), None),
    # 0.18+: the graph pool's actual size beside the estimate; the actual one is the graphs' memory.
    (KIND_GRAPH_DONE, named('CUDA graph pool memory', rf"CUDA graph pool memory: (?P<graph_gib>{_F}) GiB \(actual\)"), None),
    (KIND_GRAPH_ESTIMATE, named('Estimated CUDA graph memory', rf"Estimated CUDA graph memory: (?P<graph_gib>{_F}) GiB total"), None),
    (
        KIND_GRAPH_BEGIN,
        named(("Capturing ", "CUDA graphs can take additional", "Profiling CUDA graph memory"), r"Capturing the model for CUDA graphs|CUDA graphs can take additional|Capturing CUDA graphs? (?:shapes|\()|Capturing cudagraphs?|Profiling CUDA graph memory"),
        None,
    ),
    # The startup accounting (INFO in 0.10.2 and from 0.26, DEBUG between): the whole budget on one line.
    # 0.27+ words the first figures "C GiB for consumed memory (weights + non-torch), A GiB for peak activation".
    (
        KIND_STARTUP_SUMMARY,
        named('on startup. Desired GPU memory utilization is',
            rf"Free memory on device(?: [\w:]+)? \((?P<free_at_start_gib>{_F})/(?P<total_gib>{_F}) GiB\) on startup\. "
            rf"Desired GPU memory utilization is \((?P<gpu_memory_utilization_f>{_F}), (?P<requested_gib>{_F}) GiB\)\. Actual usage is "
            rf"(?:(?P<weights_gib>{_F}) GiB for weight, (?P<activation_peak_gib>{_F}) GiB for peak activation, (?P<non_torch_gib>{_F}) GiB for non-torch memory"
            rf"|(?P<consumed_gib>{_F}) GiB for consumed memory \(weights \+ non-torch\), (?P<activation_peak2_gib>{_F}) GiB for peak activation),? "
            rf"and (?P<graph_gib>{_F}) GiB for CUDAGraph memory\.(?:.*?Current kv cache memory in use is (?P<kv_gib>{_F}) GiB)?"
        ),
        _startup_summary,
    ),
    (
        KIND_FREE_LESS,
        named('Free memory on device',
            # 0.32+: with weights held by another process, "... is less than the engine's budget after excluding external process's weights (U, R GiB)".
            rf"Free memory on device(?: (?P<device_str>[\w:]+))? \((?P<free_at_start_gib>{_F})/(?P<total_gib>{_F}) GiB\) on startup is less than "
            rf"(?:desired GPU memory utilization|the engine's budget after excluding external process's weights) \((?P<gpu_memory_utilization_f>{_F}), (?P<requested_gib>{_F}) GiB\)"
        ),
        None,
    ),
    (KIND_NO_CACHE_BLOCKS, named('No available memory for the cache blocks', r"No available memory for the cache blocks"), None),
    (
        KIND_ONE_REQUEST,
        named(("To serve at least one request", "The model's max seq len", "estimated maximum model length is "),
            # 2024-2025 wrote "(16.00 GiB KV cache is needed"; 2026 dropped the parenthesis.
            # V1 0.7.0-0.8.2 printed GB (bytes / 2^30), GiB from 0.8.3.
            rf"To serve at least one request with the models?'s max seq len \((?P<max_model_len_n>{_N})\),\s*\(?(?P<needed_gib>{_F}) Gi?B KV cache is needed, "
            rf"which is larger than the available KV cache memory \((?P<available_gib>{_F}) Gi?B\)\."
            rf"(?: Based on the available memory, the estimated maximum model length is (?P<estimated_max_len_n>{_N})\.)?"
            rf"|The model's max seq len \((?P<stored_max_model_len_n>{_N})\) is larger than the maximum number of tokens that can be stored in KV cache "
            rf"\((?P<kv_capacity_tokens_n>{_N})\)"
            # The same message cut by a paste: only its last sentence is left.
            rf"|(?:the )?estimated maximum model length is (?P<cut_estimated_max_len_n>{_N})\."
        ),
        _one_request,
    ),
    (
        KIND_PREEMPT,
        named('is preempted by',
            # The running count (total_num_cumulative_preemption=N, since 0.4.3) ends the line: a paste that cuts
            # the line before it, or an older release without it, still shows a preemption.
            r"is preempted by PreemptionMode\.(?P<mode_str>\w+) mode because there is not enough KV cache space(?:.*?total_num_cumulative_preemption=(?P<cumulative_n>\d+))?"
        ),
        None,
    ),
    (
        KIND_ENGINE_FAILED,
        named(
            (
                "EngineCore failed to start",
                "WorkerProc hit an exception",
                "Engine core initialization failed",
                "died unexpectedly",
                "EngineDeadError",
                "EngineCore encountered a fatal error",
                "Engine process failed to start",
                " initialization failed",
            ),
            # V0's multiprocessing engine (0.6.2-0.10.2): "Engine process failed to start"; V1 0.7.x
            # "EngineCore initialization failed", 0.8.0-0.8.3 "EngineCore_0 initialization failed".
            r"EngineCore failed to start|WorkerProc hit an exception|Engine core initialization failed|died unexpectedly|EngineDeadError"
            r"|EngineCore encountered a fatal error|Engine process failed to start|EngineCore(?:_\d+)? initialization failed",
        ),
        None,
    ),
    (KIND_MM_PROFILE, named(("Starting profile run for multi-modal models", "Encoder cache will be initialized"), r"Starting profile run for multi-modal models|Encoder cache will be initialized"), None),
    (KIND_READY, named(("Application startup complete", "Starting vLLM API server"), r"Application startup complete|Starting vLLM API server"), None),
    (KIND_CHUNKED, named('Chunked prefill is enabled', r"Chunked prefill is enabled with max_num_batched_tokens=(?P<max_num_batched_tokens_n>\d+)"), None),
    (KIND_LOAD_START, named('Starting to load model', r"Starting to load model \S+"), None),
)

_DICT_ITEM_RE = named("'", r"'(?P<key_str>\w+)': (?P<value_str>'(?:[^'\\]|\\.)*'|\"[^\"]*\"|\[[^\]]*\]|[\w.+-]+)")
_CONFIG_ITEM_RE = named("=", r"(?<![\w.])(?P<key_str>\w+)=(?P<value_str>'(?:[^'\\]|\\.)*'|[\w.+/-]+)")
_CAPTURE_SIZES_RE = named("capture_sizes", r"['\"]?(?:cudagraph_capture_sizes|capture_sizes)['\"]?\s*[:=]\s*\[(?P<sizes_str>[\d,\s]*)\]")
_MAX_CAPTURE_RE = named("capture_size", r"['\"]?max_(?:cudagraph_)?capture_size['\"]?\s*[:=]\s*(?P<max_capture_size_n>\d+)")

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
    "dtype",
    "limit_mm_per_prompt",
    "max_seq_len",
    "block_size",
    "enable_chunked_prefill",
}


def _config_values(text: str, pattern: LazyRegex) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for m in pattern.finditer(text):
        key, raw = m.group("key_str"), m.group("value_str")
        if key in _ARG_KEYS and key not in values:
            value = python_value(raw)
            if raw in ("True", "False"):
                value = raw == "True"
            values[key] = value
    sizes = _CAPTURE_SIZES_RE.search(text)
    if sizes:
        nums = [int(n) for n in re.compile(r"\d+").findall(sizes.group("sizes_str"))]
        if nums:
            values["max_capture_size"] = max(nums)
    else:
        mcs = _MAX_CAPTURE_RE.search(text)
        if mcs:
            values.update(typed(mcs))
    return values


# The table as rows the dispatch hands out: only the rows whose needle is in a line are tried.
_DISPATCH: Dispatch[tuple[str, _Shape | None]] = Dispatch(tuple((pattern, (kind, shape)) for kind, pattern, shape in _PATTERNS))

# Error messages long enough to be hard-wrapped by a terminal ("... (4.26 GiB KV cach" / "e is needed");
# a line that starts one but does not match whole is joined with the next lines before giving up.
_WRAPPABLE = lazy(
    ("To serve at least one request", "Free memory on device", "The model's max seq len", "No available memory for the cache"),
    r"To serve at least one request|Free memory on device|The model's max seq len|No available memory for the cache",
)
_MAX_JOIN = 4


class VLLMParser:
    """Incremental parser for vLLM lines: ``feed`` one line at a time, ``finish`` at the end.

    While not ``pending`` it reads only lines holding one of ANCHORS or NEEDLES (pipeline/events.py
    routes the others past it): every pattern above holds one of them.
    """

    ANCHORS = ANCHORS
    # What it reads on a line without an anchor: two engine failures, and the start of a message whose
    # anchor a terminal's wrap may have cut off.
    NEEDLES: tuple[str, ...] = ("WorkerProc hit an exception", "EngineCore encountered a fatal error", "To serve at least one request", "No available memory for the cache")
    FOLDED_NEEDLES: tuple[str, ...] = ()
    REPEATING: tuple[tuple[bytes, str], ...] = ((b"is preempted by", KIND_PREEMPT),)

    def __init__(self) -> None:
        self._pending: tuple[list, str] | None = None

    @property
    def pending(self) -> bool:
        """A message that may be hard-wrapped is being joined with the lines after it."""
        return self._pending is not None

    def _match(self, msg: str, refs: tuple) -> list[Event]:
        for pattern, (kind, shape) in _DISPATCH.candidates(msg):
            m = pattern.search(msg)
            if m is None:
                continue
            values = typed(m)
            return [Event(kind, refs, values if shape is None else shape(values))]
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

    def finish(self) -> list[Event]:
        self._pending = None
        return []

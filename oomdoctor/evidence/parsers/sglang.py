"""SGLang (and SGLang Omni) evidence: the startup memory timeline, memory errors, retractions.

Every pattern below is written against the message templates in log_formats.md §1-§2, one
alternative per era where the wording changed. SGLang prints "GB" but divides by 2**30.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomdoctor.base.evidence import Event, Line
from oomdoctor.evidence.parsers.captures import NUM, named, present, typed
from oomdoctor.evidence.parsers.python_values import python_value
from oomdoctor.input.patterns import Dispatch, LazyRegex, lazy

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    _Shape = Callable[[dict[str, Any]], dict[str, Any]]

KIND_SERVER_ARGS = "server_args"
KIND_INIT_DIST_END = "init_dist_end"
KIND_UNBALANCED = "unbalanced"
KIND_LOAD_BEGIN = "load_begin"
KIND_LOAD_END = "load_end"
KIND_KV_ALLOCATED = "kv_allocated"
KIND_POOL_END = "pool_end"
KIND_GRAPH_BEGIN = "graph_begin"
KIND_GRAPH_END = "graph_end"
KIND_GRAPH_BAR = "graph_bar"
KIND_SUMMARY = "summary"
KIND_READY = "ready"
KIND_NOT_ENOUGH = "not_enough_memory"
KIND_NO_KV = "weights_leave_no_kv"
KIND_HYBRID_NOT_ENOUGH = "hybrid_state_not_enough"
KIND_PROFILED_NEGATIVE = "profiled_negative"
KIND_LEGACY_PROFILE = "legacy_memory_profiling"
KIND_CAPTURE_FAILED = "capture_failed"
KIND_RETRACT = "retract"
KIND_KV_ALLOC_FAIL = "kv_alloc_fail"
KIND_KV_ALLOC_DETAIL = "kv_alloc_detail"
KIND_REQ_SLOTS_FAIL = "req_slots_fail"
KIND_SCHED_EXC = "scheduler_exception"
KIND_SIGQUIT = "sigquit"
KIND_STRAGGLER = "load_straggler"
KIND_OMNI_STAGE = "omni_stage"
KIND_OMNI_FLOOR = "omni_reserve_floor"
KIND_OMNI_ENCODER_FAIL = "omni_encoder_fail"
KIND_MM_CACHE_FULL = "mm_cache_full"
KIND_MM_RESERVE = "mm_reserve"
KIND_CAPTURE_ADVICE = "capture_advice"
KIND_HOST_POOL = "host_pool"

ANCHORS: tuple[bytes, ...] = (
    b"server_args=",
    b"mem usage=",
    b"avail mem=",
    b"avail_mem=",
    b"memory capacity is unbalanced",
    b"Cache is allocated",
    b"max_total_num_token",  # "max_total_num_tokens=", and the router era's "max_total_num_token="
    b"fired up",
    b"Not enough memory",
    b"Not enought memory",  # 0.1.6-0.1.16 printed the typo
    b"leaves no room for the full KV pool",
    b"cannot hold even one request",
    b"Please set a smaller number for",
    b"Not enough GPU memory",
    b"Loaded weights leave",
    b"too small to serve",
    b"profiled value",
    b"Memory profiling:",
    b"graph failed",
    b"capture failed",
    b"Retract requests",
    b"out of memory happened",
    b"Try to lower your batch size",
    b"This should never happen",
    b"This should nerver happen",
    b"Try to allocate",
    b"tokens: ",
    b"alloc_req_slots",
    b"hit an exception",
    b"sigquit",
    b"didn't finish loading",
    b"sglang_ar_start",
    b"encoder_mem_reserve",
    b"compute_fn failed",
    b"Worker: request",
    b"step failed",
    b"embedding cache is full",
    b"for post-sizing multimodal",
    b"No space left for only one request",
    b"Possible solutions",
    b"graph begin",
    b"graph end",
    b"GB host memory for",
    b"KV host pool:",
)

_F = NUM
# The graph word of a capture line: "cuda graph", "CUDA graph", and since 2026 the platform's ("NPU graph",
# "XPU graph", "CPU graph"; "npu graph" / "cpu graph" before).
_GRAPH = r"(?:cuda|CUDA|npu|NPU|xpu|XPU|cpu|CPU) graph"



def _load_end(v: dict[str, Any]) -> dict[str, Any]:
    # The "type=" form without "elapsed=" is the 2023-2024 era; a line without "type=" is 2026's.
    modern = v["elapsed"] is not None or v["model_type"] is None
    values = {"model_type": v["model_type"], "avail_bytes": v["avail_bytes"], "era": "V-c/d" if modern else "V-a/b"}
    if v["mem_usage_bytes"] is not None:
        values["mem_usage_bytes"] = v["mem_usage_bytes"]
    return values


def _kv_allocated(v: dict[str, Any]) -> dict[str, Any]:
    values = {"dtype": v["dtype"]}
    if v["tokens"] is not None:
        values["tokens"] = v["tokens"]
    if v["kv_bytes"] is not None:
        values["kv_bytes"] = v["kv_bytes"]
        values["layout"] = "mla"
    else:
        values["kv_bytes"] = (v["k_bytes"] or 0) + (v["v_bytes"] or 0)
        values["layout"] = "mha"
    return values


def _capture_failed(v: dict[str, Any]) -> dict[str, Any]:
    reason = v["reason"] or ""
    low = reason.lower()
    return {
        "reason": reason[:500],
        "is_oom": any(s in low for s in ("out of memory", "cublas_status_alloc_failed", "cublas_status_not_initialized", "outofmemory")),
        "custom_all_reduce": any(s in low for s in ("custom_all_reduce", "custom all-reduce", "cudaipc")),
    }


def _omni_stage(v: dict[str, Any]) -> dict[str, Any]:
    fields = {m.group("key_str"): m.group("value_str") for m in _OMNI_KV_RE.finditer(v["rest"])}
    values: dict[str, Any] = {"step": v["step"], "stage": v["stage"]}
    for key in ("mem_fraction_static", "encoder_mem_reserve", "pre_load_avail_mem", "post_load_avail_mem"):
        raw = fields.get(key)
        try:
            values[key] = float(raw) if raw not in (None, "None") else None
        except ValueError:
            values[key] = None
    return values


# (kind, pattern, shape): the first pattern found in a line makes its event. Values are ``typed(match)``
# (each group's name says its unit and output key, see captures.py), passed through ``shape`` when the
# kind needs more than that: ``present`` drops the keys of optional clauses the line lacks.
_SIMPLE: tuple[tuple[str, LazyRegex, _Shape | None], ...] = (
    (KIND_INIT_DIST_END, named('Init torch distributed ends', rf"Init torch distributed ends\.(?: elapsed={_F} s,)? mem usage=(?P<mem_usage_gib>{_F})"), None),
    (KIND_LOAD_BEGIN, named('Load weight begin', rf"Load weight begin\. avail mem=(?P<avail_gib>{_F}) ?GB"), None),
    (
        KIND_LOAD_END,
        named('Load weight end',
            # 2026 builds may print "quant=fp8, fmt=e4m3," instead of "type=...": the type is optional.
            rf"Load weight end\.(?: elapsed=(?P<elapsed_f>{_F}) s,)?(?: type=(?P<model_type_str>[\w.]+),)?.*?avail mem=(?P<avail_gib>{_F}) ?GB"
            rf"(?:, mem usage=(?P<mem_usage_gib>{_F}) ?GB)?"
        ),
        _load_end,
    ),
    (
        KIND_KV_ALLOCATED,
        named('Cache is allocated',
            rf"KV Cache is allocated\.(?: dtype: (?P<dtype_str>[\w.]+),)?(?: #tokens: (?P<tokens_n>\d+),)? "
            rf"(?:K size: (?P<k_gib>{_F}) GB, V size: (?P<v_gib>{_F}) GB|KV size: (?P<kv_gib>{_F}) GB)"
        ),
        _kv_allocated,
    ),
    # The hierarchical cache's host tier (memory_pool_host.py), each rank's own, printed before it is allocated:
    # "Allocating 40.00 GB host memory for hierarchical KV cache." (and its Mamba, DSA-indexer, V4 pools), since
    # 0.5.9 also "Allocating <label> hierarchical KV host pool: N tokens, X GB host memory.".
    (
        KIND_HOST_POOL,
        named(("GB host memory for", "KV host pool:"), rf"Allocating (?P<host_gb>{_F}) GB host memory for |hierarchical KV host pool: \d+ tokens, (?P<pool_gb>{_F}) GB host memory"),
        lambda v: {"host_bytes": v["host_bytes"] if v["host_bytes"] is not None else v["pool_bytes"]},
    ),
    (KIND_POOL_END, named('Memory pool end', rf"Memory pool end\. avail mem=(?P<avail_gib>{_F}) ?GB"), None),
    (
        KIND_GRAPH_BEGIN,
        named('graph begin',
            # 0.5.7-0.5.13's multi-layer EAGLE draft printed "graph begin (step N)."
            rf"Capture (?:(?P<role_str>target|draft) (?P<phase_str>\w+) )?(?:\w+ )?{_GRAPH} begin(?: \(step \d+\))?\.(?:.*?avail mem=(?P<avail_gib>{_F}) ?GB)?"
        ),
        None,
    ),
    (
        KIND_GRAPH_END,
        named('graph end',
            # Each figure on its own: 0.4.4-0.4.6 printed "avail mem=X GB. mem usage=Y GB.", later builds usage first.
            rf"Capture (?:(?P<role_str>target|draft) (?P<phase_str>\w+) )?(?:\w+ )?{_GRAPH} end\."
            rf"(?=(?:.*?mem usage=(?P<mem_usage_gib>{_F}) ?GB)?)(?=(?:.*?avail mem=(?P<avail_gib>{_F}) ?GB)?)"
        ),
        None,
    ),
    # The capture progress bar's description: "Capturing batches (bs=N avail_mem=X GB)"; 0.4.5-0.4.8 without
    # bs=; piecewise graphs "Capturing num tokens (num_tokens=N avail_mem=X GB)", 0.5.21+ "Capturing prefill shape (...)".
    # A token count is no decode batch size (piecewise graphs have their own limit): its own key.
    (
        KIND_GRAPH_BAR,
        named(("Capturing batches", "Capturing num tokens", "Capturing prefill shape"),
            rf"Capturing (?:batches|num tokens|prefill shape) \((?:bs=(?P<bs_n>\d+) |num_tokens=(?P<num_tokens_n>\d+) )?avail_mem=(?P<avail_gib>{_F}) ?GB\)"
        ),
        present,
    ),
    (
        KIND_SUMMARY,
        # The router era (0.1.3-0.1.16) printed "max_total_num_token=N, max_prefill_num_token=N, context_len=N";
        # 0.1.18-0.1.22 had no max_running_requests.
        named('max_total_num_token',
            r"max_total_num_tokens?=(?P<max_total_num_tokens_n>\d+), (?:chunked_prefill_size=(?P<chunked_prefill_size_n>-?\d+), )?"
            r"max_prefill_(?:tokens|num_token)=(?P<max_prefill_tokens_n>\d+), (?:max_running_requests=(?P<max_running_requests_n>\d+), )?"
            rf"context_len=(?P<context_len_n>\d+)(?:, available_gpu_mem=(?P<available_gpu_mem_gib>{_F}) ?GB)?"
        ),
        present,
    ),
    (KIND_READY, named('fired up', r"The server is fired up and ready to roll"), None),
    (
        KIND_NOT_ENOUGH,
        named(("Not enough memory", "Not enought memory"),
            r"Not enought? memory\. Please try to increase --mem-fraction-static\.?"
            rf"(?: Current value: (?:self\.server_args\.)?mem_fraction_static=(?P<mem_fraction_static_f>{_F}))?"
        ),
        present,
    ),
    (
        KIND_NO_KV,
        named('Loaded weights leave',
            rf"Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=(?P<mem_fraction_static_f>{_F})\.?"
            rf"(?: Raise --mem-fraction-static above (?P<suggested_mem_fraction_static_f>{_F}) "
            rf"\(minimum viable = 1 - available/pre = (?P<minimum_viable_f>{_F})\))?"
        ),
        present,
    ),
    # 2026 sliding-window (SWA) pools: the pool cap leaves no KV room, or the pool cannot hold one request.
    (
        KIND_NOT_ENOUGH,
        named(("leaves no room for the full KV pool", "cannot hold even one request"),
            rf"(?:SWA pool cap \(\d+ tokens, (?P<swa_fixed_gib>{_F}) Gi?B\) leaves no room for the full KV pool"
            rf"(?: within the available (?P<available_gib>{_F}) Gi?B)?)|(?P<swa_too_small_flag>SWA pool \(\d+ tokens\) cannot hold even one request)"
        ),
        lambda v: {**present(v), "source": "swa_pool"},
    ),
    (KIND_HYBRID_NOT_ENOUGH, named(("Not enough GPU memory for hybrid", "state cache is too small"), r"Not enough GPU memory for hybrid|state cache is too small to serve any requests"), None),
    (
        KIND_PROFILED_NEGATIVE,
        named('profiled value', r"max_total_tokens=(?P<requested_tokens_n>\d+) is larger than the profiled value (?P<profiled_tokens_n>-?\d+)"),
        None,
    ),
    (
        KIND_LEGACY_PROFILE,
        named('Memory profiling:',
            rf"Memory profiling: available_gpu_memory=(?P<post_gib>{_F}) GB, total_gpu_memory=(?P<pre_gib>{_F}) GB, "
            rf"mem_fraction_static=(?P<mem_fraction_static_f>{_F}), rest_memory=(?P<rest_gib>{_F}) GB"
        ),
        None,
    ),
    (
        KIND_CAPTURE_FAILED,
        named('failed', r"(?:Capture (?:prefill )?(?:cuda|CUDA) graph failed|CUDA graph capture failed|Breakable CUDA graph failed)[.:]? ?(?P<reason_str>.*)"),
        _capture_failed,
    ),
    (
        KIND_RETRACT,
        named('#retracted_reqs', r"(?:KV cache pool is full\. Retract requests\. |[Dd]ecode out of memory happened[.,] )#retracted_reqs: (?P<retracted_reqs_n>\d+)"),
        None,
    ),
    (
        KIND_KV_ALLOC_FAIL,
        named('ut of memory. ', r"(?P<which_str>Prefill|Decode)? ?[Oo]ut of memory\. (?:Try to lower your batch size|This should ne(?:r)?ver happen)"),
        lambda v: {"which": (v["which"] or "any").lower()},
    ),
    (
        KIND_KV_ALLOC_DETAIL,
        # 0.3.5-0.4.6 printed "Avaliable tokens:".
        named(("Try to allocate ", "Available ", "Avaliable "), r"^\s*(?:Try to allocate (?P<requested_tokens_n>\d+) tokens|Ava(?:il|li)able (?:full )?tokens: (?P<available_tokens_n>\d+))"),
        present,
    ),
    (
        KIND_REQ_SLOTS_FAIL,
        named("alloc_req_slots runs out of memory", r"alloc_req_slots runs out of memory(?:.*?available_size\(\)=(?P<available_slots_n>\d+), num_reqs=(?P<requested_slots_n>\d+))?"),
        present,
    ),
    (KIND_REQ_SLOTS_FAIL, named("No space left for only one request", r"No space left for only one request"), None),
    # alloc_req_slots before 0.4.4: "Out of memory. Please set a smaller number for `--max-running-requests`."
    (KIND_REQ_SLOTS_FAIL, named("Please set a smaller number for", r"Out of memory\. Please set a smaller number for `?--max-running-requests"), None),
    (
        KIND_SCHED_EXC,
        named('hit an exception', r"(?P<who_str>Scheduler|DataParallelController|TpModelWorkerClient|DetokenizerManager) hit an exception"),
        None,
    ),
    (KIND_SIGQUIT, named('sigquit', r"Received sigquit from a child process"), None),
    (
        KIND_STRAGGLER,
        named("other ranks that didn't finish", r"TP rank (?P<tp_rank_n>\d+) could finish the model loading, but there are other ranks that didn't finish loading"),
        None,
    ),
    (KIND_OMNI_STAGE, named('sglang_ar_start', r"sglang_ar_(?P<step_str>startup|started) stage=(?P<stage_str>\w+)(?P<rest_str>.*)"), _omni_stage),
    (
        KIND_OMNI_FLOOR,
        named('safe floor',
            rf"(?:auto mem_fraction_static|colocated total_gpu_memory_fraction) (?P<auto_mem_fraction_static_f>{_F}) "
            rf"minus encoder_mem_reserve (?P<encoder_mem_reserve_f>{_F}) = (?P<result_f>{_F}) is below the safe floor"
        ),
        None,
    ),
    (
        KIND_OMNI_ENCODER_FAIL,
        named(("compute_fn failed for ", "Worker: request ", "OmniEngine "),
            r"SimpleScheduler: compute_fn failed for (?P<request_id_str>\S+)|Worker: request (?P<worker_request_id_str>\S+) failed"
            r"|OmniEngine (?:overlap )?step failed"
        ),
        lambda v: {"request_id": v["request_id"] or v["worker_request_id"]},
    ),
    (KIND_MM_CACHE_FULL, named('embedding cache is full', r"Multimodal embedding cache is full"), None),
    (KIND_MM_RESERVE, named('post-sizing multimodal', rf"Reserving (?P<reserve_gib>{_F}) GB of the KV budget for post-sizing multimodal"), None),
    # The fixed "Possible solutions:" block after a capture failure; it names this version's flags.
    (
        KIND_CAPTURE_ADVICE,
        named(("Possible solutions:", ". set --", ". disable ", "Open an issue on GitHub", "This is not an out-of-memory error"),
            # decode_flag_flag: the output key decode_flag, a _flag (whether "-decode" was printed).
            r"(?:Possible solutions:|^\s*\d\. (?:set --mem-fraction-static|set --cuda-graph-max-bs(?P<decode_flag_flag>-decode)?"
            r"|disable (?:decode )?(?:cuda|CUDA) graph|disable torch compile|set --piecewise)"
            r"|Open an issue on GitHub|This is not an out-of-memory error)"
        ),
        None,
    ),
)

# The table as rows the dispatch hands out: only the rows whose needle is in a line are tried.
_SIMPLE_DISPATCH: Dispatch[tuple[str, _Shape | None]] = Dispatch(tuple((pattern, (kind, shape)) for kind, pattern, shape in _SIMPLE))

_UNBALANCED_RE = lazy("memory capacity is unbalanced", r"The memory capacity is unbalanced")
# 0.5.10 renamed min_per_gpu_memory to pre_model_load_memory.
_UNBALANCED_NUMS_RE = named(
    ("min_per_gpu_memory=", "pre_model_load_memory="),
    rf"(?:min_per_gpu_memory|pre_model_load_memory)=(?P<min_free_gib>{_F})(?: ?GB)?, local_gpu_memory=(?P<local_free_gib>{_F})",
)

# server_args keys the budget and advice need; anything else stays in the raw text.
_ARG_KEYS = (
    "model_path",
    "served_model_name",
    "mem_fraction_static",
    "tp_size",
    "pp_size",
    "dp_size",
    "ep_size",
    "chunked_prefill_size",
    "max_prefill_tokens",
    "max_running_requests",
    "max_total_tokens",
    "context_length",
    "cuda_graph_max_bs",
    "cuda_graph_max_bs_decode",
    "cuda_graph_bs",
    "disable_cuda_graph",
    "kv_cache_dtype",
    "quantization",
    "dtype",
    "enable_dp_attention",
    "speculative_algorithm",
    "page_size",
    "enable_multimodal",
    "enable_memory_saver",
    "disable_radix_cache",
    "device",
)
_ARG_VALUE = r"(?P<value_str>'(?:[^'\\]|\\.)*'|\"[^\"]*\"|[\w.+-]+)"
_ARG_RE = named("=", r"(?<![\w.])(?P<key_str>" + "|".join(_ARG_KEYS) + r")=" + _ARG_VALUE)
# From 0.5.19 the line is "server_args={'model_path': ..., 'mem_fraction_static': 0.83, ...}" (a dict).
_ARG_DICT_RE = named("': ", r"(?<![\w.])'(?P<key_str>" + "|".join(_ARG_KEYS) + r")': " + _ARG_VALUE)
_OMNI_KV_RE = named("=", r"(?P<key_str>\w+)=(?P<value_str>\S+)")


def parse_server_args(text: str) -> dict[str, Any]:
    """The known fields of a ``server_args=ServerArgs(...)`` repr (or the ``{...}`` dict of 0.5.19+), as Python values.

    Per-key patterns, not a full ``ast`` parse: some fields have unparsable reprs and hard-wrapped
    pastes break the expression, while the keys oomdoctor needs stay readable.
    """
    args: dict[str, Any] = {}
    pattern = _ARG_DICT_RE if text.startswith("server_args={") else _ARG_RE
    matches = list(pattern.finditer(text))
    # Only the outer repr's (or dict's) own fields: a key inside another value (an override dict, a JSON
    # string) is not the server's setting.
    depths, _ = _nesting(text, [m.start() for m in matches])
    for m, depth in zip(matches, depths):  # noqa: B905 (one depth per match)
        key, raw = m.group("key_str"), m.group("value_str")
        if key in args or depth != 1:
            continue
        args[key] = python_value(raw)
    args["_has_cuda_graph_max_bs_decode"] = any(k in text for k in ("cuda_graph_max_bs_decode=", "'cuda_graph_max_bs_decode'", "cuda_graph_config"))
    return args


_OPENERS = {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}
# A quoted string (skipped whole) or a bracket: a repr is walked token by token, not character by character.
_NESTING_TOKENS = lazy(None, r"""'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*"|[()\[\]{}]""")


def _nesting(text: str, positions: list[int]) -> tuple[list[int], int]:
    """The bracket depth at each of ``positions`` (ascending; -1 inside a quoted string other than at its
    opening quote) and at the end; brackets inside quotes are not counted."""
    depths: list[int] = []
    depth, k, n = 0, 0, len(positions)
    for m in _NESTING_TOKENS.finditer(text):
        start = m.start()
        while k < n and positions[k] < start:
            depths.append(depth)
            k += 1
        token = m.group()
        if token[0] in "'\"":
            end = m.end()
            while k < n and positions[k] < end:
                depths.append(depth if positions[k] == start else -1)
                k += 1
        else:
            depth += _OPENERS[token]
    depths.extend([depth] * (n - k))
    return depths, depth


def _balanced(args_text: str) -> bool:
    """Whether a ``server_args=`` text has closed the repr's ``(`` or the dict's ``{`` it opened."""
    return _nesting(args_text, [])[1] <= 0


class SGLangParser:
    """Incremental parser for SGLang lines: ``feed`` one line at a time, ``finish`` at the end.

    While not ``pending`` it reads only lines holding one of ANCHORS or NEEDLES (pipeline/events.py
    routes the others past it): every pattern below holds one of them.
    """

    ANCHORS = ANCHORS
    # What it reads on a line without an anchor: the numbered advice after "Possible solutions:".
    NEEDLES: tuple[str, ...] = (". set --", ". disable ", "Open an issue on GitHub", "This is not an out-of-memory error")
    FOLDED_NEEDLES: tuple[str, ...] = ()
    # Lines that repeat for as long as a server runs, by the one anchor they hold, and the kind they are.
    REPEATING: tuple[tuple[bytes, str], ...] = ((b"Retract requests", KIND_RETRACT),)

    def __init__(self) -> None:
        self._args_refs: list = []
        self._args_text: str | None = None

    def _flush_args(self) -> list[Event]:
        if self._args_text is None:
            return []
        values = parse_server_args(self._args_text)
        event = Event(KIND_SERVER_ARGS, tuple(self._args_refs), values)
        self._args_text = None
        self._args_refs = []
        return [event]

    @property
    def pending(self) -> bool:
        """A hard-wrapped server_args repr is being read: the next lines may continue it."""
        return self._args_text is not None

    def feed(self, line: Line) -> list[Event]:
        msg = line.msg
        out: list[Event] = []
        if self._args_text is not None:
            # A hard-wrapped ServerArgs repr (or dict) continues until its brackets balance.
            if line.ts is None and len(self._args_refs) < 40 and not _balanced(self._args_text):
                self._args_text += msg.strip("\n")
                self._args_refs.append(line.ref)
                if _balanced(self._args_text):
                    out.extend(self._flush_args())
                return out
            out.extend(self._flush_args())

        if "server_args=" in msg:
            i = msg.find("server_args=")
            self._args_text = msg[i:]
            self._args_refs = [line.ref]
            if _balanced(self._args_text):
                out.extend(self._flush_args())
            return out

        if _UNBALANCED_RE.search(msg):
            nums = _UNBALANCED_NUMS_RE.search(msg)
            out.append(Event(KIND_UNBALANCED, (line.ref,), typed(nums) if nums else {}))
            return out

        for pattern, (kind, shape) in _SIMPLE_DISPATCH.candidates(msg):
            m = pattern.search(msg)
            if m is None:
                continue
            values = typed(m)
            out.append(Event(kind, (line.ref,), values if shape is None else shape(values)))
            break
        return out

    def finish(self) -> list[Event]:
        return self._flush_args()

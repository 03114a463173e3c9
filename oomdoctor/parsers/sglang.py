"""SGLang (and SGLang Omni) evidence: the startup memory timeline, memory errors, retractions.

Every pattern below is written against the message templates in log_formats.md §1-§2, one
alternative per era where the wording changed. SGLang prints "GB" but divides by 2**30.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from oomdoctor.evidence import Event, Line
from oomdoctor.patterns import LazyRegex, lazy
from oomdoctor.units import optional_gib_to_bytes as _gib
from oomdoctor.units import optional_number as _num

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

ANCHORS: tuple[bytes, ...] = (
    b"server_args=",
    b"mem usage=",
    b"avail mem=",
    b"avail_mem=",
    b"memory capacity is unbalanced",
    b"Cache is allocated",
    b"max_total_num_tokens=",
    b"fired up",
    b"Not enough memory",
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
)

_F = r"(-?\d+(?:\.\d+)?)"

_SIMPLE: tuple[tuple[str, LazyRegex], ...] = (
    (KIND_INIT_DIST_END, lazy('Init torch distributed ends', rf"Init torch distributed ends\.(?: elapsed={_F} s,)? mem usage={_F}")),
    (KIND_LOAD_BEGIN, lazy('Load weight begin', rf"Load weight begin\. avail mem={_F} ?GB")),
    (
        KIND_LOAD_END,
        lazy('Load weight end', rf"Load weight end\.(?: elapsed={_F} s,)? type=(?P<type>[\w.]+),.*?avail mem={_F} ?GB(?:, mem usage={_F} ?GB)?"),
    ),
    (
        KIND_KV_ALLOCATED,
        lazy('Cache is allocated',
            rf"KV Cache is allocated\.(?: dtype: (?P<dtype>[\w.]+),)?(?: #tokens: (?P<tokens>\d+),)? "
            rf"(?:K size: (?P<k>{_F[1:-1]}) GB, V size: (?P<v>{_F[1:-1]}) GB|KV size: (?P<kv>{_F[1:-1]}) GB)"
        ),
    ),
    (KIND_POOL_END, lazy('Memory pool end', rf"Memory pool end\. avail mem={_F} ?GB")),
    (
        KIND_GRAPH_BEGIN,
        lazy('graph begin', rf"Capture (?:(?P<role>target|draft) (?P<phase>\w+) )?(?:\w+ )?(?:cuda|CUDA|npu) graph begin\.(?:.*?avail mem={_F} ?GB)?"),
    ),
    (
        KIND_GRAPH_END,
        lazy('graph end', rf"Capture (?:(?P<role>target|draft) (?P<phase>\w+) )?(?:\w+ )?(?:cuda|CUDA|npu) graph end\.(?:.*?mem usage={_F} ?GB.*?avail mem={_F} ?GB)?"),
    ),
    (KIND_GRAPH_BAR, lazy('Capturing batches', rf"Capturing batches \((?:bs|num_tokens)=(\d+) avail_mem={_F} ?GB\)")),
    (
        KIND_SUMMARY,
        lazy('max_total_num_tokens=',
            r"max_total_num_tokens=(?P<tokens>\d+), (?:chunked_prefill_size=(?P<chunk>-?\d+), )?max_prefill_tokens=(?P<prefill>\d+), "
            rf"max_running_requests=(?P<running>\d+), context_len=(?P<ctx>\d+)(?:, available_gpu_mem=(?P<avail>{_F[1:-1]}) ?GB)?"
        ),
    ),
    (KIND_READY, lazy('fired up', r"The server is fired up and ready to roll")),
    (
        KIND_NOT_ENOUGH,
        lazy('Not enough memory', rf"Not enough memory\. Please try to increase --mem-fraction-static\.?(?: Current value: (?:self\.server_args\.)?mem_fraction_static={_F})?"),
    ),
    (
        KIND_NO_KV,
        lazy('Loaded weights leave',
            rf"Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static={_F}\.?"
            rf"(?: Raise --mem-fraction-static above {_F} \(minimum viable = 1 - available/pre = {_F}\))?"
        ),
    ),
    (KIND_HYBRID_NOT_ENOUGH, lazy(None, r"Not enough GPU memory for hybrid|state cache is too small to serve any requests")),
    (KIND_PROFILED_NEGATIVE, lazy('profiled value', r"max_total_tokens=(\d+) is larger than the profiled value (-?\d+)")),
    (
        KIND_LEGACY_PROFILE,
        lazy('Memory profiling:', rf"Memory profiling: available_gpu_memory={_F} GB, total_gpu_memory={_F} GB, mem_fraction_static={_F}, rest_memory={_F} GB"),
    ),
    (KIND_CAPTURE_FAILED, lazy('failed', r"(?:Capture cuda graph failed|CUDA graph capture failed|Breakable CUDA graph failed)[.:]? ?(?P<reason>.*)")),
    (
        KIND_RETRACT,
        lazy('#retracted_reqs', r"(?:KV cache pool is full\. Retract requests\. |[Dd]ecode out of memory happened[.,] )#retracted_reqs: (\d+)"),
    ),
    (KIND_KV_ALLOC_FAIL, lazy('ut of memory. ', r"(?P<which>Prefill|Decode)? ?[Oo]ut of memory\. (?:Try to lower your batch size|This should never happen)")),
    (KIND_KV_ALLOC_DETAIL, lazy(None, r"^\s*(?:Try to allocate (?P<want>\d+) tokens|Available (?:full )?tokens: (?P<avail>\d+))")),
    (
        KIND_REQ_SLOTS_FAIL,
        lazy(None, r"alloc_req_slots runs out of memory(?:.*?available_size\(\)=(?P<avail>\d+), num_reqs=(?P<reqs>\d+))?"),
    ),
    (KIND_REQ_SLOTS_FAIL, lazy(None, r"No space left for only one request")),
    (KIND_SCHED_EXC, lazy('hit an exception', r"(?P<who>Scheduler|DataParallelController|TpModelWorkerClient|DetokenizerManager) hit an exception")),
    (KIND_SIGQUIT, lazy('sigquit', r"Received sigquit from a child process")),
    (KIND_STRAGGLER, lazy("other ranks that didn't finish", r"TP rank (\d+) could finish the model loading, but there are other ranks that didn't finish loading")),
    (KIND_OMNI_STAGE, lazy('sglang_ar_start', r"sglang_ar_(?P<step>startup|started) stage=(?P<stage>\w+)(?P<rest>.*)")),
    (
        KIND_OMNI_FLOOR,
        lazy('safe floor', rf"(?:auto mem_fraction_static|colocated total_gpu_memory_fraction) {_F} minus encoder_mem_reserve {_F} = {_F} is below the safe floor"),
    ),
    (KIND_OMNI_ENCODER_FAIL, lazy(None, r"SimpleScheduler: compute_fn failed for (?P<rid>\S+)|Worker: request (?P<rid2>\S+) failed|OmniEngine (?:overlap )?step failed")),
    (KIND_MM_CACHE_FULL, lazy('embedding cache is full', r"Multimodal embedding cache is full")),
    (KIND_MM_RESERVE, lazy('post-sizing multimodal', rf"Reserving {_F} GB of the KV budget for post-sizing multimodal")),
    # The fixed "Possible solutions:" block after a capture failure; it names this version's flags.
    (
        KIND_CAPTURE_ADVICE,
        lazy(None,
            r"(?:Possible solutions:|^\s*\d\. (?:set --mem-fraction-static|set --cuda-graph-max-bs(?P<decode>-decode)?|disable (?:decode )?(?:cuda|CUDA) graph|disable torch compile|set --piecewise)"
            r"|Open an issue on GitHub|This is not an out-of-memory error)"
        ),
    ),
)

_UNBALANCED_RE = lazy("memory capacity is unbalanced", r"The memory capacity is unbalanced")
_UNBALANCED_NUMS_RE = lazy("min_per_gpu_memory=", rf"min_per_gpu_memory={_F}(?: ?GB)?, local_gpu_memory={_F}")

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
    "enable_dp_attention",
    "speculative_algorithm",
    "page_size",
    "enable_multimodal",
    "enable_memory_saver",
    "disable_radix_cache",
    "device",
)
_ARG_RE = lazy("=", r"(?<![\w.])(" + "|".join(_ARG_KEYS) + r")=('(?:[^'\\]|\\.)*'|\"[^\"]*\"|[\w.+-]+)")
_OMNI_KV_RE = lazy("=", r"(\w+)=(\S+)")


def parse_server_args(text: str) -> dict[str, Any]:
    """The known fields of a ``server_args=ServerArgs(...)`` repr, as Python values.

    Per-key patterns, not a full ``ast`` parse: some fields have unparsable reprs and hard-wrapped
    pastes break the expression, while the keys oomdoctor needs stay readable.
    """
    args: dict[str, Any] = {}
    for m in _ARG_RE.finditer(text):
        key, raw = m.group(1), m.group(2)
        if key in args:
            continue
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw
        args[key] = value
    args["_has_cuda_graph_max_bs_decode"] = "cuda_graph_max_bs_decode=" in text or "cuda_graph_config" in text
    return args


class SGLangParser:
    """Incremental parser for SGLang lines: ``feed`` one line at a time, ``finish`` at the end."""

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

    def feed(self, line: Line) -> list[Event]:
        msg = line.msg
        out: list[Event] = []
        if self._args_text is not None:
            # A hard-wrapped ServerArgs repr continues until its parentheses balance.
            if line.ts is None and len(self._args_refs) < 40 and self._args_text.count("(") > self._args_text.count(")"):
                self._args_text += msg.strip("\n")
                self._args_refs.append(line.ref)
                if self._args_text.count("(") <= self._args_text.count(")"):
                    out.extend(self._flush_args())
                return out
            out.extend(self._flush_args())

        if "server_args=" in msg:
            i = msg.find("server_args=")
            self._args_text = msg[i:]
            self._args_refs = [line.ref]
            if self._args_text.count("(") <= self._args_text.count(")"):
                out.extend(self._flush_args())
            return out

        if _UNBALANCED_RE.search(msg):
            nums = _UNBALANCED_NUMS_RE.search(msg)
            values: dict[str, Any] = {}
            if nums:
                values = {"min_free_bytes": _gib(nums.group(1)), "local_free_bytes": _gib(nums.group(2))}
            out.append(Event(KIND_UNBALANCED, (line.ref,), values))
            return out

        for kind, pattern in _SIMPLE:
            m = pattern.search(msg)
            if m is None:
                continue
            found = self._values(kind, m)
            if found is None:
                continue
            out.append(Event(kind, (line.ref,), found))
            break
        return out

    @staticmethod
    def _values(kind: str, m: re.Match[str]) -> dict[str, Any] | None:
        g = m.groups()
        if kind == KIND_INIT_DIST_END:
            return {"mem_usage_bytes": _gib(g[1])}
        if kind == KIND_LOAD_BEGIN:
            return {"avail_bytes": _gib(g[0])}
        if kind == KIND_LOAD_END:
            values = {"model_type": m.group("type"), "avail_bytes": _gib(g[2]), "era": "V-c/d" if g[0] else "V-a/b"}
            if g[3] is not None:
                values["mem_usage_bytes"] = _gib(g[3])
            return values
        if kind == KIND_KV_ALLOCATED:
            values = {"dtype": m.group("dtype")}
            if m.group("tokens"):
                values["tokens"] = int(m.group("tokens"))
            if m.group("kv") is not None:
                values["kv_bytes"] = _gib(m.group("kv"))
                values["layout"] = "mla"
            else:
                values["kv_bytes"] = (_gib(m.group("k")) or 0) + (_gib(m.group("v")) or 0)
                values["layout"] = "mha"
            return values
        if kind == KIND_POOL_END:
            return {"avail_bytes": _gib(g[0])}
        if kind == KIND_GRAPH_BEGIN:
            return {"role": m.group("role"), "phase": m.group("phase"), "avail_bytes": _gib(g[2])}
        if kind == KIND_GRAPH_END:
            return {"role": m.group("role"), "phase": m.group("phase"), "mem_usage_bytes": _gib(g[2]), "avail_bytes": _gib(g[3])}
        if kind == KIND_GRAPH_BAR:
            return {"bs": int(g[0]), "avail_bytes": _gib(g[1])}
        if kind == KIND_SUMMARY:
            values = {
                "max_total_num_tokens": int(m.group("tokens")),
                "max_prefill_tokens": int(m.group("prefill")),
                "max_running_requests": int(m.group("running")),
                "context_len": int(m.group("ctx")),
            }
            if m.group("chunk") is not None:
                values["chunked_prefill_size"] = int(m.group("chunk"))
            if m.group("avail") is not None:
                values["available_gpu_mem_bytes"] = _gib(m.group("avail"))
            return values
        if kind == KIND_NOT_ENOUGH:
            return {"mem_fraction_static": _num(g[0])} if g[0] else {}
        if kind == KIND_NO_KV:
            values = {"mem_fraction_static": _num(g[0])}
            if g[1] is not None:
                values["suggested_mem_fraction_static"] = _num(g[1])
                values["minimum_viable"] = _num(g[2])
            return values
        if kind == KIND_PROFILED_NEGATIVE:
            return {"requested_tokens": int(g[0]), "profiled_tokens": int(g[1])}
        if kind == KIND_LEGACY_PROFILE:
            return {
                "post_bytes": _gib(g[0]),
                "pre_bytes": _gib(g[1]),
                "mem_fraction_static": _num(g[2]),
                "rest_bytes": _gib(g[3]),
            }
        if kind == KIND_CAPTURE_FAILED:
            reason = m.group("reason") or ""
            low = reason.lower()
            return {
                "reason": reason[:500],
                "is_oom": any(s in low for s in ("out of memory", "cublas_status_alloc_failed", "cublas_status_not_initialized", "outofmemory")),
                "custom_all_reduce": any(s in low for s in ("custom_all_reduce", "custom all-reduce", "cudaipc")),
            }
        if kind == KIND_RETRACT:
            return {"retracted_reqs": int(g[0])}
        if kind == KIND_KV_ALLOC_FAIL:
            return {"which": (m.group("which") or "any").lower()}
        if kind == KIND_KV_ALLOC_DETAIL:
            if m.group("want"):
                return {"requested_tokens": int(m.group("want"))}
            return {"available_tokens": int(m.group("avail"))}
        if kind == KIND_REQ_SLOTS_FAIL:
            if m.groupdict().get("avail"):
                return {"available_slots": int(m.group("avail")), "requested_slots": int(m.group("reqs"))}
            return {}
        if kind == KIND_SCHED_EXC:
            return {"who": m.group("who")}
        if kind == KIND_STRAGGLER:
            return {"tp_rank": int(g[0])}
        if kind == KIND_OMNI_STAGE:
            fields = dict(_OMNI_KV_RE.findall(m.group("rest")))
            values = {"step": m.group("step"), "stage": m.group("stage")}
            for key in ("mem_fraction_static", "encoder_mem_reserve", "pre_load_avail_mem", "post_load_avail_mem"):
                raw = fields.get(key)
                try:
                    values[key] = float(raw) if raw not in (None, "None") else None
                except ValueError:
                    values[key] = None
            return values
        if kind == KIND_OMNI_FLOOR:
            return {"auto_mem_fraction_static": _num(g[0]), "encoder_mem_reserve": _num(g[1]), "result": _num(g[2])}
        if kind == KIND_OMNI_ENCODER_FAIL:
            return {"request_id": m.group("rid") or m.group("rid2")}
        if kind == KIND_CAPTURE_ADVICE:
            return {"decode_flag": bool(m.group("decode"))}
        if kind == KIND_MM_RESERVE:
            return {"reserve_bytes": _gib(g[0])}
        return {}

    def finish(self) -> list[Event]:
        return self._flush_args()

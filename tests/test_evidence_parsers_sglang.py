"""SGLang lines of every era (log_formats.md §1) to events with the right numbers."""

from __future__ import annotations

import pytest

from oomdoctor.base.evidence import Line, LineRef
from oomdoctor.base.units import GIB
from oomdoctor.evidence.parsers import captures
from oomdoctor.evidence.parsers import sglang as sg
from oomdoctor.pipeline.events import ANCHORS


def parse(texts: list[str], ts: str | None = "t") -> list:
    p = sg.SGLangParser()
    out = []
    for i, t in enumerate(texts, 1):
        out += p.feed(Line(LineRef("x", i), t, ts=ts if i == 1 else None))
    return out + p.finish()


def one(text: str, anchored: bool = True):
    # A line reaches the parser when the scanner finds one of the anchors in it (or, ``anchored=False``,
    # as one of the lines read after an anchored one: an advice block's items).
    assert not anchored or any(anchor in text.encode() for anchor in ANCHORS), f"no anchor in {text!r}"
    events = parse([text])
    assert len(events) == 1, events
    return events[0]


def g(x: float) -> int:
    return round(x * GIB)


@pytest.mark.parametrize(
    "text, avail, usage, era",
    [
        ("Load weight end. type=LlamaForCausalLM, dtype=torch.float16, avail mem=8.21 GB", 8.21, None, "V-a/b"),
        ("Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=17.11 GB, mem usage=61.40 GB.", 17.11, 61.40, "V-a/b"),
        ("Load weight end. elapsed=34.90 s, type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=47.80 GB, mem usage=30.71 GB.", 47.80, 30.71, "V-c/d"),
        ("Load weight end. elapsed=392.11 s, type=DeepseekV4ForCausalLM, quant=fp8, fmt=e4m3, avail mem=109.20 GB, mem usage=73.43 GB.", 109.20, 73.43, "V-c/d"),
        ("Load weight end. elapsed=1.00 s, type=Qwen4ExpForCausalLMMTP, avail mem=50.00 GB, mem usage=-1.86 GB.", 50.0, -1.86, "V-c/d"),
    ],
)
def test_load_weight_end_eras(text: str, avail: float, usage: float | None, era: str) -> None:
    e = one(text)
    assert e.kind == sg.KIND_LOAD_END
    assert e.get("avail_bytes") == g(avail)
    assert e.get("mem_usage_bytes") == (g(usage) if usage is not None else None)
    assert e.get("era") == era


@pytest.mark.parametrize(
    "text, tokens, kv, layout",
    [
        ("KV Cache is allocated. K size: 27.13 GB, V size: 27.13 GB.", None, 54.26, "mha"),
        ("KV Cache is allocated. #tokens: 287375, K size: 17.54 GB, V size: 17.54 GB", 287375, 35.08, "mha"),
        ("KV Cache is allocated. #tokens: 512000, KV size: 33.44 GB", 512000, 33.44, "mla"),
        ("KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1230000, K size: 18.77 GB, V size: 18.77 GB", 1230000, 37.54, "mha"),
    ],
)
def test_kv_allocated_forms(text: str, tokens: int | None, kv: float, layout: str) -> None:
    e = one(text)
    assert e.kind == sg.KIND_KV_ALLOCATED
    assert e.get("tokens") == tokens
    assert e.get("kv_bytes") == pytest.approx(g(kv), abs=2)
    assert e.get("layout") == layout


def test_graph_lines_of_three_eras() -> None:
    assert one("Capture cuda graph begin. This can take up to several minutes.").kind == sg.KIND_GRAPH_BEGIN
    e = one("Capture cuda graph end. Time elapsed: 21.34 s. mem usage=1.10 GB. avail mem=10.85 GB.")
    assert (e.kind, e.get("mem_usage_bytes"), e.get("avail_bytes")) == (sg.KIND_GRAPH_END, g(1.10), g(10.85))
    e = one("Capture target decode CUDA graph end. elapsed=2.58 s, mem usage=0.45 GB, avail mem=72.65 GB.")
    assert (e.kind, e.get("role"), e.get("phase"), e.get("avail_bytes")) == (sg.KIND_GRAPH_END, "target", "decode", g(72.65))
    e = one("Capture draft cuda graph begin. This can take up to several minutes. avail mem=20.00 GB")
    assert e.kind == sg.KIND_GRAPH_BEGIN and e.get("avail_bytes") == g(20)
    e = one("Capturing batches (bs=24 avail_mem=4.00 GB):  30%|###       | 3/10")
    assert (e.kind, e.get("bs")) == (sg.KIND_GRAPH_BAR, 24)


def test_summary_forms() -> None:
    old = one("max_total_num_tokens=444500, max_prefill_tokens=16384, max_running_requests=2049, context_len=131072")
    assert old.get("max_total_num_tokens") == 444500 and "available_gpu_mem_bytes" not in old.values
    new = one("max_total_num_tokens=287375, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=3592, context_len=40960, available_gpu_mem=10.85 GB")
    assert new.get("chunked_prefill_size") == 8192 and new.get("available_gpu_mem_bytes") == g(10.85)


@pytest.mark.parametrize(
    "text, kind, key, value",
    [
        ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", sg.KIND_NOT_ENOUGH, "mem_fraction_static", None),
        ("Not enough memory. Please try to increase --mem-fraction-static. Current value: self.server_args.mem_fraction_static=0.805", sg.KIND_NOT_ENOUGH, "mem_fraction_static", 0.805),
        ("Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.7", sg.KIND_NOT_ENOUGH, "mem_fraction_static", 0.7),
        ("ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.94. Raise --mem-fraction-static above 0.942 (minimum viable = 1 - available/pre = 0.9411).", sg.KIND_NO_KV, "suggested_mem_fraction_static", 0.942),
        ("max_total_tokens=100000 is larger than the profiled value -2048. Use the profiled value instead.", sg.KIND_PROFILED_NEGATIVE, "profiled_tokens", -2048),
        ("Memory profiling: available_gpu_memory=18.00 GB, total_gpu_memory=78.00 GB, mem_fraction_static=0.70, rest_memory=-5.40 GB", sg.KIND_LEGACY_PROFILE, "rest_bytes", g(-5.40)),
        ("decode out of memory happened, #retracted_reqs: 3, #new_token_ratio: 0.1 -> 0.2", sg.KIND_RETRACT, "retracted_reqs", 3),
        ("Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.1 -> 0.2", sg.KIND_RETRACT, "retracted_reqs", 1),
        ("KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_tokens_gained: 646, #new_token_ratio: 0.0980 -> 0.3487", sg.KIND_RETRACT, "retracted_reqs", 2),
        ("alloc_req_slots runs out of memory. Please set a smaller number for `--max-running-requests`. req_to_token_pool.available_size()=4, num_reqs=1, ", sg.KIND_REQ_SLOTS_FAIL, "available_slots", 4),
        ("Capture cuda graph failed: CUDA out of memory. Tried to allocate 1.00 GiB.", sg.KIND_CAPTURE_FAILED, "is_oom", True),
        ("Capture cuda graph failed: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", sg.KIND_CAPTURE_FAILED, "is_oom", True),
        ("Capture cuda graph failed: invalid argument (custom_all_reduce)", sg.KIND_CAPTURE_FAILED, "is_oom", False),
        ("auto mem_fraction_static 0.124 minus encoder_mem_reserve 0.050 = 0.074 is below the safe floor 0.1; lower encoder_mem_reserve or pin --mem-fraction-static explicitly.", sg.KIND_OMNI_FLOOR, "result", 0.074),
    ],
)
def test_messages(text: str, kind: str, key: str, value) -> None:
    e = one(text)
    assert e.kind == kind
    assert e.get(key) == value


def test_unbalanced_with_numbers() -> None:
    e = one("The memory capacity is unbalanced. Some GPUs may be occupied by other processes. min_per_gpu_memory=61.12, local_gpu_memory=75.03, local_gpu_memory * 0.9=67.527")
    assert e.kind == sg.KIND_UNBALANCED and e.get("min_free_bytes") == g(61.12) and e.get("local_free_bytes") == g(75.03)


def test_server_args_both_graph_spellings() -> None:
    old = one("server_args=ServerArgs(model_path='m', cuda_graph_max_bs=160, mem_fraction_static=0.88)")
    assert old.get("cuda_graph_max_bs") == 160 and not old.get("_has_cuda_graph_max_bs_decode")
    new = one("server_args=ServerArgs(model_path='m', cuda_graph_max_bs_decode=512, mem_fraction_static=0.88)")
    assert new.get("cuda_graph_max_bs_decode") == 512 and new.get("_has_cuda_graph_max_bs_decode")


def test_hard_wrapped_server_args_are_joined() -> None:
    events = parse(["server_args=ServerArgs(model_path='m', mem_fraction_static=0.8, enab", "le_priority_scheduling=False, chunked_prefill_s", "ize=4096, tp_size=2)"])
    assert len(events) == 1
    e = events[0]
    assert [r.line for r in e.refs] == [1, 2, 3]
    assert (e.get("chunked_prefill_size"), e.get("tp_size"), e.get("mem_fraction_static")) == (4096, 2, 0.8)


def test_omni_stage_lines() -> None:
    e = one("sglang_ar_startup stage=thinker gpu_id=0 tp_rank=0/1 context_length=8192 total_gpu_memory_fraction=None effective_total_gpu_memory_fraction=None mem_fraction_static=0.824 encoder_mem_reserve=0.05 pre_load_avail_mem=78.4 pid=41233 pre_load_process_mem=0.52GiB")
    assert (e.get("step"), e.get("stage"), e.get("mem_fraction_static"), e.get("encoder_mem_reserve"), e.get("pre_load_avail_mem")) == ("startup", "thinker", 0.824, 0.05, 78.4)


def test_every_pattern_names_every_group_with_a_unit() -> None:
    patterns = [p for _, p, _ in sg._SIMPLE] + [sg._UNBALANCED_NUMS_RE, sg._ARG_RE, sg._OMNI_KV_RE]
    for pattern in patterns:
        compiled = pattern.compiled
        assert compiled.groups == len(compiled.groupindex), pattern.source
        captures.check_source(compiled.pattern)


@pytest.mark.parametrize(
    "text, kind, values",
    [
        ("  2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)", sg.KIND_CAPTURE_ADVICE, {"decode_flag": True}),
        ("Possible solutions:", sg.KIND_CAPTURE_ADVICE, {"decode_flag": False}),
        ("SimpleScheduler: compute_fn failed for req-7", sg.KIND_OMNI_ENCODER_FAIL, {"request_id": "req-7"}),
        ("Worker: request req-9 failed: CUDA out of memory", sg.KIND_OMNI_ENCODER_FAIL, {"request_id": "req-9"}),
        ("OmniEngine overlap step failed", sg.KIND_OMNI_ENCODER_FAIL, {"request_id": None}),
        ("Capture cuda graph begin. This can take up to several minutes.", sg.KIND_GRAPH_BEGIN, {"role": None, "phase": None, "avail_bytes": None}),
        ("Prefill out of memory. Try to lower your batch size.", sg.KIND_KV_ALLOC_FAIL, {"which": "prefill"}),
        ("Out of memory. This should never happen.", sg.KIND_KV_ALLOC_FAIL, {"which": "any"}),
        ("alloc_req_slots runs out of memory. Please set a smaller number for `--max-running-requests`.", sg.KIND_REQ_SLOTS_FAIL, {}),
    ],
)
def test_whole_values_of_shaped_kinds(text: str, kind: str, values: dict) -> None:
    e = one(text, anchored=kind != sg.KIND_CAPTURE_ADVICE)  # an advice item is read as a line after "Possible solutions:"
    assert (e.kind, e.values) == (kind, values)


# --- forms found by reading every sampled release's logger and raise calls (0.1.3 to 0.5.23) -------------


@pytest.mark.parametrize(
    "text, role, usage, avail",
    [
        # 0.4.4-0.4.6 printed avail mem first (a 2025-03-08 TP=4 log).
        ("Capture cuda graph end. Time elapsed: 7.23 s. avail mem=0.53 GB. mem usage=0.93 GB.", None, 0.93, 0.53),
        ("Capture draft cuda graph end. Time elapsed: 3.10 s. avail mem=12.40 GB. mem usage=1.20 GB.", None, 1.20, 12.40),
        ("Capture draft cuda graph end. Time elapsed: 3.10 s. avail mem=12.40 GB", None, None, 12.40),  # 0.4.4 draft: no usage
        ("Capture cuda graph end. Time elapsed: 7.23 s. mem usage=0.93 GB. avail mem=0.53 GB.", None, 0.93, 0.53),
        # 2026 platform words.
        ("Capture target decode NPU graph end. elapsed=8.04 s, mem usage=0.80 GB, avail mem=29.20 GB.", "target", 0.80, 29.20),
        ("Capture target decode XPU graph end. elapsed=8.04 s, mem usage=0.80 GB, avail mem=29.20 GB.", "target", 0.80, 29.20),
    ],
)
def test_graph_end_figures_in_either_order(text: str, role: str | None, usage: float | None, avail: float) -> None:
    e = one(text)
    assert (e.kind, e.get("role"), e.get("mem_usage_bytes"), e.get("avail_bytes")) == (sg.KIND_GRAPH_END, role, None if usage is None else g(usage), g(avail))


def test_graph_begin_forms_of_2026() -> None:
    e = one("Capture draft extend cuda graph begin (step 2). This can take up to several minutes. avail mem=40.10 GB")
    assert (e.kind, e.get("role"), e.get("phase"), e.get("avail_bytes")) == (sg.KIND_GRAPH_BEGIN, "draft", "extend", g(40.10))
    cpu = one("Capture cpu graph begin. This can take up to several minutes. avail mem=100.00 GB")
    assert (cpu.kind, cpu.get("avail_bytes")) == (sg.KIND_GRAPH_BEGIN, g(100.0))


@pytest.mark.parametrize(
    "text, bs, tokens, avail",
    [
        ("Capturing batches (bs=160 avail_mem=5.64 GB): 100%|##########| 23/23", 160, None, 5.64),
        ("Capturing batches (avail_mem=5.64 GB): 100%|##########| 23/23 [00:06<00:00,  3.6it/s]", None, None, 5.64),  # 0.4.5-0.4.8
        # A piecewise or prefill bar counts tokens, not a decode batch size (0.5.4-0.5.20, 0.5.21+).
        ("Capturing num tokens (num_tokens=8192 avail_mem=31.02 GB):  40%|####      | 20/50", None, 8192, 31.02),
        ("Capturing prefill shape (num_tokens=4096 avail_mem=30.50 GB):   5%|5         | 1/20", None, 4096, 30.50),
    ],
)
def test_capture_progress_bars(text: str, bs: int | None, tokens: int | None, avail: float) -> None:
    e = one(text)
    assert (e.kind, e.get("bs"), e.get("num_tokens"), e.get("avail_bytes")) == (sg.KIND_GRAPH_BAR, bs, tokens, g(avail))


def test_prefill_graph_capture_failure_is_a_capture_failure() -> None:
    e = one("Exception: Capture prefill CUDA graph failed: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.00 GiB is free.")
    assert (e.kind, e.get("is_oom")) == (sg.KIND_CAPTURE_FAILED, True)


def test_summary_lines_of_2024() -> None:
    router = one("Rank 0: max_total_num_token=277804, max_prefill_num_token=46300, context_len=4096, ")  # 0.1.3-0.1.16
    assert (router.kind, router.get("max_total_num_tokens"), router.get("max_prefill_tokens"), router.get("context_len")) == (sg.KIND_SUMMARY, 277804, 46300, 4096)
    assert "max_running_requests" not in router.values
    tp_worker = one("[gpu_id=0] max_total_num_tokens=277804, max_prefill_tokens=16384, context_len=4096")  # 0.1.18-0.1.22
    assert (tp_worker.kind, tp_worker.get("max_total_num_tokens"), tp_worker.get("max_prefill_tokens")) == (sg.KIND_SUMMARY, 277804, 16384)


@pytest.mark.parametrize(
    "text, kind, values",
    [
        ("RuntimeError: Not enought memory. Please try to increase --mem-fraction-static.", sg.KIND_NOT_ENOUGH, {}),  # 0.1.6-0.1.16
        ("Prefill out of memory. This should nerver happen.", sg.KIND_KV_ALLOC_FAIL, {"which": "prefill"}),  # 0.1.6-0.1.14
        ("Avaliable tokens: 4000", sg.KIND_KV_ALLOC_DETAIL, {"available_tokens": 4000}),  # 0.3.5-0.4.6
        ("RuntimeError: Out of memory. Please set a smaller number for `--max-running-requests`.", sg.KIND_REQ_SLOTS_FAIL, {}),  # 0.1.22-0.4.3
        (
            "RuntimeError: SWA pool cap (65536 tokens, 12.50 GiB) leaves no room for the full KV pool within the available 10.25 GiB. Reduce "
            "--max-running-requests, lower SGLANG_SWA_EVICTION_INTERVAL, or increase --mem-fraction-static.",
            sg.KIND_NOT_ENOUGH,
            {"swa_fixed_bytes": g(12.50), "available_bytes": g(10.25), "swa_too_small": False, "source": "swa_pool"},
        ),
        (
            "RuntimeError: SWA pool (2048 tokens) cannot hold even one request: the prefill admission floor is sliding_window_size (4096) + page_size (64). "
            "Increase --swa-full-tokens-ratio or the total KV budget.",
            sg.KIND_NOT_ENOUGH,
            {"swa_too_small": True, "source": "swa_pool"},
        ),
    ],
)
def test_old_spellings_and_2026_pool_errors(text: str, kind: str, values: dict) -> None:
    e = one(text)
    assert e.kind == kind and e.values == values


def test_unbalanced_numbers_renamed_in_2026() -> None:
    e = one(
        "The memory capacity is unbalanced. Some GPUs may be occupied by other processes. pre_model_load_memory=61.12, local_gpu_memory=75.03, "
        "local_gpu_memory * 0.9=67.527"
    )
    assert (e.kind, e.get("min_free_bytes"), e.get("local_free_bytes")) == (sg.KIND_UNBALANCED, g(61.12), g(75.03))


def test_a_key_inside_another_value_is_not_the_servers_setting() -> None:
    e = one(
        "server_args={'model_path': 'x', 'json_model_override_args': \"{'mem_fraction_static': 0.5}\", 'cuda_graph_config': {'tp_size': 2}, "
        "'mem_fraction_static': 0.83, 'tp_size': 8}"
    )
    assert (e.get("mem_fraction_static"), e.get("tp_size")) == (0.83, 8)
    r = one("server_args=ServerArgs(model_path='x', json_model_override_args='{\"a\": \"mem_fraction_static=0.5\"}', mem_fraction_static=0.83)")
    assert r.get("mem_fraction_static") == 0.83


def test_server_args_printed_as_a_dict_since_0_5_19() -> None:
    e = one(
        "server_args={'model_path': '/models/x', 'tp_size': 8, 'mem_fraction_static': 0.83, 'chunked_prefill_size': 8192, 'kv_cache_dtype': 'fp8_e4m3', "
        "'context_length': 262144, 'disable_cuda_graph': False, 'cuda_graph_config': {'max_bs': 256}}"
    )
    assert e.kind == sg.KIND_SERVER_ARGS
    assert (e.get("model_path"), e.get("tp_size"), e.get("mem_fraction_static"), e.get("chunked_prefill_size")) == ("/models/x", 8, 0.83, 8192)
    assert (e.get("kv_cache_dtype"), e.get("context_length"), e.get("disable_cuda_graph"), e.get("_has_cuda_graph_max_bs_decode")) == ("fp8_e4m3", 262144, False, True)
    # Hard-wrapped: continued until the braces balance.
    wrapped = parse(["server_args={'model_path': '/models/x', 'tp_size': 4,", " 'mem_fraction_static': 0.7}"])
    assert len(wrapped) == 1 and (wrapped[0].get("tp_size"), wrapped[0].get("mem_fraction_static")) == (4, 0.7)


def test_host_kv_pool_lines_are_a_milestone_with_the_host_bytes() -> None:
    # memory_pool_host.py: f"Allocating {requested_bytes / 1e9:.2f} GB host memory for hierarchical KV cache.", and the
    # 0.5.9+ pool summary; each rank prints its own before allocating.
    (e,) = sg.SGLangParser().feed(Line(LineRef("x", 1, "TP1"), "Allocating 40.00 GB host memory for hierarchical KV cache."))
    assert (e.kind, e.get("host_bytes")) == (sg.KIND_HOST_POOL, 40 * 10**9)
    (e,) = sg.SGLangParser().feed(Line(LineRef("x", 1), "Allocating MHA hierarchical KV host pool: 2097152 tokens, 32.21 GB host memory."))
    assert (e.kind, e.get("host_bytes")) == (sg.KIND_HOST_POOL, 32_210_000_000)
    # Near miss: the GPU pool's own line is another milestone.
    assert [x.kind for x in sg.SGLangParser().feed(Line(LineRef("x", 1), "KV Cache is allocated. #tokens: 1254080, K size: 19.14 GB, V size: 19.14 GB"))] == [sg.KIND_KV_ALLOCATED]

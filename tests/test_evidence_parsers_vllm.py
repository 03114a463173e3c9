"""vLLM lines (log_formats.md §3) to events with the right numbers."""

from __future__ import annotations

import pytest

from oomdoctor.base.evidence import Line, LineRef
from oomdoctor.base.units import GIB
from oomdoctor.evidence.parsers import captures
from oomdoctor.evidence.parsers import vllm as vl
from oomdoctor.pipeline.events import ANCHORS


def one(text: str):
    # A line reaches the parser only when the scanner finds one of the anchors in it.
    assert any(anchor in text.encode() for anchor in ANCHORS), f"no anchor in {text!r}"
    events = vl.VLLMParser().feed(Line(LineRef("x", 1), text))
    assert len(events) == 1, text
    return events[0]


def g(x: float) -> int:
    return round(x * GIB)


def test_non_default_args_and_namespace() -> None:
    e = one("non-default args: {'model': 'Qwen/Qwen3-8B', 'gpu_memory_utilization': 0.85, 'max_model_len': 32768, 'max_num_seqs': 128, 'api_key': ['sk-x']}")
    assert (e.get("gpu_memory_utilization"), e.get("max_model_len"), e.get("max_num_seqs")) == (0.85, 32768, 128)
    assert "api_key" not in e.values
    ns = one("args: Namespace(host=None, model='m', gpu_memory_utilization=0.95, max_num_batched_tokens=32768, enforce_eager=True)")
    assert (ns.get("gpu_memory_utilization"), ns.get("max_num_batched_tokens"), ns.get("enforce_eager")) == (0.95, 32768, True)


def test_engine_config_v1_and_v0() -> None:
    e = one("Initializing a V1 LLM engine (v0.10.1) with config: model='Qwen/Qwen3-8B', dtype=torch.bfloat16, max_seq_len=40960, tensor_parallel_size=2, enforce_eager=False, kv_cache_dtype=fp8, compilation_config={\"level\":3,\"cudagraph_capture_sizes\":[256,128,8,4,2,1],\"max_capture_size\":256}")
    assert (e.get("version"), e.get("v1"), e.get("max_seq_len"), e.get("tensor_parallel_size"), e.get("enforce_eager"), e.get("kv_cache_dtype"), e.get("max_capture_size")) == ("0.10.1", True, 40960, 2, False, "fp8", 256)
    v0 = one("Initializing an LLM engine (v0.6.3.post1) with config: model='m', max_seq_len=4096, tensor_parallel_size=1")
    assert v0.get("v1") is False and v0.get("max_seq_len") == 4096


@pytest.mark.parametrize(
    "text, key, value",
    [
        ("Model loading took 14.9888 GiB and 13.204526 seconds", "weights_bytes", g(14.9888)),
        ("Model loading took 14.9888 GiB memory and 13.204526 seconds", "weights_bytes", g(14.9888)),
        ("Loading model weights took 14.99 GB", "weights_bytes", g(14.99)),
        ("Model loading took 0.2389 GB and 0.977005 seconds", "weights_bytes", g(0.2389)),  # V0 0.6-0.8, early V1
        ("Available KV cache memory: -3.68 GiB", "kv_bytes", g(-3.68)),
        ("GPU KV cache size: 448,016 tokens", "kv_tokens", 448016),
        ("Maximum concurrency for 32,768 tokens per request: 13.67x", "concurrency", 13.67),
        ("# GPU blocks: 1423, # CPU blocks: 2048", "gpu_blocks", 1423),
        ("Graph capturing finished in 22 secs, took 0.93 GiB", "graph_bytes", g(0.93)),
        ("Graph capturing finished in 5 secs, took -0.12 GiB", "graph_bytes", g(-0.12)),
        ("Estimated CUDA graph memory: 1.25 GiB total", "graph_bytes", g(1.25)),
        ("Chunked prefill is enabled with max_num_batched_tokens=8192.", "max_num_batched_tokens", 8192),
    ],
)
def test_memory_lines(text: str, key: str, value) -> None:
    assert one(text).get(key) == value


def test_merged_kv_size_and_concurrency_line() -> None:
    e = one("GPU KV cache size: 1,230,000 tokens, Maximum concurrency for 131,072 tokens per request: 9.38x")
    assert (e.get("kv_tokens"), e.get("max_model_len"), e.get("concurrency")) == (1230000, 131072, 9.38)


def test_profiling_multi_line_v0_and_one_line_v1() -> None:
    total = one("the current vLLM instance can use total_gpu_memory (79.15GiB) x gpu_memory_utilization (0.90) = 71.24GiB")
    assert (total.kind, total.get("total_bytes"), total.get("gpu_memory_utilization")) == (vl.KIND_PROFILE_TOTAL, g(79.15), 0.9)
    parts = one("model weights take 14.99GiB; non_torch_memory takes 0.35GiB; PyTorch activation peak memory takes 1.24GiB; the rest of the memory reserved for KV Cache is 54.66GiB.")
    assert (parts.get("weights_bytes"), parts.get("activation_peak_bytes"), parts.get("kv_bytes")) == (g(14.99), g(1.24), g(54.66))
    v1 = one("Memory profiling takes 11.85 seconds. Total non KV cache memory: 16.58GiB; torch peak memory increase: 1.24GiB; non-torch forward increase memory: -15.24GiB; weights memory: 14.99GiB.")
    assert (v1.get("non_kv_bytes"), v1.get("non_torch_bytes")) == (g(16.58), g(-15.24))
    v029 = one("Memory profiling takes 9.01 seconds. Total non KV cache memory: 61.49GiB; torch peak memory increase: 2.04GiB; non-torch forward increase memory: 0.10GiB; total consumed (from mem_get_info): 61.49GiB; weights memory: 55.87GiB.")
    assert v029.get("weights_bytes") == g(55.87)
    res = one("Memory profiling results: duration=3.01 seconds, total_gpu_memory=44.35GiB, initial_memory_usage=24.76GiB, peak_torch_memory=25.59GiB, memory_usage_post_profile=24.92GiB, non_torch_memory=0.60GiB, kv_cache_size=-3.87GiB, gpu_memory_utilization=0.50")
    assert (res.get("non_kv_bytes"), res.get("kv_bytes")) == (g(25.59) + g(0.60), g(-3.87))


def test_startup_errors() -> None:
    v7 = one("ValueError: Free memory on device (58.61/79.19 GiB) on startup is less than desired GPU memory utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.")
    assert (v7.get("free_at_start_bytes"), v7.get("total_bytes"), v7.get("gpu_memory_utilization"), v7.get("requested_bytes")) == (g(58.61), g(79.19), 0.9, g(71.27))
    v7b = one("Free memory on device cuda:0 (84.11/287.98 GiB) on startup is less than desired GPU memory utilization (0.95, 273.59 GiB).")
    assert v7b.get("device") == "cuda:0"
    assert one("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.").kind == vl.KIND_NO_CACHE_BLOCKS
    v9 = one("To serve at least one request with the model's max seq len (131072), (16.00 GiB KV cache is needed, which is larger than the available KV cache memory (4.21 GiB). Based on the available memory, the estimated maximum model length is 34480. Try increasing")
    assert (v9.get("max_model_len"), v9.get("needed_bytes"), v9.get("available_bytes"), v9.get("estimated_max_len")) == (131072, g(16), g(4.21), 34480)
    typo = one("To serve at least one request with the models's max seq len (32768), (8.00 GiB KV cache is needed, which is larger than the available KV cache memory (7.97 GiB). Try increasing")
    assert typo.get("estimated_max_len") is None and typo.get("needed_bytes") == g(8)
    old = one("The model's max seq len (32768) is larger than the maximum number of tokens that can be stored in KV cache (22768). Try increasing")
    assert (old.get("max_model_len"), old.get("kv_capacity_tokens")) == (32768, 22768)


def test_preemption_warning() -> None:
    e = one("Sequence group 0 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption=51")
    assert (e.kind, e.get("mode"), e.get("cumulative")) == (vl.KIND_PREEMPT, "RECOMPUTE", 51)


def test_preemption_warning_cut_before_its_running_count() -> None:
    # vllm#546's paste: a string request id, the line cut by the paste before total_num_cumulative_preemption.
    e = one("Sequence group chat-7e630abf1a8b4c8a88775b1e98a54cf2 is preempted by PreemptionMode.SWAP mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization or")
    assert (e.kind, e.get("mode"), e.get("cumulative")) == (vl.KIND_PREEMPT, "SWAP", None)
    # Near miss: the engine's words stop before the reason, so nothing says the KV pool ran short.
    assert vl.VLLMParser().feed(Line(LineRef("x", 1), "Sequence group 3 is preempted by PreemptionMode.SWAP mode")) == []


def test_every_pattern_names_every_group_with_a_unit() -> None:
    patterns = [p for _, p, _ in vl._PATTERNS] + [vl._DICT_ITEM_RE, vl._CONFIG_ITEM_RE, vl._CAPTURE_SIZES_RE, vl._MAX_CAPTURE_RE]
    for pattern in patterns:
        compiled = pattern.compiled
        assert compiled.groups == len(compiled.groupindex), pattern.source
        captures.check_source(compiled.pattern)


@pytest.mark.parametrize(
    "text, values",
    [
        ("Model loading took 14.9888 GiB and 13.2 seconds", {"weights_bytes": g(14.9888), "era": "V1"}),
        ("Loading model weights took 14.99 GB", {"weights_bytes": g(14.99), "era": "V0"}),
        ("Model loading took 14.9888 GB and 13.204526 seconds", {"weights_bytes": g(14.9888)}),  # printed by both eras
        (
            "AssertionError: Error in memory profiling. Initial free memory 70.5 GiB, current free memory 71.25 GiB. This happens when",
            {"initial_free_bytes": g(70.5), "current_free_bytes": g(71.25)},
        ),
        (
            "AssertionError: Error in memory profiling. Initial free memory 75698733056, current free memory 76501024768.5",
            {"initial_free_bytes": 75698733056, "current_free_bytes": 76501024768},
        ),
        ("the estimated maximum model length is 34480.", {"estimated_max_len": 34480}),
        ("Initial free memory 78.50 GiB; ", {"free_at_start_bytes": g(78.5)}),
        (
            "Initial free memory: 78.50 GiB, Requested memory: 0.9 (util), 71.27 GiB",
            {"free_at_start_bytes": g(78.5), "gpu_memory_utilization": 0.9, "requested_bytes": g(71.27)},
        ),
    ],
)
def test_whole_values_of_shaped_kinds(text: str, values: dict) -> None:
    assert one(text).values == values


# --- forms found by reading 51 released sdists (0.4.1-0.33.0), each fed through the anchor check ---------


@pytest.mark.parametrize(
    "text, kind, values",
    [
        ("INFO 03-10 08:07:20 [gpu_model_runner.py:1067] Model loading took 0.2389 GB and 0.977005 seconds", vl.KIND_WEIGHTS, {"weights_bytes": g(0.2389)}),
        ("Loading model weights took 14.9888 GiB", vl.KIND_WEIGHTS, {"weights_bytes": g(14.9888), "era": "V0"}),  # XPU V0 0.8.3-0.9.2
        (
            "Memory profiling results: total_gpu_memory=7.92GiB initial_memory_usage=0.37GiB peak_torch_memory=0.71GiB memory_usage_post_profile=0.39Gib "
            "non_torch_memory=0.15GiB kv_cache_size=6.27GiB gpu_memory_utilization=0.90",  # 0.6.4 as released: no commas
            vl.KIND_PROFILE_V0_RESULTS,
            {
                "total_bytes": g(7.92),
                "initial_used_bytes": g(0.37),
                "peak_torch_bytes": g(0.71),
                "non_kv_bytes": g(0.71) + g(0.15),
                "non_torch_bytes": g(0.15),
                "kv_bytes": g(6.27),
                "gpu_memory_utilization": 0.90,
            },
        ),
        (
            "Memory profiling takes 9.01 seconds. Total non KV cache memory: 61.49GiB; torch peak memory increase: 2.04GiB; total consumed (from mem_get_info): "
            "61.49GiB; weights memory: 55.87GiB.",  # 0.27+
            vl.KIND_PROFILE_V1,
            {"non_kv_bytes": g(61.49), "activation_peak_bytes": g(2.04), "total_consumed_bytes": g(61.49), "weights_bytes": g(55.87)},
        ),
        (
            "ValueError: To serve at least one request with the models's max seq len (116160), (4.43 GB KV cache is needed, which is larger than the available "
            "KV cache memory (3.48 GB). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",  # 0.7.0-0.8.2
            vl.KIND_ONE_REQUEST,
            {"max_model_len": 116160, "needed_bytes": g(4.43), "available_bytes": g(3.48), "estimated_max_len": None},
        ),
        (
            "AssertionError: Error in memory profiling. This happens when the GPU memory was not properly cleaned up before initializing the vLLM instance.",
            vl.KIND_PROFILE_ASSERT,
            {},
        ),
        ("INFO 06-05 13:03:17 [executor_base.py:112] # rocm blocks: 37011, # CPU blocks: 7281", vl.KIND_GPU_BLOCKS, {"gpu_blocks": 37011}),
        ("INFO 02-19 10:54:28 model_runner.py:1523] Graph capturing finished in 14 secs.", vl.KIND_GRAPH_DONE, {"graph_bytes": None}),
        (
            "INFO 06-07 08:56:50 [gpu_worker.py:619] CUDA graph pool memory: 0.71 GiB (actual), 0.79 GiB (estimated), difference: 0.07 GiB (10.1%).",
            vl.KIND_GRAPH_DONE,
            {"graph_bytes": g(0.71)},
        ),
        (
            "INFO 09-25 13:39:07 [gpu_model_runner.py:3269] Encoder cache will be initialized with a budget of 8192 tokens, and profiled with 31 image items of the "
            "maximum feature size.",
            vl.KIND_MM_PROFILE,
            {},
        ),
        (
            "INFO 09-30 10:00:28 [gpu_worker.py:251] Initial free memory 78.49843215942383 GiB, reserved 20.00GiB memory for KV Cache as specified by "
            "kv_cache_memory_bytes config and skipped memory profiling.",
            vl.KIND_INITIAL_FREE,
            {"free_at_start_bytes": g(78.49843215942383), "kv_reserved_bytes": g(20.0)},
        ),
        (
            "ValueError: Free memory on device cuda:0 (58.61/79.19 GiB) on startup is less than the engine's budget after excluding external process's weights "
            "(0.9, 61.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",  # 0.32+
            vl.KIND_FREE_LESS,
            {"device": "cuda:0", "free_at_start_bytes": g(58.61), "total_bytes": g(79.19), "gpu_memory_utilization": 0.9, "requested_bytes": g(61.27)},
        ),
        ("XPU KV cache size: 448,016 tokens, Maximum concurrency for 32,768 tokens per request: 13.67x", vl.KIND_KV_TOKENS, None),
        ("RuntimeError: Engine process failed to start. See stack trace for the root cause.", vl.KIND_ENGINE_FAILED, {}),
        ("RuntimeError: EngineCore_0 initialization failed. See root cause above.", vl.KIND_ENGINE_FAILED, {}),
    ],
)
def test_released_forms(text: str, kind: str, values: dict | None) -> None:
    e = one(text)
    assert e.kind == kind
    if values is not None:
        assert e.values == values
    else:
        assert e.get("kv_tokens") == 448016


def test_the_v0_engine_line_of_0_7_to_0_10() -> None:
    e = one(
        "INFO 02-20 15:43:27 llm_engine.py:234] Initializing a V0 LLM engine (v0.7.2) with config: model='./Qwen2.5-72B-Instruct-AWQ', "
        "speculative_config=None, max_seq_len=32768, tensor_parallel_size=4, enforce_eager=False, kv_cache_dtype=auto"
    )
    assert (e.kind, e.get("version"), e.get("v1"), e.get("max_seq_len"), e.get("tensor_parallel_size")) == (vl.KIND_ENGINE_CONFIG, "0.7.2", False, 32768, 4)


def test_the_startup_accounting_line_of_both_wordings() -> None:
    old = one(
        "(EngineCore_DP0 pid=2211) INFO 06-20 09:13:31 [gpu_worker.py:298] Free memory on device (78.5/79.19 GiB) on startup. Desired GPU memory utilization "
        "is (0.9, 71.27 GiB). Actual usage is 14.99 GiB for weight, 1.24 GiB for peak activation, 0.35 GiB for non-torch memory, and 0.93 GiB for CUDAGraph "
        "memory. Replace gpu_memory_utilization config with `--kv-cache-memory=58690483814` (54.66 GiB) to fit into requested memory, or "
        "`--kv-cache-memory=66050000000` (61.51 GiB) to fully utilize gpu memory. Current kv cache memory in use is 54.69 GiB."
    )
    assert old.kind == vl.KIND_STARTUP_SUMMARY
    assert old.values == {
        "free_at_start_bytes": g(78.5),
        "total_bytes": g(79.19),
        "gpu_memory_utilization": 0.9,
        "requested_bytes": g(71.27),
        "weights_bytes": g(14.99),
        "activation_peak_bytes": g(1.24),
        "non_torch_bytes": g(0.35),
        "graph_bytes": g(0.93),
        "kv_bytes": g(54.69),
    }
    new = one(
        "Free memory on device (78.5/79.19 GiB) on startup. Desired GPU memory utilization is (0.9, 71.27 GiB). Actual usage is 15.34 GiB for consumed "
        "memory (weights + non-torch), 1.24 GiB for peak activation, and 0.93 GiB for CUDAGraph memory. Current kv cache memory in use is 54.69 GiB."
    )
    assert (new.get("consumed_bytes"), new.get("activation_peak_bytes"), new.get("graph_bytes"), new.get("kv_bytes")) == (g(15.34), g(1.24), g(0.93), g(54.69))
    assert "weights_bytes" not in new.values and "activation_peak2_bytes" not in new.values


@pytest.mark.parametrize(
    "text",
    ["CPU KV cache size: 448,016 tokens", "vGPU KV cache size: 99,999 tokens", "GPU + host KV cache size: 448,016 tokens"],
)
def test_kv_lines_that_are_not_the_devices_pool(text: str) -> None:
    # CPU offloading's pool; 0.32+'s hisparse "GPU + host" may count host tokens.
    assert [e.kind for e in vl.VLLMParser().feed(Line(LineRef("x", 1), text))] in ([], [vl.KIND_CONCURRENCY])

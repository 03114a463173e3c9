"""The PyTorch OOM message in all its eras, wrappers and damage."""

from __future__ import annotations

import re

import pytest

from oomdoctor.base.evidence import Line, LineRef
from oomdoctor.base.units import GIB, MIB
from oomdoctor.evidence.parsers import captures, torch_oom
from oomdoctor.evidence.parsers.captures import SUFFIXES, CaptureNameError, named, present, typed
from oomdoctor.evidence.parsers.torch_oom import KIND_DRIVER_OOM, KIND_HOST_OOM, KIND_OOM, TorchParser, classify_frames, parse_oom_message

# parse_oom_message's patterns: every capture group named <key>_<suffix> (oomdoctor/evidence/parsers/captures.py).
ALLOCATOR_PATTERNS = (
    "_OOM_START_RE",
    "_REQUESTED_RE",
    "_ERA2_RE",
    "_ERA0_RE",
    "_PROCESS_RE",
    "_ALLOWED_RE",
    "_ALLOCATED_RE",
    "_PRIVATE_RE",
    "_UNALLOCATED_RE",
)


def feed(lines: list[str]) -> list:
    """The parser over ``lines``, with its last resort asked of each line it read nothing from, as the pipeline asks it
    of a line no parser read (pipeline/events.py)."""
    p = TorchParser()
    out = []
    for i, text in enumerate(lines, 1):
        line = Line(LineRef("x", i, None, text), text)
        out += p.feed(line) or p.stated_oom(line)
    return out + p.finish()


ERA2 = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.31 GiB is free. "
    "Process 12345 has 3.20 GiB memory in use. Including non-PyTorch memory, this process has 74.66 GiB memory in use. Of the allocated memory "
    "70.12 GiB is allocated by PyTorch, with 1.05 GiB allocated in private pools (e.g., CUDA Graphs), and 2.47 GiB is reserved by PyTorch but "
    "unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
)


def test_era2_numbers() -> None:
    v = parse_oom_message(ERA2)
    assert v["era"] == 2
    assert v["requested_bytes"] == 2 * GIB
    assert v["capacity_bytes"] == round(79.19 * GIB)
    assert v["free_bytes"] == round(1.31 * GIB)
    assert v["allocated_bytes"] == round(70.12 * GIB)
    assert v["private_pool_bytes"] == round(1.05 * GIB)
    assert v["reserved_unallocated_bytes"] == round(2.47 * GIB)
    procs = v["processes"]
    assert [(p.pid, p.is_self) for p in procs] == [(12345, False), (None, True)]
    assert procs[0].used_bytes == round(3.2 * GIB)
    assert v["complete"]


def test_self_clause_in_the_middle_and_no_comma_private_pool() -> None:
    text = (
        "CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 2.31 GiB is free. Process 1187 has 6.10 GiB "
        "memory in use. Including non-PyTorch memory, this process has 61.02 GiB memory in use. Process 2231 has 9.70 GiB memory in use. Of the "
        "allocated memory 58.40 GiB is allocated by PyTorch, with 1.10 GiB allocated in private pools (e.g. CUDA Graphs), and 912.00 MiB is reserved "
        "by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_ALLOC_CONF=expandable_segments:True"
    )
    v = parse_oom_message(text)
    assert [p.pid for p in v["processes"]] == [1187, None, 2231]
    assert v["reserved_unallocated_bytes"] == 912 * MIB


def test_era1_typo_capacty() -> None:
    v = parse_oom_message("CUDA out of memory. Tried to allocate 138.00 MiB. GPU 0 has a total capacty of 15.90 GiB of which 8.44 MiB is free.")
    assert v["era"] == 1
    assert v["capacity_bytes"] == round(15.90 * GIB)


def test_era0_and_npu() -> None:
    v = parse_oom_message("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 79.15 GiB total capacity; 76.30 GiB already allocated; 18.69 MiB free; 77.90 GiB reserved in total by PyTorch)")
    assert v["era"] == 0
    assert v["reserved_unallocated_bytes"] == round(77.90 * GIB) - round(76.30 * GIB)
    npu = parse_oom_message("NPU out of memory. Tried to allocate 2.00 GiB (NPU 3; 60.96 GiB total capacity; 50.12 GiB already allocated; 1.10 GiB free; 57.80 GiB reserved in total by PyTorch)")
    assert npu["backend"] == "NPU" and npu["device"] == 3


def test_wrappers() -> None:
    assert parse_oom_message("OutOfMemoryError('CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 23.55 GiB of which 0.10 GiB is free.')")["wrapper"] == "repr"
    events = feed(['{"error":{"message":"CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 23.55 GiB of which 0.10 GiB is free. See documentation for Memory Management"}}'])
    assert events[0].kind == KIND_OOM and events[0].get("requested_bytes") == GIB
    events = feed(["Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 320.00 MiB. GPU 0 has a total capacity of 79.19 GiB of which 208.31 MiB is free. See documentation for Memory Management"])
    assert events[0].get("wrapper") == "cuda_graph_capture"
    events = feed(["RuntimeError: Worker failed with error 'CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 23.55 GiB of which 0.10 GiB is free. See documentation for Memory Management', please check the stack trace above"])
    assert events[0].get("wrapper") == "worker"
    # The wrapper is read from what precedes the message, in any of the capture failure's spellings.
    events = feed(["Exception: CUDA graph capture failed: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.00 GiB is free. See documentation for Memory Management"])
    assert events[0].get("wrapper") == "cuda_graph_capture" and events[0].get("requested_bytes") == 2 * GIB


def test_wrapped_message_is_joined() -> None:
    events = feed([
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 0 has a total capac",
        "ity of 22.05 GiB of which 2.17 GiB is free. Including non-PyTorch memory, this process has 19.8",
        "7 GiB memory in use. Of the allocated memory 18.92 GiB is allocated by PyTorch, and 521.33 MiB is",
        " reserved by PyTorch but unallocated.",
    ])
    assert len(events) == 1
    e = events[0]
    assert [r.line for r in e.refs] == [1, 2, 3, 4]
    assert e.get("capacity_bytes") == round(22.05 * GIB)
    assert e.get("processes")[0].used_bytes == round(19.87 * GIB)


def test_truncated_message_still_an_oom() -> None:
    events = feed(["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU"])
    assert events[0].kind == KIND_OOM and events[0].get("requested_bytes") == 2 * GIB
    assert not events[0].get("complete")


def test_glued_to_tqdm_bar() -> None:
    events = feed(["Capturing batches (bs=8 avail_mem=0.10 GB):  80%|████████  | 4/5 [00:01<00:00]torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total capacity of 23.55 GiB of which 12.00 MiB is free. See documentation for Memory Management"])
    assert events[0].get("requested_bytes") == 64 * MIB


def test_absurd_sizes_are_dropped_not_trusted() -> None:
    v = parse_oom_message("CUDA out of memory. Tried to allocate 17179869184.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.00 GiB is free.")
    assert "requested_bytes" not in v
    assert v["capacity_bytes"] == round(79.19 * GIB)


def test_driver_and_host_signatures() -> None:
    kinds = [(e.kind, e.get("source")) for e in feed([
        "RuntimeError: CUDA error: out of memory",
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "node1:1:2 [0] include/alloc.h:103 NCCL WARN Cuda failure 'out of memory'",
        "CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:137",
        "NVRM: GPU at PCI:0000:3b:00: Out of memory [NV_ERR_NO_MEMORY]",
        "Out of memory: Killed process 5120 (python3) total-vm:1kB",
        "RuntimeError: [enforce fail at alloc_cpu.cpp:114] DefaultCPUAllocator: can't allocate memory: you tried to allocate 1073741824 bytes.",
    ])]
    assert kinds == [
        (KIND_DRIVER_OOM, "cuda_runtime"),
        (KIND_DRIVER_OOM, "cublas"),
        (KIND_DRIVER_OOM, "nccl"),
        (KIND_DRIVER_OOM, "cumem_allocator"),
        (KIND_DRIVER_OOM, "nvrm"),
        (KIND_HOST_OOM, "kernel_oom_killer"),
        (KIND_HOST_OOM, "cpu_allocator"),
    ]


def test_sglang_kv_allocator_message_is_not_a_torch_oom() -> None:
    assert feed(["Prefill out of memory. Try to lower your batch size.", "Decode out of memory happened. #retracted_reqs: 1"]) == []


def test_stage_from_frames() -> None:
    assert classify_frames((("sglang/srt/model_executor/model_runner.py", "forward_extend"),))[0] == "forward"
    assert classify_frames((("x/cuda_graph_runner.py", "replay"), ("x/model_runner.py", "forward_decode"))) == ("forward", "decode")
    assert classify_frames((("x/cuda_graph_runner.py", "capture_one_batch_size"), ("x/llama.py", "forward")))[0] == "cuda_graph"
    assert classify_frames((("x/loader.py", "load_weights"),))[0] == "weight_loading"
    assert classify_frames((("x/memory_pool.py", "_create_buffers"),))[0] == "kv_pool"
    assert classify_frames((("x/mm_utils.py", "general_mm_embed_routine"), ("x/qwen2.py", "forward")))[0] == "forward"
    assert classify_frames((("x/mm_utils.py", "embed_mm_inputs"), ("x/qwen2_5_vl.py", "get_image_feature")))[0] == "encoder"
    assert classify_frames(())[0] == "unknown"


def test_typed_converts_each_suffix_by_name() -> None:
    pattern = re.compile(
        r"a=(?P<avail_gib>\S+) r=(?P<reserve_mib>\S+) s=(?P<req_size>\d+ \w+) b=(?P<kv_bytes>\d+) n=(?P<tokens_n>[\d,]+)"
        r" f=(?P<mem_fraction_f>\S+) m=(?P<model_str>\S+)(?P<decode_flag> -decode)?"
    )
    m = pattern.search("a=1.5 r=512 s=2 GiB b=4096 n=1,048,576 f=0.85 m=Qwen/Qwen3-8B -decode")
    assert m is not None
    assert typed(m) == {
        "avail_bytes": round(1.5 * GIB),
        "reserve_bytes": 512 * MIB,
        "req_bytes": 2 * GIB,
        "kv_bytes": 4096,
        "tokens": 1048576,
        "mem_fraction": 0.85,
        "model": "Qwen/Qwen3-8B",
        "decode": True,
    }


def test_typed_absent_optional_group_is_none_and_flag_false() -> None:
    pattern = re.compile(r"avail=(?P<avail_gib>\d+)(?:, usage=(?P<usage_gib>\d+))?(?P<decode_flag>-decode)?")
    m = pattern.search("avail=3")
    assert m is not None
    assert typed(m) == {"avail_bytes": 3 * GIB, "usage_bytes": None, "decode": False}
    assert present(typed(m)) == {"avail_bytes": 3 * GIB, "decode": False}


def test_typed_size_implausible_is_none_and_reported() -> None:
    m = re.compile(r"of (?P<capacity_size>\S+ \w+) free (?P<free_size>\S+ \w+) bad (?P<odd_size>\S+ \w+)").search("of 16777216.00 TiB free 1.00 GiB bad 3 parsecs")
    assert m is not None
    found: dict[str, str] = {}
    assert typed(m, found) == {"capacity_bytes": None, "free_bytes": GIB, "odd_bytes": None}
    assert found == {"capacity_bytes": "16777216.00 TiB"}


def test_group_without_a_known_suffix_is_rejected() -> None:
    # At declaration (import time of the parser module) for a named group ...
    with pytest.raises(CaptureNameError, match="avail"):
        named("avail", r"avail mem=(?P<avail>\d+)")
    with pytest.raises(CaptureNameError, match="_gib"):
        named("avail", r"avail mem=(?P<_gib>\d+)")
    assert named("avail", r"avail mem=(?P<avail_gib>\d+)").search("avail mem=2") is not None
    # ... and at the first conversion for an unnamed one (or a pattern built without named()).
    m = re.compile(r"avail mem=(\d+)").search("avail mem=2")
    assert m is not None
    with pytest.raises(CaptureNameError, match="unnamed"):
        typed(m)
    m = re.compile(r"avail mem=(?P<avail_gigs>\d+)").search("avail mem=2")
    assert m is not None
    with pytest.raises(CaptureNameError, match="avail_gigs"):
        typed(m)


def test_suffix_vocabulary_is_documented() -> None:
    doc = captures.__doc__ or ""
    for suffix in SUFFIXES:
        assert f"``{suffix}``" in doc


def test_allocator_patterns_name_every_group() -> None:
    for name in ALLOCATOR_PATTERNS:
        compiled = getattr(torch_oom, name).compiled
        assert compiled.groups == len(compiled.groupindex), name
        captures.check_source(compiled.pattern)


def test_allocator_body_without_its_header_is_an_oom_but_token_pool_lines_are_not() -> None:
    body = "Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.00 GiB is free. Of the allocated memory 70.00 GiB is allocated by PyTorch, and 1.00 GiB is reserved by PyTorch but unallocated."
    events = feed([body])
    assert [e.kind for e in events] == [KIND_OOM]
    assert events[0].get("requested_bytes") == 2 << 30 and events[0].get("free_bytes") == 1 << 30
    assert feed(["Prefill out of memory. Try to allocate 8192 tokens.", "Available full tokens: 7936"]) == []


def test_ascend_current_active_clause_and_process_without_pid() -> None:
    npu = parse_oom_message(
        "NPU out of memory. Tried to allocate 22.00 MiB (NPU 0; 60.97 GiB total capacity; 10.24 GiB already allocated; "
        "10.24 GiB current active; 19.52 MiB free; 10.30 GiB reserved in total by PyTorch)"
    )
    assert npu["backend"] == "NPU" and npu["free_bytes"] == round(19.52 * (1 << 20)) and npu["allocated_bytes"] == round(10.24 * (1 << 30))
    anon = parse_oom_message("CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 23.65 GiB of which 100.00 MiB is free. Process has 9.00 GiB memory in use.")
    (proc,) = anon["processes"]
    assert proc.pid is None and proc.is_self is False


def test_other_runtimes_gpu_oom_signatures(tmp_path) -> None:
    """GPU OOM lines of other runtimes, each as its own format string prints it, reach the parser
    through the scanner's anchors and are read as driver-level OOMs; near misses are not."""
    from oomdoctor.api import diagnose

    cases = {
        # ggml-cuda.cu: "%s: allocating %.2f MiB on device %d: cudaMalloc failed: %s" (llama.cpp#18181)
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 372.08 MiB on device 0: cudaMalloc failed: out of memory": "ggml_cuda_malloc",
        # XLA's stream executor (JAX, sglang-jax on GPU)
        "E1130 10:00:00.000000 1234 cuda_driver.cc:1089] failed to alloc 2147483648 bytes on host: CUDA_ERROR_OUT_OF_MEMORY: out of memory": "cuda_driver_api",
        "RuntimeError: CUDA error: cudaErrorMemoryAllocation": "cuda_runtime_enum",
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 2147483648 bytes.": "xla_resource_exhausted",
        "RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm. Used 17.50G of 15.48G hbm.": "xla_resource_exhausted",
        # TurboMind (lmdeploy#2442) and a TensorRT-LLM check whose call a paste cut off (TensorRT-LLM#260)
        "RuntimeError: [TM][ERROR] CUDA runtime error: out of memory /lmdeploy/src/turbomind/utils/memory_utils.cu:32": "cuda_runtime_error",
        "ream->get()): out of memory (/app/tensorrt_llm/cpp/tensorrt_llm/runtime/tllmBuffers.h:112)": "cuda_check",
    }
    for line, source in cases.items():
        assert [(e.kind, e.get("source")) for e in feed([line])] == [(KIND_DRIVER_OOM, source)], line
        log = tmp_path / "one.log"
        log.write_text(line + "\n")
        assert diagnose([str(log)]).verdict_class != "none", line
    near_misses = [
        "INFO 08-19 07:51:12 model_runner.py:1028] CUDA graphs can take additional 1~3 GiB memory per GPU. If you are running out of memory, consider decreasing `gpu_memory_utilization` or enforcing eager mode.",
        "grpc._channel._InactiveRpcError: status = StatusCode.RESOURCE_EXHAUSTED details = \"Received message larger than max (8388608 vs. 4194304)\"",
        "ggml_cuda_init: found 1 CUDA devices: Device 0: NVIDIA GeForce RTX 4090, compute capability 8.9",
        "WARNING: if you run out of memory (OOM), lower max_batch_size (see docs/perf.md)",
    ]
    for line in near_misses:
        assert feed([line]) == [], line


def test_ray_memory_monitor_report_without_its_first_sentence() -> None:
    """Ray's OOM report reaches pastes without "Task was killed due to the node running low on memory"."""
    events = feed([
        "Memory on the node (IP: 169.254.181.2, ID: 708c7baf966d59aa3f08299830c349ca055293ebb1c33d8e72cd3336) where the task (actor ID: "
        "0dab4ab45f6c947201afac6d01000000, name=RayWorkerVllm.__init__, pid=308, memory used=11.15GB) was running was 12.49GB / 13.15GB (0.95), "
        "which exceeds the memory usage threshold of 0.95.",
        "Refer to the documentation on how to address the out of memory issue: https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html.",
    ])
    assert [(e.kind, e.get("source"), e.get("strength")) for e in events] == [(KIND_HOST_OOM, "ray_memory_monitor", "strong")] * 2
    assert feed(["Memory on the node is fine: 3.2GB / 64GB"]) == []


@pytest.mark.parametrize(
    "lines, exception, stage",
    [
        # vllm#10085: the paste stops inside "torch.OutOfMemoryError: Error in model executi".
        (
            [
                '  File "/vllm-workspace/vllm/model_executor/models/ultravox.py", line 420, in _process_audio_input',
                "    audio_features = self.audio_tower(audio_input)",
                "torch.OutOfMemoryError: Error in model executi",
            ],
            "torch.OutOfMemoryError",
            "encoder",
        ),
        # vllm#13074 / verl#647: Ray re-raises a worker's exception as RayTaskError(<cause class>), and the paste stops
        # before the worker's own message.
        (
            [
                '  File "/usr/local/lib/python3.12/dist-packages/ray/_private/worker.py", line 919, in get_objects',
                "    raise value.as_instanceof_cause()",
                "ray.exceptions.RayTaskError(OutOfMemoryError): ray::RayWorkerWrapper.execute_method() (pid=341, ip=10.66.6.64)",
            ],
            "ray.exceptions.RayTaskError(OutOfMemoryError)",
            None,
        ),
    ],
)
def test_the_exception_line_alone_is_an_oom_with_its_message_missing(lines: list[str], exception: str, stage: str | None) -> None:
    (oom,) = [e for e in feed(lines) if e.kind == KIND_OOM]
    assert oom.get("exception") == exception and oom.get("requested_bytes") is None
    if stage is not None:
        assert oom.get("stage") == stage


@pytest.mark.parametrize(
    "line",
    [
        # A source line that handles the class is not one, nor is a log line that names it mid-sentence.
        "    except torch.cuda.OutOfMemoryError:",
        "INFO retrying after a torch.OutOfMemoryError: batch halved",
        # The class name quoted bare (inline code in a bug report's prose) is a statement, not the exception line.
        "torch.OutOfMemoryError",
        # Ray with another cause class, and Ray's own memory-monitor kill (a bare ray.exceptions.OutOfMemoryError,
        # read as the host's OOM elsewhere).
        "ray.exceptions.RayTaskError(ValueError): ray::main_task() (pid=5, ip=10.1.200.6)",
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
    ],
)
def test_naming_the_class_elsewhere_is_not_the_exception_line(line: str) -> None:
    assert [e for e in feed([line]) if e.kind == KIND_OOM] == []


# --- formats found by reading the allocators' and checks' source across versions and forks -----------------


def test_cached_era_counts_cached_as_what_is_held_beyond_allocated() -> None:
    # PyTorch <= 1.3: format_size(amount_cached - amount_allocated) " cached)" (PR 13751 calls it memory
    # held by the allocator but not used); issue 18853's paste.
    v = parse_oom_message(
        "CUDA out of memory. Tried to allocate 1024.00 MiB (GPU 0; 15.90 GiB total capacity; 14.25 GiB already allocated; 991.56 MiB free; 607.00 KiB cached)"
    )
    assert (v["era"], v["allocated_bytes"], v["reserved_unallocated_bytes"]) == (0, round(14.25 * GIB), 607 * 1024)
    assert v["reserved_bytes"] == round(14.25 * GIB) + 607 * 1024
    big = parse_oom_message("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 10.92 GiB total capacity; 4.01 GiB already allocated; 356.00 MiB free; 5.54 GiB cached)")
    assert big["reserved_unallocated_bytes"] == round(5.54 * GIB)  # not 5.54 - 4.01
    # The later wording is the total: unallocated = reserved - allocated, as before.
    later = parse_oom_message(
        "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 10.92 GiB total capacity; 4.01 GiB already allocated; 356.00 MiB free; 5.54 GiB reserved in total by PyTorch)"
    )
    assert (later["reserved_bytes"], later["reserved_unallocated_bytes"]) == (round(5.54 * GIB), round(5.54 * GIB) - round(4.01 * GIB))


@pytest.mark.parametrize("device_char, device", [("\x01", 1), ("\x03", 3), ("\t", None), ("", None)])
def test_torch_2_3_device_printed_as_a_character(device_char: str, device: int | None) -> None:
    # PyTorch 2.3 printed the int8 device index as a char (fixed by PR 123984): the char is the index,
    # unless it is a blank (GPU 9 printed a tab) or a paste dropped it.
    v = parse_oom_message(
        f"CUDA out of memory. Tried to allocate 20.00 MiB. GPU {device_char} has a total capacity of 79.15 GiB of which 3.62 MiB is free. "
        "Process 1234 has 79.13 GiB memory in use. Of the allocated memory 77.20 GiB is allocated by PyTorch, and 1.02 GiB is reserved by PyTorch but unallocated."
    )
    assert (v["era"], v["capacity_bytes"], v["free_bytes"], v.get("device")) == (2, round(79.15 * GIB), round(3.62 * MIB), device)


def test_a_request_larger_than_any_card_is_kept() -> None:
    v = parse_oom_message(
        "CUDA out of memory. Tried to allocate 130206.04 GiB. GPU 0 has a total capacity of 23.56 GiB of which 16.57 GiB is free. "
        "Of the allocated memory 5.41 GiB is allocated by PyTorch, and 476.00 MiB is reserved by PyTorch but unallocated."
    )
    assert v["requested_bytes"] == round(130206.04 * GIB) and "implausible" not in v
    # 16 EiB is NVML's sentinel read as a size, and requests from 1 EiB up are worded "more than 1EB".
    sentinel = parse_oom_message("CUDA out of memory. Tried to allocate 17179869184.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.00 GiB is free.")
    assert "requested_bytes" not in sentinel and sentinel["implausible"] == ("17179869184.00 GiB",)


def test_fork_allocators_device_words_and_missing_free_clauses() -> None:
    # Intel's first in-tree XPU allocator: no "of which ... is free" (intel-extension-for-pytorch#846).
    xpu = parse_oom_message(
        "XPU out of memory. Tried to allocate 8.00 GiB. GPU 0 has a total capacity of 15.11 GiB. Of the allocated memory 0 bytes is allocated by PyTorch, "
        "and 0 bytes is reserved by PyTorch but unallocated. Please use `empty_cache` to release all unoccupied cached memory."
    )
    assert (xpu["backend"], xpu["device"], xpu["capacity_bytes"], xpu["requested_bytes"]) == ("XPU", 0, round(15.11 * GIB), 8 * GIB)
    assert "free_bytes" not in xpu
    # IPEX's era-0 form without "free" (intel-extension-for-pytorch#629).
    ipex = parse_oom_message("XPU out of memory. Tried to allocate 1.71 GiB (GPU 0; 15.56 GiB total capacity; 176.00 MiB already allocated; 176.00 MiB reserved in total by PyTorch)")
    assert (ipex["backend"], ipex["capacity_bytes"], ipex["allocated_bytes"], ipex["reserved_unallocated_bytes"]) == ("XPU", round(15.56 * GIB), 176 * MIB, 0)
    # Cambricon MLU, both forms (torch_mlu caching_allocator.cpp; its era-2 form has no blank before "is free").
    mlu0 = parse_oom_message(
        "MLU out of memory. Tried to allocate 500.00 GiB (MLU 0; 47.98 GiB total capacity; 4.00 KiB already allocated; 47.41 GiB free; 2.00 MiB reserved in total by PyTorch)"
    )
    assert (mlu0["backend"], mlu0["capacity_bytes"], mlu0["free_bytes"], mlu0["requested_bytes"]) == ("MLU", round(47.98 * GIB), round(47.41 * GIB), 500 * GIB)
    mlu2 = parse_oom_message("MLU out of memory. Tried to allocate 500.00 GiB. MLU 0 has a total capacity of 47.98 GiB of which 47.41 GiBis free. Of the allocated memory 4.00 KiB")
    assert (mlu2["era"], mlu2["device"], mlu2["free_bytes"]) == (2, 0, round(47.41 * GIB))


def test_fork_exceptions_and_backends_are_named() -> None:
    [musa] = feed(
        [
            "torch.musa.OutOfMemoryError: MUSA out of memory. Tried to allocate 2.00 GiB (GPU 0; 47.98 GiB total capacity; 40.00 GiB already allocated; "
            "1.00 GiB free; 45.00 GiB reserved in total by PyTorch)"
        ]
    )
    assert (musa.get("backend"), musa.get("exception"), musa.get("free_bytes")) == ("MUSA", "torch.musa.OutOfMemoryError", GIB)
    [mps] = feed(
        [
            "RuntimeError: MPS backend out of memory (MPS allocated: 8.00 GB, other allocations: 1.20 MB, max allowed: 9.07 GB). Tried to allocate 1024.00 MB on "
            "private pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit for memory allocations (may cause system failure)."
        ]
    )
    assert (mps.kind, mps.get("backend"), mps.get("requested_bytes"), mps.get("complete")) == (KIND_OOM, "MPS", GIB, True)


@pytest.mark.parametrize(
    "text, source",
    [
        ("RuntimeError: CUDA driver error: out of memory", "cuda_driver"),
        ("RuntimeError: HIP error: out of memory", "hip_runtime"),
        ("RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/THCTensorRandom.cu:25", "thc"),
        ("THCudaCheck FAIL file=/pytorch/aten/src/THC/THCCachingHostAllocator.cpp line=278 error=2 : out of memory", "thc"),
        ("include/alloc.h:125 NCCL WARN Cuda failure 2 'out of memory'", "nccl"),
        ("include/alloc.h:103 NCCL WARN Cuda failure 'out of memory'", "nccl"),
        ("RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED", "cudnn"),
        ("RuntimeError: cuFFT error: CUFFT_ALLOC_FAILED", "cufft"),
    ],
)
def test_driver_and_library_allocation_failures(text: str, source: str) -> None:
    [e] = feed([text])
    assert (e.kind, e.get("source")) == (KIND_DRIVER_OOM, source)


@pytest.mark.parametrize(
    "text",
    [
        # The same checks for other errors.
        "RuntimeError: CUDA driver error: invalid argument",
        "RuntimeError: HIP error: invalid device function",
        "NCCL WARN Cuda failure 1 'invalid argument'",
        "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED",
        # cuDNN v8's benchmarking warns with the status and goes on (PyTorch 2.3 Conv_v8.cpp).
        "UserWarning: Plan failed with a cudnnException: CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: cudnnFinalize Descriptor Failed cudnn_status: "
        "CUDNN_STATUS_ALLOC_FAILED (Triggered internally at ../aten/src/ATen/native/cudnn/Conv_v8.cpp:919.)",
        "conv algo 3 skipped (CUFFT_ALLOC_FAILED), trying the next one",
        # NVIDIA's Multi-Process Service, not Apple's MPS backend.
        "NVIDIA MPS out of memory: server refused client",
        "GMPS out of memory",
        # Prose that names an OOM is not the last resort's statement of one (_OOM_STATEMENT_RE).
        "to avoid out of memory errors, lower --max-num-seqs",
        "WARNING: this run might go out of memory with a batch of 64",
        "Out of memory errors are common with long prompts",
        "    except RuntimeError:  # out of memory",
        # The one-word code is the exception class's only with its colon-led form; host memory is not the device's.
        "raise OutOfMemoryError(msg)",
        "Error Code 2: OutOfMemoryError handler installed",
        "ERROR: failed to allocate host memory for the pinned buffer",
        "failed to allocate port 8000",
        "Allocated device memory: 12.00 GiB",
        # The same check macro's other errors, and a pool's own progress that says "Attempting to allocate".
        "CUDA error 700 at ggml-cuda.cu:6776: an illegal memory access was encountered",
        "Attempting to allocate 1024 bytes from the staging pool",
        "hsa_status_t status = HSA_STATUS_SUCCESS; HSA_STATUS_ERROR_INVALID_ISA is not a resource shortage",
        # SGLang's retraction notice is the catalogue's (a normal answer to a full KV pool), never an OOM.
        "Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.0980 -> 0.9446",
    ],
)
def test_other_errors_and_mentions_of_the_status_are_no_oom(text: str) -> None:
    assert [e for e in feed([text]) if e.kind in (KIND_OOM, KIND_DRIVER_OOM)] == []


def test_the_oom_start_hint_holds_wherever_the_start_pattern_matches() -> None:
    """_OOM_START_RE is tried only where _OOM_START_HINT matches: on every fixture line (and its joined and
    re-spaced forms) a start match implies a hint match."""
    from oomdoctor.evidence.parsers import torch_oom as tt

    from conftest import FIXTURES

    lines = [line for p in sorted(FIXTURES.rglob("*")) if p.is_file() and p.suffix in (".log", ".txt", ".md") for line in p.read_text(errors="replace").splitlines()]
    lines += [line.replace(" ", "") for line in lines if "memory" in line] + [line.replace(" ", "\n ") for line in lines if "allocate" in line]
    started = 0
    for line in lines:
        if tt._OOM_START_RE.search(line):
            started += 1
            assert tt._OOM_START_HINT.search(line), line
            assert tt._oom_start(line) is not None
    assert started > 300


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: out of memory",
        "TT_FATAL: Out of Memory: Not enough space to allocate 5368709120 B DRAM buffer",  # tt-metal#40108
        "llama_init_from_model: failed to allocate compute buffers: out of memory",
        "Out of memory while allocating the KV cache",
        "FATAL ERROR: OUT OF MEMORY",
        # TensorRT names the error code in one word (NVIDIA/TensorRT-LLM#1609, a field case).
        "[05/15/2024-14:03:05] [TRT] [E] 2: [virtualMemoryBuffer.cpp::resizePhysical::155] Error Code 2: OutOfMemory (no further information)",
        # AWS Neuron's runtime allocator under DJL Serving (deepjavalibrary/djl-serving#1847, a field case).
        "ERROR  TDRV:dmem_alloc_internal                     Failed to alloc DEVICE memory: 469762048",
        "unable to allocate 2.00 GiB of GPU memory for the workspace",
        # The "%s error %d at %s:%d: %s" of many projects' CUDA check macro (llama.cpp 2023, ggml-org/llama.cpp#1230).
        "CUDA error 2 at ggml-cuda.cu:359: out of memory",
    ],
)
def test_a_runtime_no_table_knows_stating_an_oom_is_an_oom_without_numbers(line: str) -> None:
    (oom,) = [e for e in feed([line]) if e.kind == KIND_DRIVER_OOM]
    assert oom.get("source") in ("oom_statement", "ggml_statement") and oom.get("stage") == "unknown"


def test_the_statement_takes_its_phase_from_the_frames_above_it() -> None:
    (oom,) = [
        e
        for e in feed([
            '  File "/x/vllm/model_executor/model_loader/loader.py", line 1, in load_model',
            "    model.load_weights(w)",
            "RuntimeError: out of memory",
        ])
        if e.kind == KIND_DRIVER_OOM
    ]
    assert oom.get("stage") == "weight_loading"


@pytest.mark.parametrize(
    "line",
    [
        "MemoryError",
        "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 3.00 GiB for an array with shape (805306368,) and data type float32",
        "terminate called after throwing an instance of 'std::bad_alloc'",
        "  what():  std::bad_alloc",
        "OSError: [WinError 1455] The paging file is too small for this operation to complete. Error loading \"C:\\torch\\lib\\cudnn_adv_infer64_8.dll\"",
        "RuntimeError: [enforce fail at alloc_cpu.cpp:114] data. DefaultCPUAllocator: not enough memory: you tried to allocate 1073741824 bytes.",
    ],
)
def test_what_any_program_prints_when_the_host_refuses_memory(line: str) -> None:
    (host,) = [e for e in feed([line]) if e.kind == KIND_HOST_OOM]
    assert host.get("strength") == "strong" and host.get("source") in ("host_allocation", "cpu_allocator")


@pytest.mark.parametrize(
    "line",
    [
        "    except MemoryError:",
        "INFO 01-01 00:00:00 [a.py:1] MemoryError handling enabled",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB",
        "terminate called after throwing an instance of 'c10::Error'",
    ],
)
def test_naming_the_host_error_or_a_gpu_one_is_not_the_hosts_failure(line: str) -> None:
    assert [e for e in feed([line]) if e.kind == KIND_HOST_OOM and e.get("strength") == "strong"] == []


def test_torchs_dataloader_killed_by_signal_and_composes_exit_code_are_kills() -> None:
    """"DataLoader worker (pid N) is killed by signal: Killed." (torch/utils/data/_utils/signal_handling.py) and docker
    compose's "<service> exited with code 137": SIGKILL, weak alone."""
    for line in ("RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed.", "sglang-1 exited with code 137"):
        (host,) = [e for e in feed([line]) if e.kind == KIND_HOST_OOM]
        assert (host.get("source"), host.get("strength")) == ("sigkill", "weak")


def test_a_stated_oom_of_a_stream_ordered_allocation_names_its_call() -> None:
    """FlashInfer's handler (sglang#109): "CUDA Error: out of memory (2) .../handler.cuh: line 100 at function
    cudaMallocAsync(...)": an engine's runtime working buffer, which the differential counts for activations."""
    (oom,) = [e for e in feed(["CUDA Error: out of memory (2) /sglang/3rdparty/flashinfer/include/flashinfer/handler.cuh: line 100 at function cudaMallocAsync(&float_buffer_, sizeof(float) *"]) if e.kind == KIND_DRIVER_OOM]
    assert (oom.get("source"), oom.get("call")) == ("oom_statement", "cudaMallocAsync")


@pytest.mark.parametrize(
    "line, source, stage",
    [
        (
            "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[32,4096,4096] and type float "
            "on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
            "tensorflow_bfc",
            "unknown",
        ),
        ("ggml_metal_graph_compute: command buffer 0 failed with status 5 error: Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)", "metal", "unknown"),
        # llama.cpp's loader names the device buffer it could not get: only while placing the model's tensors.
        ("Error: llama runner process has terminated: error loading model: unable to allocate CUDA0 buffer", "ggml_model_buffer", "weight_loading"),
        ("llama_model_load: error loading model: unable to allocate backend buffer", "ggml_model_buffer", "weight_loading"),
        # ROCm's HSA runtime (sgl-project/sglang#25797 on MI350X).
        ("HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate the necessary resources.", "hsa_out_of_resources", "unknown"),
    ],
)
def test_other_runtimes_device_ooms(line: str, source: str, stage: str) -> None:
    (oom,) = [e for e in feed([line]) if e.kind == KIND_DRIVER_OOM]
    assert (oom.get("source"), oom.get("stage")) == (source, stage)


def test_llama_cpps_cpu_buffer_and_ollamas_system_memory_check_are_the_hosts() -> None:
    for line, source in (
        ("llama_model_load: error loading model: unable to allocate CPU buffer", "ggml_host_buffer"),
        ("Error: model requires more system memory (12.3 GiB) than is available (7.8 GiB)", "ollama_system_memory"),
        (
            'time=2026-03-25T09:45:06.861Z level=WARN source=server.go:1044 msg="model request too large for system" requested="5.3 GiB" '
            'available="4.8 GiB" total="10.0 GiB" free="4.8 GiB" swap="0 B"',
            "ollama_system_memory",
        ),
    ):
        (host,) = [e for e in feed([line]) if e.kind == KIND_HOST_OOM]
        assert (host.get("source"), host.get("strength")) == (source, "strong")
    # Near misses: a retried resource, a device buffer named in a size report, and ONNX Runtime's arena, which the
    # CPU provider has too (its line does not say which device: review of 2026-12-03).
    assert [e for e in feed(["onnxruntime::BFCArena::AllocateRawInternal(ORTBFCArena) Failed to allocate memory for requested buffer of size 285081600"]) if e.kind == KIND_DRIVER_OOM] == []
    assert [e for e in feed(["warning: unable to allocate the requested resource, retrying"]) if e.kind in (KIND_DRIVER_OOM, KIND_HOST_OOM)] == []
    assert [e for e in feed(["load_tensors:        CUDA0 model buffer size =  4403.49 MiB"]) if e.kind in (KIND_DRIVER_OOM, KIND_HOST_OOM)] == []


@pytest.mark.parametrize(
    "line, source",
    [
        # llama.cpp's host-pinned buffer is tried only after plain host memory failed: the host's (review of 2026-12-03).
        ("llama_model_load: error loading model: unable to allocate CUDA_Host buffer", "ggml_host_buffer"),
        ("Error: llama runner process has terminated: error loading model: unable to allocate CUDA_Host buffer", "ggml_host_buffer"),
        # Programs' own host OOMs that read like the generic statement.
        ("fatal error: runtime: out of memory", "host_statement"),
        ("runtime: out of memory: cannot allocate 4194304-byte block (3221225472 in use)", "host_statement"),
        ("fatal: Out of memory, malloc failed (tried to allocate 2147483648 bytes)", "host_statement"),
        ("Out of memory: Kill process 28341 (python3) score 953 or sacrifice child", "host_statement"),
        (
            "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[1024,1024,1024] and type float "
            "on /job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu",
            "host_statement",
        ),
        ("numpy.core._exceptions.MemoryError: Unable to allocate 1.57 GiB for an array with shape (210000000,) and data type float64", "host_allocation"),
        ("memory allocation of 17179869184 bytes failed", "host_allocation"),
        # ollama relays the runner's stderr joined on one line: the CPU buffer's refusal beside the pinned buffer's
        # alloc_tensor_range line (ollama#16455's form; the buffer line alone used to end the line's reading).
        (
            "500 Internal Server Error: llama-server startup failed: llama-server process has terminated: exit status 1: "
            "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 9925767168 alloc_tensor_range: failed to allocate "
            "CUDA_Host buffer of size 9925767168 error loading model: unable to allocate CUDA_Host buffer",
            "ggml_host_buffer",
        ),
    ],
)
def test_host_memory_in_other_programs_words_is_never_a_device_oom(line: str, source: str) -> None:
    events = feed([line])
    assert [(e.get("source"), e.get("strength")) for e in events if e.kind == KIND_HOST_OOM] == [(source, "strong")]
    assert [e for e in events if e.kind in (KIND_OOM, KIND_DRIVER_OOM)] == []


def test_sglangs_token_pool_text_is_not_the_generic_statement(tmp_path) -> None:
    """SGLang's allocator before its catalogue form: the SGLang parser reads the line (its KV slot shortage), so the last
    resort is not asked of it."""
    from oomdoctor.input.files import InputStats
    from oomdoctor.pipeline.events import read_events

    log = tmp_path / "x.log"
    log.write_text("RuntimeError: Out of memory. Try to lower your batch size.\n")
    events = read_events(str(log), InputStats(path=str(log)))
    assert [e for e in events if e.kind == KIND_DRIVER_OOM] == [] and [e.kind for e in events if e.kind == "kv_alloc_fail"]


def test_a_statement_on_a_llama_cpp_line_is_llama_cpps() -> None:
    """Its function tag says whose flags apply (advice/generic.is_llama_cpp): llama.cpp's, not PyTorch's."""
    (oom,) = [e for e in feed(["llama_init_from_model: failed to allocate compute buffers: out of memory"]) if e.kind == KIND_DRIVER_OOM]
    assert oom.get("source") == "ggml_statement"
    (other,) = [e for e in feed(["RuntimeError: out of memory"]) if e.kind == KIND_DRIVER_OOM]
    assert other.get("source") == "oom_statement"


def test_tgis_warmup_with_a_kv_budget_is_its_warmup_oom() -> None:
    """TGI 1.0 (text-generation-inference#710's title): the warmup's other form, with --max-batch-total-tokens set."""
    line = "Error: Warmup(Generation(\"Not enough memory to handle 16000 total tokens with 2 prefill tokens. You need to decrease `--max-batch-total-tokens` or `--max-batch-prefill-tokens`\"))"
    (oom,) = [e for e in feed([line]) if e.kind == KIND_DRIVER_OOM]
    assert oom.get("source") == "warmup_prefill"


def test_rays_dead_worker_is_a_weak_kill() -> None:
    """OpenRLHF#1065 (batch 2026-12-03h, read after scoring): Ray's raylet on a worker that vanished. Near miss: a
    worker that exited by itself."""
    line = "(raylet) A worker died or was killed while executing a task by an unexpected system error. To troubleshoot the problem, check the logs for the dead worker."
    (host,) = [e for e in feed([line]) if e.kind == KIND_HOST_OOM]
    assert (host.get("source"), host.get("strength")) == ("ray_worker_died", "weak")
    assert [e for e in feed(["(raylet) The worker exited normally after finishing its tasks."]) if e.kind == KIND_HOST_OOM] == []


# PyTorch's caching allocator warns before it raises (c10 CUDACachingAllocator.cpp, TORCH_WARN, 2.8 and later), in the
# form real logs show (wtdcode/vllm-backport#94, a field case; the same line under `[rank0]:[W922 05:15:28]`).
ALLOCATOR_WARNING = (
    "[rank5]:[W1203 09:27:46.123456 CUDACachingAllocator.cpp:3933] memory allocation failed with OOM on device 5 "
    "while trying to allocate 671088640 bytes (free: 513736704, total: 85095874560)."
)


def test_the_allocator_warning_alone_is_an_oom_with_its_figures() -> None:
    (oom,) = [e for e in feed([ALLOCATOR_WARNING]) if e.kind == KIND_OOM]
    assert (oom.get("device"), oom.get("requested_bytes"), oom.get("free_bytes"), oom.get("capacity_bytes")) == (5, 671088640, 513736704, 85095874560)
    assert oom.get("complete") is True


def test_a_warning_hard_wrapped_before_while_is_joined() -> None:
    first, rest = ALLOCATOR_WARNING.split(" while ")
    (oom,) = [e for e in feed([first, "  while " + rest]) if e.kind == KIND_OOM]
    assert oom.get("requested_bytes") == 671088640 and oom.get("capacity_bytes") == 85095874560
    assert [r.line for r in oom.refs] == [1, 2]


def test_the_message_after_the_warning_is_the_failure_and_the_warning_is_not_counted_again() -> None:
    """The warning comes before the traceback; the OutOfMemoryError at its end carries the frames and every figure."""
    traceback = [
        "Traceback (most recent call last):",
        '  File "/x/vllm/v1/worker/gpu_model_runner.py", line 1, in execute_model',
        "    hidden = self.model(x)",
        ERA2,
    ]
    with_warning = [e for e in feed([ALLOCATOR_WARNING, *traceback]) if e.kind == KIND_OOM]
    without = [e for e in feed(traceback) if e.kind == KIND_OOM]
    assert len(with_warning) == 1
    assert with_warning[0].values == without[0].values
    assert with_warning[0].ref.line == 5 and with_warning[0].get("stage") == without[0].get("stage") != "unknown"


def test_mlxs_refusal_of_a_buffer_above_the_devices_limit_is_a_device_oom_with_its_figures() -> None:
    """MLX's Metal allocator ("[metal::malloc] Attempting to allocate N bytes which is greater than the maximum allowed
    buffer size of M bytes."), as ollama's mlx runner relays it (ollama/ollama#17804) and as the C++ exception escapes
    without its tag (Blaizzy/mlx-vlm#121); cut after "which is" by a wrap, the request alone."""
    for line, limit in (
        ("Error: 500 Internal Server Error: mlx runner failed: panic: mlx: [metal::malloc] Attempting to allocate 133872076800 bytes which is greater than the maximum allowed buffer size of 30150672384 bytes.", 30150672384),
        ("libc++abi: terminating due to uncaught exception of type std::runtime_error: Attempting to allocate 135383101952 bytes which is greater than the maximum allowed buffer size of 77309411328 bytes.", 77309411328),
        ("RuntimeError: [metal::malloc] Attempting to allocate 25353916928 bytes which is", None),
    ):
        (oom,) = [e for e in feed([line]) if e.kind == KIND_DRIVER_OOM]
        assert oom.get("source") == "metal_buffer_limit"
        assert oom.get("buffer_limit_bytes") == limit
        assert oom.get("requested_bytes") in (133872076800, 135383101952, 25353916928)


def test_the_kernels_oom_reaper_line_is_a_host_kill() -> None:
    """mm/oom_kill.c's "oom_reaper: reaped process %d (%s), now anon-rss:..." follows the kill: a paste that kept only it
    shows the kill. Near miss: another program's "reaped process" line."""
    for line in ("oom_reaper: reaped process 2583 (python), now anon-rss:0kB, file-rss:64784kB, shmem-rss:4672kB", "[ 8812.123456] oom_reaper: reaped process 41 (python3), now anon-rss:0kB"):
        (host,) = [e for e in feed([line]) if e.kind == KIND_HOST_OOM]
        assert (host.get("source"), host.get("strength")) == ("kernel_oom_reaper", "strong")
    assert [e for e in feed(["supervisord: reaped process 1234 (worker) exit status 0"]) if e.kind == KIND_HOST_OOM] == []


def test_rays_table_of_the_largest_processes_is_its_oom_killers_report() -> None:
    """Ray's memory monitor (memory_monitor.cc) ends its kill report with "Top 10 memory users:" and a
    "PID\\tMEM(GB)\\tCOMMAND" table: a paste that kept only the table (verl-project/verl#224) shows the kill.
    Near misses: ps's and top's own headers."""
    for lines in (["PID\tMEM(GB)\tCOMMAND", "40126\t11.20\tray::WorkerDict.actor_rollout_generate_sequences"], ["PID     MEM(GB) COMMAND"], ["Top 10 memory users:"]):
        hosts = [e for e in feed(lines) if e.kind == KIND_HOST_OOM]
        assert [(e.get("source"), e.get("strength")) for e in hosts] == [("ray_memory_monitor", "strong")]
    for line in ("  PID USER      PR  NI    VIRT    RES  %MEM     TIME+ COMMAND", "  PID TTY          TIME CMD", "USER PID %CPU %MEM VSZ RSS TTY STAT START TIME COMMAND"):
        assert [e for e in feed([line]) if e.kind == KIND_HOST_OOM] == []

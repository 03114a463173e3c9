"""The OOM signatures other than PyTorch's caching-allocator message, as tables of (source, pattern):
device OOMs of the CUDA/ROCm libraries and other runtimes, ggml's buffers, host-memory failures and kills.

Each row's needle is a literal every match holds; ``torch_oom.TorchParser`` tries only the rows whose
needle is in a line (``Dispatch``). The anchors that route such lines to the parser are in torch_oom.ANCHORS.
"""

from __future__ import annotations

import re

from oomdoctor.input.patterns import Dispatch, LazyRegex, lazy

# A row's named groups are figures of its event, in bytes, named as the facts are (requested_bytes, buffer_limit_bytes).
DRIVER_PATTERNS: tuple[tuple[str, LazyRegex], ...] = (
    ("cuda_runtime", lazy("CUDA error", r"CUDA error: out of memory")),
    # TurboMind (lmdeploy): "[TM][ERROR] CUDA runtime error: out of memory /lmdeploy/src/turbomind/utils/memory_utils.cu:32".
    ("cuda_runtime_error", lazy("CUDA runtime error", r"CUDA runtime error:? out of memory")),
    ("cublas", lazy("CUBLAS_STATUS", r"CUBLAS_STATUS_ALLOC_FAILED|CUBLAS_STATUS_NOT_INITIALIZED")),
    # NCCL's CUDACHECK prints "Cuda failure 'out of memory'", its driver-API CUCHECK "Cuda failure 2 'out of memory'".
    ("nccl", lazy(("Cuda failure", "Failed to CUDA calloc"), r"Cuda failure (?:\d+ )?'?out of memory'?|Failed to CUDA calloc")),
    # PyTorch's driver-API check (cuMem* under expandable_segments, symmetric memory): "CUDA driver error: out of memory".
    ("cuda_driver", lazy("CUDA driver error", r"CUDA driver error: out of memory")),
    # The same runtime check on a ROCm build: "HIP error: out of memory".
    ("hip_runtime", lazy("HIP error", r"HIP error: out of memory")),
    # PyTorch <= ~1.10's THC: "cuda runtime error (2) : out of memory at .../THCTensorRandom.cu:25",
    # "THCudaCheck FAIL file=... line=... error=2 : out of memory".
    ("thc", lazy(("cuda runtime error", "THCudaCheck"), r"cuda runtime error \(2\) : out of memory|THCudaCheck FAIL .*: out of memory")),
    # cuDNN's and cuFFT's workspace and plan allocations, as the error PyTorch raises: "cuDNN error:
    # CUDNN_STATUS_ALLOC_FAILED" (cuDNN v8's benchmarking warns with the same status and carries on).
    ("cudnn", lazy("CUDNN_STATUS_ALLOC_FAILED", r"cuDNN error: CUDNN_STATUS_ALLOC_FAILED")),
    ("cufft", lazy("CUFFT_ALLOC_FAILED", r"cuFFT error: CUFFT_ALLOC_FAILED")),
    ("cumem_allocator", lazy(("CUDA Error", "Cuda Error", "Cuda error"), r"CUDA Error: out of memory at", re.I)),
    # vLLM's CUDACHECK in its kernels (csrc/custom_all_reduce.cuh): "Failed: Cuda error <file>:<line> 'out of memory'".
    ("cudacheck", lazy(("Failed: Cuda error", ".cuh:"), r"Failed: (?:Cuda error )?\S+\.cuh?:\d+ 'out of memory'", re.I)),
    ("hip", lazy("hipErrorOutOfMemory", r"hipErrorOutOfMemory")),
    # ROCm's HSA runtime when a device allocation fails under a kernel launch or a queue ("HSA_STATUS_ERROR_OUT_OF_RESOURCES:
    # The runtime failed to allocate the necessary resources.", often with "Available Free mem: 30 MB" after it).
    ("hsa_out_of_resources", lazy("HSA_STATUS_ERROR_OUT_OF_RESOURCES", r"HSA_STATUS_ERROR_OUT_OF_RESOURCES")),
    ("cusolver", lazy(None, r"cusolver_status_alloc_failed", re.I)),
    ("nvrm", lazy("NV_ERR_NO_MEMORY", r"NVRM.*NV_ERR_NO_MEMORY|Out of memory \[NV_ERR_NO_MEMORY\]")),
    # TensorRT-LLM's buffers: "CUDA runtime error in ::cudaMallocAsync(...): out of memory".
    ("cuda_malloc", lazy("cudaMalloc", r"cudaMalloc\w*\(.*\):\s*out of memory")),
    # The same check's tail when a paste cut the call off: "...->get()): out of memory (/app/.../tllmBuffers.h:112)".
    ("cuda_check", lazy("out of memory (", r"\):\s*out of memory \(\S+\.(?:h|hpp|cu|cuh|cpp|cc):\d+\)")),
    # Candle/TGI's Rust allocator, and TGI/LoRAX warmup verdicts (the prefill did not fit).
    ("device_limit", lazy("would exceed allowed memory", r"would exceed allowed memory")),
    # TGI's warmup in both forms: "Not enough memory to handle 4096 prefill tokens. You need to decrease
    # `--max-batch-prefill-tokens`", and with a KV budget set (2023) "Not enough memory to handle 16000 total tokens with
    # 2 prefill tokens. You need to decrease `--max-batch-total-tokens` or `--max-batch-prefill-tokens`".
    ("warmup_prefill", lazy("Not enough memory to handle", r"Not enough memory to handle \d+ (?:prefill|total) tokens")),
    # TensorRT-LLM's executor: "Executor creation failed due to insufficient GPU memory".
    ("trtllm_executor", lazy("insufficient GPU memory", r"insufficient GPU memory")),
    # ggml (llama.cpp and its servers): "allocating 372.08 MiB on device 0: cudaMalloc failed: out of memory".
    ("ggml_cuda_malloc", lazy(("cudaMalloc", "hipMalloc"), r"(?:cuda|hip)Malloc\w* failed: out of memory")),
    # The CUDA driver API's and runtime API's names for it (JAX/XLA on GPU, CuPy, Numba, TensorRT).
    ("cuda_driver_api", lazy("CUDA_ERROR_OUT_OF_MEMORY", r"CUDA_ERROR_OUT_OF_MEMORY")),
    ("cuda_runtime_enum", lazy("cudaErrorMemoryAllocation", r"cudaErrorMemoryAllocation")),
    # XLA (JAX, sglang-jax, vLLM on TPU): "RESOURCE_EXHAUSTED: Out of memory while trying to allocate ...",
    # "RESOURCE_EXHAUSTED: ... Ran out of memory in memory space hbm".
    ("xla_resource_exhausted", lazy("RESOURCE_EXHAUSTED", r"RESOURCE_EXHAUSTED:.{0,120}?(?:Out of memory|[Rr]an out of memory)")),
    # TensorFlow's BFC allocator: "ResourceExhaustedError: OOM when allocating tensor with shape[32,4096,4096] and
    # type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc".
    # On the CPU ("device:CPU:0 by allocator cpu") it is the host's (tensorflow_cpu below).
    ("tensorflow_bfc", lazy("OOM when allocating", r"OOM when allocating tensor(?!.*(?:device:CPU|by allocator cpu))")),
    # Apple's GPUs (llama.cpp's Metal backend, MLX): "Command buffer execution failed: Insufficient Memory
    # (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)".
    ("metal", lazy("kIOGPUCommandBufferCallbackErrorOutOfMemory", r"kIOGPUCommandBufferCallbackErrorOutOfMemory")),
    # MLX's Metal allocator refusing one buffer larger than the device allows (mlx/backend/metal/allocator.cpp:
    # "[metal::malloc] Attempting to allocate N bytes which is greater than the maximum allowed buffer size of M
    # bytes."), as mlx-vlm and ollama's mlx runner relay it, the tag dropped where the C++ exception escapes ("libc++abi:
    # terminating due to uncaught exception of type std::runtime_error: Attempting to allocate ..."); a cut paste keeps
    # the request, the limit only when it is whole.
    (
        "metal_buffer_limit",
        lazy(
            "Attempting to allocate",
            r"Attempting to allocate (?P<requested_bytes>\d+) bytes which is\b(?:.*?maximum allowed buffer size of (?P<buffer_limit_bytes>\d+) bytes)?",
        ),
    ),
    # llama.cpp's loader when a device buffer for the model's tensors could not be allocated (llama-model.cpp:
    # "unable to allocate %s buffer" with the buffer type's name: CUDA0, ROCm0, Vulkan0, Metal; 2024's "unable to
    # allocate backend buffer"), as ollama relays it ("llama runner process has terminated: error loading model:
    # unable to allocate CUDA0 buffer"). The CPU buffer types and the host-pinned ones (CUDA_Host, ROCm_Host: tried
    # only after plain host memory failed too) are the host's (ggml_host_buffer below).
    ("ggml_model_buffer", lazy("unable to allocate", r"unable to allocate (?!CPU|\w+_Host\b)(?:backend|[A-Z]\w*) buffer\b")),
)
# The device OOMs only ggml (llama.cpp, ollama) reports: its CUDA backend's cudaMalloc, its loader's buffer, and an
# OOM stated on a line llama.cpp's own function tag begins (stated_oom): llama.cpp's flags are the levers then.
GGML_SOURCES = frozenset({"ggml_cuda_malloc", "ggml_model_buffer", "ggml_statement"})
# Sources whose message itself names the stage: llama.cpp's loader allocates that buffer only while placing the
# model's tensors.
SOURCE_STAGE = {"ggml_model_buffer": "weight_loading"}
# The last resort for a runtime no table above (nor the engines' catalogue) knows: a line that states an
# out-of-memory failure in the form errors take, in any case. An exception or fatal tag whose message
# begins with it ("RuntimeError: out of memory", "TT_FATAL: Out of Memory: Not enough space to allocate
# ..."), a failed call whose reason it is ("llama_init_from_model: failed to allocate: out of memory"), or
# a message that opens with it. Prose that merely names it ("to avoid out of memory errors, lower ...")
# has none of these forms. Read as an OOM without numbers (a driver-level one): its class comes from the
# phase, as for "CUDA error: out of memory".
OOM_STATEMENT_RE = lazy(
    ("out of memory", "Out of memory", "Out of Memory", "Out Of Memory", "OUT OF MEMORY", "OutOfMemory", "memory"),
    r"^\W{0,3}out of memory\b(?!\s+(?:errors?|issues?|problems?)\b)"
    # The error tag may carry its code and where it was raised before the colon, as CUDA checks print it
    # ("CUDA error 2 at ggml-cuda.cu:359: out of memory": the "%s error %d at %s:%d: %s" of many projects' macro).
    r"|^(?:\w+ )?[\w.]*(?:error|exception|fatal|failure)\w*(?:\s+\d+)?(?:\s+at\s+\S+?:\d+)?\s*:\s*(?:[\w .]{0,40}:\s*)?(?:cuda |gpu |device )?out of memory\b"
    r"|\b(?:failed|unable|cannot|could not|can't)\b[^.:]{0,80}:\s*out of memory\b"
    # An error code or status named for it in one word (TensorRT's "Error Code 2: OutOfMemory (no further
    # information)"); not the exception class OutOfMemoryError, which the allocator message's parsers read.
    r"|\b(?:error|status)(?:\s+code)?\s*\d*\s*:\s*out_?of_?memory\b"
    # A device allocation that failed, in the words of a runtime's own allocator (AWS Neuron's "Failed to alloc
    # DEVICE memory: 469762048"); host memory is not the device's (the host patterns read that).
    r"|\b(?:failed|unable|cannot|could not|can't)\s+(?:to\s+)?alloc(?:ate)?\b(?:[^.:]|\.\d){0,60}?\b(?:device|gpu|vram|hbm)\s+memory\b",
    re.I,
)
LLAMA_CPP_TAG_RE = lazy(("llama_", "ggml_", "clip_", "mtmd_"), r"(?:llama|ggml|clip|mtmd)_\w*: ")
# A stream-ordered allocation an engine made itself: "::cudaMallocAsync(ptr, n, mCudaStream->get()):
# out of memory" (TensorRT-LLM's CudaAllocatorAsync, tllmBuffers.h), its tail when a paste re-wrapped the
# call ("ream->get()): out of memory (.../tllmBuffers.h:112)": the stream argument), FlashInfer's handler
# ("at function cudaMallocAsync(&float_buffer_, ...").
ASYNC_CALL_RE = lazy(("cudaMallocAsync", "->get()):"), r"cudaMallocAsync\b|->get\(\)\):\s*out of memory")
# ggml's allocators say what a failed buffer was for (ggml/src/ggml-alloc.c, ggml-backend.cpp). The graph
# allocator's ggml_gallocr_reserve_n (ggml_gallocr_reserve_n_impl in newer trees) reserves a compute buffer
# (GGML_BACKEND_BUFFER_USAGE_COMPUTE): a compute graph's intermediate tensors, a forward pass's or an image
# encoder's activations. alloc_tensor_range (ggml_backend_alloc_ctx_tensors_from_buft; in newer trees
# ggml_backend_buft_alloc_buffer_n_default) places a context's own tensors: the model's weights, the KV
# cache. Each prints "%s: failed to allocate %s buffer of size %zu" (its function, the buffer type) after
# the backend's "cudaMalloc failed: out of memory".
GGML_BUFFER_RE = lazy(
    "failed to allocate",
    r"\b(?P<func>ggml_gallocr_reserve_n(?:_impl)?|alloc_tensor_range|ggml_backend_buft_alloc_buffer_n_default): failed to allocate (?P<buffer>\S+) buffer of size (?P<size>\d+)",
)
GGML_USAGE = {"ggml_gallocr_reserve_n": "compute", "ggml_gallocr_reserve_n_impl": "compute"}
# ggml's CUDA backend names the function whose CUDA call failed on the line after "CUDA error: ..." (its
# CUDA_CHECK: "current device: %d, in function %s at %s:%d"). ggml_cuda_pool_malloc (_leg, _vmm) is the pool of
# temporary buffers an op takes while it computes (dequantized weights, cuBLAS inputs): a compute buffer.
GGML_POOL_RE = lazy("in function ggml_cuda_pool", r"current device: \d+, in function (?P<func>ggml_cuda_pool_malloc\w*)")
HOST_PATTERNS: tuple[tuple[str, str, LazyRegex], ...] = (
    # c10's alloc_cpu.cpp: "DefaultCPUAllocator: can't allocate memory: you tried to allocate N bytes", since
    # torch 1.13 "DefaultCPUAllocator: not enough memory: you tried to allocate N bytes."
    ("cpu_allocator", "strong", lazy("DefaultCPUAllocator", r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory)(?:: you tried to allocate (\d+) bytes)?")),
    # What every program prints when the host cannot give it memory: Python's MemoryError (the exception line, bare
    # or under a module: NumPy's "_ArrayMemoryError: Unable to allocate 3.00 GiB for an array"), Rust's own abort
    # ("memory allocation of 17179869184 bytes failed": TGI's router, candle, mistral.rs), C++'s std::bad_alloc
    # escaping (libstdc++'s "terminate called after throwing an instance of 'std::bad_alloc'" and its
    # "what():  std::bad_alloc"), and Windows' commit limit ("[WinError 1455] The paging file is too small
    # for this operation to complete", os error 1455 from Rust).
    (
        "host_allocation",
        "strong",
        lazy(
            ("MemoryError", "bad_alloc", "paging file is too small", "os error 1455", "memory allocation of"),
            r"^(?:[A-Za-z_]\w*\.)*MemoryError\b(?:\s*:.*)?\s*$|_ArrayMemoryError: Unable to allocate|instance of 'std::bad_alloc'|what\(\):\s+std::bad_alloc"
            r"|paging file is too small for this operation|os error 1455|^memory allocation of \d+ bytes failed",
        ),
    ),
    # The kernel's record, global or a memory cgroup's ("Memory cgroup out of memory: Killed process"),
    # with the killed process's resident memory when the line keeps it.
    ("kernel_oom_killer", "strong", lazy("Killed process", r"[Oo]ut of memory: Killed process (\d+) \(([^)]*)\)(?:.*?anon-rss:\s*(\d+)kB)?")),
    # The kernel's reaper after such a kill (mm/oom_kill.c: "oom_reaper: reaped process %d (%s), now anon-rss:%lukB,
    # file-rss:%lukB, shmem-rss:%lukB"): the kill line itself may be cut from the paste.
    ("kernel_oom_reaper", "strong", lazy("oom_reaper: reaped process", r"oom_reaper: reaped process \d+ \(")),
    # Slurm's step: "Detected 1 oom-kill event(s) in step 3495064.0 cgroup", "Detected 2 oom_kill events in
    # StepId=JOBID.13"; srun's "task 0: Out Of Memory"; a cgroup v2 memory.events line "oom_kill 3".
    (
        "slurm_oom_kill",
        "strong",
        lazy(("oom-kill event", "oom_kill event", "Out Of Memory"), r"Detected \d+ oom[-_]kill events?|srun: error: .*\btasks? [\d,-]+: Out Of Memory"),
    ),
    ("cgroup_events", "strong", lazy("oom_kill ", r"^\s*oom_kill\s+[1-9]\d*\s*$")),
    # The kernel's memory-cgroup report before 5.x (mm/memcontrol.c mem_cgroup_print_oom_info): "Task in /docker/<id>
    # killed as a result of limit of /docker/<id>" (or "... of host").
    ("memcg_limit", "strong", lazy("killed as a result of limit of", r"Task in \S+ killed as a result of limit of")),
    # systemd on a unit the kernel's OOM killer (or systemd-oomd) hit: "<unit>: A process of this unit has been
    # killed by the OOM killer." (src/core/unit.c) and "<unit>: Failed with result 'oom-kill'." (service.c's
    # result string for SERVICE_FAILURE_OOM_KILL), as journalctl shows them.
    ("systemd_oom_kill", "strong", lazy(("result 'oom-kill'", "killed by the OOM killer"), r"Failed with result 'oom-kill'|process of this unit has been killed by the OOM killer")),
    ("cgroup", "strong", lazy(("Memory cgroup out of memory", "oom-kill:", "OOMKilled"), r"Memory cgroup out of memory|oom-kill:|OOMKilled")),
    # ggml's host buffers: the CPU (and AMX) backend's aligned malloc failing ("%s: failed to allocate buffer of size
    # %zu", ggml-backend.cpp / ggml-cpu), and llama.cpp's loader giving up on a CPU buffer ("unable to allocate %s
    # buffer" with the CPU buffer type, llama-model.cpp): host RAM (or Windows' commit limit), not the GPU.
    (
        "ggml_host_buffer",
        "strong",
        lazy(("alloc_buffer: failed to allocate buffer", "unable to allocate"), r"ggml_backend_(?:cpu|amx)\w*_alloc_buffer: failed to allocate buffer of size \d+|unable to allocate (?:CPU\w*|\w+_Host) buffer\b"),
    ),
    # Other programs' own host OOMs, which read like the last resort's statement (OOM_STATEMENT_RE) and are tried
    # before it: Go's runtime (ollama is a Go program: "fatal error: runtime: out of memory", "runtime: out of memory:
    # cannot allocate 4194304-byte block"), git's xmalloc ("fatal: Out of memory, malloc failed"), the kernel killer
    # before 4.19 ("Out of memory: Kill process 28341 (python3) score 953 or sacrifice child") and its
    # oom_kill_allocating_task form; TensorFlow on the CPU ("OOM when allocating tensor ... device:CPU:0").
    (
        "host_statement",
        "strong",
        lazy(
            ("out of memory", "Out of memory", "OOM when allocating"),
            r"^fatal error: (?:runtime: )?out of memory\b|^runtime: out of memory: cannot allocate|Out of memory, malloc failed"
            r"|[Oo]ut of memory(?: \(oom_kill_allocating_task\))?: Kill process \d+|OOM when allocating tensor.*(?:device:CPU|by allocator cpu)",
        ),
    ),
    # ENOMEM from the host: mmap of a checkpoint, fork of a loader worker.
    ("enomem", "strong", lazy("Cannot allocate memory", r"\[Errno 12\] Cannot allocate memory|Cannot allocate memory \(12\)|unable to mmap \d+ bytes.*Cannot allocate memory")),
    # ollama's own check before it loads a model on the host: "model requires more system memory (12.3 GiB) than is
    # available (7.8 GiB)" to the client, and its server's warning before "Load failed" (llm/server.go: msg="model
    # request too large for system" requested="5.3 GiB" available="4.8 GiB").
    (
        "ollama_system_memory",
        "strong",
        lazy(("more system memory", "too large for system"), r"model requires more system memory \([^)]*\) than is available|model request too large for system"),
    ),
    # Ray's memory monitor kills workers before the kernel does.
    # Its report may reach a paste without its first sentence: the node's memory line, the link to Ray's
    # OOM-prevention page and its table of the largest processes (memory_monitor.cc's "Top 10 memory users:" and
    # "PID\tMEM(GB)\tCOMMAND" header, a paste's tabs turned to blanks) are its own too.
    (
        "ray_memory_monitor",
        "strong",
        lazy(
            ("memory pressure", "running low on memory", "Memory on the node", "ray-oom-prevention", "memory users:", "MEM(GB)"),
            r"killed due to memory pressure \(OOM\)|Task was killed due to the node running low on memory"
            r"|Memory on the node \(IP: [^)]*\) where the (?:task|actor)|docs\.ray\.io/\S*ray-oom-prevention"
            r"|Top \d+ memory users:|^\s*PID\s+MEM\(GB\)\s+COMMAND\b",
        ),
    ),
    # Ray's raylet on a worker that vanished ("A worker died or was killed while executing a task by an unexpected system
    # error", its detail naming "(1) The process is killed by SIGKILL by OOM killer due to high memory usage"): a kill,
    # weak alone as a bare "Killed" is (the worker may have crashed).
    ("ray_worker_died", "weak", lazy(("A worker died or was killed", "killed by SIGKILL by OOM killer"), r"A worker died or was killed while executing a task|killed by SIGKILL by OOM killer")),
    # Go's os/exec reports a child ended by SIGKILL as "signal: killed" (ollama: "llama runner process has
    # terminated: signal: killed").
    # zsh reports a job or command ended by SIGKILL in lower case (Src/signames: "killed"): "[1]  + 14875 killed
    # python main.py" for a job, "zsh: killed     python main.py" in the foreground.
    ("sigkill", "weak", lazy(("Killed", " killed ", "signal: killed", "137", "-9", "signal 9", "SIGKILL"), r"(?:^|[\s\]|])Killed\s*$|\bsignal: [Kk]illed\b|\b\d+ Killed\s|(?:\[\d+\]\s+[+-]?\s*\d+|\bzsh:)\s+killed\s+\S|exit(?:ed)?\s*(?:with\s*)?(?:code|status)\s*[:=]?\s*137\b|exitcode\s*:\s*-9\b|exit code:?\s*-9\b|signal 9\b|SIGKILL")),
)
# The tables as rows the dispatch hands out: only the rows whose needle is in a line are tried.
DRIVER_DISPATCH: Dispatch[str] = Dispatch(tuple((pattern, source) for source, pattern in DRIVER_PATTERNS))
HOST_DISPATCH: Dispatch[tuple[str, str]] = Dispatch(tuple((pattern, (source, strength)) for source, strength, pattern in HOST_PATTERNS))

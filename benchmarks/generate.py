"""Generate large, realistic server logs for the benchmark (SGLang or vLLM), OOM near the end.

Days of decode/prefill batch statistics, periodic retractions/preemptions, many ranks, one restart,
and a runtime OOM with its traceback close to the end. Deterministic for a given seed.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

SGLANG_HEAD = """[2026-03-02 10:00:01] server_args=ServerArgs(model_path='Qwen/Qwen3-235B-A22B', tokenizer_path='Qwen/Qwen3-235B-A22B', mem_fraction_static=0.838, max_running_requests=None, chunked_prefill_size=8192, max_prefill_tokens=16384, tp_size={tp}, pp_size=1, dp_size=1, cuda_graph_max_bs_decode=256)
"""
SGLANG_RANK_START = """[2026-03-02 10:00:06 TP{r}] Init torch distributed ends. elapsed=0.85 s, mem usage=0.62 GB
[2026-03-02 10:00:06 TP{r}] Load weight begin. avail mem=78.51 GB
[2026-03-02 10:00:41 TP{r}] Load weight end. elapsed=34.90 s, type=Qwen3MoeForCausalLM, avail mem=47.80 GB, mem usage=30.71 GB.
[2026-03-02 10:00:41 TP{r}] KV Cache is allocated. #tokens: 287375, K size: 17.54 GB, V size: 17.54 GB
[2026-03-02 10:00:41 TP{r}] Memory pool end. avail mem=12.15 GB
"""
SGLANG_READY = """[2026-03-02 10:01:04 TP0] max_total_num_tokens=287375, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=3592, context_len=40960, available_gpu_mem=10.85 GB
[2026-03-02 10:01:08] The server is fired up and ready to roll!
"""
SGLANG_OOM = """[2026-03-09 11:20:31 TP{r}] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2987, in run_scheduler_process
    scheduler.event_loop_overlap()
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 2210, in forward_extend
    return self.model.forward(
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.25 GiB. GPU {r} has a total capacity of 79.19 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.15 GiB memory in use. Of the allocated memory 76.71 GiB is allocated by PyTorch, and 410.00 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)
[2026-03-09 11:20:31] Received sigquit from a child process. It usually means the child failed.
"""

VLLM_HEAD = """(APIServer pid=1) INFO 03-02 10:00:01 [utils.py:326] non-default args: {{'model': 'meta-llama/Llama-3.1-70B-Instruct', 'tensor_parallel_size': {tp}, 'gpu_memory_utilization': 0.92, 'max_num_seqs': 256}}
(EngineCore_DP0 pid=211) INFO 03-02 10:00:20 [core.py:74] Initializing a V1 LLM engine (v0.10.1) with config: model='meta-llama/Llama-3.1-70B-Instruct', dtype=torch.bfloat16, max_seq_len=131072, tensor_parallel_size={tp}, enforce_eager=False, kv_cache_dtype=auto
(EngineCore_DP0 pid=211) INFO 03-02 10:01:10 [gpu_model_runner.py:1950] Model loading took 32.8800 GiB and 48.101101 seconds
(EngineCore_DP0 pid=211) INFO 03-02 10:01:30 [gpu_worker.py:302] Available KV cache memory: 36.10 GiB
(EngineCore_DP0 pid=211) INFO 03-02 10:01:30 [kv_cache_utils.py:1087] GPU KV cache size: 473,152 tokens
(APIServer pid=1) INFO:     Application startup complete.
"""
VLLM_OOM = """(VllmWorker rank={r} pid=10{r}0) ERROR 03-09 11:20:31 [multiproc_executor.py:487] WorkerProc hit an exception.
[rank{r}]: Traceback (most recent call last):
[rank{r}]:   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line 1602, in execute_model
[rank{r}]:     hidden_states = self.model(
[rank{r}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU {r} has a total capacity of 79.19 GiB of which 2.02 GiB is free. Including non-PyTorch memory, this process has 77.16 GiB memory in use. Of the allocated memory 73.38 GiB is allocated by PyTorch, and 1.21 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)
"""


def _sglang_body(rng: random.Random, tp: int, n: int):
    for i in range(n):
        r = rng.randrange(tp)
        hh, mm, ss = (i // 3600) % 24, (i // 60) % 60, i % 60
        day = 2 + i // 86400 % 7
        ts = f"[2026-03-{day:02d} {hh:02d}:{mm:02d}:{ss:02d} TP{r}]"
        if i % 5 == 0:
            yield f"{ts} Prefill batch. #new-seq: {rng.randrange(1, 9)}, #new-token: {rng.randrange(512, 8192)}, #cached-token: {rng.randrange(0, 4096)}, token usage: {rng.random():.2f}, #running-req: {rng.randrange(1, 128)}, #queue-req: {rng.randrange(0, 40)}\n"
        elif i % 20011 == 0:
            yield f"{ts} KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_tokens_gained: {rng.randrange(100, 900)}, #new_token_ratio: 0.0980 -> 0.3487\n"
        else:
            yield f"{ts} Decode batch, #running-req: {rng.randrange(1, 256)}, #token: {rng.randrange(1000, 287000)}, token usage: {rng.random():.2f}, cuda graph: True, gen throughput (token/s): {rng.uniform(800, 4000):.2f}, #queue-req: {rng.randrange(0, 40)}\n"
        if i % 50000 == 0:
            yield f"[2026-03-{day:02d} {hh:02d}:{mm:02d}:{ss:02d}] INFO:     127.0.0.1:{rng.randrange(30000, 60000)} - \"POST /v1/chat/completions HTTP/1.1\" 200 OK\n"


def _vllm_body(rng: random.Random, tp: int, n: int):
    for i in range(n):
        hh, mm, ss = (i // 3600) % 24, (i // 60) % 60, i % 60
        if i % 3 == 0:
            yield f"(APIServer pid=1) INFO 03-0{2 + i // 86400 % 7} {hh:02d}:{mm:02d}:{ss:02d} [loggers.py:123] Engine 000: Avg prompt throughput: {rng.uniform(0, 9000):.1f} tokens/s, Avg generation throughput: {rng.uniform(100, 3000):.1f} tokens/s, Running: {rng.randrange(0, 256)} reqs, Waiting: {rng.randrange(0, 50)} reqs, GPU KV cache usage: {rng.uniform(0, 100):.1f}%, Prefix cache hit rate: {rng.uniform(0, 90):.1f}%\n"
        else:
            yield f"(APIServer pid=1) INFO:     10.0.{rng.randrange(0, 255)}.{rng.randrange(1, 255)}:{rng.randrange(30000, 60000)} - \"POST /v1/completions HTTP/1.1\" 200 OK\n"


def generate(path: Path, system: str, size_mb: int, tp: int = 8, seed: int = 0) -> int:
    rng = random.Random(seed)
    target = size_mb * 1024 * 1024
    written = 0
    with open(path, "w", encoding="utf-8") as fh:
        def w(text: str) -> None:
            nonlocal written
            fh.write(text)
            written += len(text)

        for restart in range(2):
            if system == "sglang":
                w(SGLANG_HEAD.format(tp=tp))
                for r in range(tp):
                    w(SGLANG_RANK_START.format(r=r))
                w(SGLANG_READY)
                body = _sglang_body(rng, tp, 10**12)
            else:
                w(VLLM_HEAD.format(tp=tp))
                body = _vllm_body(rng, tp, 10**12)
            goal = target * (0.3 if restart == 0 else 1.0)
            for line in body:
                w(line)
                if written >= goal:
                    break
        for r in range(tp):
            w((SGLANG_OOM if system == "sglang" else VLLM_OOM).format(r=r))
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("output")
    ap.add_argument("--system", choices=["sglang", "vllm"], default="sglang")
    ap.add_argument("--size-mb", type=int, default=100)
    ap.add_argument("--tp", type=int, default=8)
    args = ap.parse_args()
    n = generate(Path(args.output), args.system, args.size_mb, args.tp)
    print(f"wrote {n / 2**20:.1f} MiB to {args.output}")


if __name__ == "__main__":
    main()

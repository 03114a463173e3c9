"""Logs shaped like busy servers' (issue 27), each measured against `grep -E -c` in the same run.

    python benchmarks/shapes.py                                   # every row, 64 MB each, 3 runs
    python benchmarks/shapes.py --checkout /tmp/base --checkout . # two checkouts, paired run by run
    python benchmarks/shapes.py --rows sglang-retract-1,vllm-v0-preempt-5 --size-mb 32 --runs 5

A row is one generated incident (cached under ``benchmarks/out/shapes/``, git-ignored): a server's
start, hours of the lines a busy server prints, and a runtime OOM at the end. Every line is built
from the engines' own format strings (``log_formats.md``; the numbers vary line by line):

- SGLang: ``Decode batch, ...`` / ``Prefill batch. ...`` statistics from the ranks, uvicorn's access
  lines (``INFO:     IP:PORT - "POST /v1/chat/completions HTTP/1.1" 200 OK``), and a share of
  retractions (``KV cache pool is full. Retract requests. #retracted_reqs: ...``, the 2026 form);
- vLLM V1: the engine's ``Engine 000: Avg prompt throughput: ...`` line every ten seconds, access
  lines, and with request logging on ``Received request ...: prompt: '...', params:
  SamplingParams(...), prompt_token_ids: [...] ...`` and ``Added request ...`` for every request;
  a share of anchored warnings no parser makes an event of (``CUDA graph memory profiling is
  disabled ...``, its real text repeated);
- vLLM V0: ``Avg prompt throughput: ... Swapped: ... Pending: ...`` lines, access lines, and a share
  of preemptions (``Sequence group N is preempted by PreemptionMode.RECOMPUTE mode ...``).

The share of repeating anchored lines is of all lines (0.1 = one line in a thousand). Layouts: one
file; 16 node files (``node00.log`` .., 8 TP ranks each); 128 rank files (``rank000.log`` ..); the
same server's log rotated into 4 MB files (``server.log``, ``server.log.1`` ..). The old generator
(``benchmarks/generate.py``) is kept as one row per system.

Each checkout (``--checkout DIR``, default this one; its bytecode compiled first, as an installed wheel
has it) runs as ``python -m oomdoctor diagnose --format json PATHS`` with that directory as its working directory (the interpreter running this script, so
one virtual environment serves every checkout), alternated with ``grep -E -c`` with run.py's OOM
triggers on the same paths, ``--runs`` times; medians are printed, and ``x grep`` is the median of
each run's ratio to the grep run beside it. Peak RSS is the child's own (os.wait4). The JSON of the
checkouts is compared: ``same`` says whether every checkout printed the same bytes.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from generate import SGLANG_OOM, VLLM_HEAD, VLLM_OOM, generate  # noqa: E402
from run import TRIGGERS  # noqa: E402

OUT = HERE / "out" / "shapes"
T0 = 1772445600.0  # 2026-03-02 10:00:00 UTC

# --- SGLang ---------------------------------------------------------------------------------

_SG_ARGS = (
    "server_args=ServerArgs(model_path='Qwen/Qwen3-235B-A22B', tokenizer_path='Qwen/Qwen3-235B-A22B', mem_fraction_static=0.838, "
    "max_running_requests=None, chunked_prefill_size=8192, max_prefill_tokens=16384, tp_size={tp}, pp_size=1, dp_size=1, "
    "cuda_graph_max_bs_decode=256, host='0.0.0.0', port=30000, nnodes={nnodes}, node_rank={node})"
)
_SG_RANK_START = (
    "[{ts} TP{r}] Init torch distributed ends. elapsed=0.85 s, mem usage=0.62 GB\n"
    "[{ts} TP{r}] Load weight begin. avail mem=78.51 GB\n"
    "[{ts} TP{r}] Load weight end. elapsed=34.90 s, type=Qwen3MoeForCausalLM, avail mem=47.80 GB, mem usage=30.71 GB.\n"
    "[{ts} TP{r}] KV Cache is allocated. #tokens: 287375, K size: 17.54 GB, V size: 17.54 GB\n"
    "[{ts} TP{r}] Memory pool end. avail mem=12.15 GB\n"
    "[{ts} TP{r}] Capture cuda graph begin. This can take up to several minutes. avail mem=12.10 GB\n"
    "[{ts} TP{r}] Capture cuda graph end. Time elapsed: 21.52 s. mem usage=1.25 GB. avail mem=10.85 GB.\n"
)
_SG_READY = (
    "[{ts} TP{r}] max_total_num_tokens=287375, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=3592, "
    "context_len=40960, available_gpu_mem=10.85 GB\n"
    "[{ts}] The server is fired up and ready to roll!\n"
)


def _stamp(t: float, fmt: str = "%Y-%m-%d %H:%M:%S") -> str:
    return time.strftime(fmt, time.gmtime(t))


class _Clock:
    """Timestamps for a run of lines, formatted once per second (strftime per line is the generator's cost)."""

    def __init__(self, fmt: str, step: float) -> None:
        self.fmt, self.step, self.t, self._sec, self._text = fmt, step, T0 + 120, -1, ""

    def tick(self) -> str:
        self.t += self.step
        sec = int(self.t)
        if sec != self._sec:
            self._sec, self._text = sec, _stamp(sec, self.fmt)
        return self._text


def sglang_body(rng: random.Random, ranks: list[int], repeat: float, access: float, clock: _Clock):
    """SGLang's runtime lines: statistics from ``ranks``, access lines, retractions (shares of all lines)."""
    while True:
        u = rng.random()
        ts = clock.tick()
        r = ranks[int(u * 7919) % len(ranks)]
        if u < repeat:
            yield (
                f"[{ts} TP{r}] KV cache pool is full. Retract requests. #retracted_reqs: {rng.randrange(1, 4)}, "
                f"#new_tokens_gained: {rng.randrange(100, 900)}, #new_token_ratio: 0.{rng.randrange(1000, 4000)} -> 0.{rng.randrange(4000, 9000)}\n"
            )
        elif u < repeat + access:
            yield f'[{ts}] INFO:     127.0.0.1:{rng.randrange(30000, 60000)} - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
        elif u * 5 % 1 < 0.2:
            yield (
                f"[{ts} TP{r}] Prefill batch. #new-seq: {rng.randrange(1, 9)}, #new-token: {rng.randrange(512, 8192)}, "
                f"#cached-token: {rng.randrange(0, 4096)}, token usage: {rng.random():.2f}, #running-req: {rng.randrange(1, 128)}, "
                f"#queue-req: {rng.randrange(0, 40)}\n"
            )
        else:
            yield (
                f"[{ts} TP{r}] Decode batch, #running-req: {rng.randrange(1, 256)}, #token: {rng.randrange(1000, 287000)}, "
                f"token usage: {rng.random():.2f}, cuda graph: {rng.random() < 0.9}, gen throughput (token/s): {rng.uniform(800, 4000):.2f}, "
                f"#queue-req: {rng.randrange(0, 40)}\n"
            )


def sglang_head(ranks: list[int], tp: int, nnodes: int, node: int) -> str:
    ts = _stamp(T0)
    out = f"[{ts}] {_SG_ARGS.format(tp=tp, nnodes=nnodes, node=node)}\n"
    out += "".join(_SG_RANK_START.format(ts=_stamp(T0 + 41), r=r) for r in ranks)
    return out + _SG_READY.format(ts=_stamp(T0 + 64), r=ranks[0])


def sglang_oom(rank: int, clock: _Clock) -> str:
    return SGLANG_OOM.format(r=rank).replace("2026-03-09 11:20:31", clock.tick())


# --- vLLM -----------------------------------------------------------------------------------

_PROMPTS = (
    "Summarise the following support ticket in two sentences and name the product it is about.",
    "Translate this paragraph into French, keeping the technical terms in English where there is no common translation.",
    "Write a Python function that parses an ISO 8601 date and returns the weekday, with a docstring and two tests.",
    "You are a helpful assistant. Answer the question using only the context below; say you do not know otherwise.",
)
_SAMPLING = (
    "SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0, temperature={temp}, top_p=1.0, "
    "top_k=0, min_p=0.0, seed=None, stop=[], stop_token_ids=[], bad_words=[], include_stop_str_in_output=False, ignore_eos=False, "
    "max_tokens={max_tokens}, min_tokens=0, logprobs=None, prompt_logprobs=None, skip_special_tokens=True, "
    "spaces_between_special_tokens=True, truncate_prompt_tokens=None, guided_decoding=None, extra_args=None)"
)
_GRAPH_WARNING = (
    "CUDA graph memory profiling is disabled (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0). Without it, CUDA graph memory is not "
    "accounted for during KV cache allocation, which may require lowering --gpu-memory-utilization to avoid OOM. Consider re-enabling "
    "it (the default as of v0.21.0) and increasing --gpu-memory-utilization from 0.8500 to 0.8524."
)


def vllm_v1_body(rng: random.Random, repeat: float, requests_logged: bool, clock: _Clock):
    """vLLM V1 behind its API server: a request per access line (with its request log), stats every ten seconds."""
    last_stats = clock.t
    while True:
        ts = clock.tick()
        u = rng.random()
        if u < repeat:
            yield f"(EngineCore_DP0 pid=211) WARNING {ts} [gpu_worker.py:411] {_GRAPH_WARNING}\n"
            continue
        if clock.t - last_stats >= 10:
            last_stats = clock.t
            yield (
                f"(APIServer pid=1) INFO {ts} [loggers.py:123] Engine 000: Avg prompt throughput: {rng.uniform(0, 9000):.1f} tokens/s, "
                f"Avg generation throughput: {rng.uniform(100, 3000):.1f} tokens/s, Running: {rng.randrange(0, 256)} reqs, "
                f"Waiting: {rng.randrange(0, 50)} reqs, GPU KV cache usage: {rng.uniform(0, 100):.1f}%, Prefix cache hit rate: {rng.uniform(0, 90):.1f}%\n"
            )
            continue
        rid = f"chatcmpl-{rng.getrandbits(128):032x}"
        if requests_logged:
            prompt = _PROMPTS[rng.randrange(len(_PROMPTS))]
            ids = ", ".join(str(rng.randrange(100, 151000)) for _ in range(rng.randrange(40, 120)))
            yield (
                f"(APIServer pid=1) INFO {ts} [logger.py:43] Received request {rid}: prompt: '<|im_start|>user\\n{prompt}<|im_end|>\\n"
                f"<|im_start|>assistant\\n', params: {_SAMPLING.format(temp=rng.choice((0.0, 0.7, 1.0)), max_tokens=rng.randrange(64, 4096))}, "
                f"prompt_token_ids: [{ids}], prompt_embeds shape: None, lora_request: None.\n"
            )
            yield f"(APIServer pid=1) INFO {ts} [async_llm.py:273] Added request {rid}.\n"
        yield f'(APIServer pid=1) INFO:     10.0.{rng.randrange(0, 255)}.{rng.randrange(1, 255)}:{rng.randrange(30000, 60000)} - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'


_V0_HEAD = (
    "INFO {ts} api_server.py:528] vLLM API server version 0.6.3\n"
    "INFO {ts} api_server.py:529] args: Namespace(host=None, port=8000, model='meta-llama/Llama-3.1-8B-Instruct', tensor_parallel_size=1, "
    "gpu_memory_utilization=0.9, max_model_len=32768, max_num_seqs=256, enforce_eager=False, kv_cache_dtype='auto')\n"
    "INFO {ts} llm_engine.py:237] Initializing an LLM engine (v0.6.3) with config: model='meta-llama/Llama-3.1-8B-Instruct', "
    "dtype=torch.bfloat16, max_seq_len=32768, tensor_parallel_size=1, enforce_eager=False, kv_cache_dtype=auto\n"
    "INFO {ts} model_runner.py:1067] Loading model weights took 14.9888 GB\n"
    "INFO {ts} gpu_executor.py:122] # GPU blocks: 27938, # CPU blocks: 2048\n"
    "INFO {ts} gpu_executor.py:126] Maximum concurrency for 32768 tokens per request: 13.64x\n"
    "INFO {ts} model_runner.py:1390] Capturing the model for CUDA graphs. This may lead to unexpected consequences if the model is not static.\n"
    "INFO {ts} model_runner.py:1518] Graph capturing finished in 14 secs.\n"
    "INFO:     Application startup complete.\n"
)
_V0_OOM = (
    "ERROR {ts} async_llm_engine.py:64] Engine background task failed\n"
    "Traceback (most recent call last):\n"
    '  File "/usr/local/lib/python3.10/dist-packages/vllm/worker/model_runner.py", line 1654, in execute_model\n'
    "    hidden_or_intermediate_states = model_executable(\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 0 has a total capacity of 79.19 GiB of which 2.02 GiB "
    "is free. Including non-PyTorch memory, this process has 77.16 GiB memory in use. Of the allocated memory 73.38 GiB is allocated by "
    "PyTorch, and 1.21 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n"
)


def vllm_v0_body(rng: random.Random, repeat: float, clock: _Clock):
    """vLLM V0: its metrics line every five seconds, access lines, preemptions (a share of all lines)."""
    last_stats, preempted = clock.t, 0
    while True:
        ts = clock.tick()
        if rng.random() < repeat:
            preempted += 50  # V0 prints the 1st, 51st, 101st ... preemption
            yield (
                f"WARNING {ts} scheduler.py:1057] Sequence group {rng.randrange(10**6)} is preempted by PreemptionMode.RECOMPUTE mode because "
                "there is not enough KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization or "
                f"tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption={preempted + 1}\n"
            )
        elif clock.t - last_stats >= 5:
            last_stats = clock.t
            yield (
                f"INFO {ts} metrics.py:351] Avg prompt throughput: {rng.uniform(0, 9000):.1f} tokens/s, Avg generation throughput: "
                f"{rng.uniform(100, 3000):.1f} tokens/s, Running: {rng.randrange(0, 256)} reqs, Swapped: 0 reqs, Pending: {rng.randrange(0, 50)} reqs, "
                f"GPU KV cache usage: {rng.uniform(0, 100):.1f}%, CPU KV cache usage: 0.0%.\n"
            )
        else:
            yield f'INFO:     10.0.{rng.randrange(0, 255)}.{rng.randrange(1, 255)}:{rng.randrange(30000, 60000)} - "POST /v1/completions HTTP/1.1" 200 OK\n'


# --- rows -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    name: str
    system: str  # sglang, vllm (V1), vllm0 (V0), old-sglang / old-vllm (generate.py)
    repeat: float = 0.0  # share of all lines, in percent
    access: float = 14.0  # percent of lines (SGLang)
    requests_logged: bool = False  # vLLM V1's --enable-log-requests
    layout: str = "one"  # one, nodes16, ranks128, rotated4mb
    size_mb: float | None = None  # this row's own size (else --size-mb)
    note: str = field(default="", compare=False)


ROWS: tuple[Row, ...] = (
    Row("old-sglang", "old-sglang", note="benchmarks/generate.py"),
    Row("sglang-retract-0", "sglang", 0.0),
    Row("sglang-retract-0.01", "sglang", 0.01),
    Row("sglang-retract-0.1", "sglang", 0.1),
    Row("sglang-retract-1", "sglang", 1.0),
    Row("sglang-retract-5", "sglang", 5.0),
    Row("sglang-access-0", "sglang", 0.1, access=0.0),
    Row("sglang-access-50", "sglang", 0.1, access=50.0),
    Row("sglang-16-nodes", "sglang", 0.1, layout="nodes16"),
    Row("sglang-16-nodes-as-one", "sglang", 0.1, layout="nodes16-one", note="the 16 node files concatenated"),
    Row("sglang-128-ranks", "sglang", 0.1, layout="ranks128"),
    Row("sglang-128-ranks-as-one", "sglang", 0.1, layout="ranks128-one", note="the 128 rank files concatenated"),
    Row("sglang-4mb-files", "sglang", 0.1, layout="rotated4mb"),
    Row("sglang-8mb", "sglang", 0.1, size_mb=8.0),
    Row("sglang-9mb", "sglang", 0.1, size_mb=9.0),
    Row("old-vllm", "old-vllm", note="benchmarks/generate.py"),
    Row("vllm-requests-off", "vllm", 0.0),
    Row("vllm-requests-on", "vllm", 0.0, requests_logged=True),
    Row("vllm-warning-0.1", "vllm", 0.1),
    Row("vllm-warning-1", "vllm", 1.0),
    Row("vllm-warning-5", "vllm", 5.0),
    Row("vllm-v0-preempt-0.01", "vllm0", 0.01),
    Row("vllm-v0-preempt-0.1", "vllm0", 0.1),
    Row("vllm-v0-preempt-1", "vllm0", 1.0),
    Row("vllm-v0-preempt-5", "vllm0", 5.0),
)


def _fill(fh, body, budget: int) -> None:
    """Write lines of ``body`` to ``fh`` until ``budget`` bytes are written (in blocks: one write per ~1 MB)."""
    written, block, size = 0, [], 0
    for line in body:
        block.append(line)
        size += len(line)
        if size >= 1 << 20 or written + size >= budget:
            fh.write("".join(block))
            written += size
            block, size = [], 0
            if written >= budget:
                return


def _sglang_files(row: Row, directory: Path, total: int, rng: random.Random) -> list[Path]:
    clock = _Clock("%Y-%m-%d %H:%M:%S", 0.05)
    repeat, access = row.repeat / 100, row.access / 100
    if row.layout in ("one", "rotated4mb"):
        ranks = list(range(8))
        path = directory / "server.log"
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(sglang_head(ranks, 8, 1, 0))
            _fill(fh, sglang_body(rng, ranks, repeat, access, clock), total - 4000)
            fh.write(sglang_oom(3, clock))
        return _rotated(path, 4 << 20) if row.layout == "rotated4mb" else [path]
    files, per_node = (16, 8) if row.layout.startswith("nodes16") else (128, 1)
    paths = []
    for f in range(files):
        ranks = [f * per_node + k for k in range(per_node)]
        node = f * per_node // 8
        path = directory / (f"node{f:02d}.log" if per_node == 8 else f"rank{f:03d}.log")
        clock = _Clock("%Y-%m-%d %H:%M:%S", 0.05 * files)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(sglang_head(ranks, 128, 16, node))
            _fill(fh, sglang_body(rng, ranks, repeat, access, clock), total // files - 4000)
            if f == files * 11 // 16:
                fh.write(sglang_oom(ranks[0], clock))
        paths.append(path)
    if row.layout.endswith("-one"):
        # The same bytes as one file: what a collector that merges the ranks' output writes.
        one = directory / "server.log"
        with open(one, "wb") as out:
            for path in paths:
                out.write(path.read_bytes())
                path.unlink()
        return [one]
    return paths


def _rotated(path: Path, piece: int) -> list[Path]:
    """``path`` cut into ``piece``-byte files as RotatingFileHandler leaves them: server.log newest, .1 .. older."""
    data = path.read_bytes()
    cuts, start = [], 0
    while start < len(data):
        end = data.rfind(b"\n", start, start + piece) + 1 if start + piece < len(data) else len(data)
        cuts.append(data[start:end])
        start = end
    path.unlink()
    out = []
    for age, chunk in enumerate(reversed(cuts)):
        p = path.with_name(path.name + (f".{age}" if age else ""))
        p.write_bytes(chunk)
        out.append(p)
    return out


def generate_row(row: Row, size_mb: float, out: Path = OUT) -> list[Path]:
    """The files of ``row`` (generated once under ``out``); a directory input for multi-file layouts."""
    size = row.size_mb or size_mb
    directory = out / f"{row.name}-{size:g}mb"
    done = directory / ".done"
    if done.exists():
        return [directory] if row.layout not in ("one", "nodes16-one", "ranks128-one") else sorted(p for p in directory.iterdir() if p.name != ".done")
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.iterdir():
        old.unlink()
    total = int(size * 1e6)
    rng = random.Random(27)
    if row.system.startswith("old-"):
        generate(directory / "server.log", row.system[4:], max(1, round(size * 1e6 / 2**20)))
    elif row.system == "sglang":
        _sglang_files(row, directory, total, rng)
    else:
        clock = _Clock("%m-%d %H:%M:%S", 0.02)
        with open(directory / "server.log", "w", encoding="utf-8") as fh:
            if row.system == "vllm":
                fh.write(VLLM_HEAD.format(tp=1))
                _fill(fh, vllm_v1_body(rng, row.repeat / 100, row.requests_logged, clock), total - 4000)
                fh.write(VLLM_OOM.format(r=0))
            else:
                fh.write(_V0_HEAD.format(ts=_stamp(T0, "%m-%d %H:%M:%S")))
                _fill(fh, vllm_v0_body(rng, row.repeat / 100, clock), total - 4000)
                fh.write(_V0_OOM.format(ts=clock.tick()))
    done.touch()
    return generate_row(row, size_mb, out)


# --- measuring ------------------------------------------------------------------------------


# The checkouts run without site's .pth files (-S; site-packages on PYTHONPATH instead): a development
# venv's editable-install finder costs every start ~40 ms that an installed wheel does not.
_ENV = {**os.environ, "PYTHONPATH": sysconfig.get_paths()["purelib"]}
SMALL = HERE.parent / "tests" / "fixtures" / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log"


def timed(cmd: list[str], cwd: Path | None = None) -> tuple[float, float, float, bytes, int]:
    """Wall seconds, CPU seconds (user + system), peak RSS (MB), stdout and exit code of ``cmd``."""
    started = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=_ENV)
    out = p.stdout.read() if p.stdout else b""
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - started
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out, os.waitstatus_to_exitcode(status)


def anchored_lines(paths: list[Path], checkout: Path) -> int:
    """How many lines hold one of the checkout's anchors (``grep -F -c``)."""
    anchors = subprocess.run(
        [sys.executable, "-c", "import sys; from oomdoctor.pipeline.events import ANCHORS; sys.stdout.buffer.write(b'\\n'.join(ANCHORS))"],
        cwd=checkout, capture_output=True, check=True,
    ).stdout
    pattern = OUT / "anchors.txt"
    # grep -f reads one pattern a line: an anchor that ends a line (b" MiB\\n") left an empty pattern, which every
    # line matches (6,700 "anchored" lines per MB); such an anchor counts here as its text (any line holding " MiB").
    pattern.write_bytes(b"\n".join(a for a in anchors.split(b"\n") if a and b"\r" not in a) + b"\n")
    files = [str(p) for path in paths for p in (sorted(path.iterdir()) if path.is_dir() else [path]) if p.name != ".done"]
    res = subprocess.run(["grep", "-F", "-c", "-h", "-f", str(pattern), *files], capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"})
    return sum(int(n) for n in res.stdout.split())


def measure_row(row: Row, paths: list[Path], checkouts: list[Path], runs: int) -> dict:
    files = [p for path in paths for p in (path.iterdir() if path.is_dir() else [path]) if p.name != ".done"]
    size_mb = sum(p.stat().st_size for p in files) / 1e6
    args = [str(p) for p in paths]
    grep = ["grep", "-E", "-c", TRIGGERS, *[str(p) for p in files]]
    ours = [[sys.executable, "-S", "-m", "oomdoctor", "diagnose", "--format", "json", *args] for _ in checkouts]
    small = [sys.executable, "-S", "-m", "oomdoctor", "diagnose", "--format", "json", str(SMALL)]
    subprocess.run(["cat", *[str(p) for p in files]], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
    walls: list[list[float]] = [[] for _ in checkouts]
    starts: list[list[float]] = [[] for _ in checkouts]
    cpus: list[list[float]] = [[] for _ in checkouts]
    ratios: list[list[float]] = [[] for _ in checkouts]
    rss: list[float] = [0.0 for _ in checkouts]
    outputs: list[bytes | None] = [None for _ in checkouts]
    greps: list[float] = []
    for _ in range(runs):
        for i, checkout in enumerate(checkouts):
            g = timed(grep)[0]
            w, cpu, peak, out, rc = timed(ours[i], checkout)
            if rc not in (0, 3):
                raise SystemExit(f"{row.name}: {checkout}: exit {rc}")
            starts[i].append(timed(small, checkout)[0])
            greps.append(g)
            walls[i].append(w)
            cpus[i].append(cpu)
            ratios[i].append(w / g)
            rss[i] = max(rss[i], peak)
            outputs[i] = out if outputs[i] is None else outputs[i]
    return {
        "row": row.name,
        "mb": size_mb,
        "files": len(files),
        "anchored_per_mb": anchored_lines(paths, checkouts[-1]) / size_mb,
        "grep_s": statistics.median(greps),
        "walls": [statistics.median(w) for w in walls],
        "starts": [statistics.median(w) for w in starts],
        "cpus": [statistics.median(c) for c in cpus],
        "ratios": [statistics.median(r) for r in ratios],
        "rss": rss,
        "same": len({o for o in outputs}) == 1,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkout", type=Path, action="append", help="a checkout to measure (repeat to pair several; default: this one)")
    ap.add_argument("--size-mb", type=float, default=64)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rows", default="", help="comma-separated row names (default: every row)")
    ap.add_argument("--list", action="store_true", help="list the rows and exit")
    ap.add_argument("--generate-only", action="store_true", help="write the rows' logs and exit")
    args = ap.parse_args()
    if args.list:
        for row in ROWS:
            print(row.name)
        return
    wanted = [r for r in ROWS if not args.rows or r.name in args.rows.split(",")]
    if args.generate_only:
        for row in wanted:
            generate_row(row, args.size_mb)
        return
    # The logs are written by a child: a child's peak RSS (os.wait4) counts the memory of the process it was
    # forked from, and this one would hold hundreds of MB once it had built a row.
    gen = [sys.executable, __file__, "--generate-only", "--size-mb", str(args.size_mb), "--rows", ",".join(r.name for r in wanted)]
    subprocess.run(gen, check=True)
    checkouts = [c.resolve() for c in (args.checkout or [HERE.parent])]
    for c in checkouts:
        # As an installed wheel has it: without bytecode (PYTHONDONTWRITEBYTECODE) every run would compile the package.
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(c / "oomdoctor")], stdout=subprocess.DEVNULL, check=False)
    load = os.getloadavg()[0]
    names = " / ".join(c.name for c in checkouts)
    print(f"checkouts: {names}; {args.runs} runs each, paired with grep -E -c; load {load:.1f}")
    head = f"{'row':22} {'MB':>6} {'files':>5} {'anch/MB':>8} {'grep s':>7}"
    for c in checkouts:
        head += f" | {c.name[:10]:>10} {'MB/s':>6} {'net':>6} {'x grep':>6} {'cpu s':>6} {'RSS':>4}"
    print(head + " | same")
    for row in wanted:
        r = measure_row(row, generate_row(row, args.size_mb), checkouts, args.runs)
        line = f"{r['row']:22} {r['mb']:6.0f} {r['files']:5d} {r['anchored_per_mb']:8.1f} {r['grep_s']:7.3f}"
        for w, start, ratio, cpu, rss in zip(r["walls"], r["starts"], r["ratios"], r["cpus"], r["rss"]):  # noqa: B905
            net = r["mb"] / (w - start) if w > start else float("inf")
            line += f" | {w:9.2f}s {r['mb'] / w:6.0f} {net:6.0f} {ratio:6.2f} {cpu:6.2f} {rss:4.0f}"
        print(line + f" | {'yes' if r['same'] else 'NO'}", flush=True)
    print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

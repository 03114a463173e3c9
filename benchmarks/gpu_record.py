"""Record real GPU evidence on a machine with an NVIDIA GPU and PyTorch, as fixtures and measurements.

    PYTHONPATH=. python3 benchmarks/gpu_record.py OUT_DIR [SECTION,SECTION...]

Run from the repository root with the machine's own python3 (the one that holds torch); oomdoctor is
used from the checkout (its rules/ folder beside the package). Each section runs on its own and a
failure is written down, never fatal; everything lands in OUT_DIR/record/ and is packed into
OUT_DIR/gpu_record.tar.gz, with OUT_DIR/summary.txt saying what happened. Sections:

- env: nvidia-smi (table and CSV), the driver, torch and its CUDA.
- nvml_cost: the flight recorder's sampler (oomdoctor.live.sampling.Sampler) over real NVML, per sample.
- oom_too_big: one allocation larger than the card (torch.OutOfMemoryError as a server prints it),
  with the capture hook's memory_stats.json and snapshot; again with expandable_segments.
- oom_foreign: another process holds most of the card; the OOM message names it (when the driver
  shows processes); `oomdoctor collect` and `nvidia-smi` are recorded while it holds.
- oom_fragmentation: holes of 1 GiB inside one cached segment and a 3 GiB request on a full card:
  "reserved but unallocated" is large, the message suggests expandable_segments.
- oom_cublas: a full card, then the first matrix product (cuBLAS workspace / handle).
- oom_graphs: an OOM while a captured CUDA graph's private pool holds 60% of the card; an OOM inside
  a graph capture; an OOM under torch.cuda.set_per_process_memory_fraction(0.25).
- driver_oom_new_context: another process fills the card to the last MiB, then a new process creates
  its CUDA context (a driver-level "CUDA error: out of memory", no allocator figures).
- fork_capture: `oomdoctor run` around a server that imports torch with the capture hook injected
  through PYTHONPATH and forks CUDA workers afterwards: the hook must not initialise CUDA in the
  parent (a forked worker could not use CUDA then), and the worker's OOM must land in a bundle.
- fork_matrix: that server with no hook, with the hook, and with an observer attached eagerly (the
  hook before the fix), directly: which variants leave CUDA usable in the forked workers.
- diagnose: `oomdoctor diagnose --format json` on every recorded log, class and confidence listed.

Nothing here is run by the test suite: it needs a GPU. What it recorded is committed under
tests/fixtures/gpu-recorded/ (see tests/fixtures/README.md) and read by tests/test_evidence_gpu_recorded.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tarfile
import textwrap
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

GIB = 1 << 30
REPO = Path(__file__).resolve().parent.parent
SUMMARY: list[str] = []


def say(line: str) -> None:
    print(line, flush=True)
    SUMMARY.append(line)


def env_with_repo(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def run_child(name: str, code: str, rec: Path, timeout: float = 120, **extra: str) -> subprocess.CompletedProcess[bytes]:
    """Run ``code`` in a fresh python3 with the repo importable; its stdout+stderr is the recorded log."""
    script = rec / f"{name}.py"
    script.write_text(textwrap.dedent(code))
    log = rec / f"{name}.log"
    with open(log, "wb") as fh:
        p = subprocess.run([sys.executable, str(script)], stdout=fh, stderr=subprocess.STDOUT, env=env_with_repo(**extra), timeout=timeout, cwd=rec)
    say(f"{name}: exit {p.returncode}, {log.stat().st_size} bytes of output")
    return p


def smi(*args: str) -> bytes:
    try:
        return subprocess.run(["nvidia-smi", *args], capture_output=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"nvidia-smi failed: {exc}\n".encode()


@contextlib.contextmanager
def holding(name: str, code: str, rec: Path) -> Iterator[tuple[int, str]]:
    """Another process that holds GPU memory (``code`` prints one line once it holds, then waits on stdin) while the block runs."""
    script = rec / f"{name}.py"
    script.write_text(textwrap.dedent(code))
    holder = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env_with_repo())
    try:
        assert holder.stdout is not None
        yield holder.pid, holder.stdout.readline().decode().strip()
    finally:
        if holder.stdin:
            holder.stdin.close()
        holder.wait(timeout=60)


def section(fn):  # type: ignore[no-untyped-def]
    def wrapped(rec: Path) -> None:
        t = time.perf_counter()
        try:
            fn(rec)
        except Exception as exc:  # noqa: BLE001 - one failed section never stops the others
            say(f"{fn.__name__}: FAILED {type(exc).__name__}: {exc}")
            (rec / f"{fn.__name__}.error.txt").write_text(traceback.format_exc())
        say(f"{fn.__name__}: {time.perf_counter() - t:.1f} s")

    wrapped.__name__ = fn.__name__
    return wrapped


@section
def env(rec: Path) -> None:
    (rec / "nvidia-smi.txt").write_bytes(smi())
    (rec / "nvidia-smi-q.txt").write_bytes(smi("-q", "-d", "MEMORY,COMPUTE"))
    csv = smi("--query-gpu=name,memory.total,memory.used,memory.free,driver_version", "--format=csv").decode(errors="replace")
    (rec / "nvidia-smi-query.csv").write_text(csv)
    import torch

    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "python": sys.version}
    (rec / "env.json").write_text(json.dumps(info, indent=2))
    say(f"env: {info['device']}, torch {info['torch']} (CUDA {info['cuda']}); {csv.strip().splitlines()[-1] if csv.strip() else 'no nvidia-smi query'}")


@section
def nvml_cost(rec: Path) -> None:
    sys.path.insert(0, str(REPO))
    from oomdoctor.live.nvml import Nvml
    from oomdoctor.live.sampling import Sampler

    nvml = Nvml()
    if not nvml.start():
        raise RuntimeError(f"NVML did not start: {nvml.available}")
    sampler = Sampler(nvml, 1.0, 100, time.time)
    sampler.sample()  # first call pays for handles
    n = 500
    t = time.perf_counter()
    for _ in range(n):
        sampler.sample()
    per = (time.perf_counter() - t) / n
    last = sampler.samples[-1]
    nvml.stop()
    (rec / "nvml_cost.json").write_text(json.dumps({"samples": n, "seconds_per_sample": per, "last_sample": last}, indent=2))
    say(f"nvml_cost: one sample of {len(last['gpus'])} GPU(s) = {per * 1e6:.0f} us over {n} samples (the recorder samples every 500 ms: {per / 0.5 * 100:.3f}% of one core)")


TOO_BIG = """
import oomdoctor.capture, torch
oomdoctor.capture.install("capture_too_big{suffix}", snapshot=True)
x = torch.ones(1024, device="cuda")
print("total", torch.cuda.get_device_properties(0).total_memory, flush=True)
y = torch.empty(int(200 * (1 << 30)), dtype=torch.uint8, device="cuda")
"""


@section
def oom_too_big(rec: Path) -> None:
    run_child("oom_too_big", TOO_BIG.format(suffix=""), rec)
    run_child("oom_too_big_expandable", TOO_BIG.format(suffix="_expandable"), rec, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")


HOLDER = """
import sys, time, torch
free, total = torch.cuda.mem_get_info()
hold = torch.empty(int(free - 30 * (1 << 30)), dtype=torch.uint8, device="cuda")
print("holding", hold.numel(), flush=True)
sys.stdin.read()
"""

VICTIM = """
import oomdoctor.capture, torch
oomdoctor.capture.install("capture_foreign")
x = torch.ones(1024, device="cuda")
free, total = torch.cuda.mem_get_info()
print(f"free {free} of {total}", flush=True)
y = torch.empty(int(free + 8 * (1 << 30)), dtype=torch.uint8, device="cuda")
"""


@section
def oom_foreign(rec: Path) -> None:
    with holding("holder", HOLDER, rec) as (pid, line):
        say(f"oom_foreign: holder pid {pid}: {line}")
        (rec / "nvidia-smi-foreign.txt").write_bytes(smi())
        c = subprocess.run([sys.executable, "-m", "oomdoctor", "collect", "-o", str(rec / "collect_foreign")], capture_output=True, text=True, env=env_with_repo(), timeout=120)
        say(f"oom_foreign: collect exit {c.returncode}: {(c.stdout + c.stderr).strip()[:300]}")
        run_child("oom_foreign", VICTIM, rec)


FRAG = """
import oomdoctor.capture, torch
oomdoctor.capture.install("capture_fragmentation", snapshot=True)
G = 1 << 30
big = torch.empty(100 * G, dtype=torch.uint8, device="cuda")
del big  # one cached segment of 100 GiB
blocks = [torch.empty(G, dtype=torch.uint8, device="cuda") for _ in range(100)]  # carved out of it
for i in range(0, 100, 2):
    blocks[i] = None  # 50 holes of 1 GiB, none adjacent
free, total = torch.cuda.mem_get_info()
filler = torch.empty(int(free - G), dtype=torch.uint8, device="cuda")
print("reserved", torch.cuda.memory_reserved(), "allocated", torch.cuda.memory_allocated(), flush=True)
want = torch.empty(3 * G, dtype=torch.uint8, device="cuda")
"""


@section
def oom_fragmentation(rec: Path) -> None:
    run_child("oom_fragmentation", FRAG, rec)


# Fill the card in ever smaller pieces until not even 1 MiB more fits (children of both cuBLAS and driver cases).
FILL_CARD = """
held = []
step = 1 << 30
while step >= (1 << 20):
    try:
        held.append(torch.empty(step, dtype=torch.uint8, device="cuda"))
    except torch.OutOfMemoryError:
        step //= 2
"""

CUBLAS = """
import torch
a = torch.ones(64, 64, device="cuda")
""" + FILL_CARD + """
torch.cuda.empty_cache()
print("free after filling", torch.cuda.mem_get_info()[0], flush=True)
b = a @ a
torch.cuda.synchronize()
print("matmul ran", flush=True)
"""


@section
def oom_cublas(rec: Path) -> None:
    run_child("oom_cublas", CUBLAS, rec)


GRAPH_POOL = """
import torch
G = 1 << 30
free, total = torch.cuda.mem_get_info()
static_in = torch.ones(1024, device="cuda")
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    pooled = torch.empty(int(total * 0.6), dtype=torch.uint8, device="cuda")  # lives in the graph's private pool
    out = static_in * 2
g.replay()
torch.cuda.synchronize()
print("captured; private pool holds", pooled.numel(), flush=True)
x = torch.empty(int(total * 0.5), dtype=torch.uint8, device="cuda")
"""

DURING_CAPTURE = """
import torch
static_in = torch.ones(1024, device="cuda")
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    out = static_in * 2
    big = torch.empty(int(200 * (1 << 30)), dtype=torch.uint8, device="cuda")
"""

FRACTION = """
import torch
torch.cuda.set_per_process_memory_fraction(0.25)
x = torch.ones(1024, device="cuda")
y = torch.empty(int(50 * (1 << 30)), dtype=torch.uint8, device="cuda")
"""

NEW_CONTEXT = """
import torch
x = torch.ones(1, device="cuda")  # a new process's CUDA context on a card another process filled
print("context created", flush=True)
"""


@section
def oom_graphs(rec: Path) -> None:
    run_child("oom_graph_private_pool", GRAPH_POOL, rec)
    run_child("oom_during_graph_capture", DURING_CAPTURE, rec)
    run_child("oom_memory_fraction", FRACTION, rec)


FILL_ALL = """
import sys, torch
""" + FILL_CARD + """
print("holding; free now", torch.cuda.mem_get_info()[0], flush=True)
sys.stdin.read()
"""


@section
def driver_oom_new_context(rec: Path) -> None:
    with holding("fill_all", FILL_ALL, rec) as (pid, line):
        say(f"driver_oom_new_context: holder pid {pid}: {line}")
        (rec / "nvidia-smi-full.txt").write_bytes(smi())
        run_child("driver_oom_new_context", NEW_CONTEXT, rec)


SERVER = """
import multiprocessing as mp, os, sys
import torch
print(f"parent {os.getpid()}: torch imported, cuda initialized in parent: {torch.cuda.is_initialized()}", flush=True)

def work(i):
    x = torch.ones(1 << 20, device="cuda")  # fails here if the parent initialised CUDA before forking
    print(f"worker {i} pid {os.getpid()}: CUDA works in the forked worker", flush=True)
    if i == 1:
        y = torch.empty(int(200 * (1 << 30)), dtype=torch.uint8, device="cuda")
    return i

if __name__ == "__main__":
    ctx = mp.get_context("fork")
    with ctx.Pool(2) as pool:
        try:
            print(pool.map(work, [0, 1]), flush=True)
        except Exception as exc:
            print(f"worker failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            sys.exit(1)
"""


@section
def fork_capture(rec: Path) -> None:
    script = rec / "fork_server.py"
    script.write_text(textwrap.dedent(SERVER))
    site = subprocess.run([sys.executable, "-m", "oomdoctor.capture", "--site-dir"], capture_output=True, text=True, env=env_with_repo(), check=True).stdout.strip()
    env = env_with_repo(OOMDOCTOR_CAPTURE_DIR=str(rec / "capture_fork"), OOMDOCTOR_CAPTURE_SNAPSHOT="1")
    env["PYTHONPATH"] = site + os.pathsep + env["PYTHONPATH"]
    p = subprocess.run(
        [sys.executable, "-m", "oomdoctor", "run", "--out", str(rec / "run_fork"), "--", sys.executable, str(script)], capture_output=True, env=env, timeout=240, cwd=rec
    )
    (rec / "fork_capture.stdout").write_bytes(p.stdout)
    (rec / "fork_capture.stderr").write_bytes(p.stderr)
    bundles = sorted(str(x.relative_to(rec)) for x in (rec / "capture_fork").glob("capture-*/*")) if (rec / "capture_fork").exists() else []
    say(f"fork_capture: run exit {p.returncode}; capture files: {bundles}")
    out = (p.stdout + p.stderr).decode(errors="replace")
    for line in out.splitlines():
        if "cuda initialized in parent" in line or "CUDA works" in line or "Cannot re-initialize" in line or line.startswith("oomdoctor:"):
            say(f"fork_capture:   {line[:240]}")


EAGER_ATTACH = "import torch\ntorch._C._cuda_attach_out_of_memory_observer(lambda *a: None)\n"


@section
def fork_matrix(rec: Path) -> None:
    """The same fork-based server with no hook, with the hook (PYTHONPATH), and with an observer attached eagerly (the old hook)."""
    script = rec / "fork_server.py"
    script.write_text(textwrap.dedent(SERVER))
    site = subprocess.run([sys.executable, "-m", "oomdoctor.capture", "--site-dir"], capture_output=True, text=True, env=env_with_repo(), check=True).stdout.strip()
    eager = rec / "eager"
    eager.mkdir(exist_ok=True)
    (eager / "sitecustomize.py").write_text(EAGER_ATTACH)
    variants = {
        "no_hook": {},
        "hook": {"PYTHONPATH": site, "OOMDOCTOR_CAPTURE_DIR": str(rec / "capture_matrix"), "OOMDOCTOR_CAPTURE_SNAPSHOT": "1"},
        "eager_attach": {"PYTHONPATH": str(eager)},
    }
    results = {}
    for name, extra in variants.items():
        env = env_with_repo()
        if "PYTHONPATH" in extra:
            env["PYTHONPATH"] = extra["PYTHONPATH"] + os.pathsep + env["PYTHONPATH"]
        env.update({k: v for k, v in extra.items() if k != "PYTHONPATH"})
        p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120, cwd=rec)
        out = p.stdout + p.stderr
        (rec / f"fork_{name}.log").write_text(out)
        results[name] = {"exit": p.returncode, "workers_with_cuda": out.count("CUDA works in the forked worker"), "init_error": "initialization error" in out}
        say(f"fork_matrix {name}: {results[name]}")
    captured = sorted(str(x.relative_to(rec)) for x in (rec / "capture_matrix").glob("capture-*/*")) if (rec / "capture_matrix").exists() else []
    results["hook_capture_files"] = captured  # type: ignore[assignment]
    say(f"fork_matrix hook capture files: {captured}")
    (rec / "fork_matrix.json").write_text(json.dumps(results, indent=2))


@section
def diagnose(rec: Path) -> None:
    targets = sorted(rec.glob("oom_*.log")) + sorted(rec.glob("driver_*.log")) + sorted(p for p in rec.glob("capture_*/capture-*") if p.is_dir()) + sorted(rec.glob("run_fork/2*"))
    results = {}
    for t in targets:
        p = subprocess.run([sys.executable, "-m", "oomdoctor", "diagnose", "--format", "json", str(t)], capture_output=True, text=True, env=env_with_repo(), timeout=120)
        name = str(t.relative_to(rec))
        try:
            v = json.loads(p.stdout)["verdict"]
            results[name] = {"exit": p.returncode, "class": v.get("class"), "confidence": v.get("confidence")}
        except (ValueError, KeyError):
            results[name] = {"exit": p.returncode, "error": (p.stderr or p.stdout)[-300:]}
        say(f"diagnose {name}: {results[name]}")
    (rec / "diagnoses.json").write_text(json.dumps(results, indent=2, sort_keys=True))


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "gpu_record_out")
    only = set(sys.argv[2].split(",")) if len(sys.argv) > 2 else None  # e.g. fork_matrix,fork_capture,diagnose
    rec = out / "record"
    rec.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    for fn in (env, nvml_cost, oom_too_big, oom_foreign, oom_fragmentation, oom_cublas, oom_graphs, driver_oom_new_context, fork_matrix, fork_capture, diagnose):
        if only is None or fn.__name__ in only:
            fn(rec)
    say(f"total: {time.perf_counter() - t:.1f} s")
    (out / "summary.txt").write_text("\n".join(SUMMARY) + "\n")
    with tarfile.open(out / "gpu_record.tar.gz", "w:gz") as tar:
        tar.add(rec, arcname="record")


if __name__ == "__main__":
    main()

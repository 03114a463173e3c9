"""Scale check: one 16-node x 8-rank incident in one call, and a fleet of small incidents with --summary.

    python benchmarks/scale.py                         # 200 MB incident; fleets of 200 and 2000 logs
    python benchmarks/scale.py --size-mb 50 --fleet 100 --fleet 400   # quicker

(a) A generated SGLang TP128 incident: one log per node (``node00.log`` .. ``node15.log``) with
``[ts TPn]`` prefixes and ``nnodes``/``node_rank`` in the server args; one rank on one node OOMs at
runtime, every other node then logs NCCL watchdog timeouts. Diagnosed with ``oomdoctor diagnose DIR``:
wall time and peak RSS, and whether the verdict names the OOMing node.

(b) A generated fleet of N small incident logs, each a copy of one shipped fixture
(tests/fixtures/*/pos_*.log, round robin, so the classes vary) with one line of its own, and 1% of
them not logs at all (binary). ``oomdoctor diagnose --summary DIR --format json`` on the whole fleet:
logs per second per core and peak RSS (the largest process: the parent or one pool worker), and how
both grow from the smallest fleet to the largest.

Peak RSS is each run's own (os.wait4 on that child: ru_maxrss of it and the descendants it waited for).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
FIXTURES = REPO / "tests" / "fixtures"
OUT = HERE / "out" / "scale"

NODES, RANKS = 16, 8
OOM_NODE, OOM_RANK = 11, 3  # node 11, its TP rank 11*8+3 = 91


def _args(node: int) -> str:
    return (
        "server_args=ServerArgs(model_path='deepseek-ai/DeepSeek-V3', tokenizer_path='deepseek-ai/DeepSeek-V3', mem_fraction_static=0.85, "
        f"max_running_requests=256, chunked_prefill_size=8192, max_prefill_tokens=16384, tp_size={NODES * RANKS}, dp_size=1, cuda_graph_max_bs=160, "
        f"host='0.0.0.0', port=30000, dist_init_addr='10.0.0.1:5000', nnodes={NODES}, node_rank={node}, disaggregation_mode='null')"
    )


def _ts(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))


def generate_incident(directory: Path, size_mb: float) -> int:
    """Write the 16-node incident into ``directory``; returns its size in bytes."""
    directory.mkdir(parents=True, exist_ok=True)
    per_node = int(size_mb * 1e6 / NODES)
    t0 = 1741338000.0  # 2025-03-07 09:00:00 UTC
    oom_t = t0 + 5 * 3600
    total = 0
    for node in range(NODES):
        ranks = [node * RANKS + r for r in range(RANKS)]
        head = [f"[{_ts(t0 + node % 3)}] {_args(node)}"]
        head += [f"[{_ts(t0 + 10)} TP{r}] Load weight begin. avail mem=78.58 GB" for r in ranks]
        head += [f"[{_ts(t0 + 59)} TP{r}] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=45.70 GB, mem usage=32.88 GB." for r in ranks]
        head += [f"[{_ts(t0 + 59)} TP{r}] KV Cache is allocated. #tokens: 269000, K size: 18.13 GB, V size: 18.13 GB" for r in ranks]
        head += [f"[{_ts(t0 + 59)} TP{ranks[0]}] Memory pool end. avail mem=8.55 GB"]
        head += [
            f"[{_ts(t0 + 59)} TP{ranks[0]}] max_total_num_tokens=269000, chunked_prefill_size=8192, max_prefill_tokens=16384, "
            "max_running_requests=256, context_len=131072, available_gpu_mem=7.40 GB"
        ]
        if node == 0:
            head.append(f"[{_ts(t0 + 84)}] The server is fired up and ready to roll!")
        with open(directory / f"node{node:02d}.log", "w", encoding="utf-8") as fh:
            fh.write("\n".join(head) + "\n")
            written = fh.tell()
            # Hours of decode traffic, every rank, up to the incident (the bulk of the 200 MB).
            n, span = 0, oom_t - (t0 + 90)
            line_len = 150
            lines = max(1, (per_node - written - 4000) // line_len)
            block: list[str] = []
            for n in range(lines):
                t = t0 + 90 + span * n / lines
                r = ranks[n % RANKS]
                block.append(
                    f"[{_ts(t)} TP{r}] Decode batch. #running-req: {200 + n % 56}, #token: {250000 + n % 9000}, "
                    f"token usage: 0.{90 + n % 8}, gen throughput (token/s): {3000 + n % 97}.20, #queue-req: {n % 41}"
                )
                if len(block) >= 10000:
                    fh.write("\n".join(block) + "\n")
                    block.clear()
            if block:
                fh.write("\n".join(block) + "\n")
            if node == OOM_NODE:
                r = ranks[OOM_RANK]
                fh.write(
                    f"[{_ts(oom_t + 2)} TP{r}] Scheduler hit an exception: Traceback (most recent call last):\n"
                    '  File "/sgl-workspace/sglang/python/sglang/srt/managers/tp_worker.py", line 178, in forward_batch_generation\n'
                    "    logits_output = self.model_runner.forward(forward_batch)\n"
                    f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU {OOM_RANK} has a total capacity of 79.19 GiB of which "
                    "1.10 GiB is free. Including non-PyTorch memory, this process has 78.07 GiB memory in use. Of the allocated memory 75.90 GiB is "
                    "allocated by PyTorch, and 602.00 MiB is reserved by PyTorch but unallocated.\n"
                    f"[{_ts(oom_t + 3)}] Received sigquit from a child process. It usually means the child failed.\n"
                )
            else:
                for r in ranks:
                    fh.write(
                        f"[rank{r}]:[E307 14:12:14.512000000 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation timeout: "
                        "WorkNCCL(SeqNum=88213, OpType=ALLREDUCE, NumelIn=14680064, NumelOut=14680064, Timeout(ms)=600000) ran for 600011 milliseconds before timing out.\n"
                    )
                fh.write(f"[{_ts(oom_t + 603)}] Rank {ranks[0]} scheduler is dead. Please check if there are relevant logs.\n")
            total += fh.tell()
    return total


def generate_fleet(directory: Path, n: int, seed: int = 0) -> dict[str, int]:
    """``n`` small incident logs from the shipped positive fixtures (round robin), 1% of them binary; returns counts by template dir."""
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    templates = sorted(FIXTURES.glob("*/pos_*.log"))
    rng = random.Random(seed)
    counts: dict[str, int] = {}
    for i in range(n):
        name = directory / f"incident-{i:05d}.log"
        if i % 100 == 99:
            name.write_bytes(bytes(rng.randrange(256) for _ in range(4096)))
            counts["(binary)"] = counts.get("(binary)", 0) + 1
            continue
        src = templates[i % len(templates)]
        name.write_bytes(src.read_bytes() + f"\n# fleet incident {i} from {src.parent.name}\n".encode())
        counts[src.parent.name] = counts.get(src.parent.name, 0) + 1
    return counts


def measure(cmd: list[str], stdout_path: Path | None = None) -> tuple[float, float, int]:
    """Run ``cmd``; return (wall seconds, peak RSS in MB of it and its waited descendants, exit code)."""
    start = time.perf_counter()
    with open(stdout_path or os.devnull, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss / 1024, proc.returncode


def oomdoctor() -> list[str]:
    return [sys.executable, "-m", "oomdoctor"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=float, default=200)
    ap.add_argument("--fleet", type=int, action="append", help="fleet sizes (repeatable; default 200 and 2000)")
    ap.add_argument("--keep", action="store_true", help="keep the generated inputs under benchmarks/out/scale")
    args = ap.parse_args()
    fleets = args.fleet or [200, 2000]
    cores = os.cpu_count() or 1
    OUT.mkdir(parents=True, exist_ok=True)
    rows: list[tuple[str, str]] = [("machine", f"{cores} cores, Python {sys.version.split()[0]}")]

    incident = OUT / "tp128_16nodes"
    if incident.exists():
        shutil.rmtree(incident)
    t = time.perf_counter()
    size = generate_incident(incident, args.size_mb)
    rows.append(("(a) 16 nodes x 8 ranks: size, generation", f"{size / 1e6:.0f} MB in {NODES} logs, {time.perf_counter() - t:.1f} s"))
    report = OUT / "tp128.json"
    wall, rss, code = measure([*oomdoctor(), "diagnose", str(incident), "--format", "json"], report)
    view = json.loads(report.read_text())
    cause = [n for n in view.get("nodes") or [] if n.get("is_cause")]
    consequences = sum(1 for n in view.get("nodes") or [] if not n.get("is_cause"))
    verdict = f"{view['verdict']['class']} on {cause[0]['node'] if cause else '?'} {cause[0].get('first_failure_rank') if cause else ''}"
    rows.append(("(a) diagnose, one call: wall, MB/s", f"{wall:.2f} s, {size / 1e6 / wall:.0f} MB/s (exit {code})"))
    rows.append(("(a) peak RSS", f"{rss:.0f} MB"))
    rows.append(("(a) verdict; nodes listed as consequences", f"{verdict}; {consequences} of {NODES}"))

    per: list[tuple[int, float, float]] = []
    for n in fleets:
        fleet = OUT / f"fleet_{n}"
        generate_fleet(fleet, n)
        summary = OUT / f"summary_{n}.json"
        wall, rss, code = measure([*oomdoctor(), "diagnose", "--summary", str(fleet), "--format", "json"], summary)
        doc = json.loads(summary.read_text())
        agg = doc["aggregate"]
        rate = n / wall / cores
        per.append((n, rate, rss))
        classes = len({e["class"] for e in agg["by_class_system"]})
        rows.append(
            (
                f"(b) --summary, {n} logs",
                f"{wall:.1f} s, {rate:.1f} logs/s/core, peak RSS {rss:.0f} MB; {agg['diagnosed']} diagnosed "
                f"({classes} classes), {agg['failed']} listed as unreadable (exit {code})",
            )
        )
        if not args.keep:
            shutil.rmtree(fleet)
    if len(per) >= 2:
        (n0, r0, m0), (n1, r1, m1) = per[0], per[-1]
        rows.append((f"(b) growth {n0} -> {n1} logs ({n1 / n0:.0f}x)", f"logs/s/core x{r1 / r0:.2f}, peak RSS x{m1 / m0:.2f}"))
    if not args.keep:
        shutil.rmtree(incident)

    width = max(len(k) for k, _ in rows)
    print(f"| {'measure':{width}} | value |\n|{'-' * (width + 2)}|-------|")
    for k, v in rows:
        print(f"| {k:{width}} | {v} |")


if __name__ == "__main__":
    main()

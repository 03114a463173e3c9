"""Memory and report size on a crash loop: N restarts of the same startup KV failure in one log.

    python benchmarks/crash_loop.py [--restarts 20000]

The trust issue's target: 20,000 restarts under 60 MB peak RSS, with a collapsed report.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

RUN = (
    "[{ts}] server_args=ServerArgs(model_path='Qwen/Qwen3-32B', tokenizer_path='Qwen/Qwen3-32B', mem_fraction_static=0.7, "
    "max_running_requests=None, chunked_prefill_size=8192, tp_size=1, pp_size=1, dp_size=1)\n"
    "[{ts} TP0] Load weight begin. avail mem=78.00 GB\n"
    "[{ts} TP0] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=18.00 GB, mem usage=60.00 GB.\n"
    "[{ts} TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n"
)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--restarts", type=int, default=20000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "loop.log"
        with log.open("w") as fh:
            for i in range(args.restarts):
                fh.write(RUN.format(ts=f"2026-03-02 {10 + (i // 3600) % 10:02d}:{(i // 60) % 60:02d}:{i % 60:02d}"))
        out = subprocess.run([sys.executable, "-m", "oomdoctor", "diagnose", str(log)], capture_output=True, text=True, check=False)
        rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(f"restarts: {args.restarts}  log: {log.stat().st_size / 1e6:.1f} MB  exit: {out.returncode}")
        print(f"peak RSS: {rss_mb:.1f} MB  text report: {len(out.stdout.splitlines())} lines")
        print(f"target < 60 MB: {'met' if rss_mb < 60 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

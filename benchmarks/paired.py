"""Two installs of oomdoctor measured side by side: small-log wall time and large-log throughput.

    python benchmarks/paired.py BEFORE_VENV AFTER_VENV [--size-mb 200] [--runs 21]

Each measurement alternates the two installs run by run, so load on the machine falls on both alike.
Both should be normal installs (``pip install .``: the wheel's bytecode is compiled at install time),
not editable checkouts, and are started by their ``bin/oomdoctor`` script as a user starts them.
Prints the median wall of a small log (the README example) and the MB/s of one generated SGLang log.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from generate import generate  # noqa: E402

SMALL = HERE.parent / "tests" / "fixtures" / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log"


def wall(cmd: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - started


def paired(commands: dict[str, list[str]], runs: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in commands}
    for cmd in commands.values():
        wall(cmd)  # warm the page cache and the bytecode
    for _ in range(runs):
        for name, cmd in commands.items():
            times[name].append(wall(cmd))
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before", type=Path, help="the virtual environment of the earlier install")
    ap.add_argument("after", type=Path, help="the virtual environment of the later install")
    ap.add_argument("--size-mb", type=int, default=200)
    ap.add_argument("--runs", type=int, default=21, help="small-log runs of each install")
    ap.add_argument("--big-runs", type=int, default=3, help="large-log runs of each install (the median is reported)")
    ap.add_argument("--out", type=Path, default=HERE / "out")
    args = ap.parse_args()

    exes = {"before": str(args.before / "bin" / "oomdoctor"), "after": str(args.after / "bin" / "oomdoctor")}
    small = paired({k: [v, "diagnose", "--format", "json", str(SMALL)] for k, v in exes.items()}, args.runs)
    bare = [wall([sys.executable, "-c", "pass"]) for _ in range(args.runs)]
    args.out.mkdir(parents=True, exist_ok=True)
    big = args.out / f"sglang-{args.size_mb}mb.log"
    if not big.exists():
        generate(big, "sglang", args.size_mb)
    size_mb = big.stat().st_size / 1e6
    large = paired({k: [v, "diagnose", "--format", "json", str(big)] for k, v in exes.items()}, args.big_runs)
    print(f"bare python -c pass: median {statistics.median(bare) * 1000:.0f} ms")
    for name in exes:
        print(f"{name:7} small log median {statistics.median(small[name]) * 1000:6.0f} ms over {args.runs} runs; "
              f"{size_mb:.0f} MB SGLang log median {statistics.median(large[name]):6.2f} s = {size_mb / statistics.median(large[name]):5.0f} MB/s")


if __name__ == "__main__":
    main()

"""Every fixture's report, written to a folder, for checking that a refactor changes no output.

    python benchmarks/fixture_outputs.py OUT_DIR            # write OUT_DIR/<case>.json and .txt
    diff -r BEFORE_DIR AFTER_DIR                            # byte-identical, or the change shows

A case is every log, gzip, issue body and bundle folder under tests/fixtures/ (the field corpus too),
diagnosed through the installed command, as a user runs it.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
FORMATS = {"json": "json", "text": "txt", "markdown": "md"}


def cases() -> list[Path]:
    found = []
    for p in sorted(FIXTURES.rglob("*")):
        if (p.is_file() and p.name.endswith((".log", ".log.gz", ".md", ".txt")) and p.name != "README.md") or (p.is_dir() and p.name.startswith(("pos_", "neg_"))):
            found.append(p)
    return found


def run_case(case: Path, out_dir: Path) -> None:
    name = str(case.relative_to(FIXTURES)).replace("/", "__")
    for fmt, ext in FORMATS.items():
        res = subprocess.run(
            [sys.executable, "-m", "oomdoctor", "diagnose", str(case.relative_to(REPO)), "--format", fmt],
            cwd=REPO,
            capture_output=True,
            check=False,
        )
        (out_dir / f"{name}.{ext}").write_bytes(res.stdout + b"\n--- stderr ---\n" + res.stderr + f"\n--- exit {res.returncode}\n".encode())


def main() -> None:
    out_dir = Path(sys.argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    todo = cases()
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda c: run_case(c, out_dir), todo))
    print(f"{len(todo)} cases x {len(FORMATS)} formats written to {out_dir}")


if __name__ == "__main__":
    main()

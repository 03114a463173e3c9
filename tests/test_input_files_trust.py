"""oomdoctor/input/files.py on hostile and damaged inputs (issue 24, items 2 to 4)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

from oomdoctor.input.files import MAX_LINE_BYTES, InputStats, iter_line_chunks

from conftest import FIXTURES

LOG = FIXTURES / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log"
OOM_LINE = b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.06 GiB is free.\n"


def _diagnose(*args: str, stdin: bytes | None = None, env: dict[str, str] | None = None, timeout: float = 120.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "oomdoctor", "diagnose", *args], input=stdin, capture_output=True, timeout=timeout, env=env)


def _lines(path: Path) -> list[bytes]:
    return b"".join(iter_line_chunks(str(path), InputStats(path=str(path)))).splitlines()


# --- item 3: a NUL run (what copytruncate leaves) never swallows the line after it -----------------


def test_nul_run_over_the_line_cap_keeps_the_next_line(tmp_path: Path) -> None:
    log = tmp_path / "nohup.log"
    log.write_bytes(b"[2026-03-02 10:00:01] Load weight begin.\n" + b"\x00" * (MAX_LINE_BYTES * 2 + 12345) + OOM_LINE)
    lines = _lines(log)
    assert lines[-1] == OOM_LINE.rstrip(b"\n")
    stats = InputStats(path=str(log))
    list(iter_line_chunks(str(log), stats))
    assert stats.long_lines == 0  # NULs are not line content: nothing was cut


def test_nul_run_before_an_oom_is_still_diagnosed(tmp_path: Path) -> None:
    log = tmp_path / "nohup.log"
    log.write_bytes(b"\x00" * (3 << 20) + OOM_LINE)
    res = _diagnose(str(log), "--format", "json")
    assert res.returncode == 3, res.stderr
    assert json.loads(res.stdout)["verdict"]["class"] != "none"


def test_nuls_inside_a_long_line_do_not_count_towards_its_cap(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    text = b"x" * 1000
    log.write_bytes(b"\x00" * (MAX_LINE_BYTES + 10) + text + b"\x00" * (MAX_LINE_BYTES + 10) + b"\nnext\n")
    assert _lines(log) == [text, b"next"]

"""`diagnose --summary DIR` never reads what is not a regular file inside DIR (issue 24, item 1).

A FIFO, a link to /dev/zero or to /dev/stdout used to hang the run (a worker blocked on the read
forever), and links out of DIR were read as incidents. Each is now listed as skipped, with its reason.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from oomdoctor.commands import fleet

from conftest import FIXTURES

LOG = FIXTURES / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log"


def _summary(*args: str, timeout: float = 60.0) -> tuple[int, str, str]:
    """`oomdoctor diagnose --summary ...` in its own session: on a hang the whole group (pool workers too) is killed."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "oomdoctor", "diagnose", "--summary", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError(f"oomdoctor diagnose --summary {' '.join(args)} hung (killed after {timeout:.0f} s)") from None
    return proc.returncode, out, err


def _hostile_dir(tmp_path: Path) -> Path:
    root = tmp_path / "incidents"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    shutil.copy(LOG, root / "good.log")
    shutil.copy(LOG, outside / "secret.log")
    (outside / "sub").mkdir()
    shutil.copy(LOG, outside / "sub" / "node0.log")
    os.mkfifo(root / "fifo.log")
    (root / "zero.log").symlink_to("/dev/zero")
    (root / "stdout.log").symlink_to("/dev/stdout")
    (root / "escape.log").symlink_to(outside / "secret.log")
    (root / "escape-dir").symlink_to(outside / "sub")
    (root / "inside.log").symlink_to("good.log")  # a link that stays inside is fine
    return root


def test_summary_skips_fifos_devices_and_links_out_of_the_directory(tmp_path: Path) -> None:
    root = _hostile_dir(tmp_path)
    code, out, err = _summary(str(root), "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    diagnosed = sorted(Path(r["path"]).name for r in doc["incidents"])
    assert diagnosed == ["good.log", "inside.log"]
    skipped = {Path(r["path"]).name: r["reason"] for r in doc["skipped"]}
    assert set(skipped) == {"fifo.log", "zero.log", "stdout.log", "escape.log", "escape-dir"}
    assert "not a regular file" in skipped["fifo.log"]
    assert "not a regular file" in skipped["zero.log"] or "leads out" in skipped["zero.log"]
    assert "leads out of" in skipped["escape.log"] and "leads out of" in skipped["escape-dir"]
    assert doc["aggregate"]["skipped"] == 5 and doc["aggregate"]["incidents"] == 2
    assert doc["failed"] == []


def test_summary_text_lists_the_skipped_entries(tmp_path: Path) -> None:
    root = _hostile_dir(tmp_path)
    code, out, err = _summary(str(root))
    assert code == 0, err
    assert "5 skipped" in out.splitlines()[0]
    assert "skipped (not read):" in out
    assert "fifo.log: not a regular file (a FIFO)" in out


def test_incidents_and_skipped_in_process(tmp_path: Path) -> None:
    root = _hostile_dir(tmp_path)
    items, skipped = fleet.entries([str(root)])
    assert sorted(Path(p).name for p in items) == ["good.log", "inside.log"]
    assert sorted(Path(r["path"]).name for r in skipped) == ["escape-dir", "escape.log", "fifo.log", "stdout.log", "zero.log"]
    assert fleet.incidents([str(root)]) == items


def test_run_directory_latest_link_out_of_the_directory_is_not_followed(tmp_path: Path) -> None:
    """`OUT/latest` of a run directory stands for the newest run only when it stays inside OUT."""
    from oomdoctor.commands.diagnose import latest_run_quiet

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.copy(LOG, outside / "server.log")
    rec = tmp_path / "rec"
    rec.mkdir()
    (rec / "latest").symlink_to(outside)
    assert latest_run_quiet(str(rec)) == str(rec)


def test_summary_of_named_paths_skips_a_fifo_and_a_device(tmp_path: Path) -> None:
    """`--summary incidents/*` names each entry itself: a FIFO or /dev/zero among them is skipped, not read."""
    root = _hostile_dir(tmp_path)
    code, out, err = _summary(str(root / "good.log"), str(root / "fifo.log"), "/dev/zero", str(tmp_path / "missing.log"), "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert [Path(r["path"]).name for r in doc["incidents"]] == ["good.log"]
    assert {r["path"]: r["reason"] for r in doc["skipped"]} == {
        str(root / "fifo.log"): "not a regular file (a FIFO)",
        "/dev/zero": "not a regular file (a character device)",
    }
    assert [Path(r["path"]).name for r in doc["failed"]] == ["missing.log"]

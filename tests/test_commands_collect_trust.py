"""`oomdoctor collect` never overwrites evidence (a second collect into the same directory is refused) and never copies a stream that may not end (issue 24)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES

LOG = FIXTURES / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log"


def _collect(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "oomdoctor", "collect", "-o", str(out), *extra], capture_output=True, text=True, cwd="/", timeout=60)


def test_second_collect_into_the_same_directory_is_refused_and_the_first_bundle_kept(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    first = _collect(out, "--log", str(LOG))
    assert first.returncode in (0, 5), first.stderr
    manifest = out / "manifest.json"
    before = manifest.read_bytes()
    copied = out / "logs" / LOG.name
    copied_before = copied.read_bytes()
    other = tmp_path / "other.log"
    other.write_text("a different incident\n")
    second = _collect(out, "--log", str(other))
    assert second.returncode == 2, second.stderr
    errors = [line for line in second.stderr.splitlines() if line.startswith("oomdoctor: error:")]
    assert len(errors) == 1 and "never overwrites" in errors[0] and "Traceback" not in second.stderr
    assert manifest.read_bytes() == before and copied.read_bytes() == copied_before
    assert json.loads(before)["logs"] == [f"logs/{LOG.name}"]
    assert not (out / "logs" / "other.log").exists()


def test_a_non_empty_directory_that_is_not_a_bundle_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "work"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    r = _collect(out)
    assert r.returncode == 2 and "not empty" in r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_an_empty_existing_directory_is_used(tmp_path: Path) -> None:
    out = tmp_path / "empty"
    out.mkdir()
    r = _collect(out)
    assert r.returncode in (0, 5), r.stderr
    assert json.loads((out / "manifest.json").read_text())["kind"] == "oomdoctor-bundle"


def _link_to_dev_zero(tmp_path: Path) -> str:
    link = tmp_path / "server.log"
    link.symlink_to("/dev/zero")
    return str(link)


def _fifo(tmp_path: Path) -> str:
    fifo = tmp_path / "stream.log"
    os.mkfifo(fifo)  # no writer: a copy would block for ever
    return str(fifo)


@pytest.mark.parametrize(
    ("make", "kind"),
    [(_link_to_dev_zero, "a character device"), (_fifo, "a FIFO"), (lambda _: "/dev/stdout", "a FIFO"), (lambda p: str(p), "a directory")],
    ids=["link-to-dev-zero", "fifo", "dev-stdout-a-pipe", "directory"],
)
def test_a_log_that_is_no_regular_file_is_refused_before_anything_is_written(tmp_path: Path, make, kind: str) -> None:
    """`collect --log LINK` with LINK -> /dev/zero copied until the disk was full, a FIFO blocked for ever (issue 24):
    one error line, exit 2, no bundle directory; `diagnose --summary` refuses the same paths (input.files.named_file_problem)."""
    log = make(tmp_path)
    out = tmp_path / "bundle"
    r = _collect(out, "--log", str(LOG), "--log", log)  # stdout is a pipe here: /dev/stdout is one
    assert r.returncode == 2, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("oomdoctor: error:")]
    assert len(errors) == 1 and f"--log {log}: " in errors[0] and kind in errors[0] and "Traceback" not in r.stderr
    assert not out.exists()


def test_a_missing_log_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    r = _collect(out, "--log", str(tmp_path / "nope.log"))
    assert r.returncode == 2 and "--log" in r.stderr and "No such file" in r.stderr
    assert not out.exists()


def test_a_link_to_a_regular_file_is_copied(tmp_path: Path) -> None:
    link = tmp_path / "current.log"
    link.symlink_to(LOG)
    out = tmp_path / "bundle"
    r = _collect(out, "--log", str(link))
    assert r.returncode in (0, 5), r.stderr
    assert (out / "logs" / "current.log").read_bytes()[:200] == LOG.read_bytes()[:200]

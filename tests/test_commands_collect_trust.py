"""`oomdoctor collect` never overwrites evidence: a second collect into the same directory is refused (issue 24, item 1)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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

"""The command as a process: exit codes through closed streams and pipes, odd file names, stdin twice."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

from conftest import FIXTURES

SMALL = FIXTURES / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log"


def test_a_reader_that_stops_after_one_line_keeps_the_exit_code(tmp_path: Path) -> None:
    """`oomdoctor diagnose LOG | head -1`: the exit code is still the diagnosis's, with no "Exception ignored" noise."""
    script = Path(sys.executable).with_name("oomdoctor")
    p = subprocess.Popen([str(script), "diagnose", str(SMALL)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    assert p.stdout is not None and p.stdout.readline().startswith(b"VERDICT: startup_kv")
    p.stdout.close()
    assert p.wait(timeout=30) == 3 and b"Exception" not in (p.stderr.read() if p.stderr else b"")


def test_the_report_file_is_written_whole_and_nothing_else(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    r = subprocess.run([sys.executable, "-m", "oomdoctor", "diagnose", "--format", "json", "-o", str(out), str(SMALL)], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 3 and r.stdout == "" and '"startup_kv"' in out.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_closed_standard_streams_keep_the_diagnosis_exit_code(tmp_path: Path) -> None:
    """cron and daemons start commands with a descriptor closed: the report still goes where it can, exit 3, no traceback."""
    import os

    script = Path(sys.executable).with_name("oomdoctor")
    for args, closed in (([str(SMALL), "-o", str(tmp_path / "r.txt")], 1), ([str(SMALL)], 1), ([str(SMALL)], 2)):
        for cmd in ([str(script)], [sys.executable, "-m", "oomdoctor"]):
            r = subprocess.run(
                [*cmd, "diagnose", *args],
                stdout=subprocess.PIPE if closed != 1 else None,
                stderr=subprocess.PIPE if closed != 2 else None,
                cwd=tmp_path,
                preexec_fn=lambda fd=closed: os.close(fd),
            )
            err = r.stderr or b""
            assert r.returncode == 3 and b"Traceback" not in err and b"internal error" not in err, (cmd, args, closed, err)
            if closed == 2:
                assert r.stdout.startswith(b"VERDICT: startup_kv")
    assert (tmp_path / "r.txt").read_text().startswith("VERDICT: startup_kv")


def test_a_broken_pipe_is_exit_0_as_the_table_says() -> None:
    from oomdoctor.base.errors import ExitCode
    from oomdoctor.commands.exits import exit_code

    assert exit_code(BrokenPipeError()) == ExitCode.NO_OOM  # NO_OOM is 0: a truthiness lookup once turned it into INTERNAL
    assert exit_code(KeyboardInterrupt()) == ExitCode.INTERRUPTED and exit_code(RuntimeError()) == ExitCode.INTERNAL
    assert exit_code(click.UsageError("x")) == ExitCode.USAGE and exit_code(click.Abort()) == ExitCode.INTERRUPTED


def test_stdin_given_twice_is_a_usage_error(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "oomdoctor", "diagnose", "-", "-"], input=SMALL.read_bytes(), capture_output=True, cwd=tmp_path)
    assert r.returncode == 2 and b"more than once" in r.stderr and b"Traceback" not in r.stderr


def test_a_file_name_that_is_not_utf8_reaches_every_output(tmp_path: Path) -> None:
    import os
    import zipfile

    odd = os.fsencode(tmp_path) + b"/bad\xff.log"
    with open(odd, "wb") as fh:
        fh.write(SMALL.read_bytes())
    for extra in (["-o", str(tmp_path / "r.md"), "--format", "markdown"], ["--bundle", str(tmp_path / "b.zip")]):
        r = subprocess.run([sys.executable, "-m", "oomdoctor", "diagnose", *extra, odd], capture_output=True, cwd=tmp_path)
        assert r.returncode == 3 and b"internal error" not in r.stderr, r.stderr
    assert "bad\\udcff.log" in (tmp_path / "r.md").read_text()
    assert "inputs/bad\\udcff.log" in zipfile.ZipFile(tmp_path / "b.zip").namelist()

"""`-o` onto a device, a FIFO or a symlink (issue 24, item 4): streams are written straight through, a
symlink is never replaced by a file, and /dev/stdout works for any user."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from oomdoctor.report.console import write_atomic

from conftest import FIXTURES

SEED = FIXTURES / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log"


def _read_fifo(path: Path, got: list[bytes]) -> threading.Thread:
    def reader() -> None:
        with open(path, "rb") as fh:
            got.append(fh.read())

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("through_link", [False, True])
def test_a_fifo_is_written_straight_through_and_stays_a_fifo(tmp_path: Path, through_link: bool) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    target = fifo
    if through_link:
        target = tmp_path / "report.txt"
        target.symlink_to(fifo)
    got: list[bytes] = []
    reader = _read_fifo(fifo, got)
    write_atomic(str(target), "report\n")
    reader.join(10)
    assert got == [b"report\n"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    if through_link:
        assert target.is_symlink() and os.readlink(target) == str(fifo)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["pipe"] + (["report.txt"] if through_link else []))


def test_a_symlink_to_a_file_stays_a_symlink_and_the_file_is_replaced(tmp_path: Path) -> None:
    real = tmp_path / "reports" / "real.md"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "report.md"
    link.symlink_to(real)
    write_atomic(str(link), "new")
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == "new"
    assert sorted(p.name for p in real.parent.iterdir()) == ["real.md"]  # no temporary left beside it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md", "reports"]


def test_a_dangling_symlink_gets_its_target_written(tmp_path: Path) -> None:
    link = tmp_path / "report.md"
    link.symlink_to(tmp_path / "made.md")
    write_atomic(str(link), "new")
    assert link.is_symlink() and (tmp_path / "made.md").read_text() == "new"


def test_a_symlink_through_proc_fd_writes_to_the_open_file_appending(tmp_path: Path) -> None:
    """What /dev/stdout is when the shell redirected it (`-o /dev/stdout >> out.txt`): its file, not a file beside it."""
    out = tmp_path / "out.txt"
    out.write_text("before\n")
    link = tmp_path / "stdout"
    link.symlink_to("/proc/self/fd/1")
    code = f"from oomdoctor.report.console import write_atomic; write_atomic({str(link)!r}, 'report\\n')"
    with open(out, "ab") as fh:
        r = subprocess.run([sys.executable, "-c", code], stdout=fh, stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert out.read_text() == "before\nreport\n" and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt", "stdout"]


def test_dash_o_dev_stdout_prints_the_report_for_any_user(tmp_path: Path) -> None:
    # Only meaningful with the fix: on the old code, as root, this replaced the machine's /dev/stdout link.
    assert os.path.islink("/dev/stdout") or stat.S_ISCHR(os.stat("/dev/stdout").st_mode)
    before = os.lstat("/dev/stdout")
    r = subprocess.run([sys.executable, "-m", "oomdoctor", "diagnose", str(SEED), "-o", "/dev/stdout"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 3 and "error" not in r.stderr, r.stderr
    assert "startup_kv" in r.stdout
    after = os.lstat("/dev/stdout")
    assert (stat.S_IFMT(after.st_mode), after.st_ino) == (stat.S_IFMT(before.st_mode), before.st_ino)
    assert not [n for n in os.listdir("/dev") if n.startswith(".oomdoctor")]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to another user")
def test_dash_o_dev_stdout_works_as_a_user_who_cannot_write_dev(tmp_path: Path) -> None:
    import pwd

    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user 'nobody'")
    log = tmp_path / "server.log"
    log.write_text(SEED.read_text())
    os.chmod(tmp_path, 0o755)
    os.chmod(log, 0o644)

    def demote() -> None:
        os.setgid(nobody.pw_gid)
        os.setuid(nobody.pw_uid)

    try:
        probe = subprocess.run([sys.executable, "-c", "import oomdoctor"], capture_output=True, timeout=60, preexec_fn=demote, cwd="/")
    except PermissionError:
        pytest.skip("user 'nobody' cannot run this interpreter")
    if probe.returncode != 0:
        pytest.skip("user 'nobody' cannot import oomdoctor from this checkout")
    r = subprocess.run([sys.executable, "-m", "oomdoctor", "diagnose", str(log), "-o", "/dev/stdout"], capture_output=True, text=True, timeout=60, preexec_fn=demote, cwd="/")
    assert r.returncode == 3, r.stderr
    assert "startup_kv" in r.stdout

"""console.atomic_target: a report file is replaced whole or not at all, and no temporary file is left behind."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from oomdoctor.base.errors import OutputError
from oomdoctor.report.console import atomic_target, write_atomic


def test_a_finished_block_replaces_the_file_with_the_umask_mode(tmp_path: Path) -> None:
    target = tmp_path / "report.md"
    target.write_text("old")
    old_umask = os.umask(0o027)
    try:
        with atomic_target(str(target)) as tmp:
            assert Path(tmp).parent == tmp_path and tmp.endswith(".partial")
            Path(tmp).write_text("new")
            assert target.read_text() == "old"  # nothing replaced before the block ends
    finally:
        os.umask(old_umask)
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]


def test_a_block_that_raises_keeps_the_old_file_and_removes_the_temporary(tmp_path: Path) -> None:
    target = tmp_path / "report.md"
    target.write_text("old")
    with pytest.raises(KeyboardInterrupt), atomic_target(str(target)) as tmp:
        Path(tmp).write_text("half")
        raise KeyboardInterrupt
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]


def test_a_rename_that_fails_removes_the_temporary(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    (target / "inside").mkdir(parents=True)  # a non-empty directory: os.replace refuses it
    with pytest.raises(OSError), atomic_target(str(target)) as tmp:
        Path(tmp).write_text("report")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]
    with pytest.raises(OutputError):
        write_atomic(str(target), "report")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]

"""Newest-first console exports are read oldest first (oomdoctor/input/ordering.py)."""

from __future__ import annotations

from oomdoctor.input.ordering import is_newest_first

from conftest import FIXTURES

SRC = FIXTURES / "runtime-activation-oom" / "pos_prefill_oom_2026.log"


def test_detects_newest_first_and_not_oldest_first() -> None:
    data = SRC.read_bytes()
    assert not is_newest_first(data)
    assert is_newest_first(b"".join(reversed(data.splitlines(keepends=True))))
    assert not is_newest_first(b"no timestamps\nat all\n")


def test_a_reversed_export_gets_the_same_verdict_and_says_so(run_cli, tmp_path) -> None:
    rev = tmp_path / "export.log"
    rev.write_bytes(b"".join(reversed(SRC.read_bytes().splitlines(keepends=True))))
    want = run_cli("diagnose", str(SRC), "--format", "json").json
    got = run_cli("diagnose", str(rev), "--format", "json").json
    assert (got["verdict"]["class"], got["verdict"]["rule"]) == (want["verdict"]["class"], want["verdict"]["rule"])
    assert got["findings"][0]["recommendations"] == want["findings"][0]["recommendations"]
    assert any("newest-first" in w for w in got["inputs"][0]["warnings"])

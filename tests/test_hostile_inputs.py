"""Damaged and hostile inputs, each with a clear outcome (issue: fast and unbreakable)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from conftest import FIXTURES

SEED = FIXTURES / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log"


def test_200mb_single_line_is_cut_and_the_rest_diagnosed(run_cli, tmp_path: Path) -> None:
    p = tmp_path / "huge.log"
    with open(p, "wb") as fh:
        block = b"x" * (1 << 20)
        for _ in range(200):
            fh.write(block)
        fh.write(b"\n" + SEED.read_bytes())
    t = time.perf_counter()
    res = run_cli("diagnose", str(p), "--format", "json")
    assert time.perf_counter() - t < 30
    assert res.code == 3
    d = res.json
    assert d["inputs"][0]["long_lines"] == 1
    assert d["verdict"]["class"] == "startup_kv"
    assert "cut to that length" in res.err


def test_log_still_being_written(run_cli, tmp_path: Path) -> None:
    p = tmp_path / "live.log"
    p.write_bytes(SEED.read_bytes()[:-30])  # ends mid-line, as a writer would leave it
    stop = threading.Event()

    def writer() -> None:
        with open(p, "ab") as fh:
            while not stop.is_set():
                fh.write(b"[2026-01-01 00:00:00 TP0] Decode batch, #running-req: 1, #token: 10, token usage: 0.01, cuda graph: True, gen throughput (token/s): 1.00, #queue-req: 0\n")
                fh.flush()

    th = threading.Thread(target=writer)
    th.start()
    try:
        res = run_cli("diagnose", str(p), "--format", "json")
    finally:
        stop.set()
        th.join()
    assert res.code == 3, res.err
    assert res.json["verdict"]["class"] == "startup_kv"
    assert "Traceback" not in res.err


def test_directory_with_thousands_of_files(run_cli, tmp_path: Path) -> None:
    for i in range(3000):
        (tmp_path / f"node{i:04d}.log").write_text(f"[2026-01-01 00:00:00] ready {i}\n")
    (tmp_path / "node9999.log").write_bytes(SEED.read_bytes())
    res = run_cli("diagnose", str(tmp_path), "--format", "json")
    assert res.code == 3
    d = res.json
    assert len(d["inputs"]) == 3001
    assert d["verdict"]["class"] == "startup_kv"


def test_symlink_loops(run_cli, tmp_path: Path) -> None:
    (tmp_path / "a.log").write_bytes(SEED.read_bytes())
    os.symlink(tmp_path, tmp_path / "self")  # a directory loop
    os.symlink(tmp_path / "y.log", tmp_path / "x.log")  # a file loop
    os.symlink(tmp_path / "x.log", tmp_path / "y.log")
    res = run_cli("diagnose", str(tmp_path), "--format", "json")
    assert res.code == 3
    assert [i["path"] for i in res.json["inputs"]] == [str(tmp_path / "a.log")]
    direct = run_cli("diagnose", str(tmp_path / "x.log"))
    assert direct.code == 5 and "symbolic links" in direct.err


def test_permission_denied(run_cli, tmp_path: Path, monkeypatch) -> None:
    p = tmp_path / "secret.log"
    p.write_bytes(SEED.read_bytes())
    real_open = open

    def denying_open(file, *args, **kwargs):
        if str(file) == str(p):
            raise PermissionError(13, "Permission denied")
        return real_open(file, *args, **kwargs)

    # Root reads any file, so the denial is injected where oomdoctor opens inputs.
    monkeypatch.setattr("oomdoctor.inputs.open", denying_open, raising=False)
    res = run_cli("diagnose", str(p))
    assert res.code == 5
    assert res.err.strip() == f"oomdoctor: error: {p}: permission denied"


def test_hostile_rule_cannot_reach_attributes(run_cli, tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    text = (Path(__file__).parent.parent / "rules" / "sglang-startup-kv.toml").read_text()
    text = text.replace('id = "sglang-startup-kv"', 'id = "evil"').replace("priority = 30", "priority = 1")
    text = text.replace('message = "SGLang could not build', 'message = "{system.__class__.__init__.__globals__} {kv_budget_bytes} SGLang could not build')
    (rules / "evil.toml").write_text(text)
    res = run_cli("diagnose", str(SEED), "--rules", str(rules), "--format", "json")
    assert res.code == 3
    msg = res.json["findings"][0]["message"]
    assert "{system.__class__.__init__.__globals__}" in msg and "__builtins__" not in msg
    assert "-5.40 GiB" in msg


def test_oversized_and_binary_rule_files(run_cli, tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.mkdir()
    (big / "x.toml").write_text("# " + "a" * (300 * 1024))
    res = run_cli("rules", "check", "--rules", str(big))
    assert res.code == 5 and "larger than 256 KiB" in res.err
    binary = tmp_path / "bin"
    binary.mkdir()
    (binary / "y.toml").write_bytes(b"\xff\xfe\x00garbage")
    res = run_cli("rules", "check", "--rules", str(binary))
    assert res.code == 5 and "y.toml" in res.err
    assert run_cli("diagnose", str(SEED), "--rules", str(tmp_path / "missing")).code == 5


def test_absurd_numbers_are_flagged_not_trusted(run_cli, tmp_path: Path) -> None:
    p = tmp_path / "absurd.log"
    p.write_text(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 17179869184.00 GiB. GPU 0 has a total capacity of 79.19 GiB "
        "of which 1.00 GiB is free. Process 4242 has 16777216.00 TiB memory in use. Including non-PyTorch memory, this process has "
        "70.00 GiB memory in use. Of the allocated memory 60.00 GiB is allocated by PyTorch, and 1.00 GiB is reserved by PyTorch but "
        "unallocated. See documentation for Memory Management\n"
    )
    res = run_cli("diagnose", str(p), "--format", "json")
    d = res.json
    assert d["implausible_values"] == ["17179869184.00 GiB", "16777216.00 TiB"]
    assert "requested_bytes" not in d["budget"]
    text = run_cli("diagnose", str(p)).out
    assert "ignored implausible sizes" in text


def test_nul_runs_from_log_rotation(run_cli, tmp_path: Path) -> None:
    p = tmp_path / "rotated.log"
    p.write_bytes(b"\x00" * 4096 + SEED.read_bytes())
    res = run_cli("diagnose", str(p), "--format", "json")
    assert res.code == 3


@pytest.mark.parametrize(
    "junk, code",
    [
        (bytes(range(256)) * 64, 5),  # every byte value: binary
        (bytes(range(1, 9)) * 5000, 5),  # control bytes: binary
        (b"\xde\xad\xbe\xef" * 5000, 0),  # high bytes only: undecodable text with no OOM in it
        (b"\x1b[" * 10000, 0),  # escape sequences are what coloured logs are made of
    ],
)
def test_junk_gets_one_line_and_a_documented_code(run_cli, tmp_path: Path, junk: bytes, code: int) -> None:
    p = tmp_path / "junk.log"
    p.write_bytes(junk)
    res = run_cli("diagnose", str(p))
    assert res.code == code
    assert "Traceback" not in res.err and len(res.err.strip().splitlines()) <= 1


def test_crash_loop_keeps_every_incident_with_bounded_events(run_cli, tmp_path: Path) -> None:
    from oomdoctor.diagnosis import read_events
    from oomdoctor.inputs import InputStats

    crash = SEED.read_text()
    log = tmp_path / "crashloop.log"
    log.write_text(crash * 300)
    events = read_events(str(log), InputStats(path=str(log)))
    per_run = len([e for e in read_events(str(SEED), InputStats(path=str(SEED)))])
    # The run being read and the 64 before it keep every event; older runs keep their start line
    # and their OOM only.
    # Identical old runs collapse into a counter on the first compacted one: constant memory.
    assert len(events) <= 65 * per_run + 2 * 2
    assert len([e for e in events if e.kind == "server_args" and len(e.ref.text) > 160]) == 65
    d = run_cli("diagnose", str(log), "--format", "json").json
    # Identical incidents collapse: the list shows the kept runs, the summary counts all of them.
    assert len(d["incidents"]) <= 16 + 64 + 1
    assert d["incidents"][0]["run"] == 1 and d["incidents"][-1]["run"] == 300
    assert {i["class"] for i in d["incidents"]} == {"startup_kv"}
    assert "this log holds 299 earlier incidents: 299 startup_kv" in d["verdict"]["summary"]
    assert d["verdict"]["class"] == "startup_kv"
    assert d["findings"][0]["recommendations"][0]["value"] == 0.85

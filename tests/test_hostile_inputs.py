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
    assert [i["path"] for i in res.json["inputs"] if i["kind"] == "log"] == [str(tmp_path / "a.log")]
    # The looping file links are not read, and are listed as skipped (the in-directory link "self" is not walked).
    assert sorted(i["path"] for i in res.json["inputs"] if i["kind"] == "skipped") == [str(tmp_path / "x.log"), str(tmp_path / "y.log")]
    assert "x.log: skipped: broken symlink" in res.err
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
    monkeypatch.setattr("oomdoctor.input.files.open", denying_open, raising=False)
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
    from oomdoctor.input.files import InputStats
    from oomdoctor.pipeline.events import read_events

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


# --- bounded work on hostile evidence (trust issue, item 2) -------------------------------------


def _shared_reference_snapshot(path: Path) -> Path:
    """~400 KB of pickle whose walk would visit 10**10 blocks: one segment and one block, referenced over and over."""
    import pickle

    block = {"size": 2 << 20, "state": "inactive"}
    segment = {"total_size": 2 << 20, "segment_pool_id": (0, 0), "blocks": [block] * 100_000}
    path.write_bytes(pickle.dumps({"segments": [segment] * 100_000}))
    return path


def test_shared_reference_snapshot_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bound is structural: the walk is refused at the first repeated reference, after one segment.

    It is counted, not timed: a 2 s limit on the subprocess failed on a loaded machine. The subprocess
    runs check what the user sees (exit 5, the reason); their timeouts only keep a regression (a walk
    of 10**10 blocks) from hanging the suite.
    """
    import pickle
    import subprocess
    import sys
    from collections import Counter

    from oomdoctor.base.errors import InputError
    from oomdoctor.evidence import allocator

    snap = _shared_reference_snapshot(tmp_path / "bomb.pickle")
    assert snap.stat().st_size < 500_000
    visits: Counter[str] = Counter()
    size = allocator._size

    def counted(value: object, path: str, what: str) -> int:
        visits[what] += 1
        return size(value, path, what)

    monkeypatch.setattr(allocator, "_size", counted)
    with pytest.raises(InputError, match="shared pickle references"):
        allocator.snapshot_facts(allocator.load_snapshot(str(snap)), str(snap))
    assert visits == {"a segment's total_size": 1}  # not one block of the 10**10 read
    res = subprocess.run([sys.executable, "-m", "oomdoctor", "diagnose", str(snap)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 5, res.stderr
    assert "shared pickle references" in res.stderr and "Traceback" not in res.stderr
    # Beside a log, the snapshot is listed as unread with the cap and the log is still diagnosed.
    res = subprocess.run([sys.executable, "-m", "oomdoctor", "diagnose", str(SEED), str(snap)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 3 and "shared pickle references" in res.stderr
    # Each segment its own object, all holding one block many times: refused at the first segment.
    block = {"size": 1, "state": "inactive"}
    snap.write_bytes(pickle.dumps({"segments": [{"total_size": 1, "blocks": [block] * 1000} for _ in range(200)]}))
    visits.clear()
    with pytest.raises(InputError, match="refers to one block more than once"):
        allocator.snapshot_facts(allocator.load_snapshot(str(snap)), str(snap))
    assert visits == {"a segment's total_size": 1}
    res = subprocess.run([sys.executable, "-m", "oomdoctor", "diagnose", str(snap)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 5 and "refers to one block more than once" in res.stderr


def test_snapshot_walk_caps_are_each_enforced() -> None:
    from oomdoctor.base.errors import InputError
    from oomdoctor.evidence import allocator

    # Distinct objects (the shared-reference check would refuse repeats first); frame lists may be shared.
    frames = [{"filename": "torch/x.py", "line": 1, "name": "f"}] * 10_000
    cases = {
        "segments": {"segments": [{"total_size": 1, "blocks": []} for _ in range(allocator.MAX_SNAPSHOT_SEGMENTS + 1)]},
        "blocks": {"segments": [{"total_size": 1, "blocks": [{"size": 1, "state": "inactive"} for _ in range(1000)]} for _ in range(allocator.MAX_SNAPSHOT_BLOCKS // 1000 + 1)]},
        "frames": {"segments": [{"total_size": 1, "blocks": [{"size": 1, "state": "active_allocated", "frames": frames} for _ in range(1000)]}]},
        "trace entries": {"segments": [], "device_traces": [[{"action": "alloc"}] * 1000] * (allocator.MAX_SNAPSHOT_TRACE_ENTRIES // 1000 + 1)},
    }
    for what, snap in cases.items():
        with pytest.raises(InputError, match=what):
            allocator.snapshot_facts(snap, "s.pickle")


@pytest.mark.parametrize(
    "name, text, reason",
    [
        ("deep-array.json", "[" * 100_000 + "]" * 100_000, "nested deeper than"),
        ("deep-object.json", '{"a":' * 100_000 + "1" + "}" * 100_000, "nested deeper than"),
        ("deep-but-parsable.json", '{"allocated_bytes.all.current": ' + "[" * 500 + "]" * 500 + "}", "nested deeper than"),
        ("inf.json", '{"allocated_bytes.all.current": 1e400, "reserved_bytes.all.current": 1}', "allocated_bytes.all.current is inf"),
        ("nan.json", '{"allocated_bytes.all.current": NaN, "reserved_bytes.all.current": 1}', "not a byte count"),
        ("bigint.json", '{"allocated_bytes.all.current": 1' + "0" * 5000 + "}", "not JSON"),
        ("bigint4000.json", '{"allocated_bytes.all.current": 1' + "0" * 4000 + "}", "out of range"),
        ("snapshot-inf.json", '{"segments": [{"total_size": 1e400, "blocks": []}]}', "total_size is inf"),
        ("huge-field.csv", 'index,name\n0,"' + "a" * 200_000 + '"\n', "field larger than"),
    ],
)
def test_hostile_evidence_json_gets_exit_5_with_the_reason(run_cli, tmp_path: Path, name: str, text: str, reason: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    res = run_cli("diagnose", str(path))
    assert res.code == 5, res.err
    assert reason in res.err and "internal error" not in res.err


def test_huge_mib_in_smi_csv_reads_as_unknown(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "gpus.csv"
    path.write_text("index,uuid,pci.bus_id,name,memory.total,memory.used,memory.free,memory.reserved\n0,GPU-1,00:01,H100," + "9" * 5000 + ",1,1,1\n")
    res = run_cli("diagnose", str(SEED), str(path), "--format", "json")
    assert res.code == 3 and "internal error" not in res.err


def test_deep_manifest_in_a_bundle_dir_is_not_a_crash(run_cli, tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    (bundle / "server.log").write_text(SEED.read_text())
    res = run_cli("diagnose", str(bundle))
    assert res.code in (3, 5) and "internal error" not in res.err


@pytest.mark.parametrize(
    "text",
    [
        "a = " + "[" * 100_000 + "]" * 100_000 + "\n",
        "a = " + "{b=" * 5_000 + "1" + "}" * 5_000 + "\n",
        "a = " + "[" * 200 + "]" * 200 + "\n",
    ],
)
def test_deeply_nested_rule_file_gets_exit_5(run_cli, tmp_path: Path, text: str) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "deep.toml").write_text(text)
    for args in (("diagnose", str(SEED), "--rules", str(rules)), ("rules", "check", "--rules", str(rules))):
        res = run_cli(*args)
        assert res.code == 5, res.err
        assert "deep.toml" in res.err and "nested deeper than" in res.err


def test_free_memory_above_the_card_is_listed_as_implausible(run_cli, tmp_path: Path) -> None:
    """pre (free before weights) larger than the card's capacity is named, not clamped silently in the bars."""
    log = tmp_path / "implausible_pre.log"
    log.write_text(
        "[2025-06-01 10:00:05 TP0] Load weight begin. avail mem=95.00 GB\n"
        "[2025-06-01 10:00:51 TP0] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=35.00 GB, mem usage=60.00 GB.\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.00 GiB is free. "
        "Of the allocated memory 76.00 GiB is allocated by PyTorch, and 100.00 MiB is reserved by PyTorch but unallocated.\n"
    )
    assert run_cli("diagnose", str(log), "--format", "json").json["implausible_values"] == ["pre 95.00 GiB > capacity 79.19 GiB"]


@pytest.mark.parametrize("key", ["gpu_memory_utilization", "tensor_parallel_size", "max_model_len"])
def test_a_word_where_vllm_s_args_hold_a_number_is_no_fact(run_cli, tmp_path: Path, key: str) -> None:
    """'gpu_memory_utilization': abc (a pasted secret, a typo) was taken as u: u*total repeated the word 85e9 times (MemoryError, exit 1)."""
    log = FIXTURES / "allocator-fragmentation" / "pos_vllm_v1_fragmented.log"
    text = log.read_text()
    value = {"gpu_memory_utilization": "0.95", "tensor_parallel_size": "4", "max_model_len": None}[key]
    line = text.splitlines()[0]
    bad = line.replace(f"'{key}': {value}", f"'{key}': abc") if value else line.replace("{'model'", f"{{'{key}': abc, 'model'")
    assert bad != line
    p = tmp_path / "vllm.log"
    p.write_text(text.replace(line, bad))
    for fmt in ("text", "html"):
        res = run_cli("diagnose", str(p), "--format", fmt)
        assert res.code == 3 and "internal error" not in res.err, res.err
    assert run_cli("diagnose", str(p), "--format", "json").json["verdict"]["class"] == "fragmentation"  # the rest of the log still decides

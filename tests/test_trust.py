"""The "trust" issue: `run` never destroys evidence, inputs are read whole, output is terminal-safe,
`plan` validates its numbers. (The capture hook's items are in test_capture.py.)"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import signal
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from oomdoctor.base.errors import InputError, UsageError
from oomdoctor.commands import run as flight
from oomdoctor.input.files import expand_paths
from oomdoctor.live import procinfo

import fakes
from conftest import FIXTURES

SEED = FIXTURES / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log"
OOM_LINE = (
    "[2026-03-02 11:20:31] Scheduler hit an exception: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.25 GiB. "
    "GPU 0 has a total capacity of 79.19 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.15 GiB "
    "memory in use. Of the allocated memory 76.71 GiB is allocated by PyTorch, and 410.00 MiB is reserved by PyTorch but unallocated."
)
STARTUP = [
    "[2026-03-02 10:00:01] server_args=ServerArgs(model_path='Qwen/Qwen3-32B', mem_fraction_static=0.838, chunked_prefill_size=8192, tp_size=1)",
    "[2026-03-02 10:00:06] Load weight begin. avail mem=78.51 GB",
    "[2026-03-02 10:00:41] Load weight end. elapsed=34.90 s, type=Qwen3ForCausalLM, avail mem=47.80 GB, mem usage=30.71 GB.",
    "[2026-03-02 10:01:04] max_total_num_tokens=287375, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=3592, context_len=40960, available_gpu_mem=10.85 GB",
    "[2026-03-02 10:01:08] The server is fired up and ready to roll!",
]
CLOCK = 1_772_000_000.0  # every run below starts in the same second: names must still not collide


def _child(tmp_path: Path, name: str, body: str) -> list[str]:
    script = tmp_path / name
    script.write_text(textwrap.dedent(body))
    return [sys.executable, str(script)]


def _record(cmd: list[str], out: Path, **kw) -> tuple[int, bytes, bytes]:
    o, e = io.BytesIO(), io.BytesIO()
    kw.setdefault("nvml_module", fakes.FakeNvml(fakes.load("idle_reserved")))
    kw.setdefault("psutil_module", None)
    kw.setdefault("oom_kills", lambda: None)
    code = flight.run(cmd, str(out), interval_ms=20, stdout=o, stderr=e, clock=lambda: CLOCK, **kw)
    return code, o.getvalue(), e.getvalue()


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def _runs(out: Path) -> list[Path]:
    return sorted(p for p in out.iterdir() if p.is_dir() and not p.is_symlink())


# --- 1. run never destroys evidence ---------------------------------------------------------------


def test_second_run_into_the_same_folder_leaves_the_first_runs_files_byte_identical(tmp_path: Path, run_cli) -> None:
    out = tmp_path / "oomdoctor-run"
    # The recorder pumps stdout and stderr separately: the pause keeps the startup lines before the OOM in server.log.
    crash = _child(tmp_path, "crash.py", f"import sys, time\nprint({chr(10).join(STARTUP)!r}, flush=True)\ntime.sleep(0.3)\nprint({OOM_LINE!r}, file=sys.stderr)\nsys.exit(1)\n")
    assert _record(crash, out)[0] == 1
    (first,) = _runs(out)
    before = {k: hashlib.sha256(v).hexdigest() for k, v in _tree(first).items()}
    assert {"server.log", "manifest.json", "report.html", "diagnosis.json"} <= set(before)

    # A command that does not start leaves no run directory and does not move "latest".
    with pytest.raises(InputError, match="cannot start"):
        _record([str(tmp_path / "no-such-server")], out)
    assert _runs(out) == [first] and os.readlink(out / "latest") == first.name

    # A second run, in the same second, gets its own directory; the first one is untouched.
    code, stdout, _ = _record([sys.executable, "-c", "print('healthy')"], out)
    assert code == 0 and stdout == b"healthy\n"
    first_again, second = _runs(out)
    assert first_again == first and second.name == f"{first.name}-2"
    assert {k: hashlib.sha256(v).hexdigest() for k, v in _tree(first).items()} == before
    assert os.readlink(out / "latest") == second.name and (second / "server.log").read_bytes() == b"healthy\n"

    # The first run's bundle still diagnoses its OOM; OUT itself stands for its latest run, said on stderr.
    assert run_cli("diagnose", str(first), "--format", "json").json["verdict"]["class"] == "runtime_activation"
    latest = run_cli("diagnose", str(out), "--format", "json")
    assert latest.code == 0 and "reading the latest run" in latest.err
    assert [i["path"] for i in latest.json["inputs"] if i["kind"] == "log"] == [str(out / "latest" / "server.log")]


def test_a_run_directory_is_locked_against_a_second_recorder(tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    fd = flight.lock_run_dir(run_dir)
    try:
        with pytest.raises(UsageError, match="another oomdoctor run is recording"):
            flight.lock_run_dir(run_dir)
    finally:
        os.close(fd)
    os.close(flight.lock_run_dir(run_dir))  # free again once the first recorder let go


def test_latest_is_replaced_atomically_by_a_rename(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    flight.point_latest(tmp_path, tmp_path / "a")
    flight.point_latest(tmp_path, tmp_path / "b")
    assert os.readlink(tmp_path / "latest") == "b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "latest"]  # no temporary link left


SECRET = "sk-proj-abcdefghijklmnopqrstuvwx"


@pytest.mark.parametrize("redact", [True, False])
def test_the_recorded_log_is_redacted_unless_no_redact(tmp_path: Path, redact: bool) -> None:
    out = tmp_path / "rec"
    cmd = _child(tmp_path, "s.py", f"import sys\nprint('launch --api-key {SECRET} --port 30000')\nsys.stdout.buffer.write(b'bytes \\xff kept\\n')\nsys.exit(2)\n")
    code, stdout, _ = _record(cmd, out, redact=redact)
    assert code == 2 and SECRET.encode() in stdout  # the terminal still sees the server's own bytes
    log = (out / "latest" / "server.log").read_bytes()
    assert (SECRET.encode() in log) is not redact
    assert b"bytes \xff kept\n" in log  # lines without a secret keep their bytes
    if redact:
        assert b"--api-key <redacted>" in log


def test_a_sigkilled_server_is_diagnosed_as_a_host_oom_kill(tmp_path: Path, run_cli) -> None:
    out = tmp_path / "rec"
    cmd = _child(tmp_path, "k.py", "import os, signal\nprint('Loading checkpoint shards:  75%', flush=True)\nos.kill(os.getpid(), signal.SIGKILL)\n")
    code, _, err = _record(cmd, out)
    assert code == 128 + signal.SIGKILL
    run_dir = out / "latest"
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["child_exit_code"] == -9 and manifest["killed_by_signal"] == 9 and "recorder.log" in manifest["logs"]
    assert "exited with code 137" in (run_dir / flight.RECORDER_LOG).read_text()
    assert json.loads((run_dir / "diagnosis.json").read_text())["verdict"]["class"] == "host_oom"
    assert b"oomdoctor: host_oom:" in err


def test_a_cgroup_oom_kill_is_fed_to_the_diagnosis(tmp_path: Path) -> None:
    out = tmp_path / "rec"
    counts = iter([(3, "/sys/fs/cgroup/x/memory.events"), (4, "/sys/fs/cgroup/x/memory.events")])
    cmd = _child(tmp_path, "w.py", f"print({chr(10).join(STARTUP)!r})\n")
    code, _, err = _record(cmd, out, oom_kills=lambda: next(counts))
    assert code == 0  # the server survived (a worker was killed), yet the kill is evidence
    run_dir = out / "latest"
    assert json.loads((run_dir / "manifest.json").read_text())["cgroup_oom_kills"] == {"before": 3, "after": 4, "source": "/sys/fs/cgroup/x/memory.events"}
    assert json.loads((run_dir / "diagnosis.json").read_text())["verdict"]["class"] == "host_oom"
    assert b"oomdoctor: host_oom:" in err


def test_cgroup_oom_kill_counter_v2_and_v1(tmp_path: Path) -> None:
    (tmp_path / "cg2" / "system.slice" / "srv").mkdir(parents=True)
    (tmp_path / "cg2" / "system.slice" / "srv" / "memory.events").write_text("low 0\nhigh 0\nmax 5\noom 2\noom_kill 2\n")
    (tmp_path / "self2").write_text("0::/system.slice/srv\n")
    assert procinfo.cgroup_oom_kills(str(tmp_path / "self2"), str(tmp_path / "cg2")) == (2, str(tmp_path / "cg2" / "system.slice" / "srv" / "memory.events"))
    (tmp_path / "cg1" / "memory" / "docker" / "abc").mkdir(parents=True)
    (tmp_path / "cg1" / "memory" / "docker" / "abc" / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 7\n")
    (tmp_path / "self1").write_text("12:pids:/docker/abc\n4:memory:/docker/abc\n")
    assert procinfo.cgroup_oom_kills(str(tmp_path / "self1"), str(tmp_path / "cg1"))[0] == 7
    assert procinfo.cgroup_oom_kills(str(tmp_path / "missing"), str(tmp_path)) is None


# --- 2. input fidelity ----------------------------------------------------------------------------


def test_an_oom_before_a_carriage_return_on_the_same_line_is_read(run_cli, tmp_path: Path) -> None:
    log = tmp_path / "ranks.log"
    bar = "Capturing batches (bs=8 avail_mem=1.02 GB):  50%|#####     | 2/4 [00:01<00:01]"
    log.write_text("\n".join(STARTUP) + "\n" + OOM_LINE + "\r" + bar + "\r" + bar + "\n")
    res = run_cli("diagnose", str(log), "--format", "json")
    assert res.code == 3 and res.json["verdict"]["class"] == "runtime_activation"


def test_rotated_logs_are_read_oldest_first_and_skipped_files_are_listed(run_cli, tmp_path: Path) -> None:
    crashed = "\n".join(STARTUP) + "\n" + OOM_LINE + "\n"
    healthy = "\n".join(STARTUP) + "\n"
    (tmp_path / "server.log").write_text(healthy)
    (tmp_path / "server.log.1").write_text(crashed)
    (tmp_path / "server.log.2.gz").write_bytes(gzip.compress(healthy.encode()))
    (tmp_path / "app.log").write_text("x\n")
    (tmp_path / "app.log-20260302").write_text("x\n")
    (tmp_path / "app.log-20260301.gz").write_bytes(gzip.compress(b"x\n"))
    (tmp_path / "core.4121").write_bytes(b"\x7fELF")
    found, skipped = expand_paths([str(tmp_path)])
    assert [Path(p).name for p in found] == ["app.log-20260301.gz", "app.log-20260302", "app.log", "server.log.2.gz", "server.log.1", "server.log"]
    assert [(Path(s.path).name, s.kind) for s in skipped] == [("core.4121", "skipped")]
    res = run_cli("diagnose", str(tmp_path), "--format", "json")
    assert res.json["verdict"]["class"] != "none" and res.code == 3
    assert f"{tmp_path / 'core.4121'}: skipped: not a log file name" in res.err


def test_symlinks_never_lead_out_of_a_directory_input(run_cli, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "other.log").write_text(OOM_LINE + "\n")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "server.log").write_text("\n".join(STARTUP) + "\n")
    os.symlink(outside / "other.log", logs / "escape.log")
    os.symlink(outside, logs / "escape-dir")
    os.symlink(logs / "server.log", logs / "again.log")  # inside: the file is read once
    res = run_cli("diagnose", str(logs), "--format", "json")
    assert res.code == 0 and res.json["verdict"]["class"] == "none"
    assert [i["path"] for i in res.json["inputs"] if i["kind"] == "log"] == [str(logs / "server.log")]
    assert sorted(Path(i["path"]).name for i in res.json["inputs"] if i["kind"] == "skipped") == ["escape-dir", "escape.log"]
    assert "escape.log: skipped: symlink leads out of the directory" in res.err


def test_an_output_that_is_one_of_the_inputs_is_refused(run_cli, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(SEED.read_bytes())
    for args in (["-o", str(log)], ["--bundle", str(log)], ["-o", str(tmp_path / "r.txt"), "--bundle", str(tmp_path / "r.txt")]):
        res = run_cli("diagnose", str(log), *args)
        assert res.code == 2, args
    res = run_cli("diagnose", str(tmp_path), "--bundle", str(log))  # a file of an input directory
    assert res.code == 2 and "is one of the inputs" in res.err
    assert log.read_bytes() == SEED.read_bytes()


def test_an_interrupted_bundle_leaves_no_zip(run_cli, tmp_path: Path, monkeypatch) -> None:
    from oomdoctor.report import bundle

    def interrupted(path: str, redact: bool):
        yield b"first block\n"
        raise KeyboardInterrupt

    monkeypatch.setattr(bundle, "copy_chunks", interrupted)
    target = tmp_path / "out" / "oom.zip"
    target.parent.mkdir()
    with pytest.raises(KeyboardInterrupt):
        bundle.write_bundle(str(target), "<html>", "md", "{}", [str(SEED)])
    assert list(target.parent.iterdir()) == []
    monkeypatch.undo()
    bundle.write_bundle(str(target), "<html>", "md", "{}", [str(SEED)])
    assert zipfile.ZipFile(target).testzip() is None and [p.name for p in target.parent.iterdir()] == ["oom.zip"]


def test_output_file_is_written_whole_by_a_rename(run_cli, tmp_path: Path) -> None:
    target = tmp_path / "report.txt"
    target.write_text("old report\n")
    res = run_cli("diagnose", str(SEED), "-o", str(target))
    assert res.code == 3 and target.read_text().startswith("VERDICT: startup_kv")
    assert [p.name for p in tmp_path.iterdir()] == ["report.txt"]


# --- 3. terminal safety ---------------------------------------------------------------------------

HOSTILE = "\x1b]0;pwned\x07\x1b]52;c;ZXZpbA==\x07\x1bP+q544e\x1b\\\x07\x9b31m\x85\x7f\r"
CONTROLS = {chr(c) for c in (*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0))}


def _raw_controls(text: str) -> set[str]:
    return {c for c in text if c in CONTROLS}


@pytest.mark.parametrize("fmt", ["text", "markdown", "json", "html"])
def test_no_raw_control_character_reaches_the_terminal(run_cli, tmp_path: Path, fmt: str) -> None:
    log = tmp_path / f"srv{HOSTILE.replace(chr(13), '')}.log"
    log.write_bytes(("\n".join(STARTUP) + "\n" + OOM_LINE + " " + HOSTILE + " tail\n").encode())
    missing = tmp_path / f"gone{HOSTILE}.log"
    res = run_cli("diagnose", str(log), str(missing), "--format", fmt)
    assert res.code == 3
    assert _raw_controls(res.out) == set() and _raw_controls(res.err) == set()
    assert "\\x1b]52;c;" in res.err  # the file name, visibly escaped in the warning
    if fmt == "text":
        assert "\\x1b]0;pwned\\x07" in res.out
    report = tmp_path / "report.out"
    assert run_cli("diagnose", str(log), "--format", fmt, "-o", str(report)).code == 3
    assert _raw_controls(report.read_text(encoding="utf-8")) == set()
    if fmt == "json":
        json.loads(report.read_text(encoding="utf-8"))  # still valid JSON


def test_error_lines_escape_control_characters(run_cli, tmp_path: Path) -> None:
    res = run_cli("diagnose", str(tmp_path / f"x{HOSTILE}.log"))
    assert res.code == 5 and _raw_controls(res.err) == set() and "\\x1b]0;pwned" in res.err


# --- 4. plan validates its numbers ----------------------------------------------------------------

GQA = FIXTURES / "plan" / "llama-3.1-8b"


@pytest.mark.parametrize("value", ["-5", "0", "nan", "inf", "1e308"])
def test_plan_refuses_nonsense_gpu_memory(run_cli, value: str) -> None:
    res = run_cli("plan", "--model", str(GQA), "--gpu-mem-gib", value)
    assert res.code == 2 and "--gpu-mem-gib must be" in res.err, (value, res.err)


@pytest.mark.parametrize(
    "change, field",
    [
        ({"num_key_value_heads": 0}, "num_key_value_heads"),
        ({"num_key_value_heads": "eight"}, "num_key_value_heads"),
        ({"num_attention_heads": 0}, "num_attention_heads"),
        ({"num_hidden_layers": -2}, "num_hidden_layers"),
        ({"head_dim": 0}, "head_dim"),
        ({"max_position_embeddings": "long"}, "max_position_embeddings"),
    ],
)
def test_plan_nonsense_config_is_exit_5_with_a_reason(run_cli, tmp_path: Path, change: dict, field: str) -> None:
    cfg = json.loads((GQA / "config.json").read_text())
    cfg.update(change)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    res = run_cli("plan", "--model", str(tmp_path), "--gpu", "H100-80GB")
    assert res.code == 5 and field in res.err and "internal error" not in res.err, res.err

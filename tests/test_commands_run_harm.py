"""`oomdoctor run` never harms the server it watches nor hangs on it (issue 24): the pass-through never
waits for the recorder, the server's exit ends the recording even while a worker it left holds its
pipes, and signals to the wrapper reach every process of the server, or none when they are not forwarded.

The hang guards are generous (tens of seconds against a wait that would otherwise last forever); no
test asserts how fast anything is: benchmarks/run_overhead.py measures that.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from oomdoctor.commands import run as flight
from oomdoctor.commands import run_log
from oomdoctor.input.redact import Redactor

import fakes

GUARD_S = 25


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "oomdoctor", "run", *args]


def _wait_for(path: Path, timeout: float = GUARD_S) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.stat().st_size:
            return True
        time.sleep(0.01)
    return False


def _kill(pid_file: Path) -> None:
    """Kill the worker a test's server left behind, if it is still there."""
    if pid_file.exists() and pid_file.read_text().strip():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


# --- the pass-through never waits for the recorder -------------------------------------------------

FLOOD_CHILD = textwrap.dedent(
    """
    import pathlib, sys
    out = sys.stdout.buffer
    line = b"INFO 03-02 10:00:41 [logger.py:43] Received request cmpl-0: params: SamplingParams(n=1, stop_token_ids=[], max_tokens=16)\\n"
    for i in range(600_000):  # ~70 MB
        out.write(b"%07d " % i + line)
    out.write(b"last line\\n")
    out.flush()
    pathlib.Path(sys.argv[1]).write_text("done")
    """
)


def test_a_stalled_log_writer_never_slows_the_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The log writer stalls until the server is done (a slow disk, a redaction that cannot keep up): the server still
    writes all its output and exits; what the log could not take is one gap in server.log, counted and said."""
    done = tmp_path / "done"
    released: list[bool] = []
    real = Redactor.log_bytes

    def stalled(self: Redactor, data: bytes) -> bytes:
        if not released:
            # Before issue 24 the pumps waited on the writer, the server on its full pipe: it never got done.
            released.append(_wait_for(done))
        return real(self, data)

    monkeypatch.setattr(Redactor, "log_bytes", stalled)
    script = tmp_path / "child.py"
    script.write_text(FLOOD_CHILD)
    out, err = io.BytesIO(), io.BytesIO()
    code = flight.run([sys.executable, str(script), str(done)], str(tmp_path / "rec"), nvml_module=fakes.FakeNvml(fakes.load("idle_reserved")), psutil_module=None, stdout=out, stderr=err)
    assert released == [True], "the server could not finish while the log writer stalled"
    assert code == 0
    passed = out.getvalue()
    assert passed.count(b"\n") == 600_001 and passed.endswith(b"last line\n")  # the terminal got every byte
    log = (tmp_path / "rec" / "latest" / "server.log").read_bytes()
    lines = log.splitlines(keepends=True)
    gaps = [line for line in lines if line.startswith(b"[oomdoctor run: ")]
    assert len(gaps) == 1 and b"not recorded here: the recorder fell behind" in gaps[0]
    kept = [line for line in lines if not line.startswith(b"[oomdoctor run: ")]
    # Whole lines of the server, in order, around the gap; and the bytes the gap names are the bytes missing.
    recorded = set(kept)
    assert kept == [line for line in passed.splitlines(keepends=True) if line in recorded]
    assert log.endswith(b"last line\n")  # the oldest output waiting was dropped, never the newest
    missing = int(gaps[0].split(b" bytes")[0].rsplit(b" ", 1)[1])
    assert missing == len(passed) - sum(map(len, kept)) > 0
    said = err.getvalue().decode()
    assert said.count("fell behind") == 1 and f"{missing} bytes" in said


def test_the_gap_keeps_whole_lines_and_redacts_what_follows(tmp_path: Path) -> None:
    """The oldest chunks waiting are dropped, with the unfinished line before them and the rest of the line they cut,
    so that no piece of a line (nor of a secret) reaches the log; the newest lines are kept and redacted as ever."""
    errors: list[str] = []
    log = run_log.BoundedLog(tmp_path / "server.log", 1 << 30, errors.append)
    tee = run_log.LogTee(log, Redactor(), max_queued=40)
    writing, gate = threading.Event(), threading.Event()
    real_write = log.write

    def stalled_write(data: bytes) -> None:
        writing.set()
        assert gate.wait(GUARD_S)
        real_write(data)

    log.write = stalled_write  # type: ignore[method-assign]
    tee.put(0, b"first line\nhalf of api_key=")  # taken by the writer, which stalls writing its first line
    assert writing.wait(GUARD_S)
    tee.put(0, b"s3cr3t01234567 and")  # 18 bytes wait
    tee.put(0, b"89 and the rest\nand a line cut in tw")  # 18 + 36 > 40: the 18 are dropped
    tee.put(0, b"o\nnext api_key=abcdef0123456789\n")  # 36 + 33 > 40: the 36 are dropped, the same gap
    gate.set()
    tee.close()
    lost = len(b"half of api_key=") + 18 + 36 + len(b"o\n")
    assert (tmp_path / "server.log").read_bytes() == (
        b"first line\n"
        + f"[oomdoctor run: {lost} bytes of the server's stdout not recorded here: the recorder fell behind (they passed through)]\n".encode()
        + b"next api_key=<redacted>\n"
    )
    assert (tee.gaps, tee.gap_bytes) == (1, lost) and errors == []


# --- the server's exit ends the recording ----------------------------------------------------------

# The OOM killer's case: the server is SIGKILLed and a worker it started lives on, holding the server's
# stdout and stderr (inherited), writing one more line soon after and then nothing for a long time.
ORPHAN_CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    pid_file = sys.argv[1]
    worker = os.fork()
    if worker == 0:
        time.sleep(0.3)
        print("worker: still here after the server died", flush=True)
        time.sleep(600)
        os._exit(0)
    with open(pid_file, "w") as f:
        f.write(str(worker))
    print("[2026-03-02 10:00:41 TP0] Scheduler hit an exception: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_a_worker_holding_the_pipes_does_not_hold_the_report(tmp_path: Path) -> None:
    """The server is SIGKILLed while its worker keeps the pipes open: the recorder drains what comes for a bounded
    time, writes the report and exits with 137, without waiting for the worker (before issue 24: not until it exited)."""
    script, pid_file, rec = tmp_path / "child.py", tmp_path / "worker.pid", tmp_path / "rec"
    script.write_text(ORPHAN_CHILD)
    p = subprocess.Popen(_cli("--out", str(rec), "--", sys.executable, str(script), str(pid_file)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/")
    try:
        out, err = p.communicate(timeout=GUARD_S)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        pytest.fail(f"oomdoctor run did not finish while the dead server's worker held its pipes: {err.decode()[-500:]}")
    finally:
        _kill(pid_file)
    assert p.returncode == 137, err.decode()
    run_dir = rec / "latest"
    log = (run_dir / "server.log").read_bytes()
    assert b"CUDA out of memory" in log
    assert b"worker: still here after the server died\n" in log and b"worker: still here" in out  # drained, and passed through
    assert (run_dir / "report.html").exists() and json.loads((run_dir / "manifest.json").read_text())["child_exit_code"] == -9
    assert "SIGKILL" in (run_dir / flight.RECORDER_LOG).read_text()
    said = err.decode()
    assert "still holds the server's output" in said and "report at" in said


# A launcher: it starts the server in the background and exits 0; the server, holding the pipes, is quiet for a
# while and then writes again.
LAUNCHER_CHILD = textwrap.dedent(
    """
    import os, sys, time
    if os.fork() == 0:
        time.sleep(1.6)  # longer than the recorder's quiet second
        print("server: ready after a quiet while", flush=True)
        os._exit(0)
    print("launcher: server started", flush=True)
    """
)


def test_a_launcher_that_exits_cleanly_is_recorded_until_its_server_closes_the_pipes(tmp_path: Path) -> None:
    """Only a server's death ends the recording early: after a clean exit, a server it left running is still recorded
    (ending there would take its reader away: its next write would fail)."""
    script = tmp_path / "child.py"
    script.write_text(LAUNCHER_CHILD)
    out, err = io.BytesIO(), io.BytesIO()
    code = flight.run([sys.executable, str(script)], str(tmp_path / "rec"), nvml_module=fakes.FakeNvml(fakes.load("idle_reserved")), psutil_module=None, stdout=out, stderr=err)
    assert code == 0
    assert out.getvalue() == b"launcher: server started\nserver: ready after a quiet while\n"
    assert (tmp_path / "rec" / "latest" / "server.log").read_bytes() == out.getvalue()
    assert "still holds" not in err.getvalue().decode()


# --- signals --------------------------------------------------------------------------------------

# A server and the worker it started, each saying which signal reached it; USR1 would be said too.
GROUP_CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    seen = sys.argv[1]
    def on(sig, frame):
        with open(seen, "a") as f:
            f.write(f"{role} {sig}\\n")
        if sig != signal.SIGUSR1:
            os._exit(40 + sig % 10)
    role = "server"
    if os.fork() == 0:
        role = "worker"
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
        signal.signal(s, on)
    with open(seen, "a") as f:
        f.write(f"{role} ready {os.getpid()}\\n")
    time.sleep(60)
    os._exit(1)
    """
)


def _group_run(tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path, Path]:
    script, seen, rec = tmp_path / "child.py", tmp_path / "seen", tmp_path / "rec"
    script.write_text(GROUP_CHILD)
    p = subprocess.Popen(_cli("--out", str(rec), "--", sys.executable, str(script), str(seen)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/")
    deadline = time.monotonic() + GUARD_S
    while time.monotonic() < deadline and not (seen.exists() and seen.read_text().count("ready") == 2):
        time.sleep(0.01)
    return p, seen, rec


def _roles(seen: Path, sig: int) -> set[str]:
    return {line.split()[0] for line in seen.read_text().splitlines() if line.split()[1] == str(int(sig))}


def _end(p: subprocess.Popen[bytes], seen: Path) -> None:
    """Kill the wrapper and whatever is left of the server and its worker."""
    p.kill()
    p.wait()
    for line in seen.read_text().splitlines() if seen.exists() else []:
        if line.split()[1] == "ready":
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split()[2]), signal.SIGKILL)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_to_the_wrapper_reaches_the_servers_whole_process_group(tmp_path: Path, sig: int) -> None:
    """kill -TERM <oomdoctor run>: the server and its worker both get it (before issue 24 only the server did)."""
    p, seen, _ = _group_run(tmp_path)
    try:
        p.send_signal(sig)
        deadline = time.monotonic() + GUARD_S
        while time.monotonic() < deadline and _roles(seen, sig) != {"server", "worker"}:
            time.sleep(0.01)
        assert _roles(seen, sig) == {"server", "worker"}, seen.read_text()
        _, err = p.communicate(timeout=GUARD_S)
    finally:
        _end(p, seen)
    assert p.returncode == 40 + int(sig) % 10, err.decode()


def test_an_unforwarded_signal_kills_neither_the_wrapper_nor_the_server(tmp_path: Path) -> None:
    """USR1 to the wrapper (its default action would end it, and the server with its pipes): nothing happens to either."""
    p, seen, rec = _group_run(tmp_path)
    try:
        p.send_signal(signal.SIGUSR1)
        time.sleep(0.5)
        assert p.poll() is None, p.communicate()[1].decode()  # before issue 24: the wrapper died of it
        assert _roles(seen, signal.SIGUSR1) == set()  # not forwarded
        p.send_signal(signal.SIGUSR2)
        time.sleep(0.3)
        assert p.poll() is None
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=GUARD_S)
    finally:
        _end(p, seen)
    assert p.returncode == 45, err.decode()
    assert err.decode().count("SIGUSR1 was not forwarded to the server") == 1
    assert (rec / "latest" / "server.log").exists()


SIGNAL_AFTER_DEATH_CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    pid_file, seen = sys.argv[1], sys.argv[2]
    worker = os.fork()
    if worker == 0:
        def on(sig, frame):
            with open(seen, "a") as f:
                f.write(f"worker {sig}\\n")
            os._exit(0)
        signal.signal(signal.SIGTERM, on)
        for i in range(3000):  # chatty: the recorder is never left waiting on a quiet pipe
            print(f"worker: line {i}", flush=True)
            time.sleep(0.2)
        os._exit(0)
    with open(pid_file, "w") as f:
        f.write(str(worker))
    time.sleep(0.2)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_a_signal_after_the_server_died_reaches_the_worker_left_behind(tmp_path: Path) -> None:
    """TERM to the wrapper while it drains a dead server's pipes (its worker holds them, writing): the worker gets
    it, so the pipes close and the recording ends (before issue 24 the signal went to the dead server and was lost)."""
    script, pid_file, seen, rec = tmp_path / "child.py", tmp_path / "worker.pid", tmp_path / "seen", tmp_path / "rec"
    script.write_text(SIGNAL_AFTER_DEATH_CHILD)
    p = subprocess.Popen(_cli("--out", str(rec), "--", sys.executable, str(script), str(pid_file), str(seen)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/")
    try:
        assert _wait_for(pid_file)
        time.sleep(1.0)  # the server has SIGKILLed itself; its worker holds the pipes and keeps writing
        assert p.poll() is None
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=GUARD_S)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        pytest.fail(f"oomdoctor run did not finish: {err.decode()[-500:]}")
    finally:
        _kill(pid_file)
    assert seen.exists() and seen.read_text() == "worker 15\n", err.decode()
    assert p.returncode == 137
    assert b"worker: line 0\n" in (rec / "latest" / "server.log").read_bytes()

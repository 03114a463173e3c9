"""`oomdoctor run` as a flight recorder under load and faults: the log stays bounded, secrets are
redacted before they reach the disk, and a recorder that lost its reader keeps recording."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from oomdoctor.commands import run as flight
from oomdoctor.input.redact import Redactor

import fakes

SECRET = "sk-proj-abcdefghijklmnopqrstuvwx"
STAT = b"[2026-03-02 10:00:41 TP0] Decode batch. #running-req: 233, #token: 81234, token usage: 0.28, gen throughput (token/s): 4012.55, #queue-req: 0\n"
BLOCKS = 500
REPEAT = 1_000_000 // len(STAT) + 1  # a block is just over 1 MB: 500 MB in all


def _block(i: int) -> bytes:
    """Block ``i`` of the 500 MB child: about 1 MB of statistics lines between a numbered first and last line."""
    first = b"block %04d begins" % i + (b" api_key=" + SECRET.encode() if i in (0, BLOCKS - 1) else b"") + b"\n"
    return first + STAT * REPEAT + b"block %04d ends\n" % i


BIG_CHILD = textwrap.dedent(
    f"""
    import sys
    SECRET, STAT, BLOCKS, REPEAT = {SECRET!r}, {STAT!r}, {BLOCKS}, {REPEAT}
    def _block(i):
        first = b"block %04d begins" % i + (b" api_key=" + SECRET.encode() if i in (0, BLOCKS - 1) else b"") + b"\\n"
        return first + STAT * REPEAT + b"block %04d ends\\n" % i
    out = sys.stdout.buffer
    for i in range(BLOCKS):
        out.write(_block(i))
    """
)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "oomdoctor", "run", *args]


def test_500_mb_under_keep_mb_16_leaves_32_mb_with_head_and_tail(tmp_path: Path) -> None:
    script = tmp_path / "big.py"
    script.write_text(BIG_CHILD)
    rec = tmp_path / "rec"
    t = time.perf_counter()
    res = subprocess.run(_cli("--out", str(rec), "--keep-mb", "16", "--", sys.executable, str(script)), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd="/", timeout=120)
    took = time.perf_counter() - t
    assert res.returncode == 0, res.stderr.decode()
    run_dir = (rec / "latest").resolve()
    on_disk = {p.name: p.stat().st_size for p in run_dir.iterdir()}
    assert sorted(on_disk) == [flight.LOCK_NAME, "server.log"]  # no ring file left behind
    assert sum(on_disk.values()) <= 32_000_000 + 200  # the first and the last 16 MB and one marker line
    log = (run_dir / "server.log").read_bytes()

    def redacted(data: bytes) -> bytes:
        return Redactor().log_bytes(data)

    head = redacted(b"".join(_block(i) for i in range(17)))
    assert log.startswith(head[:16_000_000])
    assert log.startswith(b"block 0000 begins api_key=<redacted>\n")
    marker_at = log.index(b"\n[oomdoctor run: ", 16_000_000 - 1)
    assert marker_at == 16_000_000
    marker_end = log.index(b"\n", marker_at + 1) + 1
    assert log.count(b"[oomdoctor run: ") == 1 and b"server.log keeps the first and the last 16 MB (--keep-mb)]" in log[marker_at:marker_end]
    tail = log[marker_end:]
    expected_tail = redacted(b"".join(_block(i) for i in range(BLOCKS - 17, BLOCKS)))
    assert expected_tail.endswith(tail) and 16_000_000 - len(STAT) < len(tail) <= 16_000_000
    assert tail.startswith(b"[2026-03-02") or tail.startswith(b"block ")  # from a whole line
    assert b"block 0499 begins api_key=<redacted>\n" in tail and tail.endswith(b"block 0499 ends\n")
    assert SECRET.encode() not in log
    dropped = int(log[marker_at:marker_end].split(b"run: ")[1].split(b" bytes")[0])
    total = sum(len(redacted(_block(i))) for i in (0, BLOCKS - 1)) + (BLOCKS - 2) * len(_block(1))
    # A child this fast can outrun the log writer: the pass-through never waits for it, the oldest output waiting is
    # dropped instead (never the head nor the newest 16 MB), each gap one line of about 120 bytes in what was dropped.
    behind = re.search(r"the recorder fell behind the server: (\d+) bytes .* \((\d+) gap\(s\)", res.stderr.decode())
    gap_bytes, gaps = (int(behind[1]), int(behind[2])) if behind else (0, 0)
    assert 0 <= 16_000_000 + dropped + len(tail) - (total - gap_bytes) <= gaps * 130
    print(f"500 MB through `oomdoctor run --keep-mb 16` in {took:.2f} s, {sum(on_disk.values()) / 1e6:.1f} MB on disk")


# --- the recorder's own stdout goes away --------------------------------------------------------

CHATTY_THEN_EXIT = textwrap.dedent(
    """
    import sys, time
    for i in range(300):
        print(f"line {i:03d} " + "x" * 60, flush=True)
        time.sleep(0.002)
    sys.stderr.write("done\\n")
    sys.exit(3)
    """
)
EXPECTED_LOG = "".join(f"line {i:03d} {'x' * 60}\n" for i in range(300)) + "done\n"


def test_a_closed_stdout_pipe_leaves_the_server_running_and_the_log_whole(tmp_path: Path) -> None:
    """The reader of `oomdoctor run ... | head -1` goes away: the server is not killed, server.log keeps all of it."""
    script = tmp_path / "child.py"
    script.write_text(CHATTY_THEN_EXIT)
    rec = tmp_path / "rec"
    p = subprocess.Popen(_cli("--out", str(rec), "--", sys.executable, str(script)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/")
    assert p.stdout is not None and p.stderr is not None
    assert p.stdout.readline() == b"line 000 " + b"x" * 60 + b"\n"
    p.stdout.close()  # the reading end: the recorder's next write gets EPIPE
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 3, err
    assert (rec / "latest" / "server.log").read_text() == EXPECTED_LOG
    assert err.count("oomdoctor: cannot write the server's stdout (Broken pipe); the server keeps running and server.log keeps recording it") == 1, err
    assert "Traceback" not in err and "Exception ignored" not in err
    assert "done\n" in err  # stderr still passes through


class _BrokenAfter(io.RawIOBase):
    """A stdout whose reader leaves after ``room`` bytes: every later write raises BrokenPipeError."""

    def __init__(self, room: int) -> None:
        self.room, self.data, self.writes = room, bytearray(), 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        self.writes += 1
        if len(self.data) >= self.room:
            raise BrokenPipeError(32, "Broken pipe")
        self.data += data
        return len(data)


@pytest.mark.parametrize("redact", [True, False])
def test_a_stdout_that_raises_broken_pipe_is_said_once_and_the_log_goes_on(tmp_path: Path, redact: bool) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHATTY_THEN_EXIT)
    out, err = _BrokenAfter(100), io.BytesIO()
    code = flight.run(
        [sys.executable, str(script)], str(tmp_path / "rec"), nvml_module=fakes.FakeNvml(fakes.load("idle_reserved")), psutil_module=None, stdout=out, stderr=err, redact=redact  # type: ignore[arg-type]
    )
    assert code == 3
    assert EXPECTED_LOG.startswith(out.data.decode()) and out.writes >= 2
    said = err.getvalue().decode()
    assert said.count("cannot write the server's stdout (Broken pipe)") == 1 and "done\n" in said
    assert (tmp_path / "rec" / "latest" / "server.log").read_text() == EXPECTED_LOG


def test_a_recorder_started_with_stdout_closed_records_and_says_so(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    child = [sys.executable, "-c", "import sys; print('hello'); sys.exit(4)"]
    res = subprocess.run(["sh", "-c", 'exec "$0" "$@" >&-', *_cli("--out", str(rec), "--", *child)], stderr=subprocess.PIPE, cwd="/", timeout=60)
    err = res.stderr.decode()
    assert res.returncode == 4, err
    assert err.count("cannot write the server's stdout (it is closed)") == 1 and "Traceback" not in err
    assert (rec / "latest" / "server.log").read_text() == "hello\n"


# --- in-flight redaction --------------------------------------------------------------------------

WAITING_CHILD = textwrap.dedent(
    f"""
    import pathlib, sys, time
    print("launch --api-key {SECRET} --port 30000", flush=True)
    sys.stdout.write("api_key=sk-proj-"); sys.stdout.flush(); time.sleep(0.05)
    print("split0123456789abcdef across two writes", flush=True)
    flag = pathlib.Path(sys.argv[1])
    for _ in range(3000):
        if flag.exists():
            break
        time.sleep(0.01)
    """
)


def test_secrets_are_redacted_before_they_reach_the_disk(tmp_path: Path) -> None:
    """While the server still runs, server.log already holds the redacted lines, and never the secret."""
    script = tmp_path / "child.py"
    script.write_text(WAITING_CHILD)
    flag, rec = tmp_path / "go", tmp_path / "rec"
    p = subprocess.Popen(_cli("--out", str(rec), "--", sys.executable, str(script), str(flag)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/")
    try:
        seen = b""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            log = rec / "latest" / "server.log"
            seen = log.read_bytes() if log.exists() else b""
            assert SECRET.encode() not in seen and b"split0123456789abcdef" not in seen
            if seen.count(b"\n") == 2:
                break
            time.sleep(0.01)
        assert seen == b"launch --api-key <redacted> --port 30000\napi_key=<redacted> across two writes\n"
        assert p.poll() is None  # the server is still running
    finally:
        flag.touch()
        out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert SECRET.encode() in out  # the terminal sees the server's own bytes
    assert [f.name for f in (rec / "latest").iterdir() if "redacting" in f.name or "ring" in f.name] == []


PEM_CHILD = textwrap.dedent(
    """
    import sys, time
    lines = ["-----BEGIN PRIVATE KEY-----", "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj",
             "MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu", "-----END PRIVATE KEY-----", "server ready"]
    for line in lines:
        line = "[2026-03-02 10:00:40] " + line + "\\n"
        half = len(line) // 2
        for part in (line[:half], line[half:]):  # every line in two writes, apart in time
            sys.stdout.write(part)
            sys.stdout.flush()
            time.sleep(0.02)
    """
)


def test_a_pem_block_written_in_pieces_is_redacted_whole(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(PEM_CHILD)
    out, err = io.BytesIO(), io.BytesIO()
    code = flight.run([sys.executable, str(script)], str(tmp_path / "rec"), nvml_module=fakes.FakeNvml(fakes.load("idle_reserved")), psutil_module=None, stdout=out, stderr=err)
    assert code == 0 and b"MIIEvQ" in out.getvalue()
    log = (tmp_path / "rec" / "latest" / "server.log").read_text()
    assert log.splitlines() == ["[2026-03-02 10:00:40] <redacted>"] * 4 + ["[2026-03-02 10:00:40] server ready"]


def test_a_secret_split_around_the_other_stream_s_write_is_redacted(tmp_path: Path) -> None:
    """Each stream keeps its own unfinished line: stdout's 'KEY=' and its value arrive on either side of a stderr line."""
    child = (
        "import sys, time\n"
        "sys.stdout.write('export OPENAI_API_KEY='); sys.stdout.flush(); time.sleep(0.1)\n"
        "sys.stderr.write('[2026-03-02 10:00:41] loading\\n'); sys.stderr.flush(); time.sleep(0.1)\n"
        "sys.stdout.write('s3cr3tValue1234567890XYZ\\n'); sys.stdout.flush()\n"
    )
    out, err = io.BytesIO(), io.BytesIO()
    code = flight.run([sys.executable, "-c", child], str(tmp_path / "rec"), nvml_module=fakes.FakeNvml(fakes.load("idle_reserved")), psutil_module=None, stdout=out, stderr=err)
    assert code == 0 and out.getvalue() == b"export OPENAI_API_KEY=s3cr3tValue1234567890XYZ\n"  # the terminal gets it as written
    log = (tmp_path / "rec" / "latest" / "server.log").read_bytes()
    assert b"s3cr3tValue" not in log
    assert log == b"[2026-03-02 10:00:41] loading\nexport OPENAI_API_KEY=<redacted>\n"


def test_an_oom_message_split_between_two_reads_is_seen(tmp_path: Path) -> None:
    child = "import sys, time\nsys.stderr.write('RuntimeError: CUDA out of mem'); sys.stderr.flush(); time.sleep(0.1)\nsys.stderr.write('ory. Tried to allocate 2.00 GiB\\n')\n"
    out, err = io.BytesIO(), io.BytesIO()
    flight.run([sys.executable, "-c", child], str(tmp_path / "rec"), nvml_module=fakes.FakeNvml(fakes.load("idle_reserved")), psutil_module=None, stdout=out, stderr=err)
    manifest = json.loads((tmp_path / "rec" / "latest" / "manifest.json").read_text())
    assert manifest["oom_seen"] is True


def test_a_failing_redactor_stops_the_log_not_the_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail closed: no line goes to the disk unredacted; the output still passes through and the exit code is the server's."""

    def broken(self: Redactor, data: bytes) -> bytes:
        raise RuntimeError("redactor bug")

    monkeypatch.setattr(Redactor, "log_bytes", broken)
    script = tmp_path / "child.py"
    script.write_text(CHATTY_THEN_EXIT)
    out, err = io.BytesIO(), io.BytesIO()
    code = flight.run([sys.executable, str(script)], str(tmp_path / "rec"), nvml_module=fakes.FakeNvml(fakes.load("idle_reserved")), psutil_module=None, stdout=out, stderr=err)
    assert code == 3 and out.getvalue().decode() + "done\n" == EXPECTED_LOG
    said = err.getvalue().decode()
    assert said.count("failed (RuntimeError: redactor bug); the log stops here") == 1
    assert (tmp_path / "rec" / "latest" / "server.log").read_bytes() == b""


def test_the_pumps_read_the_pipe_in_large_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A chatty child (one write per line) is read a few hundred KB at a time, not one line per wake-up."""
    sizes: list[int] = []
    real_read = os.read

    def read(fd: int, n: int) -> bytes:
        data = real_read(fd, n)
        sizes.append(len(data))
        return data

    monkeypatch.setattr(os, "read", read)  # the pumps read with os.read
    child = "import sys\nfor i in range(100000):\n    sys.stdout.write(f'[TP0] Decode batch. #token: {i}, token usage: 0.28\\n'); sys.stdout.flush()\n"
    out, err = io.BytesIO(), io.BytesIO()
    code = flight.run([sys.executable, "-c", child], str(tmp_path / "rec"), nvml_module=fakes.FakeNvml(fakes.load("idle_reserved")), psutil_module=None, stdout=out, stderr=err)
    assert code == 0 and out.getvalue().count(b"\n") == 100000
    reads = [n for n in sizes if n]
    # 100,000 writes of ~45 bytes in ~0.1 s: ~20 reads here (~500 without the pause after a read that did not fill the pipe).
    assert len(reads) < 150, (len(reads), sum(reads) / len(reads))


ORDER_CHILD = textwrap.dedent(
    """
    import sys, time
    for i in range(400):
        sys.stdout.write(f"line {i:03d}\\n"); sys.stdout.flush()
        time.sleep(0.0005)
        if i % 40 == 39:
            time.sleep(0.001)
            sys.stderr.write(f"after line {i:03d}\\n"); sys.stderr.flush()
    """
)


def test_stderr_does_not_overtake_stdout_lines_waiting_out_a_pause(tmp_path: Path) -> None:
    """stdout is read after pauses; a stderr line written after a stdout line still follows it in server.log."""
    script = tmp_path / "child.py"
    script.write_text(ORDER_CHILD)
    out, err = io.BytesIO(), io.BytesIO()
    code = flight.run([sys.executable, str(script)], str(tmp_path / "rec"), nvml_module=fakes.FakeNvml(fakes.load("idle_reserved")), psutil_module=None, stdout=out, stderr=err)
    assert code == 0
    lines = (tmp_path / "rec" / "latest" / "server.log").read_text().splitlines()
    assert [line for line in lines if line.startswith("line ")] == [f"line {i:03d}" for i in range(400)]
    for i in range(39, 400, 40):
        assert lines.index(f"after line {i:03d}") > lines.index(f"line {i:03d}"), i


def test_a_pem_block_with_stderr_lines_between_its_lines_is_redacted(tmp_path: Path) -> None:
    """stdout writes the key, stderr writes between its lines: server.log interleaves them, and no key line may be in clear."""
    child = textwrap.dedent(
        """
        import sys, time
        key = ["-----BEGIN PRIVATE KEY-----", "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj",
               "MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu", "VuNd9tybAgMBAAE=", "-----END PRIVATE KEY-----"]
        for i, line in enumerate(key):
            sys.stdout.write(line + "\\n"); sys.stdout.flush(); time.sleep(0.03)
            sys.stderr.write(f"[2026-03-02 10:00:41 TP0] loading shard {i}\\n"); sys.stderr.flush(); time.sleep(0.03)
        """
    )
    out, err = io.BytesIO(), io.BytesIO()
    code = flight.run([sys.executable, "-c", child], str(tmp_path / "rec"), nvml_module=fakes.FakeNvml(fakes.load("idle_reserved")), psutil_module=None, stdout=out, stderr=err)
    assert code == 0 and b"MIIEvQ" in out.getvalue()
    log = (tmp_path / "rec" / "latest" / "server.log").read_text()
    for fragment in ("MIIEvQ", "MzEfYy", "VuNd9t"):
        assert fragment not in log, log
    assert [line for line in log.splitlines() if "loading shard" in line] == [f"[2026-03-02 10:00:41 TP0] loading shard {i}" for i in range(5)]


def test_a_secret_across_the_1_mib_split_of_a_long_line_is_redacted(tmp_path: Path) -> None:
    """server.log redacts a line longer than READ_BYTES in pieces: a secret where the line is cut must not be in clear."""
    from oomdoctor.commands.run_pumps import READ_BYTES

    # (text before the cut of the secret's context, the rest of it); the line is cut READ_BYTES after its start.
    forms = [
        ("hf_abcdefg", "hijklmnopqrstuvwxyz0123456789"),
        ("api_", "key=s3cr3tValueAcrossTheCut0123"),
        ("Authorization: Bea", "rer eyBearerTokenAcrossTheCut456"),
        ("--hf-token ", "tokenAfterTheFlagAcrossTheCut789"),
        ("https://bob:hunter2", "passAcrossTheCut@db.internal/x"),
    ]
    lines = [b"x" * (READ_BYTES - len(head) - 1) + b" " + (head + tail).encode() + b" 12345 MiB end\n" for head, tail in forms]
    data = tmp_path / "lines.bin"
    data.write_bytes(b"".join(lines))
    # Each line's end comes a moment later: the recorder holds more than READ_BYTES of it unfinished, and cuts it.
    child = (
        "import sys, time\nout = sys.stdout.buffer\n"
        "for line in open(sys.argv[1], 'rb').read().splitlines(keepends=True):\n"
        "    out.write(line[:-15]); out.flush(); time.sleep(0.05); out.write(line[-15:]); out.flush()\n"
    )
    out, err = io.BytesIO(), io.BytesIO()
    code = flight.run([sys.executable, "-c", child, str(data)], str(tmp_path / "rec"), nvml_module=fakes.FakeNvml(fakes.load("idle_reserved")), psutil_module=None, stdout=out, stderr=err)
    assert code == 0 and out.getvalue() == b"".join(lines)
    log = (tmp_path / "rec" / "latest" / "server.log").read_bytes()
    assert log.count(b"\n") == len(forms)
    secrets = ["hf_abcdefghijklmnopqrstuvwxyz0123456789", "s3cr3tValueAcrossTheCut0123", "eyBearerTokenAcrossTheCut456", "tokenAfterTheFlagAcrossTheCut789", "hunter2passAcrossTheCut"]
    for secret in secrets:
        for piece in (secret[:8], secret[-8:]):
            assert piece.encode() not in log, (secret, piece)
    # Nothing else of the lines is lost: the filler and the numbers after each secret are all there.
    assert log.count(b" 12345 MiB end\n") == len(forms)
    assert log.count(b"x") >= sum(len(line) for line in lines) - 64 * len(forms) - sum(len(h + t) for h, t in forms)

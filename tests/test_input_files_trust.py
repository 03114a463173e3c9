"""oomdoctor/input/files.py on hostile and damaged inputs (issue 24, items 2 to 4)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from oomdoctor.input.files import MAX_LINE_BYTES, InputStats, iter_line_chunks

from conftest import FIXTURES, one_error

LOG = FIXTURES / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log"
OOM_LINE = b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.06 GiB is free.\n"


def _diagnose(*args: str, stdin: bytes | None = None, env: dict[str, str] | None = None, timeout: float = 120.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "oomdoctor", "diagnose", *args], input=stdin, capture_output=True, timeout=timeout, env=env)


def _lines(path: Path) -> list[bytes]:
    return b"".join(iter_line_chunks(str(path), InputStats(path=str(path)))).splitlines()


# --- item 3: a NUL run (what copytruncate leaves) never swallows the line after it -----------------


def test_nul_run_over_the_line_cap_keeps_the_next_line(tmp_path: Path) -> None:
    log = tmp_path / "nohup.log"
    log.write_bytes(b"[2026-03-02 10:00:01] Load weight begin.\n" + b"\x00" * (MAX_LINE_BYTES * 2 + 12345) + OOM_LINE)
    lines = _lines(log)
    assert lines[-1] == OOM_LINE.rstrip(b"\n")
    stats = InputStats(path=str(log))
    list(iter_line_chunks(str(log), stats))
    assert stats.long_lines == 0  # NULs are not line content: nothing was cut


def test_nul_run_before_an_oom_is_still_diagnosed(tmp_path: Path) -> None:
    log = tmp_path / "nohup.log"
    log.write_bytes(b"\x00" * (3 << 20) + OOM_LINE)
    res = _diagnose(str(log), "--format", "json")
    assert res.returncode == 3, res.stderr
    assert json.loads(res.stdout)["verdict"]["class"] != "none"


def test_nuls_inside_a_long_line_do_not_count_towards_its_cap(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    text = b"x" * 1000
    log.write_bytes(b"\x00" * (MAX_LINE_BYTES + 10) + text + b"\x00" * (MAX_LINE_BYTES + 10) + b"\nnext\n")
    assert _lines(log) == [text, b"next"]


# --- item 4: damaged and unsupported compressed inputs are said to be so -------------------------


def _json(res: subprocess.CompletedProcess) -> dict:
    return json.loads(res.stdout)


def _validate(doc: dict) -> None:
    import jsonschema

    from conftest import REPO

    schema = json.loads((REPO / "oomdoctor" / "data" / "diagnosis.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(doc)


def test_gzip_cut_before_the_failure_is_inconclusive_not_none(tmp_path: Path) -> None:
    data = gzip.compress(LOG.read_bytes())
    cut = tmp_path / "server.log.gz"
    cut.write_bytes(data[: len(data) * 6 // 10])  # the stream stops before the exception line
    res = _diagnose(str(cut), "--format", "json")
    assert res.returncode == 4, res.stderr  # inconclusive, not "no OOM evidence" (0)
    doc = _json(res)
    assert doc["verdict"]["evidence"] == "incomplete"
    (entry,) = doc["inputs"]
    assert entry["truncated"] is True and "damaged" not in entry  # cut short, not corrupt
    assert any("truncated" in w for w in entry["warnings"])
    assert b"gzip stream ends early" in res.stderr
    _validate(doc)


def test_gzip_damaged_in_the_middle_keeps_what_came_before(tmp_path: Path) -> None:
    text = LOG.read_bytes()
    data = bytearray(gzip.compress(text))
    data[len(data) // 2] ^= 0xFF
    bad = tmp_path / "server.log.gz"
    bad.write_bytes(bytes(data))
    res = _diagnose(str(bad), "--format", "json")
    assert res.returncode in (3, 4), res.stderr  # a diagnosis of what was read, not exit 5 "no text"
    doc = _json(res)
    (entry,) = doc["inputs"]
    assert entry.get("damaged") is True and entry["truncated"] is True and entry["lines"] >= 2
    assert b"gzip stream is damaged" in res.stderr
    _validate(doc)  # the JSON contract's schema knows the damaged flag
    lines = _lines(bad)
    read = b"\n".join(lines[:-1])
    assert len(read) > 100 and text.startswith(read)  # the text before the damage is read, and nothing else
    assert lines[-1].startswith(b"[... oomdoctor: the gzip stream is damaged here")


def test_gzip_with_a_bad_checksum_is_damaged(tmp_path: Path) -> None:
    data = bytearray(gzip.compress(LOG.read_bytes()))
    data[-8] ^= 0xFF  # the CRC32 in the trailer
    bad = tmp_path / "server.log.gz"
    bad.write_bytes(bytes(data))
    stats = InputStats(path=str(bad))
    lines = b"".join(iter_line_chunks(str(bad), stats)).splitlines()
    assert stats.damaged and stats.truncated
    assert lines[: len(LOG.read_bytes().splitlines())] == LOG.read_bytes().splitlines()


def test_intact_gzip_is_not_marked(tmp_path: Path) -> None:
    good = tmp_path / "server.log.gz"
    good.write_bytes(gzip.compress(LOG.read_bytes()))
    stats = InputStats(path=str(good))
    assert b"".join(iter_line_chunks(str(good), stats)) == LOG.read_bytes()
    assert not stats.truncated and not stats.damaged and stats.warnings == []


# Frames of formats oomdoctor does not decompress: each is one clear error naming the format, never
# its bytes read as a text log (an lz4 frame of a log is mostly literal text and used to pass as one).
LZ4_FRAME = bytes.fromhex("04224d186440a7") + LOG.read_bytes()[:200]
LZ4_LEGACY = bytes.fromhex("02214c18") + b"\xba\x05\x00\x00" + LOG.read_bytes()[:200]
ZSTD_SKIPPABLE = bytes.fromhex("502a4d18") + (4).to_bytes(4, "little") + b"seek" + bytes.fromhex("28b52ffd") + LOG.read_bytes()[:200]


def test_lz4_and_zstd_are_named_not_read_as_text(tmp_path: Path) -> None:
    for name, data, fmt in (("a.log.lz4", LZ4_FRAME, "lz4"), ("b.log", LZ4_LEGACY, "lz4"), ("c.log.zst", ZSTD_SKIPPABLE, "zstd")):
        p = tmp_path / name
        p.write_bytes(data)
        res = _diagnose(str(p))
        assert res.returncode == 5, (name, res.stdout)
        err = res.stderr.decode()
        assert f"{fmt} input is not supported" in err and err.count("\n") == 1, err
        assert "VERDICT" not in res.stdout.decode()


def test_brotli_by_name_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "server.log.br"
    p.write_bytes(bytes(range(256)) * 4)
    res = _diagnose(str(p))
    assert res.returncode == 5 and b"brotli input is not supported" in res.stderr


def test_directory_lists_zstd_and_lz4_as_skipped_with_the_format(tmp_path: Path) -> None:
    from oomdoctor.input.files import expand_paths

    (tmp_path / "server.log").write_bytes(LOG.read_bytes())
    (tmp_path / "server.log.1.zst").write_bytes(ZSTD_SKIPPABLE)
    (tmp_path / "server.log.2.lz4").write_bytes(LZ4_FRAME)
    found, skipped = expand_paths([str(tmp_path)])
    assert found == [str(tmp_path / "server.log")]
    reasons = {Path(s.path).name: s.warnings[0] for s in skipped}
    assert "zstd" in reasons["server.log.1.zst"] and "not supported" in reasons["server.log.1.zst"]
    assert "lz4" in reasons["server.log.2.lz4"]


# --- item 2: standard input is spooled with a bound, and the spool never outlives the run ----------

import os  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402

from oomdoctor.input import stdin_spool  # noqa: E402


class _Stdin:
    def __init__(self, data: bytes) -> None:
        import io

        self.buffer = io.BytesIO(data)


def test_stdin_spool_keeps_head_and_tail_and_says_what_was_dropped(tmp_path: Path, monkeypatch) -> None:
    keep = 64 << 10
    monkeypatch.setattr(stdin_spool, "STDIN_KEEP_BYTES", keep)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    head = LOG.read_bytes()
    filler = b"".join(b"[2026-03-02 10:00:%02d] Decode batch. #running-req: 3, #token: 4096\n" % (i % 60) for i in range(20000))
    tail = b"[2026-03-02 11:00:00] Decode batch. #running-req: 3\n" + OOM_LINE
    monkeypatch.setattr(sys, "stdin", _Stdin(head + filler + tail))
    stdin_spool.spool_stdin()
    try:
        (spool,) = [p for p in os.listdir(tmp_path) if p.startswith(".oomdoctor-stdin-")]  # the ring is gone
        data = (tmp_path / spool).read_bytes()
        assert len(data) <= 2 * keep + 300  # bounded: the head, the tail and one marker line
        assert data.startswith(head) and data.endswith(tail)
        marker = [line for line in data.splitlines() if line.startswith(b"[oomdoctor: ")]
        assert len(marker) == 1 and b"of standard input dropped here" in marker[0]
        stats = InputStats(path="<stdin>")
        read = b"".join(iter_line_chunks("-", stats))
        assert read == data
        assert any("dropped" in w and "64 KiB" in w for w in stats.warnings), stats.warnings
    finally:
        stdin_spool.release_stdin_spool()
    assert os.listdir(tmp_path) == []


def test_stdin_under_the_cap_is_kept_whole(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(stdin_spool, "STDIN_KEEP_BYTES", 4096)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    data = b"x" * 5000 + b"\n" + b"y" * 3000 + b"\n"  # over one keep, under two: nothing is dropped
    monkeypatch.setattr(sys, "stdin", _Stdin(data))
    stdin_spool.spool_stdin()
    try:
        stats = InputStats(path="<stdin>")
        assert b"".join(iter_line_chunks("-", stats)) == data and stats.warnings == []
    finally:
        stdin_spool.release_stdin_spool()
    assert os.listdir(tmp_path) == []


def test_stdin_over_the_cap_is_diagnosed_from_its_tail(tmp_path: Path, monkeypatch, run_cli) -> None:
    monkeypatch.setattr(stdin_spool, "STDIN_KEEP_BYTES", 64 << 10)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    filler = b"[2026-03-02 10:00:01] Decode batch. #running-req: 3, #token: 4096\n" * 20000
    res = run_cli("diagnose", "-", "--format", "json", input=LOG.read_bytes() + filler + OOM_LINE)
    assert res.code == 3, res.err
    (entry,) = res.json["inputs"]
    assert any("dropped" in w for w in entry["warnings"])
    assert "of standard input were dropped" in res.err
    assert os.listdir(tmp_path) == []


_FULL_DISK = """
import os, sys, tempfile
real = tempfile.mkstemp
def full(*a, **k):
    fd, path = real(*a, **k)
    os.close(fd)
    return os.open("/dev/full", os.O_WRONLY), path  # every write fails with ENOSPC, as on a full disk
tempfile.mkstemp = full
from oomdoctor.commands.cli import main
main(["diagnose", "-"])
"""


def test_stdin_spool_on_a_full_disk_is_one_error_line_and_leaves_nothing(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    res = subprocess.run([sys.executable, "-c", _FULL_DISK], input=LOG.read_bytes(), capture_output=True, timeout=60, env=env)
    err = res.stderr.decode()
    assert res.returncode == 5, err
    assert err.count("\n") == 1 and err.startswith("oomdoctor: error: ") and "No space left on device" in err, err
    assert "internal error" not in err and "Traceback" not in err
    assert os.listdir(tmp_path) == []


def _interrupted(tmp_path: Path, sig: int) -> tuple[int, str]:
    """`oomdoctor diagnose -` on a stream that stays open, signalled once its spool exists."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    # A suite started in the background (`.ci/run &`) hands its children SIGINT ignored, and Python then
    # installs no KeyboardInterrupt handler: the child gets the default disposition back, as a terminal gives it.
    proc = subprocess.Popen(
        [sys.executable, "-m", "oomdoctor", "diagnose", "-"],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdin is not None
    try:
        proc.stdin.write(LOG.read_bytes() * 50)
        proc.stdin.flush()
        for _ in range(600):  # a hang guard, not a timing assertion: wait for the spool to appear
            if os.listdir(tmp_path):
                break
            time.sleep(0.05)
        assert os.listdir(tmp_path), "the spool never appeared"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err.decode()


def test_sigterm_while_spooling_stdin_exits_cleanly_and_leaves_nothing(tmp_path: Path) -> None:
    code, err = _interrupted(tmp_path, signal.SIGTERM)
    assert code == 143, (code, err)
    assert err.strip() == "oomdoctor: error: terminated"
    assert os.listdir(tmp_path) == []


def test_sigint_while_spooling_stdin_leaves_nothing(tmp_path: Path) -> None:
    code, err = _interrupted(tmp_path, signal.SIGINT)
    assert code == 130, (code, err)
    assert err.strip() == "oomdoctor: error: interrupted"
    assert os.listdir(tmp_path) == []


# --- an endless input given as a log (issue 24) ---------------------------------------------------


@pytest.mark.parametrize("name", ["x.csv", "x.log", "x.json", "x.pickle", "x.xml", "dev-zero"])
def test_a_character_device_given_by_name_is_one_error_line_and_exit_5(tmp_path: Path, name: str) -> None:
    """A link to /dev/zero (whatever its name says) never ends: refused before a byte is read, not read for ever.

    The subprocess timeout only guards the suite against the hang this test is about; the bound is
    structural: the device is refused by its type (os.stat), so its length never matters.
    """
    link = tmp_path / name
    link.symlink_to("/dev/zero")
    res = subprocess.run([sys.executable, "-m", "oomdoctor", "diagnose", str(link)], capture_output=True, text=True, timeout=60, cwd="/")
    assert res.returncode == 5, res.stderr
    assert one_error(res.stderr) == f"oomdoctor: error: {link}: not a regular file (/dev/zero is a character device, which may never end); save the log to a file, or pipe it in as -"


def test_a_character_device_beside_a_log_is_listed_and_the_log_diagnosed(run_cli, tmp_path: Path) -> None:
    link = tmp_path / "zero.log"
    link.symlink_to("/dev/zero")
    res = run_cli("diagnose", str(LOG), str(link), "--format", "json")
    assert res.code == 3
    unread = [i for i in res.json["inputs"] if i["path"] == str(link)]
    assert len(unread) == 1 and "a character device" in unread[0]["warnings"][0]

"""Evidence links out of a bundle directory are neither read nor copied into `--bundle` (issue 24, item 5).

The walk of the logs skipped such a link and said so, but evidence_files (rglob, is_file) read the
same link as evidence, and the bundle then copied the file it leads to: a secret outside the folder
ended up in the zip, beside a warning that said "skipped".
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from pathlib import Path

from oomdoctor.evidence.collected import evidence_files

from conftest import FIXTURES

LOG = FIXTURES / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log"
SECRET = "OUTSIDE-SECRET-7f3a"


def _bundle_with_links_out(tmp_path: Path) -> Path:
    bundle = tmp_path / "bundle"
    outside = tmp_path / "outside"
    bundle.mkdir()
    (outside / "sub").mkdir(parents=True)
    shutil.copy(LOG, bundle / "server.log")
    (bundle / "manifest.json").write_text(json.dumps({"kind": "oomdoctor-bundle", "bundle_version": 1, "gpus": []}))
    (outside / "snap.json").write_text(json.dumps({"segments": [], "note": SECRET}))
    (outside / "sub" / "memory_stats.json").write_text(json.dumps({"segments": [], "note": SECRET}))
    (outside / "secret.log").write_text(f"[2026-03-02 10:00:00] {SECRET}\n")
    (bundle / "memory_snapshot.json").symlink_to(outside / "snap.json")
    (bundle / "linked-dir").symlink_to(outside / "sub")
    (bundle / "escape.log").symlink_to(outside / "secret.log")
    os.mkfifo(bundle / "pipe.json")  # evidence-named FIFO: opening it would block
    return bundle


def test_evidence_files_never_leave_the_bundle(tmp_path: Path) -> None:
    bundle = _bundle_with_links_out(tmp_path)
    found = evidence_files(str(bundle))
    assert found == [str(bundle / "manifest.json")]


def test_evidence_link_inside_the_bundle_is_read(tmp_path: Path) -> None:
    bundle = _bundle_with_links_out(tmp_path)
    (bundle / "stats").mkdir()
    (bundle / "stats" / "memory_stats.json").write_text("{}")
    (bundle / "again.json").symlink_to(bundle / "stats" / "memory_stats.json")
    found = evidence_files(str(bundle))
    assert str(bundle / "stats" / "memory_stats.json") in found
    assert str(bundle / "again.json") not in found  # the same file once


def test_bundle_zip_holds_nothing_from_outside(tmp_path: Path, run_cli) -> None:
    bundle = _bundle_with_links_out(tmp_path)
    out = tmp_path / "oom.zip"
    res = run_cli("diagnose", str(bundle), "--format", "json", "--bundle", str(out))
    assert res.code == 3, res.err
    inputs = res.json["inputs"]
    read = {Path(i["path"]).name for i in inputs if i["kind"] != "skipped"}
    skipped = {Path(i["path"]).name for i in inputs if i["kind"] == "skipped"}
    assert "memory_snapshot.json" not in read and "escape.log" not in read
    assert {"memory_snapshot.json", "linked-dir", "escape.log", "pipe.json"} <= skipped
    with zipfile.ZipFile(out) as zf:
        names = zf.namelist()
        assert not any("memory_snapshot" in n or "escape" in n for n in names), names
        for name in names:
            assert SECRET.encode() not in zf.read(name), name


def test_bundle_of_a_pipe_input_notes_it_instead_of_hanging(tmp_path: Path) -> None:
    """`diagnose <(zcat log.gz) --bundle b.zip`: the diagnosis drains the pipe; the bundle says so, never reopens it."""
    import signal
    import subprocess
    import sys

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    out = tmp_path / "b.zip"
    proc = subprocess.Popen(
        [sys.executable, "-m", "oomdoctor", "diagnose", str(fifo), "--bundle", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    with open(fifo, "wb") as fh:  # blocks until oomdoctor opens it for reading
        fh.write(LOG.read_bytes())
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError("--bundle reopened the drained pipe and hung (killed after 60 s)") from None
    assert proc.returncode == 3, err
    assert out.is_file()
    assert "not a regular file" in err
    with zipfile.ZipFile(out) as zf:
        assert "README.txt" in zf.namelist() and not any(n.startswith("inputs/") for n in zf.namelist())


# --- terminal escapes in the bundle's reports (issue 24) ------------------------------------------

# An OSC 52 clipboard write, a title change, a colour, a CSI in its C1 form and a BEL, in lines the report cites.
ESCAPES = "\x1b]52;c;ZWNobyBwd25lZA==\x07\x1b]0;owned\x1b\\\x1b[31m\x9b2J\x07"


def _raw_control(c: str) -> bool:
    """A C0 control but tab and newline, DEL or a C1 control: what a terminal acts on."""
    return (ord(c) < 0x20 and c not in "\t\n") or 0x7F <= ord(c) < 0xA0


def test_bundle_reports_carry_no_raw_terminal_escape(run_cli, tmp_path: Path) -> None:
    lines = LOG.read_text().splitlines()
    lines = [line + ESCAPES if ("Not enough memory" in line or "Load weight end" in line or "server_args=" in line) else line for line in lines]
    log = tmp_path / "esc.log"
    log.write_text("\n".join(lines) + "\n")
    out = tmp_path / "b.zip"
    res = run_cli("diagnose", str(log), "--bundle", str(out))
    assert res.code == 3
    with zipfile.ZipFile(out) as zf:
        members = {name: zf.read(name).decode() for name in ("report.html", "summary.md", "diagnosis.json")}
        copy = zf.read("inputs/esc.log").decode()
    for name, text in members.items():
        raw = sorted({f"{ord(c):#04x}" for c in text if _raw_control(c)})
        assert raw == [], (name, raw)
    # Escaped, not dropped: what the log held is still readable in the reports.
    assert "\\x1b]52;c;ZWNobyBwd25lZA==\\x07" in members["summary.md"] and "\\x1b]52;c;" in members["report.html"]
    assert "\\u001b]52;c;" in members["diagnosis.json"] and "\\u009b2J" in members["diagnosis.json"]
    assert ESCAPES in copy  # the input copy is the log as it was (redacted only)


def test_run_s_report_carries_no_raw_terminal_escape(tmp_path: Path) -> None:
    """`run` writes report.html and diagnosis.json into its run directory (a bundle `diagnose DIR` reads) the same way."""
    import io
    import sys

    from oomdoctor.commands import run as flight

    import fakes

    oom = "[2026-03-02 11:20:31] Scheduler hit an exception: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.25 GiB."
    child = f"import sys\nprint({'server_args=ServerArgs(mem_fraction_static=0.8)' + ESCAPES!r}, flush=True)\nsys.stderr.write({oom + ESCAPES + chr(10)!r})\nsys.exit(1)\n"
    scenario = fakes.load("accounted")
    flight.run([sys.executable, "-c", child], str(tmp_path / "rec"), nvml_module=fakes.FakeNvml(scenario), psutil_module=fakes.FakePsutil(scenario), stdout=io.BytesIO(), stderr=io.BytesIO())
    rec = tmp_path / "rec" / "latest"
    assert ESCAPES in (rec / "server.log").read_text()
    for name in ("report.html", "diagnosis.json"):
        text = (rec / name).read_text()
        assert "52;c;ZWNobyBwd25lZA==" in text, name  # the line is cited, escaped
        assert [c for c in text if _raw_control(c)] == [], name


def test_a_token_across_the_1_mib_cut_of_a_long_line_leaves_no_part_in_the_copy(run_cli, tmp_path: Path, monkeypatch) -> None:
    """Lines over MAX_LINE_BYTES are cut: a token cut in two is no token the rules know, and its first part reached the copy."""
    from oomdoctor.input import files

    # The cap and the read size scaled down 16 times: the same code, on lines of 200 KB rather than 3 MB.
    monkeypatch.setattr(files, "MAX_LINE_BYTES", 64 << 10)
    monkeypatch.setattr(files, "CHUNK_BYTES", 16 << 10)
    MAX_LINE_BYTES = files.MAX_LINE_BYTES
    tokens = ["hf_abcdefghijklmnopqrstuvwxyz0123456789", "ghp_abcdefghijklmnopqrstuvwxyz0123456789", "AKIAABCDEFGHIJKLMNOP"]
    # The token starts a few bytes before the cut; the line goes on (the cut falls where the reader finds it too long).
    rest = b" tail" * (MAX_LINE_BYTES // 5)
    lines = [b"x " * ((MAX_LINE_BYTES - 9) // 2) + tokens[0].encode() + rest + b"\n", b"y " * ((MAX_LINE_BYTES - 13) // 2) + tokens[1].encode() + rest + b"\n",
             b"z" * (MAX_LINE_BYTES - 6) + b" " + tokens[2].encode() + rest + b"\n"]
    log = tmp_path / "long.log"
    log.write_bytes(b"".join(lines) + LOG.read_bytes())
    out = tmp_path / "b.zip"
    assert run_cli("diagnose", str(log), "--bundle", str(out)).code == 3
    with zipfile.ZipFile(out) as zf:
        copy = zf.read("inputs/long.log").decode()
    for token in tokens:
        assert token[:5] not in copy, token
    assert copy.count("x x x") and copy.count("\n") == LOG.read_text().count("\n") + 3

"""`oomdoctor run` (flight recorder) and `oomdoctor plan` (pre-launch budget)."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from oomdoctor.base.errors import InputError
from oomdoctor.base.units import GIB
from oomdoctor.commands import plan
from oomdoctor.commands import run as flight
from oomdoctor.commands.run_log import BoundedLog
from oomdoctor.memory.gpus import find_gpu

import fakes
from conftest import FIXTURES

CHILD = textwrap.dedent(
    """
    import sys, time
    for line in [
        "[2026-03-02 10:00:01] server_args=ServerArgs(model_path='Qwen/Qwen3-32B', mem_fraction_static=0.838, chunked_prefill_size=8192, tp_size=1)",
        "[2026-03-02 10:00:06] Load weight begin. avail mem=78.51 GB",
        "[2026-03-02 10:00:41] Load weight end. elapsed=34.90 s, type=Qwen3ForCausalLM, avail mem=47.80 GB, mem usage=30.71 GB.",
        "[2026-03-02 10:01:04] max_total_num_tokens=287375, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=3592, context_len=40960, available_gpu_mem=10.85 GB",
        "[2026-03-02 10:01:08] The server is fired up and ready to roll!",
    ]:
        print(line, flush=True)
    sys.stdout.buffer.write(b"raw bytes \\xff\\xfe and a partial line")
    sys.stdout.flush()
    time.sleep(0.3)
    sys.stderr.write("[2026-03-02 11:20:31] Scheduler hit an exception: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.25 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.15 GiB memory in use. Of the allocated memory 76.71 GiB is allocated by PyTorch, and 410.00 MiB is reserved by PyTorch but unallocated. See documentation for Memory Management\\n")
    sys.exit(1)
    """
)


def test_run_passes_output_through_and_records_the_oom(tmp_path: Path) -> None:
    script = tmp_path / "server.py"
    script.write_text(CHILD)
    expected = subprocess.run([sys.executable, str(script)], capture_output=True)
    out, err = io.BytesIO(), io.BytesIO()
    scenario = fakes.load("accounted")
    out_dir = tmp_path / "rec"
    code = flight.run(
        [sys.executable, str(script)], str(out_dir), interval_ms=20, nvml_module=fakes.FakeNvml(scenario), psutil_module=fakes.FakePsutil(scenario), stdout=out, stderr=err
    )
    rec = out_dir / "latest"
    assert code == 1 == expected.returncode
    assert out.getvalue() == expected.stdout  # byte for byte, invalid UTF-8 and the unterminated line included
    assert err.getvalue().startswith(expected.stderr)
    # The summary line names the flag to change, then where the report is.
    assert b"oomdoctor: runtime_activation: lower --mem-fraction-static from 0.838 to " in err.getvalue()[len(expected.stderr):]
    assert b"; report at " in err.getvalue()[len(expected.stderr):]
    assert _names(rec) == ["diagnosis.json", "manifest.json", "report.html", "samples.json", "server.log"]
    manifest = json.loads((rec / "manifest.json").read_text())
    assert manifest["oom_seen"] and manifest["child_exit_code"] == 1 and manifest["gpu_evidence"]["source"] == "nvml"
    assert manifest["gpus"][0]["processes"][0]["pid"] == 4242 and manifest["gpus"][0]["processes"][0]["is_server"]
    samples = json.loads((rec / "samples.json").read_text())["samples"]
    assert len(samples) >= 3 and samples[0]["processes"] == [{"gpu": "GPU-ffff0000-1111-2222-3333-444455556666", "pid": 4242, "used_bytes": 78400 << 20}]
    assert json.loads((rec / "diagnosis.json").read_text())["verdict"]["class"] == "runtime_activation"
    report = (rec / "report.html").read_text()
    assert 'id="samples-chart"' in report and "pid 4242" in report
    # The log holds whole lines in the order they were completed: stdout's unterminated last line (held
    # for its end, so that a secret split around the other stream's write is still redacted) comes last.
    whole, partial = expected.stdout.rsplit(b"\n", 1)
    assert partial == b"raw bytes \xff\xfe and a partial line"
    assert (rec / "server.log").read_bytes() == whole + b"\n" + expected.stderr + partial


def _names(run_dir: Path) -> list[str]:
    """A run directory's files, without the recorder's lock file."""
    return sorted(p.name for p in run_dir.iterdir() if p.name != flight.LOCK_NAME)


def test_run_clean_exit_writes_no_bundle(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    out, err = io.BytesIO(), io.BytesIO()
    code = flight.run([sys.executable, "-c", "print('ok')"], str(rec), nvml_module=fakes.FakeNvml(fakes.load("idle_reserved")), psutil_module=None, stdout=out, stderr=err)
    assert code == 0 and out.getvalue() == b"ok\n"
    assert _names(rec / "latest") == ["server.log"]


SIG_CHILD = textwrap.dedent(
    """
    import signal, sys, time
    def on(sig, frame):
        print(f"got {sig}", flush=True)
        sys.exit(40 + sig % 10)
    signal.signal(signal.SIGTERM, on)
    signal.signal(signal.SIGINT, on)
    print("ready", flush=True)
    time.sleep(30)
    """
)


@pytest.mark.parametrize("sig, child_code", [(signal.SIGTERM, 45), (signal.SIGINT, 42)])
def test_run_forwards_signals_and_exits_with_the_childs_code(tmp_path: Path, sig: int, child_code: int) -> None:
    script = tmp_path / "child.py"
    script.write_text(SIG_CHILD)
    rec = tmp_path / "rec"
    p = subprocess.Popen([sys.executable, "-m", "oomdoctor", "run", "--out", str(rec), "--", sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/")
    assert p.stdout.readline() == b"ready\n"
    p.send_signal(sig)
    rest, err = p.communicate(timeout=30)
    assert p.returncode == child_code, err
    assert rest == f"got {int(sig)}\n".encode()
    run_dir = rec / "latest"
    assert (run_dir / "server.log").read_bytes() == b"ready\n" + rest
    manifest = json.loads((run_dir / "manifest.json").read_text())
    # This machine has no GPU: the log is still recorded, and the bundle says why there are no samples.
    if manifest["gpu_evidence"]["unavailable"]:
        assert json.loads((run_dir / "samples.json").read_text())["unavailable"]


# --- plan ----------------------------------------------------------------------------------------

OMNI = FIXTURES / "plan" / "qwen3-omni-30b-a3b"
MLA = FIXTURES / "plan" / "deepseek-v2-lite" / "config.json"
GQA = FIXTURES / "plan" / "llama-3.1-8b"


def test_plan_seed000_h100_infeasible_at_07_feasible_at_085() -> None:
    m = plan.load_model(str(OMNI))
    assert m.weights_bytes == 60 * GIB and m.weights_source.startswith("safetensors index")
    assert (m.layers, m.kv_heads, m.head_dim) == (48, 4, 128)  # the thinker's text config
    h100 = find_gpu("H100-80GB")
    p = plan.plan(m, h100.capacity_bytes, h100.name, context_len=32768, at=0.7, smi_total_bytes=h100.smi_total_bytes)
    assert p["at"]["feasible"] is False and p["at"]["kv_bytes"] < 0
    # pre = 79.19 GiB (CUDA's total) - 0.59 GiB context = 78.60 GiB; 0.7 * 78.60 - 60 = -4.98 GiB
    assert p["at"]["kv_bytes"] / GIB == pytest.approx(-4.98, abs=0.01)
    assert p["recommended"] == 0.85 and p["feasible"]
    assert p["kv_bytes"] / GIB == pytest.approx(6.81, abs=0.01)  # 0.85 * 78.60 - 60
    assert p["cell_bytes"] == 4 * 256 * 48 * 2
    assert p["kv_tokens"] == int(p["kv_bytes"] // p["cell_bytes"]) and p["max_concurrency"] == round(p["kv_tokens"] / 32768, 2)
    assert p["default"] == 0.835 and p["default_in_window"]  # SGLang's auto-tune reads nvidia-smi's 81559 MiB


def test_plan_seed000_h20_feasible_at_07_with_about_7gb_kv() -> None:
    m = plan.load_model(str(OMNI))
    h20 = find_gpu("h20")
    p = plan.plan(m, h20.capacity_bytes, h20.name, context_len=32768, at=0.7)
    assert p["at"]["feasible"] is True
    kv_gb = p["at"]["kv_bytes"] / 1e9
    assert 6.5 < kv_gb < 7.5, kv_gb  # 0.7 * (95.10 - 0.59) GiB - 60 GiB = 6.16 GiB = 6.61 GB


def test_plan_cell_bytes_mla_is_not_split_and_gqa_is() -> None:
    mla = plan.load_model(str(MLA))
    assert mla.mla == (512, 64)
    assert plan.cell_bytes(mla, 1, 2).value == plan.cell_bytes(mla, 2, 2).value == (512 + 64) * 27 * 2
    gqa = plan.load_model(str(GQA))
    assert plan.cell_bytes(gqa, 1, 2).value == 8 * 256 * 32 * 2
    assert plan.cell_bytes(gqa, 2, 2).value == 4 * 256 * 32 * 2
    assert plan.cell_bytes(gqa, 16, 2).value == 1 * 256 * 32 * 2  # KV heads replicate beyond 8 ranks
    assert gqa.weights_bytes / 1e9 == pytest.approx(16.06, abs=0.05)  # 8.03 B parameters in bf16
    assert mla.weights_bytes / 1e9 == pytest.approx(31.4, abs=0.3)  # 15.7 B parameters in bf16


def test_plan_moe_config_without_expert_size_is_an_input_error(tmp_path: Path, run_cli) -> None:
    cfg = {"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "vocab_size": 1000, "num_local_experts": 8}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="lacks moe_intermediate_size and intermediate_size"):
        plan.load_model(str(tmp_path))
    res = run_cli("plan", "--model", str(tmp_path), "--gpu", "H100-80GB")
    assert res.code == 5 and "intermediate_size" in res.err


def test_plan_cli_exit_codes_and_what_fits(run_cli) -> None:
    ok = run_cli("plan", "--model", str(OMNI), "--gpu", "H100-80GB", "--context-len", "32768")
    assert ok.code == 0 and "recommended: --mem-fraction-static 0.85" in ok.out
    pinned = run_cli("plan", "--model", str(OMNI), "--gpu", "H100-80GB", "--context-len", "32768", "--at", "0.7")
    # The exit code follows the recommendation (0.85 fits); the pinned 0.7 is reported as INFEASIBLE.
    assert pinned.code == 0 and "INFEASIBLE" in pinned.out
    tight = run_cli("plan", "--model", str(GQA), "--gpu", "A10", "--context-len", "131072", "--system", "vllm", "--format", "json")
    assert tight.code == 3
    data = tight.json
    assert data["feasible"] is False and data["flag"] == "--gpu-memory-utilization"
    fits = {(f["gpu"], f["tp_size"]) for f in data["fits_on"]}
    assert ("H100-80GB", 1) in fits and ("A10", 2) in fits
    assert run_cli("plan", "--model", str(OMNI), "--gpu", "Z80").code == 2
    assert run_cli("plan", "--model", str(OMNI)).code == 2
    assert run_cli("plan", "--model", "/nonexistent", "--gpu", "H100").code == 5
    custom = run_cli("plan", "--model", str(GQA), "--gpu-mem-gib", "24", "--context-len", "8192", "--format", "json").json
    assert custom["capacity_bytes"] == 24 * GIB and custom["feasible"]


def test_plan_markdown_and_html(run_cli) -> None:
    md = run_cli("plan", "--model", str(OMNI), "--gpu", "H100-80GB", "--context-len", "32768", "--format", "markdown").out
    assert md.startswith("## oomdoctor plan:") and "--mem-fraction-static 0.85" in md
    page = run_cli("plan", "--model", str(OMNI), "--gpu", "H100-80GB", "--context-len", "32768", "--format", "html").out
    assert "Content-Security-Policy" in page and '<pre id="flags">--mem-fraction-static 0.85</pre>' in page and "<script" not in page


# --- server.log bounded by --keep-mb; output passes through when the log cannot be written ---------


def test_bounded_log_keeps_head_and_tail_with_one_marker(tmp_path: Path) -> None:
    said: list[str] = []
    log = BoundedLog(tmp_path / "server.log", 100, said.append)
    lines = [f"line {i:04d} {'x' * 20}\n".encode() for i in range(200)]  # 31 bytes each
    for i in range(0, 200, 7):
        log.write(b"".join(lines[i : i + 7]))  # writes that straddle the head's end and the ring's
    log.close()
    text = (tmp_path / "server.log").read_bytes()
    head, marker, tail = text.split(b"\n", 1)[0], *text.split(b"\n[oomdoctor run: ", 1)
    assert text.startswith(b"".join(lines)[:100])
    assert tail.count(b"oomdoctor run:") == 0 and marker.count(b"oomdoctor run:") == 0
    dropped, rest = tail.split(b" bytes", 1)
    kept_tail = rest.split(b"]\n", 1)[1]
    assert b"".join(lines).endswith(kept_tail) and kept_tail.startswith(b"line ") and len(kept_tail) <= 100
    assert 100 + int(dropped) + len(kept_tail) == len(b"".join(lines))
    assert not said and not list(tmp_path.glob("*.ring"))
    assert head.startswith(b"line 0000")


def test_bounded_log_under_the_limit_is_the_whole_output(tmp_path: Path) -> None:
    log = BoundedLog(tmp_path / "server.log", 100, lambda s: None)
    for chunk in (b"a" * 60, b"b" * 60, b"c" * 50):
        log.write(chunk)
    log.close()
    assert (tmp_path / "server.log").read_bytes() == b"a" * 60 + b"b" * 60 + b"c" * 50  # 170 < 2 x 100: nothing dropped


class _FullDisk(io.RawIOBase):
    """A log file on a full file system: every write raises ENOSPC after the first ``room`` bytes."""

    def __init__(self, room: int) -> None:
        self.room = room

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        import errno
        import os

        if len(data) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(data)
        return len(data)


@pytest.mark.parametrize("redact", [False, True])
def test_run_passes_output_through_when_the_disk_is_full(tmp_path: Path, redact: bool) -> None:
    child = "import sys\nfor i in range(2000): print(f'line {i} ' + 'y' * 100)\nsys.stderr.write('done\\n')\n"
    expected = subprocess.run([sys.executable, "-c", child], capture_output=True)
    out, err = io.BytesIO(), io.BytesIO()
    code = flight.run(
        [sys.executable, "-c", child],
        str(tmp_path / "rec"),
        nvml_module=fakes.FakeNvml(fakes.load("idle_reserved")),
        psutil_module=None,
        stdout=out,
        stderr=err,
        redact=redact,
        log_opener=lambda path, mode: _FullDisk(1000),  # type: ignore[arg-type,return-value]
    )
    assert code == 0 and out.getvalue() == expected.stdout
    said = err.getvalue().decode()
    assert said.count("No space left on device") == 1 and "still passes through" in said
    assert said.startswith("done\n") or "done\n" in said


def test_run_keep_mb_bounds_the_recorded_log(tmp_path: Path) -> None:
    child = "for i in range(30000): print(f'{i:06d} ' + 'z' * 93)\n"  # 3 MB
    out, err = io.BytesIO(), io.BytesIO()
    code = flight.run(
        [sys.executable, "-c", child], str(tmp_path / "rec"), nvml_module=fakes.FakeNvml(fakes.load("idle_reserved")), psutil_module=None, stdout=out, stderr=err, keep_mb=0.5
    )
    assert code == 0 and len(out.getvalue()) == 3_030_000
    log = (tmp_path / "rec" / "latest" / "server.log").read_bytes()
    assert log.startswith(out.getvalue()[:500_000]) and log.endswith(out.getvalue()[-400_000:])
    assert log.count(b"[oomdoctor run: ") == 1 and b"MB) of server output dropped here" in log
    assert len(log) < 1_001_000

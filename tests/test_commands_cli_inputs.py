"""Bad input never makes a traceback; exit codes are the documented ones; output is deterministic."""

from __future__ import annotations

import bz2
import gzip
import lzma
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES

SEED = FIXTURES / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log"


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_seed_text_report(run_cli) -> None:
    res = run_cli("diagnose", str(SEED))
    assert res.code == 3
    assert "VERDICT: startup_kv" in res.out
    assert "raise --mem-fraction-static from 0.7 to 0.85" in res.out
    assert "-5.40 GiB" in res.out and "6.30 GiB" in res.out


def test_json_is_byte_identical_across_runs(run_cli) -> None:
    a = run_cli("diagnose", str(SEED), "--format", "json").out
    b = run_cli("diagnose", str(SEED), "--format", "json").out
    assert a == b
    assert '"schema_version": 1' in a


def test_output_file(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    res = run_cli("diagnose", str(SEED), "--format", "json", "-o", str(out))
    assert res.code == 3 and res.out == ""
    assert '"startup_kv"' in out.read_text()


def test_no_oom_exits_0(run_cli) -> None:
    res = run_cli("diagnose", str(FIXTURES / "none" / "healthy_2026.log"), "--format", "json")
    assert res.code == 0
    d = res.json
    assert d["verdict"]["class"] == "none"
    # kv = 47.80 - (1 - 0.838) * 78.51 = 35.08 GiB; at the ~128 KiB/token the KV line implies that is
    # SGLang's own 287375 tokens, up to the 2-decimal rounding of the logged sizes.
    assert d["budget"]["kv_budget_bytes"] == pytest.approx(35.0814 * (1 << 30), rel=1e-4)
    assert d["budget"]["kv_tokens"] == pytest.approx(287375, rel=1e-4)
    assert d["budget"]["pre_bytes"] == round(78.51 * (1 << 30))


@pytest.mark.parametrize("compress", [gzip.compress, bz2.compress, lzma.compress])
def test_compressed_inputs_by_magic(run_cli, tmp_path: Path, compress) -> None:
    p = tmp_path / "server.bin"  # no telling extension: sniffed by magic bytes
    p.write_bytes(compress(SEED.read_bytes()))
    res = run_cli("diagnose", str(p), "--format", "json")
    assert res.code == 3 and res.json["verdict"]["class"] == "startup_kv"


def test_stdin(run_cli) -> None:
    res = run_cli("diagnose", "-", "--format", "json", input=SEED.read_bytes())
    assert res.code == 3
    assert res.json["inputs"][0]["path"] == "<stdin>"


def test_directory_of_logs(run_cli, tmp_path: Path) -> None:
    (tmp_path / "a.log").write_bytes(SEED.read_bytes())
    (tmp_path / "notes.pickle").write_bytes(b"\x80\x04")
    res = run_cli("diagnose", str(tmp_path), "--format", "json")
    assert res.code == 3 and [i["kind"] for i in res.json["inputs"]] == ["log", "skipped"]
    assert f"{tmp_path / 'notes.pickle'}: skipped: not a log file name" in res.err


def test_empty_file(run_cli, tmp_path: Path) -> None:
    p = tmp_path / "empty.log"
    p.write_bytes(b"")
    res = run_cli("diagnose", str(p))
    assert res.code == 5
    assert "empty input" in _one_error_line(res.err)


def test_binary_file(run_cli, tmp_path: Path) -> None:
    p = tmp_path / "core.log"
    p.write_bytes(bytes(range(256)) * 400)
    res = run_cli("diagnose", str(p))
    assert res.code == 5
    assert "binary" in _one_error_line(res.err)


def test_missing_path(run_cli) -> None:
    res = run_cli("diagnose", "/nonexistent/server.log")
    assert res.code == 5
    assert "no such file" in _one_error_line(res.err)


def test_missing_input_is_its_own_warning(run_cli, tmp_path: Path) -> None:
    """A missing path beside a good log is listed under its own path, not as a warning of the good log."""
    missing = tmp_path / "missing.log"
    binary = tmp_path / "core.log"
    binary.write_bytes(bytes(range(256)) * 400)
    alone = run_cli("diagnose", str(SEED), "--format", "json")
    res = run_cli("diagnose", str(SEED), str(missing), str(binary), "--format", "json")
    assert res.code == alone.code == 3
    inputs = res.json["inputs"]
    assert inputs[0] == alone.json["inputs"][0] and inputs[0]["warnings"] == []
    assert inputs[1] == {
        "path": str(missing),
        "kind": "missing",
        "lines": 0,
        "unparsed_lines": 0,
        "compression": None,
        "truncated": False,
        "long_lines": 0,
        "warnings": ["no such file or directory"],
    }
    assert (inputs[2]["path"], inputs[2]["kind"], inputs[2]["lines"]) == (str(binary), "unreadable", 0)
    assert "binary" in inputs[2]["warnings"][0]
    warnings = [line for line in res.err.splitlines() if line.strip()]
    assert warnings[0] == f"oomdoctor: warning: {missing}: no such file or directory"
    assert warnings[1].startswith(f"oomdoctor: warning: {binary}: looks like a binary file")
    assert len(warnings) == 2 and str(SEED) not in res.err
    # The verdict is the good log's; --bundle leaves the unread inputs out instead of failing on them.
    assert res.json["verdict"] == alone.json["verdict"]
    out = tmp_path / "b.zip"
    bundled = run_cli("diagnose", str(SEED), str(missing), "--bundle", str(out))
    assert bundled.code == 3 and out.is_file()


def test_directory_without_logs(run_cli, tmp_path: Path) -> None:
    (tmp_path / "x.pickle").write_bytes(b"1")
    res = run_cli("diagnose", str(tmp_path))
    assert res.code == 5
    assert "holds no log files" in _one_error_line(res.err)


def test_truncated_gzip_gives_partial_diagnosis(run_cli, tmp_path: Path) -> None:
    data = gzip.compress(SEED.read_bytes() * 20)
    p = tmp_path / "cut.log.gz"
    p.write_bytes(data[: len(data) - 40])
    res = run_cli("diagnose", str(p), "--format", "json")
    assert res.code == 3
    d = res.json
    assert d["inputs"][0]["truncated"] is True
    assert "truncated" in res.err
    assert "Traceback" not in res.err


def test_truncated_gzip_with_nothing_readable(run_cli, tmp_path: Path) -> None:
    p = tmp_path / "cut.gz"
    p.write_bytes(gzip.compress(b"x" * 1000)[:10])  # the header alone
    res = run_cli("diagnose", str(p))
    assert res.code == 5
    _one_error_line(res.err)


def test_non_utf8_and_nul_bytes(run_cli, tmp_path: Path) -> None:
    p = tmp_path / "mixed.log"
    p.write_bytes(b"\xff\xfe garbage \x00\x00\n" + SEED.read_bytes() + b"\n\xc3\x28 bad utf8\n")
    res = run_cli("diagnose", str(p), "--format", "json")
    assert res.code == 3 and res.json["verdict"]["class"] == "startup_kv"


def test_50mb_single_line(run_cli, tmp_path: Path) -> None:
    p = tmp_path / "huge.log"
    with open(p, "wb") as fh:
        fh.write(b"A" * (50 << 20))
        fh.write(b"\n")
        fh.write(SEED.read_bytes())
    res = run_cli("diagnose", str(p), "--format", "json")
    assert res.code == 3
    d = res.json
    assert d["inputs"][0]["long_lines"] == 1
    assert d["findings"][0]["evidence"][0]["line"] == 5  # line numbers still count the long line


def test_one_bad_input_among_good_ones(run_cli, tmp_path: Path) -> None:
    res = run_cli("diagnose", str(SEED), str(tmp_path / "missing.log"), "--format", "json")
    assert res.code == 3
    assert "missing.log" in res.err


def test_usage_error_exit_2(run_cli) -> None:
    assert run_cli("diagnose").code == 2
    assert run_cli("diagnose", str(SEED), "--format", "yaml").code == 2


def test_restarts_make_incidents_and_the_last_is_the_verdict(run_cli, tmp_path: Path) -> None:
    healthy = (FIXTURES / "sglang-startup-kv" / "neg_small_kv_started.log").read_bytes()
    crash = SEED.read_bytes()
    graph = (FIXTURES / "sglang-cuda-graph-oom" / "pos_capture_failed_2025.log").read_bytes()
    p = tmp_path / "loop.log"
    p.write_bytes(crash + healthy + graph)
    d = run_cli("diagnose", str(p), "--format", "json").json
    assert [(i["run"], i["class"]) for i in d["incidents"]] == [(1, "startup_kv"), (3, "cuda_graph")]
    assert d["verdict"]["class"] == "cuda_graph"
    n_crash = crash.count(b"\n")
    assert d["incidents"][0]["first_line"] == 14
    assert d["incidents"][1]["first_line"] > n_crash + healthy.count(b"\n")


def _run_module(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "oomdoctor", *args], capture_output=True, text=True, cwd="/")


def test_main_entry_exit_codes() -> None:
    assert _run_module("diagnose", str(SEED)).returncode == 3
    assert _run_module("diagnose", str(FIXTURES / "none" / "healthy_2026.log")).returncode == 0
    r = _run_module("diagnose", "/nope")
    assert r.returncode == 5 and r.stderr.startswith("oomdoctor: error:")
    assert _run_module("--help").returncode == 0
    assert "Exit codes" in _run_module("diagnose", "--help").stdout


def test_typed_errors_and_outcomes_map_to_documented_exit_codes() -> None:
    """Library code raises typed errors and returns typed outcomes; the CLI alone picks the codes."""
    import click

    from oomdoctor.base.errors import GpuNotFound, InputError, OomdoctorError, OutputError, RuleError, UsageError
    from oomdoctor.base.outcomes import GpuEvidence, PlanFit
    from oomdoctor.commands.cli import _exit_code
    from oomdoctor.memory.gpus import find_gpu

    with pytest.raises(GpuNotFound, match="unknown GPU 'Z80'"):
        find_gpu("Z80")
    assert not hasattr(GpuNotFound("x"), "exit_code")
    assert _exit_code(GpuNotFound("x")) == 2 and _exit_code(UsageError("x")) == 2 and _exit_code(click.UsageError("x")) == 2
    assert _exit_code(InputError("x")) == _exit_code(RuleError("x")) == _exit_code(OutputError("x")) == 5
    assert _exit_code(OomdoctorError("x")) == _exit_code(ValueError("x")) == 1
    assert _exit_code(KeyboardInterrupt()) == _exit_code(click.Abort()) == 130
    assert _exit_code(GpuEvidence.AVAILABLE) == 0 and _exit_code(GpuEvidence.UNAVAILABLE) == 5
    assert _exit_code(PlanFit.FITS) == 0 and _exit_code(PlanFit.DOES_NOT_FIT) == 3
    r = _run_module("plan", "--model", "/nonexistent", "--gpu", "Z80")
    assert r.returncode == 2 and r.stderr.startswith("oomdoctor: error: unknown GPU 'Z80'")


def test_diagnose_imports_neither_torch_nor_pynvml() -> None:
    code = (
        "import sys, runpy\n"
        f"sys.argv = ['oomdoctor', 'diagnose', {str(SEED)!r}, '--format', 'json']\n"
        "try:\n    runpy.run_module('oomdoctor', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('torch', 'pynvml') if m in sys.modules]\n"
        "sys.stderr.write('HEAVY=' + ','.join(heavy) + '\\n')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert "HEAVY=\n" in r.stderr
    assert '"startup_kv"' in r.stdout


def test_a_text_diagnosis_of_a_small_log_loads_only_what_it_uses() -> None:
    """Start-up is paid by every on-call run: the bundle's zipfile (and shutil, pathlib, bz2, lzma with it), the HTML
    renderer's jinja2, psutil, the large-chunk scanners and the evidence-file reader load only when an input or an
    option needs them; the prefix table compiles only the entries the log's lines can start (an SGLang log, not
    vLLM's, Ray's, Python logging's or a supervisor's tags), and the context searches wait for a line that needs them."""
    # (pathlib is left out: an editable install's finder loads it.)
    lazy = ("zipfile", "shutil", "bz2", "lzma", "jinja2", "psutil", "hyperscan", "re2", "prometheus_client", "oomdoctor.evidence.collected")
    code = (
        "import sys, runpy\n"
        f"sys.argv = ['oomdoctor', 'diagnose', {str(SEED)!r}]\n"
        "try:\n    runpy.run_module('oomdoctor', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        f"sys.stderr.write('LOADED=' + ','.join(m for m in {lazy!r} if m in sys.modules) + '\\n')\n"
        "from oomdoctor.input import prefixes\n"
        "sys.stderr.write('COMPILED=' + ','.join(n for n, p in prefixes._PREFIXES if p._compiled is not None) + '\\n')\n"
        "from oomdoctor.pipeline import events\n"
        "sys.stderr.write(f'CONTEXT_SEARCHES={events._context_needles.cache_info().currsize}\\n')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert "LOADED=\n" in r.stderr, r.stderr[-500:]
    assert "VERDICT: startup_kv" in r.stdout
    compiled = r.stderr.split("COMPILED=")[1].split()[0].split(",")
    assert "sglang" in compiled and not {"vllm_proc", "ray", "pylogging", "supervisor"} & set(compiled), compiled
    assert "CONTEXT_SEARCHES=0\n" in r.stderr


@pytest.mark.parametrize("codec", ["gzip", "bz2", "lzma"])
def test_a_damaged_compressed_log_is_read_up_to_the_damage(run_cli, tmp_path: Path, codec: str) -> None:
    """bz2 and lzma are imported only for such files; their damage is still caught (lzma.LZMAError is not an OSError)."""
    import importlib

    log = (FIXTURES / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log").read_bytes() * 40
    data = importlib.import_module(codec).compress(log)
    cut = len(data) * 3 // 4
    bad = tmp_path / f"server.log.{ {'gzip': 'gz', 'bz2': 'bz2', 'lzma': 'xz'}[codec] }"
    bad.write_bytes(data[:cut] + b"\x00" * 64 + data[cut + 64 :])
    r = run_cli("diagnose", str(bad))
    assert "stream is damaged" in r.err and "Traceback" not in r.err
    assert r.code in (3, 4, 5)

"""The click-free path of a plain `oomdoctor diagnose`: same parameters, same output, no click import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
from hypothesis import given
from hypothesis import strategies as st

from oomdoctor.cli import diagnose as click_diagnose
from oomdoctor.entry import DIAGNOSE_DEFAULTS, DIAGNOSE_OPTIONS, parse_diagnose

from conftest import FIXTURES

SMALL = FIXTURES / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log"
VOCAB = [
    "a.log", "b.log", "-", "--format", "json", "text", "markdown", "html", "prometheus", "xml", "--format=json", "--format=",
    "-o", "--output", "--output=r.txt", "-o=r.txt", "-or.txt", "--system", "sglang", "vllm", "torch", "auto", "--system=vllm",
    "--no-redact", "--no-redact=1", "--redact-pii", "--bundle", "b.zip", "--rules", "rules", "--summary", "--help", "-h", "--", "--bogus",
]  # fmt: skip


def _click_params(args: list[str]) -> dict | None:
    try:
        ctx = click_diagnose.make_context("diagnose", list(args), resilient_parsing=False)
    except click.exceptions.ClickException:
        return None
    except click.exceptions.Exit:
        return None
    return ctx.params


def test_the_option_table_is_the_click_command_s() -> None:
    fast = {p.name for p in click_diagnose.params} - {"paths", "bundle", "rules_dirs", "summary"}
    assert fast == {dest for dest, _ in DIAGNOSE_OPTIONS.values()}
    for param in click_diagnose.params:
        if param.name not in fast:
            continue
        for opt in param.opts:
            dest, allowed = DIAGNOSE_OPTIONS[opt]
            assert dest == param.name
            if isinstance(param.type, click.Choice):
                assert allowed == tuple(param.type.choices)
            assert (allowed == "flag") == bool(getattr(param, "is_flag", False))
    defaults = _click_params(["a.log"])
    assert defaults is not None and {k: v for k, v in defaults.items() if k in fast} == DIAGNOSE_DEFAULTS


@given(st.lists(st.sampled_from(VOCAB), max_size=7))
def test_the_fast_parser_agrees_with_click_whenever_it_answers(args: list[str]) -> None:
    fast = parse_diagnose(args)
    if fast is None:
        return  # click parses it (and words its errors)
    slow = _click_params(args)
    assert slow is not None, args
    assert {**fast, "bundle": None, "rules_dirs": (), "summary": False} == slow


def test_the_common_forms_take_the_fast_path() -> None:
    assert parse_diagnose(["a.log"]) == {**DIAGNOSE_DEFAULTS, "paths": ("a.log",)}
    assert parse_diagnose(["--format", "json", "-o", "r.json", "a.log", "b.log"])["paths"] == ("a.log", "b.log")
    assert parse_diagnose(["-", "--format=markdown", "--redact-pii"])["fmt"] == "markdown"
    for other in (["--help"], [], ["--bundle", "x.zip", "a.log"], ["--format", "xml", "a.log"], ["--rules", "d", "a.log"], ["--summary", "a"], ["-o"], ["-o", str(FIXTURES), "a.log"]):
        assert parse_diagnose(other) is None, other


def _both(args: list[str], tmp_path: Path, stdin: bytes | None = None) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    fast = subprocess.run([sys.executable, "-m", "oomdoctor", *args], capture_output=True, input=stdin, cwd=tmp_path)
    slow = subprocess.run([sys.executable, "-c", "from oomdoctor.cli import main; main()", *args], capture_output=True, input=stdin, cwd=tmp_path)
    return fast, slow


def test_both_paths_print_the_same(tmp_path: Path) -> None:
    cases = [
        ["diagnose", str(SMALL)],
        ["diagnose", "--format", "json", str(SMALL)],
        ["diagnose", "--format=markdown", "--system", "sglang", str(SMALL)],
        ["diagnose", str(tmp_path / "missing.log")],
        ["diagnose", str(SMALL), "-o", str(SMALL)],  # refused: the output is an input
    ]
    for args in cases:
        fast, slow = _both(args, tmp_path)
        assert (fast.returncode, fast.stdout, fast.stderr) == (slow.returncode, slow.stdout, slow.stderr), args
    fast, slow = _both(["diagnose", "-"], tmp_path, stdin=SMALL.read_bytes())
    assert fast.returncode == slow.returncode == 3 and fast.stdout == slow.stdout


def test_a_plain_diagnose_imports_no_click(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "oomdoctor", "diagnose", str(SMALL)], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 3
    imported = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert "oomdoctor.diagnosis" in imported
    assert not {m for m in imported if m.split(".")[0] in ("click", "jinja2", "torch", "pynvml", "tomllib", "tomli")}


def test_the_fast_path_writes_the_report_file_atomically(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    r = subprocess.run([sys.executable, "-m", "oomdoctor", "diagnose", "--format", "json", "-o", str(out), str(SMALL)], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 3 and r.stdout == "" and '"startup_kv"' in out.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_the_console_script_skips_teardown_but_loses_nothing(tmp_path: Path) -> None:
    """`oomdoctor` (console_main) ends with os._exit after flushing: same bytes, same code, files in place."""
    script = Path(sys.executable).with_name("oomdoctor")
    for args in (["diagnose", str(SMALL)], ["diagnose", "--format", "json", str(SMALL)], ["diagnose", str(tmp_path / "missing.log")]):
        fast = subprocess.run([str(script), *args], capture_output=True, cwd=tmp_path)
        slow = subprocess.run([sys.executable, "-m", "oomdoctor", *args], capture_output=True, cwd=tmp_path)
        assert (fast.returncode, fast.stdout, fast.stderr) == (slow.returncode, slow.stdout, slow.stderr), args
    out = tmp_path / "r.md"
    r = subprocess.run([str(script), "diagnose", "--format", "markdown", "-o", str(out), str(SMALL)], capture_output=True, cwd=tmp_path)
    assert r.returncode == 3 and out.read_text().startswith("## ") and sorted(p.name for p in tmp_path.iterdir()) == ["r.md"]
    # A reader that stops after one line: the exit code is still the diagnosis's, no "Exception ignored" noise.
    p = subprocess.Popen([str(script), "diagnose", str(SMALL)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    assert p.stdout is not None and p.stdout.readline().startswith(b"VERDICT: startup_kv")
    p.stdout.close()
    assert p.wait(timeout=30) == 3 and b"Exception" not in (p.stderr.read() if p.stderr else b"")

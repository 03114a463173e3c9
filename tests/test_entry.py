"""The click-free path of a plain `oomdoctor diagnose`: same parameters, same output, no click import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
from hypothesis import given
from hypothesis import strategies as st

from oomdoctor.commands.cli import diagnose as click_diagnose
from oomdoctor.commands.entry import DIAGNOSE_DEFAULTS, DIAGNOSE_OPTIONS, parse_diagnose

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
    slow = subprocess.run([sys.executable, "-c", "from oomdoctor.commands.cli import main; main()", *args], capture_output=True, input=stdin, cwd=tmp_path)
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


# Which modules a plain diagnose loads, seen from inside the console entry's process: forbidden modules
# something loaded before the entry (site, an editable install's finder imports contextlib) are dropped
# from sys.modules first, so the package importing one again shows. os._exit (the fast exit) reports.
IMPORTED = """
import os, sys
forbidden = set(sys.argv[1].split(","))
for name in [m for m in sys.modules if m.split(".")[0] in forbidden]:
    del sys.modules[name]
real_exit = os._exit
def report(code):
    print(code, " ".join(sorted(sys.modules)), file=sys.stderr, flush=True)
    real_exit(code)
os._exit = report
sys.argv = ["oomdoctor", "diagnose", *sys.argv[2:]]
from oomdoctor.commands.entry import console_main
console_main()
"""
FORBIDDEN = (
    "click",
    "jinja2",
    "torch",
    "pynvml",
    "tomllib",
    "tomli",
    "dataclasses",
    "inspect",
    "typing",
    "ast",
    "zlib",
    "bisect",
    "math",
    "shlex",
    "contextvars",
    "contextlib",
    # re imports enum, functools, collections, types and operator: ~4 ms of a small log (regex_cache).
    "re",
    "enum",
    "functools",
    "collections",
    "types",
    "operator",
)


def test_a_plain_diagnose_imports_no_click(tmp_path: Path) -> None:
    """Nor what a small log's start does without (issue 15): dataclasses (inspect, ast, dis, tokenize come
    with it: ~10 ms; oomdoctor.base.records replaces it), typing (~2 ms; annotations only), ast, zlib, bisect, math, shlex, contextvars,
    contextlib (~0.4 ms), re with enum, functools and collections (~4 ms); json with --format json."""
    cmd = [sys.executable, "-c", IMPORTED, ",".join(FORBIDDEN), str(SMALL)]
    subprocess.run(cmd, capture_output=True, cwd=tmp_path)  # fills the disk cache (a cold one parses TOML with tomllib)
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    code, loaded = r.stderr.strip().splitlines()[-1].split(" ", 1)
    imported = set(loaded.split())
    assert code == "3" and "oomdoctor.pipeline.diagnosis" in imported
    assert not {m for m in imported if m.split(".")[0] in FORBIDDEN}
    assert "oomdoctor.base.outcomes" not in imported  # collect's and plan's enums
    # --format json writes through render.json_text: json's import compiles six patterns (~1.3 ms).
    r = subprocess.run([*cmd[:3], ",".join((*FORBIDDEN, "json", "_json")), "--format", "json", str(SMALL)], capture_output=True, text=True, cwd=tmp_path)
    code, loaded = r.stderr.strip().splitlines()[-1].split(" ", 1)
    assert code == "3" and "oomdoctor.report.render.json_text" in loaded.split()
    assert "oomdoctor.report.render.bars" not in loaded.split()  # the charts are not built for a JSON report
    assert not {m for m in loaded.split() if m.split(".")[0] in (*FORBIDDEN, "json", "_json")}
    # The check sees what it should: a module the path does load, dropped first, shows again.
    r = subprocess.run([sys.executable, "-c", IMPORTED, "gc,_blake2", str(SMALL)], capture_output=True, text=True, cwd=tmp_path)
    assert {"gc", "_blake2"} <= set(r.stderr.strip().splitlines()[-1].split()[1:])


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


def test_closed_standard_streams_keep_the_diagnosis_exit_code(tmp_path: Path) -> None:
    """cron and daemons start commands with a descriptor closed: the report still goes where it can, exit 3, no traceback."""
    import os

    script = Path(sys.executable).with_name("oomdoctor")
    for args, closed in (([str(SMALL), "-o", str(tmp_path / "r.txt")], 1), ([str(SMALL)], 1), ([str(SMALL)], 2)):
        for cmd in ([str(script)], [sys.executable, "-m", "oomdoctor"]):
            r = subprocess.run(
                [*cmd, "diagnose", *args],
                stdout=subprocess.PIPE if closed != 1 else None,
                stderr=subprocess.PIPE if closed != 2 else None,
                cwd=tmp_path,
                preexec_fn=lambda fd=closed: os.close(fd),
            )
            err = r.stderr or b""
            assert r.returncode == 3 and b"Traceback" not in err and b"internal error" not in err, (cmd, args, closed, err)
            if closed == 2:
                assert r.stdout.startswith(b"VERDICT: startup_kv")
    assert (tmp_path / "r.txt").read_text().startswith("VERDICT: startup_kv")


def test_a_broken_pipe_is_exit_0_as_the_table_says() -> None:
    from oomdoctor.base.errors import ExitCode
    from oomdoctor.commands.exits import exit_code

    assert exit_code(BrokenPipeError()) == ExitCode.NO_OOM  # NO_OOM is 0: a truthiness lookup once turned it into INTERNAL
    assert exit_code(KeyboardInterrupt()) == ExitCode.INTERRUPTED and exit_code(RuntimeError()) == ExitCode.INTERNAL
    assert exit_code(click.UsageError("x")) == ExitCode.USAGE and exit_code(click.Abort()) == ExitCode.INTERRUPTED


def test_stdin_given_twice_is_a_usage_error(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "oomdoctor", "diagnose", "-", "-"], input=SMALL.read_bytes(), capture_output=True, cwd=tmp_path)
    assert r.returncode == 2 and b"more than once" in r.stderr and b"Traceback" not in r.stderr


def test_a_file_name_that_is_not_utf8_reaches_every_output(tmp_path: Path) -> None:
    import os
    import zipfile

    odd = os.fsencode(tmp_path) + b"/bad\xff.log"
    with open(odd, "wb") as fh:
        fh.write(SMALL.read_bytes())
    for extra in (["-o", str(tmp_path / "r.md"), "--format", "markdown"], ["--bundle", str(tmp_path / "b.zip")]):
        r = subprocess.run([sys.executable, "-m", "oomdoctor", "diagnose", *extra, odd], capture_output=True, cwd=tmp_path)
        assert r.returncode == 3 and b"internal error" not in r.stderr, r.stderr
    assert "bad\\udcff.log" in (tmp_path / "r.md").read_text()
    assert "inputs/bad\\udcff.log" in zipfile.ZipFile(tmp_path / "b.zip").namelist()

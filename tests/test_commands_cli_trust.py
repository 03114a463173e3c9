"""The CLI gives one `error:` line and the documented exit code, never "internal error", on hostile
options and inputs (issue 24, item 3), and caps what `plan` and `triage` read (item 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, measured, one_error

SEED = FIXTURES / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log"
PLAN_MODEL = FIXTURES / "plan" / "llama-3.1-8b"

def cli(*args: str, stdin_closed: bool = False, timeout: float = 120) -> subprocess.CompletedProcess:
    if stdin_closed:  # `oomdoctor ... <&-`: file descriptor 0 not open at all
        return subprocess.run(["bash", "-c", 'exec "$@" <&-', "bash", sys.executable, "-m", "oomdoctor", *args], capture_output=True, text=True, timeout=timeout, cwd="/")
    return subprocess.run([sys.executable, "-m", "oomdoctor", *args], capture_output=True, text=True, timeout=timeout, cwd="/", stdin=subprocess.DEVNULL)


# --- closed standard input ------------------------------------------------------------------------


@pytest.mark.parametrize("args", [("diagnose", "-"), ("triage", "-")])
def test_closed_stdin_is_unreadable_input_not_an_internal_error(args: tuple[str, ...]) -> None:
    r = cli(*args, stdin_closed=True)
    assert r.returncode == 5 and "standard input is closed" in one_error(r.stderr)


# --- numeric options: NaN and infinities ----------------------------------------------------------


@pytest.mark.parametrize(
    "args, option",
    [
        (("run", "--keep-mb", "nan", "--", "true"), "--keep-mb"),
        (("run", "--keep-mb", "inf", "--", "true"), "--keep-mb"),
        (("plan", "--model", str(PLAN_MODEL), "--gpu", "H100-80GB", "--at", "nan"), "--at"),
        (("triage", "--threshold", "nan", str(SEED)), "--threshold"),
    ],
)
def test_non_finite_numbers_are_usage_errors(tmp_path: Path, args: tuple[str, ...], option: str) -> None:
    r = cli(*args)
    assert r.returncode == 2, r.stderr
    assert f"Invalid value for '{option}'" in r.stderr and "Traceback" not in r.stderr and "internal error" not in r.stderr
    assert not list(tmp_path.iterdir())


def test_run_with_nan_keep_mb_records_nothing(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "oomdoctor", "run", "--out", str(tmp_path / "rec"), "--keep-mb", "nan", "--", "true"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "not a finite number" in r.stderr and "internal error" not in r.stderr
    assert not (tmp_path / "rec").exists()


# --- triage on a bare log whose first character is [ ---------------------------------------------


def test_triage_reads_a_bare_log_starting_with_a_bracket_as_a_log(tmp_path: Path) -> None:
    assert SEED.read_text().startswith("[")
    r = cli("triage", str(SEED), "--format", "json")
    assert r.returncode == 0, r.stderr
    reply = json.loads(r.stdout)
    assert reply["kind"] == "answer" and reply["class"] == "startup_kv"


@pytest.mark.parametrize("text", ["[rank0]: torch.OutOfMemoryError: CUDA out of memory.\n", "[1, 2]\n", "[]\n", '[{"no": "body"}]\n'])
def test_triage_never_refuses_a_bracketed_text_as_broken_json(tmp_path: Path, text: str) -> None:
    path = tmp_path / "paste.log"
    path.write_text(text)
    r = cli("triage", str(path), "--format", "json")
    assert r.returncode == 0 and "error" not in r.stderr, r.stderr
    assert json.loads(r.stdout)["kind"] in ("answer", "ask", "silent")


def test_triage_event_payload_must_still_be_json(tmp_path: Path) -> None:
    event = tmp_path / "event.json"
    event.write_text("[rank0]: not an event\n")
    r = cli("triage", "--event", str(event))
    assert r.returncode == 5 and "event.json" in one_error(r.stderr)


def test_triage_caps_what_it_reads(tmp_path: Path) -> None:
    issue = tmp_path / "issue.md"
    with open(issue, "wb") as fh:
        fh.truncate(1 << 30)
    code, err, rss = measured("triage", str(issue))
    assert code == 5 and "MiB cap for an issue" in one_error(err)
    assert rss < 100


# --- plan: huge, endless and deeply nested configs -------------------------------------------------


def test_plan_on_an_endless_config_is_capped() -> None:
    code, err, rss = measured("plan", "--model", "/dev/zero", "--gpu", "H100-80GB", timeout=60)
    assert code == 5 and "MiB cap for a model config.json" in one_error(err)
    assert rss < 500


def test_plan_on_a_2gb_config_is_refused_before_reading(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    with open(cfg, "wb") as fh:
        fh.truncate(2 << 30)
    code, err, rss = measured("plan", "--model", str(tmp_path), "--gpu", "H100-80GB")
    assert code == 5 and "MiB cap for a model config.json" in one_error(err)
    assert rss < 100


@pytest.mark.parametrize(
    "text",
    [
        '{"a":' * 100_000 + "1" + "}" * 100_000,
        "[" * 100_000 + "]" * 100_000,
        '{"thinker_config":' * 900 + '{"num_hidden_layers": 1}' + "}" * 900,
    ],
)
def test_plan_on_a_deeply_nested_config_gets_exit_5(tmp_path: Path, text: str) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(text)
    r = cli("plan", "--model", str(cfg), "--gpu", "H100-80GB")
    assert r.returncode == 5 and "nested deeper than" in one_error(r.stderr)


def test_plan_with_a_huge_safetensors_index_falls_back_to_the_estimate(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text((PLAN_MODEL / "config.json").read_text())
    with open(tmp_path / "model.safetensors.index.json", "wb") as fh:
        fh.truncate(2 << 30)
    code, err, rss = measured("plan", "--model", str(tmp_path), "--gpu", "H100-80GB", "--format", "json")
    assert code in (0, 3) and "internal error" not in err, err
    assert rss < 100


def test_triage_summary_reads_a_jsonl_export_line_by_line_with_a_cap(tmp_path: Path) -> None:
    export = tmp_path / "issues.jsonl"
    with open(export, "wb") as fh:
        fh.write(b'{"title": "t", "number": 1, "body": "no oom here"}\n')
        fh.truncate(1 << 30)  # then a 1 GiB "line" with no newline
    code, err, rss = measured("triage", "--summary", str(export))
    assert code == 5 and "issues.jsonl:2" in one_error(err) and "MiB cap for an issue" in err
    assert rss < 100

"""The Markdown summary, the bundle, and redaction of every secret form in every output."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from oomdoctor.input.redact import redact_text
from oomdoctor.report.render import markdown

from conftest import FIXTURES

SEED = FIXTURES / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log"

SECRETS = {
    "sk-live0123456789abcdefXYZ": "server_args=ServerArgs(model_path='m', api_key='sk-live0123456789abcdefXYZ', mem_fraction_static=0.7)",
    "adminpw12345": "[2026-01-01 00:00:00] launch: python -m sglang.launch_server --admin-api-key adminpw12345 --tp 2",
    "hf_abcdefghijklmnopqrstuvwxyz01": "HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz01 CUDA_VISIBLE_DEVICES=0",
    "vllmkey-998877": "(APIServer pid=1) INFO 01-01 00:00:00 [utils.py:1] non-default args: {'model': 'm', 'api_key': ['vllmkey-998877'], 'gpu_memory_utilization': 0.9}",
    "Zm9vOmJhcg": "Authorization: Bearer Zm9vOmJhcgZm9vOmJhcg",
    "MIIEpAIBAAKCAQEA": "-----BEGIN RSA PRIVATE KEY-----MIIEpAIBAAKCAQEA-----END RSA PRIVATE KEY-----",
    "AKIAIOSFODNN7EXAMPLE": "aws key AKIAIOSFODNN7EXAMPLE in env",
    "ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa": "token ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "github_pat_11AAAAAAA0abcdefghijklmnop": "pat github_pat_11AAAAAAA0abcdefghijklmnop",
    "xoxb-123456789012-abcdef": "slack xoxb-123456789012-abcdef",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlMTIz": "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlMTIz",
    "s3cretpw": "model s3://user:s3cretpw@bucket/weights",
    "hunter2hunter2": "--hf-token=hunter2hunter2",
}


@pytest.mark.parametrize("secret, line", list(SECRETS.items()))
def test_redact_text_removes_each_form(secret: str, line: str) -> None:
    out = redact_text(line)
    assert secret not in out and "<redacted>" in out


def test_redaction_keeps_counts_and_harmless_numbers() -> None:
    out = redact_text("non-default args: {'api_key': ['a-key-1', 'b-key-2'], 'max_num_batched_tokens': 8192}")
    assert out == "non-default args: {'api_key': ['<redacted>', '<redacted>'], 'max_num_batched_tokens': 8192}"
    line = "[2026-03-02 10:01:04 TP0] max_total_num_tokens=287375, tokenizer_path='Qwen/Qwen3', #token: 81316, token usage: 0.93"
    assert redact_text(line) == line


@pytest.fixture
def secret_log(tmp_path: Path) -> Path:
    log = tmp_path / "secret.log"
    cited = SEED.read_text().splitlines()
    # server_args is cited by the startup_kv finding; put every secret form on cited or bundled lines.
    cited[0] = cited[0].replace("api_key=None", "api_key='sk-live0123456789abcdefXYZ'")
    extra = [line for line in SECRETS.values() if not line.startswith("server_args")]
    log.write_text("\n".join(extra + cited) + "\n")
    return log


def test_no_secret_in_any_output(run_cli, secret_log: Path, tmp_path: Path) -> None:
    outputs = {}
    for fmt in ("text", "json", "markdown", "html"):
        res = run_cli("diagnose", str(secret_log), "--format", fmt)
        assert res.code == 3
        outputs[fmt] = res.out + res.err
    bundle = tmp_path / "b.zip"
    assert run_cli("diagnose", str(secret_log), "--bundle", str(bundle)).code == 3
    with zipfile.ZipFile(bundle) as zf:
        names = zf.namelist()
        assert {"report.html", "summary.md", "diagnosis.json", "inputs/secret.log", "README.txt"} <= set(names)
        for name in names:
            outputs[f"bundle:{name}"] = zf.read(name).decode()
    assert "sk-live0123456789abcdefXYZ" in secret_log.read_text()
    for where, text in outputs.items():
        for secret in SECRETS:
            assert secret not in text, f"{secret} leaked into {where}"
    assert "api_key='<redacted>'" in outputs["bundle:inputs/secret.log"]
    # The cited launch line is in every report, redacted.
    for fmt in ("text", "json", "markdown", "html"):
        assert "--admin-api-key" not in outputs[fmt] or "<redacted>" in outputs[fmt]


def test_no_redact_opts_out(run_cli, secret_log: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "raw.zip"
    assert run_cli("diagnose", str(secret_log), "--no-redact", "--bundle", str(bundle)).code == 3
    with zipfile.ZipFile(bundle) as zf:
        assert "sk-live0123456789abcdefXYZ" in zf.read("inputs/secret.log").decode()
        assert "NOT redacted" in zf.read("README.txt").decode()


def test_bundle_contents_and_json(run_cli, tmp_path: Path) -> None:
    bundle = tmp_path / "b.zip"
    res = run_cli("diagnose", str(FIXTURES / "sglang-cuda-graph-oom/pos_capture_failed_2025_gzip.log.gz"), "--bundle", str(bundle), "--format", "json")
    assert res.code == 3
    with zipfile.ZipFile(bundle) as zf:
        data = json.loads(zf.read("diagnosis.json"))
        assert data["verdict"]["class"] == "cuda_graph"
        assert zf.read("inputs/pos_capture_failed_2025_gzip.log").startswith(b"[2025-07-02")  # decompressed
        assert "<svg id=\"budget-chart\"" in zf.read("report.html").decode()
        assert zf.read("summary.md").decode().startswith("## oomdoctor: `cuda_graph`")


def test_markdown_summary_shape(run_cli) -> None:
    out = run_cli("diagnose", str(FIXTURES / "oom-foreign-process/pos_self_in_middle_2025.log"), "--format", "markdown").out
    assert out.startswith("## oomdoctor: `foreign_process`")
    assert "| process | GPU memory | role |" in out and "| 2231 | 9.70 GiB | other |" in out
    assert "#### `foreign_process`" in out and "pos_self_in_middle_2025.log:" in out  # the finding and its lines, unfolded
    assert "### Budget" in out or "### GPU memory" in out
    assert len(out) < markdown.LIMIT


def test_markdown_truncation_is_stated(run_cli, monkeypatch) -> None:
    monkeypatch.setattr(markdown, "LIMIT", 2500)
    out = run_cli("diagnose", str(FIXTURES / "runtime-activation-oom/pos_prefill_oom_2026.log"), "--format", "markdown").out
    assert "Truncated" in out
    assert len(out) <= 2500 + 300


def test_markdown_fence_survives_backticks_in_logs(tmp_path: Path, run_cli) -> None:
    log = tmp_path / "ticks.log"
    log.write_text("RuntimeError: CUDA error: out of memory ``` injected ```` fence\n")
    out = run_cli("diagnose", str(log), "--format", "markdown").out
    assert "`````text" in out

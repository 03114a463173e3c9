"""escape_markdown_prose and code spans/fences: log text in Markdown prose renders as that text, and nothing in it goes live."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from oomdoctor.report.mdsafe import code_fence, code_span, escape_markdown_prose

from conftest import FIXTURES

SEED = FIXTURES / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log"


def _outside_code(md: str) -> str:
    """The Markdown with every code span removed (GFM: a run of n backticks closes at the next run of exactly n)."""
    return re.sub(r"(?<!`)(`+)(?!`).*?(?<!`)\1(?!`)", "", md)


@pytest.mark.parametrize(
    "hostile, live",
    [
        ("model @octocat/maintainers failed", "@octocat"),
        ("see @admin please", "@admin"),
        ("dup of #123 and octo/engine#45", "#123"),
        ("pixel ![x](https://tracker.example/p.png)", "https://"),
        ("click [here](https://evil.example/login)", "https://"),
        ("visit www.evil.example/x now", "www."),
        ("mail ops@evil.example now", "ops@evil"),
        ("<img src=https://tracker.example/p.png>", "https://"),
        ("GH-77 again", "GH-77"),
    ],
)
def test_live_tokens_go_into_code_spans(hostile: str, live: str) -> None:
    out = escape_markdown_prose(hostile)
    rest = _outside_code(out)
    assert live not in rest, out
    assert "<" not in rest and "](" not in rest.replace("\\]", "")
    assert "\n" not in out


def test_plain_prose_keeps_its_words() -> None:
    out = escape_markdown_prose("KV cache of 12.5 GiB for max_num_seqs 256")
    assert out == "KV cache of 12.5 GiB for max\\_num\\_seqs 256"


@pytest.mark.parametrize("text", ["a`b", "``x``", "`", "ends with `", "````````` nine", " spaced "])
def test_a_code_span_cannot_be_closed_by_its_text(text: str) -> None:
    span = code_span(text)
    ticks = re.match(r"`+", span).group(0)
    inner = span[len(ticks) : -len(ticks)]
    assert span.endswith(ticks) and all(len(run) != len(ticks) for run in re.findall(r"`+", inner))
    assert inner.strip() == text.strip()


def test_a_fence_is_longer_than_any_backtick_run_inside() -> None:
    body = "line\n````\n```text\nmore ``````"
    fence = code_fence(body)
    opening = fence.split("\n")[0].removesuffix("text")
    assert len(opening) == 7 and fence.endswith("\n" + opening)


def test_diagnose_markdown_keeps_log_mentions_and_links_inert(run_cli, tmp_path: Path) -> None:
    log = tmp_path / "inject.log"
    lines = SEED.read_text().splitlines()
    lines[0] = re.sub(r"model_path='[^']*'", "model_path='@octocat/x#12 ![p](https://tracker.example/p.png)'", lines[0])
    log.write_text("\n".join(lines) + "\n")
    out = run_cli("diagnose", str(log), "--format", "markdown").out
    prose = re.sub(r"(?ms)^(`{3,})\w*\n.*?^\1$", "", out)
    rest = _outside_code(prose)
    assert "@octocat" not in rest and "#12" not in rest and "https://tracker" not in rest
    assert "octocat" in out  # still shown, as code

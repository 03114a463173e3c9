"""escape_markdown_cell: log text in a Markdown table cell renders as that text, nothing more."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oomdoctor.report.mdsafe import escape_markdown_cell

from conftest import FIXTURES

SEED = FIXTURES / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log"


@pytest.mark.parametrize(
    "hostile",
    [
        "<img src=https://tracker.example/pixel.png>",
        "</details><details open><summary>fake</summary>",
        "</td></tr></table><script>alert(1)</script>",
        "a | b | c",
        "line one\nline two\r\n| injected | row |",
        "![pixel](https://tracker.example/p.png)",
        "[click](javascript:alert(1))",
        "**bold** _it_ ~~gone~~ `code`",
        "<!-- hide the rest",
        "\u202eevil\u202c and \x1b[31mred\x1b[0m",
    ],
)
def test_hostile_cell_text_is_inert(hostile: str) -> None:
    cell = escape_markdown_cell(hostile)
    assert "<" not in cell and ">" not in cell  # no tag, no comment, no autolink
    assert "\n" not in cell and "\r" not in cell
    assert re.search(r"(?<!\\)\|", cell) is None  # every pipe escaped: no new column
    assert re.search(r"(?<!\\)[`*_\[\]~!]", cell) is None  # no inline Markdown syntax
    assert "\u202e" not in cell and "\x1b" not in cell


def test_plain_text_reads_the_same() -> None:
    assert escape_markdown_cell("NVIDIA H100 80GB HBM3") == "NVIDIA H100 80GB HBM3"
    assert escape_markdown_cell("Qwen/Qwen3-Omni-30B-A3B-Instruct") == "Qwen/Qwen3-Omni-30B-A3B-Instruct"
    assert escape_markdown_cell("a_b") == "a\\_b"
    assert escape_markdown_cell("x < 5 & y") == "x &lt; 5 &amp; y"
    assert escape_markdown_cell(0.85) == "0.85"


def _unescape(cell: str) -> str:
    cell = re.sub(r"\\(.)", r"\1", cell)
    return cell.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"').replace("&amp;", "&")


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp"), blacklist_characters="\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")))
def test_escaping_loses_no_printable_text(text: str) -> None:
    """What a reader sees (entities and backslash escapes resolved) is the text itself."""
    cell = escape_markdown_cell(text)
    assert "\n" not in cell and "<" not in cell
    assert _unescape(cell) == text


def test_log_text_in_a_markdown_table_cell_is_escaped(run_cli, tmp_path: Path) -> None:
    """A model path from the log is printed in the Environment table: it must not close <details> or embed an image."""
    log = tmp_path / "inject.log"
    lines = SEED.read_text().splitlines()
    lines[0] = re.sub(r"model_path='[^']*'", "model_path='</details><img src=x>'", lines[0])
    log.write_text("\n".join(lines) + "\n")
    out = run_cli("diagnose", str(log), "--format", "markdown").out
    rows = [line for line in out.splitlines() if line.startswith("| model |")]
    assert rows and all("<img" not in r and "</details>" not in r for r in rows)

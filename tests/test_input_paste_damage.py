"""Every positive fixture keeps its diagnosis under the damage pastes add around the program's output.

A markdown quote ("> "), Windows line ends, ANSI colour codes kept by a terminal copy, a docker
compose prefix, an indent over the whole paste (a markdown indented block, a list item, a tab) and
a terminal's hard wrap at 100 or 120 columns change how lines start and end, not what they say: the
class, the rule and the evidence status stay.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from oomdoctor.api import diagnose
from oomdoctor.base.toml_data import tomllib

from conftest import FIXTURES

DAMAGE: dict[str, Callable[[str], str]] = {
    "markdown_quote": lambda line: "> " + line,
    "crlf": lambda line: line + "\r",
    "ansi": lambda line: "\x1b[32m" + line + "\x1b[0m",
    "docker_compose": lambda line: "sglang-1  | " + line,
    "indented_4": lambda line: "    " + line,
    "indented_tab": lambda line: "\t" + line,
    # tmux and Windows consoles pad every copied line with blanks to the window's width.
    "console_padding": lambda line: line.ljust(240),
    "nested_quote": lambda line: "> > " + line,
}


def hard_wrap(width: int) -> Callable[[str], str]:
    """A terminal's wrap: every physical line longer than ``width`` cut into pieces of exactly that width."""

    def cut(text: str) -> str:
        return "\n".join(piece for line in text.split("\n") for piece in ([line[i : i + width] for i in range(0, len(line), width)] or [""]))

    return cut


# Applied to the whole text (a wrap cuts lines, it does not prefix them).
WRAPS: dict[str, Callable[[str], str]] = {"hard_wrap_100": hard_wrap(100), "hard_wrap_120": hard_wrap(120)}

POSITIVES = sorted(p for p in FIXTURES.glob("*/pos_*.log") if (p.parent / (p.name.removesuffix(".log") + ".expect.toml")).exists())


@pytest.mark.parametrize("path", POSITIVES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_damage_keeps_the_diagnosis(path: Path, tmp_path: Path) -> None:
    want = tomllib.loads((path.parent / (path.name.removesuffix(".log") + ".expect.toml")).read_text())
    original = diagnose([str(path)])
    assert original.verdict_class == want["class"]
    lines = path.read_text(errors="replace").split("\n")
    for name, damage in DAMAGE.items():
        pasted = tmp_path / f"{name}.log"
        pasted.write_text("\n".join(damage(line) if line else line for line in lines), newline="")
        d = diagnose([str(pasted)])
        got = (d.verdict_class, d.verdict_rule, d.evidence.status)
        assert got == (original.verdict_class, original.verdict_rule, original.evidence.status), name
    for name, wrap in WRAPS.items():
        pasted = tmp_path / f"{name}.log"
        pasted.write_text(wrap(path.read_text(errors="replace")), newline="")
        d = diagnose([str(pasted)])
        assert (d.verdict_class, d.verdict_rule, d.evidence.status) == (original.verdict_class, original.verdict_rule, original.evidence.status), name


def test_the_fixture_set_is_found() -> None:
    assert len(POSITIVES) >= 90

"""The CLI as the README documents it: every command line parses against the click tree as written, each
option has help text, `oomdoctor --help` cuts no summary short, and shell completion prints a script."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from oomdoctor.commands.cli import cli

from conftest import REPO

README = (REPO / "README.md").read_text()


def _walk(cmd: click.Command, path: tuple[str, ...] = ("oomdoctor",)):
    yield path, cmd
    if isinstance(cmd, click.Group):
        for name, sub in sorted(cmd.commands.items()):
            yield from _walk(sub, (*path, name))


def _shell_blocks() -> list[str]:
    return re.findall(r"```(?:bash|sh|console)\n(.*?)```", README, re.S)


def _command_lines() -> list[list[str]]:
    """Each `oomdoctor ...` invocation in the README's shell blocks, as argv after `oomdoctor`, as a shell would split it."""
    out = []
    for block in _shell_blocks():
        text = block.replace("\\\n", " ")
        for line in text.splitlines():
            for part in re.split(r"\|\||&&|\||;", line):
                words = shlex.split(part, comments=True)
                if "oomdoctor" in words:
                    args = words[words.index("oomdoctor") + 1 :]
                    # A redirection and its target are the shell's, not the command's.
                    args = [a for i, a in enumerate(args) if not a.startswith((">", "<")) and not (i and args[i - 1] in (">", "<", ">>"))]
                    if args:
                        out.append(args)
    return out


LINES = _command_lines()


def test_the_readme_has_command_lines_for_every_command() -> None:
    named = {args[0] for args in LINES}
    assert set(cli.commands) <= named, f"README shows no command line for {sorted(set(cli.commands) - named)}"
    assert len(LINES) >= 25


@pytest.mark.parametrize("args", LINES, ids=lambda a: " ".join(a)[:70])
def test_each_readme_command_line_parses_as_written(args: list[str]) -> None:
    """Resolved through the click tree and parsed (choices, types, required options), as pasted; nothing runs."""
    cmd: click.Command = cli
    rest = list(args)
    parent = None
    while isinstance(cmd, click.Group):
        assert rest, f"{args}: a group without a command"
        name, rest = rest[0], rest[1:]
        assert name in cmd.commands, f"{args}: no command {name!r} (there are {sorted(cmd.commands)})"
        parent = click.Context(cmd, info_name=name)
        cmd = cmd.commands[name]
    try:
        cmd.make_context(cmd.name or "", rest, parent=parent)
    except click.exceptions.Exit:
        pass
    except click.ClickException as exc:
        pytest.fail(f"oomdoctor {' '.join(args)}: {exc.format_message()}")


def test_no_readme_line_uses_a_shorthand() -> None:
    """No `list | explain RULE_ID` alternatives nor `[--optional]` brackets: each line is pasted as it is."""
    for block in _shell_blocks():
        for line in block.splitlines():
            if line.lstrip().startswith("oomdoctor "):
                head = line.split("#", 1)[0]
                assert not re.search(r"\| *[a-z]+ [A-Z_]+|\[--", head), f"not a command line: {line}"


@pytest.mark.parametrize("path", sorted({tuple(a[:2]) if a[0] in ("rules", "facts") else (a[0],) for a in LINES}), ids=" ".join)
def test_each_documented_command_s_help_runs(path: tuple[str, ...]) -> None:
    res = CliRunner().invoke(cli, [*path, "--help"], prog_name="oomdoctor")
    assert res.exit_code == 0 and res.output.startswith(f"Usage: oomdoctor {' '.join(path)} "), res.output


def test_every_option_has_help_text() -> None:
    missing = [f"{' '.join(path)} {'/'.join(p.opts)}" for path, cmd in _walk(cli) for p in cmd.params if isinstance(p, click.Option) and not p.hidden and not (p.help or "").strip()]
    assert missing == []


def test_every_command_has_help_and_no_summary_is_cut() -> None:
    for path, cmd in _walk(cli):
        assert (cmd.help or "").strip(), path
    for path, cmd in _walk(cli):
        if not isinstance(cmd, click.Group):
            continue
        res = CliRunner().invoke(cli, [*path[1:], "--help"], prog_name="oomdoctor")
        listed = res.output.split("Commands:\n", 1)[1].splitlines()
        rows = [line for line in listed if line.startswith("  ") and line.strip()]
        assert len(rows) == len(cmd.commands), (path, rows)
        for line in rows:
            assert not line.rstrip().endswith("..."), f"{' '.join(path)} --help cuts a summary: {line.strip()}"


def test_bash_completion_prints_a_script() -> None:
    env = {**os.environ, "_OOMDOCTOR_COMPLETE": "bash_source"}
    res = subprocess.run([sys.executable, "-m", "oomdoctor"], env=env, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert res.returncode == 0
    assert "_oomdoctor_completion() {" in res.stdout and "complete -o nosort -F _oomdoctor_completion oomdoctor" in res.stdout
    assert '_OOMDOCTOR_COMPLETE=bash_source oomdoctor' in README
    # The script's callback answers: the commands that start with "dia".
    env = {**os.environ, "_OOMDOCTOR_COMPLETE": "bash_complete", "COMP_WORDS": "oomdoctor dia", "COMP_CWORD": "1"}
    res = subprocess.run([sys.executable, "-m", "oomdoctor"], env=env, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert res.stdout.split() == ["plain,diagnose"]

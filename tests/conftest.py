"""Shared helpers: the repository paths and a CLI runner that returns (exit code, stdout, stderr)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, settings

from oomdoctor.commands.cli import cli

# Fuzzing is bounded in CI: a fixed example budget per property, no per-example deadline (a cold
# first example pays for imports). HYPOTHESIS_PROFILE=long runs ten times more locally.
settings.register_profile("ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"


class Result:
    def __init__(self, code: int, out: str, err: str):
        self.code, self.out, self.err = code, out, err

    @property
    def json(self) -> dict:
        return json.loads(self.out)


@pytest.fixture
def run_cli():
    def _run(*args: str, input: bytes | str | None = None) -> Result:
        runner = CliRunner()
        res = runner.invoke(cli, list(args), input=input, catch_exceptions=False)
        return Result(res.exit_code, res.stdout, res.stderr)

    return _run


# Each oomdoctor process of the resource tests runs inside a wrapper that reports its peak RSS.
_MEASURE = (
    "import resource, subprocess, sys\n"
    "r = subprocess.run([sys.executable, '-m', 'oomdoctor', *sys.argv[2:]], capture_output=True, text=True, timeout=float(sys.argv[1]))\n"
    "sys.stderr.write(r.stderr)\n"
    "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)\n"
)


def measured(*args: str, timeout: float = 120) -> tuple[int, str, int]:
    """(exit code, stderr, peak RSS in MB) of ``oomdoctor ARGS`` in a fresh process (the wrapper kills it past ``timeout``)."""
    r = subprocess.run([sys.executable, "-c", _MEASURE, str(timeout), *args], capture_output=True, text=True, timeout=timeout + 30, cwd="/")
    assert r.returncode == 0, r.stderr[-2000:]  # the hang guard
    code, rss = r.stdout.split()
    return int(code), r.stderr, int(rss)


def one_error(stderr: str) -> str:
    """The one `oomdoctor: error:` line of ``stderr``, with no traceback and no internal error."""
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr[-2000:]
    errors = [line for line in stderr.splitlines() if line.startswith("oomdoctor: error:")]
    assert len(errors) == 1, stderr[-2000:]
    return errors[0]

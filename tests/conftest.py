"""Shared helpers: the repository paths and a CLI runner that returns (exit code, stdout, stderr)."""

from __future__ import annotations

import json
import os
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

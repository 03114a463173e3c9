"""The lint and type gate: ruff and mypy, configured in pyproject.toml, must both be clean.

Both run from this interpreter's environment (the `test` extra installs them) with the repository
root as the working directory, so they read pyproject.toml; their caches (.ruff_cache/,
.mypy_cache/) are git-ignored and keep a repeated run well under a second.
"""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_ruff_clean() -> None:
    res = _run("ruff", "check", "--no-fix", "oomdoctor", "tests", "benchmarks", "reports")
    assert res.returncode == 0, f"ruff check found problems:\n{res.stdout}{res.stderr}"


def test_mypy_clean() -> None:
    res = _run("mypy")  # the packages and options are in [tool.mypy]
    assert res.returncode == 0, f"mypy found problems:\n{res.stdout}{res.stderr}"

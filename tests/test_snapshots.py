"""Whole-output snapshots: every fixture's full `--format json` diagnosis, committed beside its expectation.

The hand-written `<case>.expect.toml` pins what matters (class, rule, cited lines, flag values);
`<case>.snapshot.json` pins everything else the JSON contract carries (derivations, messages,
not-evaluated notes, input statistics), so that any change in the output shows up as a diff.

Machine-specific parts are normalised before the comparison: absolute paths become relative to the
repository root (`tests/fixtures/...`) and the tool version becomes `<version>`.

To accept a change: `OOMDOCTOR_UPDATE_SNAPSHOTS=1 pytest tests/test_snapshots.py` rewrites the
snapshot files (and removes those whose case is gone); review the result with `git diff`.
"""

from __future__ import annotations

import difflib
import json
import os
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from conftest import FIXTURES, REPO

UPDATE = os.environ.get("OOMDOCTOR_UPDATE_SNAPSHOTS", "") not in ("", "0")
SUFFIX = ".snapshot.json"
EXPECT = ".expect.toml"
# The field corpus (tests/fixtures/field/) has labels, not expectations; it has no snapshots either.
SKIP_DIRS = {"field"}


def _expectations() -> list[Path]:
    return sorted(p for p in FIXTURES.glob(f"*/*{EXPECT}") if p.parent.name not in SKIP_DIRS)


def _case_for(expect: Path) -> Path | None:
    """The input an expectation describes: `<stem>.log`, `<stem>.log.gz` or the bundle directory `<stem>/`."""
    stem = expect.name[: -len(EXPECT)]
    found = [p for p in (expect.parent / f"{stem}.log", expect.parent / f"{stem}.log.gz", expect.parent / stem) if p.exists()]
    return found[0] if len(found) == 1 else None


def _snapshot_path(expect: Path) -> Path:
    # Beside the case, never inside a bundle directory (diagnose would read it as evidence).
    return expect.parent / (expect.name[: -len(EXPECT)] + SUFFIX)


def _replacements() -> list[tuple[str, str]]:
    """Machine-specific prefixes, longest first (a virtual environment may live inside the checkout)."""
    pairs = {}
    for root in {str(REPO), os.path.realpath(REPO)}:
        pairs[root + os.sep] = ""
        pairs[root] = "."
    for name in ("purelib", "platlib"):
        path = sysconfig.get_paths().get(name)
        if path:
            pairs[path] = "<site-packages>"
    return sorted(pairs.items(), key=lambda kv: len(kv[0]), reverse=True)


def _normalise(value: Any, replacements: list[tuple[str, str]]) -> Any:
    if isinstance(value, str):
        for old, new in replacements:
            value = value.replace(old, new)
        return value
    if isinstance(value, dict):
        return {k: _normalise(v, replacements) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalise(v, replacements) for v in value]
    return value


def _snapshot_text(data: dict[str, Any]) -> str:
    data = _normalise(data, _replacements())
    if isinstance(data.get("tool"), dict) and "version" in data["tool"]:
        data["tool"]["version"] = "<version>"
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("expect", _expectations(), ids=lambda p: f"{p.parent.name}/{p.name[: -len(EXPECT)]}")
def test_snapshot(expect: Path, run_cli) -> None:
    case = _case_for(expect)
    assert case is not None, f"{expect.relative_to(REPO)}: no single <stem>.log, <stem>.log.gz or <stem>/ beside it"
    res = run_cli("diagnose", str(case), "--format", "json")
    assert res.out.startswith("{"), f"no JSON on stdout (exit {res.code}): {res.err}"
    got = _snapshot_text(res.json)
    snap = _snapshot_path(expect)
    want = snap.read_text(encoding="utf-8") if snap.exists() else None
    if got == want:
        return
    if UPDATE:
        snap.write_text(got, encoding="utf-8")
        return
    rel = snap.relative_to(REPO)
    if want is None:
        pytest.fail(f"{rel} is missing; write it with OOMDOCTOR_UPDATE_SNAPSHOTS=1 pytest tests/test_snapshots.py")
    diff = "".join(difflib.unified_diff(want.splitlines(keepends=True), got.splitlines(keepends=True), f"{rel} (committed)", f"{rel} (now)"))
    pytest.fail(f"the JSON output differs from its snapshot (accept with OOMDOCTOR_UPDATE_SNAPSHOTS=1 and review the diff):\n{diff}", pytrace=False)


def test_no_orphan_snapshots() -> None:
    """A snapshot whose expectation is gone is stale; the update switch removes it."""
    wanted = {_snapshot_path(e) for e in _expectations()}
    orphans = sorted(p for p in FIXTURES.glob(f"*/*{SUFFIX}") if p.parent.name not in SKIP_DIRS and p not in wanted)
    if UPDATE:
        for p in orphans:
            p.unlink()
        return
    assert not orphans, f"snapshots without a {EXPECT}: {[str(p.relative_to(REPO)) for p in orphans]}"

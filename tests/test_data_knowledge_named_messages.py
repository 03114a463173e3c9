"""The messages issue 23 names, each built from the engine's own template (tests/fixtures/knowledge/named_messages.toml).

Each fixture line is its catalogue template rendered with sample values; it must be recognised with the
phase and class its place in the engine's code implies, with the figures it carries parsed as typed
values: by the catalogue (parsers/engine_messages) and, read through the scanner, by whichever parser
reads it first (a dedicated parser keeps the lines it knows).
"""

from __future__ import annotations

import json
import re

import pytest

from oomdoctor.base.toml_data import tomllib
from oomdoctor.evidence.parsers import engine_messages as em
from oomdoctor.input.files import InputStats
from oomdoctor.pipeline.events import read_events

from conftest import FIXTURES, REPO

NAMED = tomllib.loads((FIXTURES / "knowledge" / "named_messages.toml").read_text(encoding="utf-8"))["message"]
_PH = re.compile(r"\{([a-z_][a-z0-9_]*):(int|float|str)\}")


def _catalogue() -> set[tuple[str, str]]:
    rows = json.loads((REPO / "oomdoctor" / "data" / "knowledge" / "messages.json").read_text(encoding="utf-8"))
    return {(m["engine"], m["template"]) for m in rows}


CATALOGUE = _catalogue()


def _message(case: dict) -> str:
    values = iter(case["values"])
    return _PH.sub(lambda m: next(values), case["template"]).replace("{{", "{").replace("}}", "}")


def _line(case: dict) -> str:
    return case.get("prefix", "") + _message(case) + case.get("suffix", "")


@pytest.mark.parametrize("case", NAMED, ids=lambda c: c["id"])
def test_the_fixture_is_the_engines_own_template(case: dict) -> None:
    assert (case["engine"], case["template"]) in CATALOGUE, "not in messages.json: rerun tools/knowledge/extract.py"
    assert len(case["values"]) == len(_PH.findall(case["template"]))


@pytest.mark.parametrize("case", [c for c in NAMED if "kind" in c], ids=lambda c: c["id"])
def test_the_catalogue_recognises_it_with_phase_class_and_values(case: dict) -> None:
    found = em.recognise(_message(case))
    assert found is not None
    entry, values, matched = found
    assert (entry.phase, entry.klass, matched) == (case["phase"], case["class"], "template")
    assert entry.notice == (case["kind"] == em.KIND_ENGINE_NOTICE)
    for name, want in case.get("parsed", {}).items():
        assert values[name] == (pytest.approx(want) if isinstance(want, float) else want), name


@pytest.mark.parametrize("case", NAMED, ids=lambda c: c["id"])
def test_read_through_the_scanner_the_line_is_recognised(case: dict, tmp_path) -> None:
    log = tmp_path / "server.log"
    log.write_text(_line(case) + "\n", encoding="utf-8")
    events = read_events(str(log), InputStats(path=str(log)))
    kinds = {e.kind for e in events}
    if "read_by" in case:
        assert case["read_by"] in kinds, kinds  # the dedicated parser keeps its line
        return
    ours = [e for e in events if e.kind == case["kind"]]
    assert ours and (ours[0].get("phase"), ours[0].get("class")) == (case["phase"], case["class"])


def test_a_name_printed_twice_keeps_both_values() -> None:
    """vLLM's "Free memory on device (X/Y GiB) on startup ..." names one expression twice: both figures are kept (the second as gib_2)."""
    entry = next(e for e in em.table().entries if e.template.startswith("Free memory on device ({gib:float}/{gib:float} GiB)"))
    figures = iter(["61.20", "79.10"])
    text = _PH.sub(lambda m: next(figures, "0.90"), entry.template)
    got = em.recognise(text)
    assert got is not None
    assert (got[1]["gib"], got[1]["gib_2"]) == (pytest.approx(61.2), pytest.approx(79.1))


@pytest.mark.parametrize(("case_id", "kind"), [("sglang-compile-num-tokens-progress", em.KIND_ENGINE_NOTICE), ("vllm-preempted-recompute", "vllm_preempt")])
def test_repeated_lines_are_counted_not_kept(case_id: str, kind: str, tmp_path) -> None:
    """Ten thousand redraws or preemptions: the first 16 and the last 64 are events, the rest a count (the
    preemption line holds the vLLM parser's literal and the catalogue's: both repeat, so the line does)."""
    case = next(c for c in NAMED if c["id"] == case_id)
    log = tmp_path / "server.log"
    log.write_text("".join(_line(case) + "\n" for _ in range(10_000)), encoding="utf-8")
    events = read_events(str(log), InputStats(path=str(log)))
    kept = [e for e in events if e.kind == kind]
    repeats = [e for e in events if e.kind == "repeats" and e.get("kind") == kind]
    assert len(kept) == 16 + 64
    assert repeats and repeats[0].get("total") == 10_000

"""Direct dispatch (patterns.Dispatch) picks the same first pattern as trying every pattern in order.

For every line of every fixture (the field corpus included), each parser table's first match found
through the dispatch equals the first match of the bare compiled regexes tried in table order, needles
ignored: this checks both that the dispatch keeps the order and that every needle (a tuple of them for
an alternation) is in every text its pattern matches.
"""

from __future__ import annotations

import pytest

from oomdoctor.evidence.parsers import oom_signatures as sig
from oomdoctor.evidence.parsers import sglang as sg
from oomdoctor.evidence.parsers import vllm as vl
from oomdoctor.input.patterns import Dispatch, LazyRegex, lazy
from oomdoctor.input.prefixes import split_prefix, strip_ansi

from conftest import FIXTURES

TABLES = {
    "sglang": sg._SIMPLE_DISPATCH,
    "vllm": vl._DISPATCH,
    "torch_driver": sig.DRIVER_DISPATCH,
    "torch_host": sig.HOST_DISPATCH,
}


def _messages() -> list[str]:
    msgs: set[str] = set()
    for log in sorted(FIXTURES.glob("*/*.log")):
        for raw in log.read_bytes().decode("utf-8", "replace").splitlines():
            msgs.add(split_prefix(raw).msg)
            msgs.add(strip_ansi(raw))
    return sorted(msgs)


def _first(rows: list[tuple[LazyRegex, object]], text: str, bare: bool) -> tuple[int, str] | None:
    for i, (pattern, _) in enumerate(rows):
        m = pattern.compiled.search(text) if bare else pattern.search(text)
        if m is not None:
            return i, m.group()
    return None


@pytest.mark.parametrize("name", sorted(TABLES))
def test_dispatch_finds_what_trying_every_pattern_finds(name: str) -> None:
    table = TABLES[name]
    rows = list(table._rows)
    index = {id(r): i for i, r in enumerate(rows)}
    matched = 0
    for msg in _messages():
        want = _first(rows, msg, bare=True)
        got = next(((index[id(row)], m.group()) for row in table.candidates(msg) if (m := row[0].search(msg)) is not None), None)
        assert got == want, (name, msg)
        matched += want is not None
    assert matched > 0


def test_candidates_keep_table_order_and_rows_without_needle() -> None:
    rows = (
        (lazy(None, r"x"), "always"),
        (lazy("beta", r"beta"), "b"),
        (lazy(("alpha", "gamma"), r"alpha|gamma"), "ag"),
        (lazy("alpha", r"alpha \d"), "a"),
    )
    d = Dispatch(rows)
    assert [p for _, p in d.candidates("alpha 1 beta")] == ["always", "b", "ag", "a"]
    assert [p for _, p in d.candidates("gamma")] == ["always", "ag"]
    assert [p for _, p in d.candidates("nothing")] == ["always"]
    assert rows[2][0].search("no match") is None and rows[2][0].search("a gamma") is not None


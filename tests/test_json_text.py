"""render.json_text writes what json.dumps(sort_keys=True, indent=2, ensure_ascii=False) writes, byte for byte."""

from __future__ import annotations

import json
from enum import IntEnum
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oomdoctor.report.render.json_text import dumps


def reference(obj: object) -> str:
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False)


SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(alphabet=st.characters(codec=None))  # surrogates too
KEYS = st.text(alphabet=st.characters(codec=None))
JSON_LIKE = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.lists(inner, max_size=3).map(tuple) | st.dictionaries(KEYS, inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=400)
@given(JSON_LIKE)
def test_the_same_text_as_json_dumps(obj: object) -> None:
    assert dumps(obj) == reference(obj)


@given(st.one_of(st.dictionaries(st.integers(), st.integers(), max_size=4), st.dictionaries(st.floats(allow_nan=False), st.none(), max_size=4)))
def test_non_string_keys_as_json_writes_them(obj: dict) -> None:
    assert dumps(obj) == reference(obj)


def test_every_control_character_and_the_odd_values() -> None:
    text = "".join(chr(c) for c in range(0x00, 0xA0)) + "\ud800 \u2028 é 世界 \"q\" \\"
    odd = {"text": text, "nan": float("nan"), "inf": [float("inf"), -float("inf")], "neg0": -0.0, "big": 10**30, "e": 1e-7,
           "nested": {"empty_list": [], "empty_dict": {}, "tuple": (1, (2, 3))}}
    odd_keys = {1.5: 0, False: 1, 7: 2, True: 3}  # numbers sort among themselves (bools are ints)
    for obj in (odd, odd_keys, {None: 1}, "top", 3, None, [], {}):
        assert dumps(obj) == reference(obj)


def test_int_and_float_subclasses_are_their_numbers() -> None:
    class Code(IntEnum):
        FOUND = 3

    class Fraction(float):
        def __repr__(self) -> str:
            return "Fraction!"

    obj = {"code": Code.FOUND, "y": Fraction(0.88), "list": [Code.FOUND]}
    assert dumps(obj) == reference(obj) and '"code": 3' in dumps(obj) and '"y": 0.88' in dumps(obj)
    assert dumps({Code.FOUND: 1}) == reference({Code.FOUND: 1}) == '{\n  "3": 1\n}'


def test_what_json_refuses_is_refused() -> None:
    for bad in ({"x": {1, 2}}, [object()], {(1, 2): "tuple key"}, {"b": b"bytes"}):
        with pytest.raises(TypeError):
            reference(bad)
        with pytest.raises(TypeError):
            dumps(bad)
    with pytest.raises(TypeError):  # mixed key types cannot be sorted, in either
        dumps({"a": 1, 2: 3})


def test_every_fixture_report_as_json_dumps_writes_it() -> None:
    from oomdoctor.api import diagnose
    from oomdoctor.report.view import build_view

    fixtures = Path(__file__).parent / "fixtures"
    logs = sorted(p for p in fixtures.glob("*/*.log") if p.stat().st_size < 100_000)[::4]
    assert len(logs) > 30
    for log in logs:
        view = {k: v for k, v in build_view(diagnose([str(log)])).items() if k != "report"}
        assert dumps(view) == reference(view), log

"""What replaces a stdlib import on the start-up path does what the stdlib does: units' rounding and
finiteness (math) on every float, advice.shell_word (shlex.quote) on every text."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from oomdoctor.base.units import MAX_PLAUSIBLE_DEVICE_BYTES, _floor, ceil_to, floor_to, is_plausible_device_bytes

FINITE = st.floats(allow_nan=False, allow_infinity=False)


@given(FINITE)
def test_floor_is_math_floor(x: float) -> None:
    assert _floor(x) == math.floor(x) and -_floor(-x) == math.ceil(x)


@given(st.floats(min_value=0, max_value=1, allow_nan=False), st.sampled_from([0.05, 0.01, 0.001]))
def test_floor_to_and_ceil_to_bracket_the_value(value: float, step: float) -> None:
    low, high = floor_to(value, step), ceil_to(value, step)
    assert low == round(math.floor(round(value / step, 9)) * step, 6) and high == round(math.ceil(round(value / step, 9)) * step, 6)


def test_plausible_bytes_refuses_what_is_not_finite() -> None:
    assert is_plausible_device_bytes(80 << 30) and is_plausible_device_bytes(0.5)
    assert not any(is_plausible_device_bytes(x) for x in (float("inf"), float("-inf"), float("nan"), MAX_PLAUSIBLE_DEVICE_BYTES + 1))


@given(st.text())
def test_shell_word_reads_back_as_the_same_single_word(text: str) -> None:
    import shlex

    from oomdoctor.advice.recommenders import shell_word

    word = shell_word(text)
    if "\x00" not in text:
        assert shlex.split(word) == [text]
    assert word == shlex.quote(text) or "'" in text  # the same text as shlex.quote, but for how a quote is escaped

"""The one log-timestamp parser: precisions, zones, long fractions, and what is not a time."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from oomdoctor.base import timestamps
from oomdoctor.base.timestamps import FULL_DATE, MONTH_DAY, TIME_OF_DAY


def _utc(*args: int) -> float:
    return datetime(*args, tzinfo=timezone.utc).timestamp()


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("2026-01-01 10:00:00", (FULL_DATE, _utc(2026, 1, 1, 10))),
        ("2026-01-01T10:00:00.250Z", (FULL_DATE, _utc(2026, 1, 1, 10) + 0.25)),
        ("2026-01-01 10:00:00,250", (FULL_DATE, _utc(2026, 1, 1, 10) + 0.25)),  # Python logging's comma
        ("2026-01-01T10:00:00.123456789Z", (FULL_DATE, _utc(2026, 1, 1, 10) + 0.123456)),  # Go/Kubernetes nanoseconds
        ("2026-01-01T18:00:00+08:00", (FULL_DATE, _utc(2026, 1, 1, 10))),  # the zone is applied
        ("2026-01-01 05:00:00-0500", (FULL_DATE, _utc(2026, 1, 1, 10))),
        ("01-01 10:00:01", (MONTH_DAY, 36001.0)),  # vLLM's month-day
        ("02-29 00:00:00", (MONTH_DAY, 59 * 86400.0)),  # a leap day parses
        ("10:00:01.5", (TIME_OF_DAY, 36001.5)),
    ],
)
def test_parse(text: str, want: tuple[int, float]) -> None:
    got = timestamps.parse(text)
    assert got is not None and got[0] == want[0] and got[1] == pytest.approx(want[1])


@pytest.mark.parametrize("text", [None, "", "step 10", "2026-13-01 10:00:00", "25:00:00", "rank 3"])
def test_not_a_time(text: str | None) -> None:
    assert timestamps.parse(text) is None


def test_epoch_seconds_only_for_a_full_date() -> None:
    assert timestamps.epoch_seconds("2026-01-01 10:00:00") == _utc(2026, 1, 1, 10)
    assert timestamps.epoch_seconds("01-01 10:00:00") is None and timestamps.epoch_seconds("10:00:00") is None


def test_lower_precision_views_of_a_full_date() -> None:
    key = timestamps.parse("2026-03-02 01:02:03")
    assert key is not None
    assert timestamps.at_precision(key, TIME_OF_DAY) == 3723.0
    assert timestamps.at_precision(key, MONTH_DAY) == timestamps.parse("03-02 01:02:03")[1]  # type: ignore[index]
    assert timestamps.at_precision((TIME_OF_DAY, 90000.0), TIME_OF_DAY) == 90000.0

"""Log timestamps as numbers: the one parser for every step that orders or reports log times.

Logs give a time at one of three precisions: a full date (``2026-01-01 10:00:00.123``, ISO with
``T``, a comma before the fraction as Python's logging prints it, an optional ``Z`` or ``+hh:mm``
zone), a month and day (vLLM's ``INFO 01-01 10:00:00``), or a time of day only. A key is
``(precision, seconds)``: precision 3 is Unix time (UTC; a stamp without a zone is read as UTC,
which keeps stamps of one log in order whatever its zone), 2 seconds since 1 January of a leap year,
1 seconds since midnight. Keys of different precision compare through ``at_precision``.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

FULL_DATE, MONTH_DAY, TIME_OF_DAY = 3, 2, 1

_EPOCH = datetime(1970, 1, 1)
_LEAP_YEAR = 2000  # so that a stamp of 29 February parses
_FORMATS = (
    ("%Y-%m-%d %H:%M:%S.%f", FULL_DATE),
    ("%Y-%m-%d %H:%M:%S", FULL_DATE),
    ("%m-%d %H:%M:%S.%f", MONTH_DAY),  # parsed with the leap year put in front
    ("%m-%d %H:%M:%S", MONTH_DAY),
    ("%H:%M:%S.%f", TIME_OF_DAY),
    ("%H:%M:%S", TIME_OF_DAY),
)
# Python's %f takes at most 6 digits; Go and Kubernetes print 9.
_LONG_FRACTION = re.compile(r"(\.\d{6})\d+")
_ZONE = re.compile(r"(?:Z|([+-])(\d{2}):?(\d{2}))$")


def parse(text: str | None) -> tuple[int, float] | None:
    """``(precision, seconds)`` of a log timestamp, or None when it is not one."""
    if not text:
        return None
    text = text.strip().replace("T", " ").replace(",", ".")
    offset_s = 0.0
    zone = _ZONE.search(text)
    if zone:
        text = text[: zone.start()].rstrip()
        if zone.group(1):
            offset_s = (int(zone.group(2)) * 3600 + int(zone.group(3)) * 60) * (-1 if zone.group(1) == "-" else 1)
    text = _LONG_FRACTION.sub(r"\1", text)
    for fmt, precision in _FORMATS:
        try:
            # strptime's default year, 1900, has no 29 February.
            dt = datetime.strptime(f"{_LEAP_YEAR}-{text}", f"%Y-{fmt}") if precision == MONTH_DAY else datetime.strptime(text, fmt)
        except ValueError:
            continue
        if precision == FULL_DATE:
            return FULL_DATE, (dt - _EPOCH).total_seconds() - offset_s
        if precision == MONTH_DAY:
            return MONTH_DAY, (dt - datetime(_LEAP_YEAR, 1, 1)).total_seconds()
        return TIME_OF_DAY, dt.hour * 3600 + dt.minute * 60 + dt.second + dt.microsecond / 1e6
    return None


def epoch_seconds(text: str | None) -> float | None:
    """Unix time of a full-date stamp (UTC when it gives no zone); None for anything less."""
    key = parse(text)
    return key[1] if key is not None and key[0] == FULL_DATE else None


def at_precision(key: tuple[int, float], precision: int) -> float:
    """A key's seconds at a lower precision (a full date as month-day, or as time of day)."""
    level, seconds = key
    if level == precision:
        return seconds
    if level == FULL_DATE:
        try:
            dt = _EPOCH + timedelta(seconds=seconds)
        except OverflowError:  # a stamp at the edge of year 1 or 9999 moved out of range by its zone
            return seconds % 86400.0
        if precision == MONTH_DAY:
            return (dt.replace(year=_LEAP_YEAR) - datetime(_LEAP_YEAR, 1, 1)).total_seconds()
        return dt.hour * 3600 + dt.minute * 60 + dt.second + dt.microsecond / 1e6
    return seconds % 86400.0


__all__ = ["FULL_DATE", "MONTH_DAY", "TIME_OF_DAY", "at_precision", "epoch_seconds", "parse"]


def with_year(text: str | None, reference: float, not_after: bool = False) -> float | None:
    """Unix time of a month-day stamp (vLLM's ``01-01 10:00:00``) given the year a reference time implies.

    ``reference`` is a Unix time from outside the stamp: another stamp of the same input or a bundle's
    recording time (the nearest such date wins, so 31 December read beside 2 January is the year before),
    or the file's modification time (``not_after``: the stamp is the latest such date not after it, a day of
    slack for the log's zone). None for a stamp that is not month-day.
    """
    key = parse(text)
    if key is None or key[0] != MONTH_DAY:
        return None
    shape = datetime(_LEAP_YEAR, 1, 1) + timedelta(seconds=key[1])
    ref_year = (_EPOCH + timedelta(seconds=reference)).year
    candidates = []
    for year in range(ref_year - 4, ref_year + 2):
        try:
            candidates.append((shape.replace(year=year) - _EPOCH).total_seconds())
        except ValueError:  # 29 February of a year that has none
            continue
    if not_after:
        before = [c for c in candidates if c <= reference + 86400.0]
        return max(before) if before else None
    return min(candidates, key=lambda c: abs(c - reference)) if candidates else None

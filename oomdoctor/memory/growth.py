"""Memory that grows until it fails: a linear fit over sampled GPU memory, the rate and the time to a full card.

Leaks and fragmentation show as a process's memory climbing for hours before the OOM. From ``oomdoctor
run``'s samples (per process and per GPU, NVML) or a DCGM ``query_range`` (per GPU), each series gets a
least-squares line; it is a growth only when all of these hold, so a flat series, noise, a server
loading its weights (a step) or a cache that fills and frees (a sawtooth) gives none:

- the samples span at least ``MIN_SPAN_S`` and number at least ``MIN_POINTS``;
- the line explains the series: R^2 >= ``MIN_R2`` (noise and a sawtooth fall far below);
- the growth is sustained: each half of the window, fitted alone, climbs at least ``MIN_HALF_SHARE`` of
  the whole window's rate (a step has one flat half);
- it is more than NVML's granularity and noise: at least ``MIN_GROWTH_BYTES`` over the window.

The projection is what an alert needs before the OOM: at that rate, with the rest of the card as it was
at the last sample, the seconds until the card's total is reached.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MIN_SPAN_S = 300.0
MIN_POINTS = 10
MIN_R2 = 0.9
MIN_HALF_SHARE = 1 / 3
MIN_GROWTH_BYTES = 256 << 20


@dataclass(frozen=True, slots=True)
class Trend:
    """One series' fit: the rate, the window it was fitted on, and how well a line explains it."""

    bytes_per_second: float
    span_s: float
    points: int
    r2: float
    last_bytes: int


def _line(points: list[tuple[float, float]]) -> tuple[float, float, float]:
    """(slope, intercept, R^2) of the least-squares line through ``points``."""
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    stt = sum((t - mt) ** 2 for t, _ in points)
    if stt == 0:
        return 0.0, mv, 0.0
    slope = sum((t - mt) * (v - mv) for t, v in points) / stt
    intercept = mv - slope * mt
    svv = sum((v - mv) ** 2 for _, v in points)
    if svv == 0:
        return slope, intercept, 0.0
    residual = sum((v - (intercept + slope * t)) ** 2 for t, v in points)
    return slope, intercept, 1.0 - residual / svv


def fit(points: list[tuple[float, int]]) -> Trend | None:
    """The growth of one series of (unix seconds, bytes) samples, or None when it is not one (see the module)."""
    pts = sorted((float(t), float(v)) for t, v in points)
    if len(pts) < MIN_POINTS or pts[-1][0] - pts[0][0] < MIN_SPAN_S:
        return None
    slope, _, r2 = _line(pts)
    span = pts[-1][0] - pts[0][0]
    if slope <= 0 or r2 < MIN_R2 or slope * span < MIN_GROWTH_BYTES:
        return None
    half = len(pts) // 2
    for part in (pts[:half], pts[half:]):
        if len(part) < 2 or _line(part)[0] < MIN_HALF_SHARE * slope:
            return None
    return Trend(bytes_per_second=slope, span_s=span, points=len(pts), r2=r2, last_bytes=int(pts[-1][1]))


def seconds_to_full(trend: Trend, card_used_bytes: int | None, card_total_bytes: int | None) -> float | None:
    """Seconds from the last sample until the card is full at the trend's rate; None without the card's figures."""
    if not card_total_bytes or card_used_bytes is None or trend.bytes_per_second <= 0:
        return None
    return max(0.0, (card_total_bytes - card_used_bytes) / trend.bytes_per_second)


def growth(samples: list[dict[str, Any]], totals: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """Each growing series of the samples (``run``'s samples.json or DCGM's query_range, as the evidence holds them).

    Per process where the samples list processes, else per GPU. ``totals``: a GPU's total bytes by UUID or
    index when the samples do not carry it (DCGM's FB_TOTAL, or FB_USED + FB_FREE + FB_RESERVED).
    """
    totals = dict(totals or {})
    card_used: dict[str, list[tuple[float, int]]] = {}
    by_process: dict[tuple[str, int], list[tuple[float, int]]] = {}
    names: dict[str, Any] = {}
    for s in samples:
        t = s.get("t")
        if not isinstance(t, (int, float)):
            continue
        for g in s.get("gpus") or []:
            key = str(g.get("uuid") or g.get("index"))
            names[key] = g.get("index") if g.get("index") is not None else g.get("uuid")
            if isinstance(g.get("used_bytes"), int):
                card_used.setdefault(key, []).append((t, g["used_bytes"]))
            if isinstance(g.get("total_bytes"), int) and g["total_bytes"] > 0:
                totals[key] = g["total_bytes"]
        for p in s.get("processes") or []:
            if isinstance(p.get("used_bytes"), int) and p.get("pid") is not None:
                by_process.setdefault((str(p.get("gpu")), int(p["pid"])), []).append((t, p["used_bytes"]))
    out: list[dict[str, Any]] = []
    series: list[tuple[str, int | None, list[tuple[float, int]]]] = [(gpu, pid, pts) for (gpu, pid), pts in by_process.items()]
    if not series:
        series = [(gpu, None, pts) for gpu, pts in card_used.items()]
    for gpu, pid, pts in sorted(series, key=lambda x: (x[0], x[1] or 0)):
        trend = fit(pts)
        if trend is None:
            continue
        used = card_used.get(gpu)
        total = totals.get(gpu) or totals.get(str(names.get(gpu)))
        # The card as it was at the last sample (the process's own reading when the card's is missing).
        left = seconds_to_full(trend, sorted(used or pts)[-1][1], total)
        out.append(
            {
                "gpu": names.get(gpu, gpu),
                "pid": pid,
                "bytes_per_second": round(trend.bytes_per_second, 3),
                "gib_per_hour": round(trend.bytes_per_second * 3600 / (1 << 30), 3),
                "span_s": round(trend.span_s, 3),
                "points": trend.points,
                "r2": round(trend.r2, 4),
                "last_bytes": trend.last_bytes,
                "card_total_bytes": total,
                "seconds_to_full": round(left, 1) if left is not None else None,
            }
        )
    return out

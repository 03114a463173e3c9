"""Inline SVG charts built on the server side; every text in them is escaped here.

Returned as markupsafe.Markup so that the HTML template inserts them without escaping twice.
"""

from __future__ import annotations

from typing import Any

from markupsafe import Markup, escape

from oomdoctor.units import GIB, gib_text

COLORS = {
    "context": "#9e9e9e",
    "weights": "#4e79a7",
    "kv": "#59a14f",
    "graphs": "#b07aa1",
    "dynamic": "#f28e2b",
    "torch_other": "#edc948",
    "other": "#e15759",
    "free": "#e6e6e6",
}
_RANK_COLORS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac")


def _g(n: float, unit: str = "bytes") -> str:
    if unit == "tokens":
        return f"{int(n):,} tokens"
    return gib_text(n)


def _svg(chart_id: str, label: str, width: int, height: int, body: str) -> Markup:
    """The chart element around already-escaped parts."""
    return Markup(
        f'<svg id="{escape(chart_id)}" class="chart" role="img" aria-label="{escape(label)}" viewBox="0 0 {width} {height}" '
        f'width="100%" xmlns="http://www.w3.org/2000/svg">{body}</svg>'
    )


def budget_bars(bars: list[dict[str, Any]], chart_id: str = "budget-chart") -> Markup:
    """One stacked bar per GPU; under each, the failed request against what was free."""
    if not bars:
        return Markup("")
    width, left, bar_h, gap = 760, 170, 26, 22
    scale_max = max(max(b["total_bytes"], sum(s["bytes"] for s in b["segments"])) for b in bars) or 1
    inner = width - left - 120  # room on the right for the total / "over by" label
    rows: list[str] = []
    y = 10
    for b in bars:
        total = b["total_bytes"]
        unit = b.get("unit", "bytes")
        name = escape(b["name"])
        assumed = " (assumed card)" if b.get("total_assumed") else ""
        rows.append(f'<text x="{left - 8}" y="{y + bar_h * 0.68:.1f}" text-anchor="end" class="lbl">{name}</text>')
        x = float(left)
        for seg in b["segments"]:
            w = inner * seg["bytes"] / scale_max
            title = escape(f"{seg['label']}: {_g(seg['bytes'], unit)}")
            rows.append(
                f'<rect x="{x:.1f}" y="{y}" width="{max(w, 0.5):.1f}" height="{bar_h}" fill="{COLORS.get(seg["kind"], "#ccc")}" '
                f'class="seg seg-{escape(seg["kind"])}"><title>{title}</title></rect>'
            )
            if w > 46:
                shown = f"{seg['bytes'] / GIB:.1f}" if unit == "bytes" else f"{seg['bytes']:,}"
                rows.append(f'<text x="{x + w / 2:.1f}" y="{y + bar_h * 0.68:.1f}" text-anchor="middle" class="seglbl">{shown}</text>')
            x += w
        used = sum(seg["bytes"] for seg in b["segments"])
        edge = left + inner * total / scale_max
        if used > total:
            # A startup KV failure: weights plus the dynamic reserve do not fit in what was free.
            rows.append(f'<line x1="{edge:.1f}" y1="{y - 4}" x2="{edge:.1f}" y2="{y + bar_h + 4}" stroke="#d62728" stroke-width="2" class="overcommit"/>')
            rows.append(f'<text x="{x + 4:.1f}" y="{y + bar_h * 0.68:.1f}" class="tot" fill="#d62728">over by {escape(_g(used - total, unit))}</text>')
        else:
            rows.append(f'<text x="{edge + 4:.1f}" y="{y + bar_h * 0.68:.1f}" class="tot">{escape(_g(total, unit) + assumed)}</text>')
        y += bar_h + 4
        req = b.get("request")
        if req and req.get("requested_bytes") is not None:
            free = req.get("free_bytes") or 0
            wf = inner * free / scale_max
            wr = inner * req["requested_bytes"] / scale_max
            rows.append(f'<text x="{left - 8}" y="{y + 9}" text-anchor="end" class="lbl small">failed request</text>')
            rows.append(f'<rect x="{left}" y="{y}" width="{max(wf, 0.5):.1f}" height="6" fill="#9e9e9e"><title>free at the failure: {escape(_g(free, unit))}</title></rect>')
            rows.append(
                f'<rect x="{left}" y="{y + 7}" width="{max(wr, 0.5):.1f}" height="6" fill="none" stroke="#d62728" stroke-width="1.5" class="request">'
                f"<title>requested: {escape(_g(req['requested_bytes'], unit))}</title></rect>"
            )
            rows.append(f'<text x="{left + max(wf, wr) + 6:.1f}" y="{y + 11}" class="small">requested {escape(_g(req["requested_bytes"], unit))} vs free {escape(_g(free, unit))}</text>')
            y += 18
        y += gap
    height = y
    body = "".join(rows)
    return _svg(chart_id, "GPU memory budget", width, height, body)


def timeline(series: dict[str, list[dict[str, Any]]]) -> Markup:
    """Free memory through the startup milestones up to the failure, one line per rank."""
    if not series:
        return Markup("")
    labels: list[str] = []
    for points in series.values():
        for p in points:
            if p["label"] not in labels:
                labels.append(p["label"])
    width, height, left, bottom, top = 760, 260, 60, 70, 14
    values = [p["bytes"] for pts in series.values() for p in pts]
    vmax = max(max(values), 1)
    inner_w, inner_h = width - left - 20, height - bottom - top
    xs = {label: left + (inner_w * i / max(len(labels) - 1, 1)) for i, label in enumerate(labels)}

    def yof(v: float) -> float:
        return top + inner_h * (1 - max(v, 0) / vmax)

    parts = [f'<line x1="{left}" y1="{top + inner_h}" x2="{left + inner_w}" y2="{top + inner_h}" stroke="#999"/>']
    for frac in (0, 0.5, 1):
        v = vmax * frac
        parts.append(f'<text x="{left - 6}" y="{yof(v) + 4:.1f}" text-anchor="end" class="small">{v / GIB:.0f} GiB</text>')
    for label, x in xs.items():
        parts.append(f'<text x="{x:.1f}" y="{top + inner_h + 14}" text-anchor="end" transform="rotate(-30 {x:.1f} {top + inner_h + 14})" class="small">{escape(label)}</text>')
    for i, (rank, points) in enumerate(series.items()):
        color = _RANK_COLORS[i % len(_RANK_COLORS)]
        coords = " ".join(f"{xs[p['label']]:.1f},{yof(p['bytes']):.1f}" for p in points)
        parts.append(f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="2"><title>{escape(rank)}</title></polyline>')
        for p in points:
            parts.append(
                f'<circle cx="{xs[p["label"]]:.1f}" cy="{yof(p["bytes"]):.1f}" r="3.5" fill="{color}">'
                f"<title>{escape(rank)} {escape(p['label'])}: {escape(_g(p['bytes']))} (line {p['line']})</title></circle>"
            )
        parts.append(f'<text x="{left + inner_w - 4}" y="{top + 12 + 13 * i}" text-anchor="end" fill="{color}" class="small">{escape(rank)}</text>')
    return _svg("timeline-chart", "free GPU memory over time", width, height, "".join(parts))


def samples_chart(series: dict[str, list[dict[str, Any]]]) -> Markup:
    """Memory over time per process from the flight recorder's samples."""
    if not series:
        return Markup("")
    width, height, left, bottom, top = 760, 240, 60, 34, 14
    tmax = max((p["t"] for pts in series.values() for p in pts), default=1) or 1
    vmax = max((p["bytes"] for pts in series.values() for p in pts), default=1) or 1
    inner_w, inner_h = width - left - 150, height - bottom - top

    def xy(p: dict[str, Any]) -> str:
        return f"{left + inner_w * p['t'] / tmax:.1f},{top + inner_h * (1 - p['bytes'] / vmax):.1f}"

    parts = [f'<line x1="{left}" y1="{top + inner_h}" x2="{left + inner_w}" y2="{top + inner_h}" stroke="#999"/>']
    parts.append(f'<text x="{left - 6}" y="{top + 4}" text-anchor="end" class="small">{vmax / GIB:.0f} GiB</text>')
    parts.append(f'<text x="{left + inner_w}" y="{top + inner_h + 14}" text-anchor="end" class="small">{tmax:.1f} s</text>')
    for i, (name, points) in enumerate(sorted(series.items())):
        color = _RANK_COLORS[i % len(_RANK_COLORS)]
        parts.append(f'<polyline points="{" ".join(xy(p) for p in points)}" fill="none" stroke="{color}" stroke-width="2"><title>{escape(name)}</title></polyline>')
        parts.append(f'<text x="{left + inner_w + 8}" y="{top + 10 + 13 * i}" fill="{color}" class="small">{escape(name)}</text>')
    return _svg("samples-chart", "GPU memory per process over time", width, height, "".join(parts))

"""Inline SVG charts built on the server side; every text in them is escaped here.

Returned as markupsafe.Markup so that the HTML template inserts them without escaping twice.

Every chart sizes its margins from its own labels (an estimate of their width, on the generous side),
so nothing is cut at either edge of the viewBox; every label inside a segment is drawn in the ink
(white, near-black or black) with the higher contrast against that segment's fill; every line and
mark a chart draws has a legend entry with a swatch (tests/test_report_html.py measures all three in
Chromium).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from markupsafe import Markup, escape

from oomdoctor.base.units import GIB, gib_text

if TYPE_CHECKING:
    from typing import Any

COLORS = {
    "context": "#9e9e9e",
    "weights": "#4e79a7",
    "kv": "#59a14f",
    "graphs": "#b07aa1",
    "dynamic": "#f28e2b",
    "torch_other": "#edc948",
    "unsplit": "#a0cbe8",  # light blue: the server's memory, weights included, not split further
    "beyond": "#ff9da7",  # pink: in use past the budget at a failure
    "other": "#e15759",
    "outside": "#f4f6f8",
    "free": "#e6e6e6",
}
# The marks drawn over the bars, with their legend swatches.
LIMIT_COLOR = "#d62728"  # the card's total, when the segments run past it
BUDGET_COLOR = "#1f2328"  # vLLM's u*total, dashed
REQUEST_COLOR = "#d62728"
FREE_AT_FAILURE_COLOR = "#76b7b2"  # teal: apart from the context grey it sits under
TEXT_COLOR = "#1f2328"
BACKGROUND = "#ffffff"
_RANK_COLORS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac")

# The charts' own style, shared by the diagnose report and the plan page. Inline style attributes on
# single elements (a segment's label ink, a warning) win over it.
CHART_CSS = (
    ".chart text { font-size: 11px; fill: #1f2328; } .chart .seglbl { font-size: 10px; } .chart .small { font-size: 10px; } .chart .tot { font-size: 11px; }\n"
    ".legend { margin: 4px 0; } .legend .legend-entry { display: inline-block; margin-right: 14px; font-size: 12px; }\n"
    ".legend .swatch { display: inline-block; width: 12px; height: 12px; margin-right: 4px; vertical-align: -2px; box-sizing: border-box; }\n"
    ".legend .swatch.line { height: 0; width: 14px; vertical-align: 3px; border-top: 2px solid; }\n"
    ".legend .swatch.dashed { border-top-style: dashed; } .legend .swatch.box { background: none; border: 1.5px solid; }\n"
    ".legend .swatch.outlined { border: 1px solid #8c959f; } .chart-note { color: #59636e; font-size: 12px; margin: 2px 0 6px; }"
)

# Average glyph advance as a share of the font size, on the wide side (DejaVu Sans, Chromium's fallback
# on a bare Linux, is about 0.6; Helvetica/Arial about 0.55): margins computed from it leave room.
_ADVANCE = 0.64


def text_width(text: str, font_px: float = 11) -> float:
    """A generous estimate of a label's rendered width in px."""
    return len(text) * font_px * _ADVANCE + 2


def _luminance(color: str) -> float:
    c = color.lstrip("#")
    if len(c) == 3:
        c = "".join(ch * 2 for ch in c)
    channels = [int(c[i : i + 2], 16) / 255 for i in (0, 2, 4)]
    lin = [x / 12.92 if x <= 0.03928 else ((x + 0.055) / 1.055) ** 2.4 for x in channels]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast(a: str, b: str) -> float:
    """WCAG 2 contrast ratio of two #rrggbb colours (1 to 21)."""
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def ink_on(fill: str) -> str:
    """The label colour for text on ``fill``: white, the page's near-black or black, the first with >= 4.5:1."""
    for ink in ("#ffffff", TEXT_COLOR, "#000000"):
        if contrast(ink, fill) >= 4.5:
            return ink
    return max(("#ffffff", "#000000"), key=lambda ink: contrast(ink, fill))


def _g(n: float, unit: str = "bytes") -> str:
    if unit == "tokens":
        return f"{int(n):,} tokens"
    return gib_text(n)


def _fit(text: str, max_px: float, font_px: float = 11) -> str:
    """The text, cut with an ellipsis to fit ``max_px`` (the full text stays in the element's title)."""
    if text_width(text, font_px) <= max_px:
        return text
    keep = max(int((max_px - 2) / (font_px * _ADVANCE)) - 1, 1)
    return text[:keep] + "…"


def _svg(chart_id: str, label: str, width: int, height: float, body: str) -> Markup:
    """The chart element around already-escaped parts."""
    return Markup(
        f'<svg id="{escape(chart_id)}" class="chart" role="img" aria-label="{escape(label)}" viewBox="0 0 {width} {height:.0f}" '
        f'width="100%" xmlns="http://www.w3.org/2000/svg">{body}</svg>'
    )


def overrun(b: dict[str, Any]) -> float:
    """How far a bar's segments run past its total; rounding noise (what would print as 0.00 GiB) is none."""
    over = sum(s["bytes"] for s in b["segments"]) - b["total_bytes"]
    return over if over >= (1 if b.get("unit") == "tokens" else GIB / 200) else 0


def _right_label(b: dict[str, Any]) -> tuple[str, bool]:
    """The text right of a bar and whether it is a warning: the total, or how far the segments overrun a limit."""
    unit = b.get("unit", "bytes")
    if overrun(b):
        return f"over by {_g(overrun(b), unit)}", True
    if b.get("over_limit_bytes"):
        return f"over {b.get('limit_name', 'the limit')} by {_g(b['over_limit_bytes'], unit)}", True
    return _g(b["total_bytes"], unit) + (" (assumed card)" if b.get("total_assumed") else ""), False


def budget_bars(bars: list[dict[str, Any]], chart_id: str = "budget-chart", layout: list[dict[str, Any]] | None = None) -> Markup:
    """One stacked bar per GPU; under each, the failed request against what was free.

    A bar may carry ``limit_bytes`` (vLLM's u*total, drawn as a dashed line) and ``over_limit_bytes``;
    when its segments sum past ``total_bytes`` a red line marks the card's total. ``layout``: all the
    bars of the page, so that charts drawn apart (now, at the recommended value) share margins and scale.
    """
    if not bars:
        return Markup("")
    width, bar_h, gap = 760, 26, 22
    every = [*bars, *(layout or [])]
    left = min(max(max(text_width(b["name"]) for b in every) + 14, 110.0), 300.0)
    right = max(max(text_width(_right_label(b)[0]) for b in every) + 10, 60.0)
    scale_max = max(max(b["total_bytes"], sum(s["bytes"] for s in b["segments"]), b.get("limit_bytes") or 0) for b in every) or 1
    inner = width - left - right
    rows: list[str] = []
    y = 10.0
    for b in bars:
        total = b["total_bytes"]
        unit = b.get("unit", "bytes")
        label_y = y + bar_h * 0.68
        rows.append(f'<text x="{left - 8:.1f}" y="{label_y:.1f}" text-anchor="end" class="lbl"><title>{escape(b["name"])}</title>{escape(_fit(b["name"], left - 12))}</text>')
        x = float(left)
        for seg in b["segments"]:
            w = inner * seg["bytes"] / scale_max
            fill = COLORS.get(seg["kind"], "#cccccc")
            title = escape(f"{seg['label']}: {_g(seg['bytes'], unit)}")
            stroke = ' stroke="#8c959f" stroke-width="0.5"' if seg["kind"] == "outside" else ""
            rows.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0.5):.1f}" height="{bar_h}" fill="{fill}"{stroke} '
                f'class="seg seg-{escape(seg["kind"])}"><title>{title}</title></rect>'
            )
            shown = f"{seg['bytes'] / GIB:.1f}" if unit == "bytes" else f"{seg['bytes']:,}"
            if w > text_width(shown, 10) + 8:
                rows.append(f'<text x="{x + w / 2:.1f}" y="{label_y:.1f}" text-anchor="middle" class="seglbl" style="fill: {ink_on(fill)}">{shown}</text>')
            x += w
        text, warn = _right_label(b)
        style = f' style="fill: {LIMIT_COLOR}"' if warn else ""
        rows.append(f'<text x="{max(x, left + inner * total / scale_max) + 4:.1f}" y="{label_y:.1f}" class="tot"{style}>{escape(text)}</text>')
        if b.get("limit_bytes"):
            lx = left + inner * b["limit_bytes"] / scale_max
            rows.append(
                f'<line x1="{lx:.1f}" y1="{y - 5:.1f}" x2="{lx:.1f}" y2="{y + bar_h + 5:.1f}" stroke="{BUDGET_COLOR}" stroke-width="2" stroke-dasharray="4 3" class="limit budget-limit">'
                f"<title>{escape(b.get('limit_name', 'limit'))}: {escape(_g(b['limit_bytes'], unit))}</title></line>"
            )
        if overrun(b):
            # A startup failure: the segments need more than the card has.
            edge = left + inner * total / scale_max
            rows.append(
                f'<line x1="{edge:.1f}" y1="{y - 5:.1f}" x2="{edge:.1f}" y2="{y + bar_h + 5:.1f}" stroke="{LIMIT_COLOR}" stroke-width="2" class="limit overcommit">'
                f"<title>card total: {escape(_g(total, unit))}</title></line>"
            )
        y += bar_h + 4
        req = b.get("request")
        if req and req.get("requested_bytes") is not None:
            free = req.get("free_bytes") or 0
            wf = inner * free / scale_max
            # A request larger than the whole scale (127 TiB asked of an 80 GiB card) is drawn to the edge.
            wr = min(inner * req["requested_bytes"] / scale_max, inner)
            rows.append(f'<text x="{left - 8:.1f}" y="{y + 9:.1f}" text-anchor="end" class="lbl small">failed request</text>')
            rows.append(
                f'<rect x="{left:.1f}" y="{y:.1f}" width="{max(wf, 0.5):.1f}" height="6" fill="{FREE_AT_FAILURE_COLOR}" class="free-at-failure">'
                f"<title>free at the failure: {escape(_g(free, unit))}</title></rect>"
            )
            rows.append(
                f'<rect x="{left:.1f}" y="{y + 7:.1f}" width="{max(wr, 0.5):.1f}" height="6" fill="none" stroke="{REQUEST_COLOR}" stroke-width="1.5" class="request">'
                f"<title>requested: {escape(_g(req['requested_bytes'], unit))}</title></rect>"
            )
            said = f"requested {_g(req['requested_bytes'], unit)} vs free {_g(free, unit)}"
            tx = left + max(wf, wr) + 6
            if tx + text_width(said, 10) > width - 2:
                # No room right of a large request: the words go on their own line under it.
                y += 16
                tx = left
            rows.append(f'<text x="{tx:.1f}" y="{y + 11:.1f}" class="small">{escape(said)}</text>')
            y += 18
        y += gap
    return _svg(chart_id, "GPU memory budget", width, y, "".join(rows))


def budget_legend(segments: list[dict[str, str]], bars: list[dict[str, Any]]) -> Markup:
    """The key of the budget bars: each segment kind drawn, then each line and mark drawn, each with a swatch."""
    entries: list[str] = []
    for s in segments:
        fill = COLORS.get(s["kind"], "#cccccc")
        outlined = " outlined" if contrast(fill, BACKGROUND) < 1.5 else ""
        entries.append(f'<span class="legend-entry key-{escape(s["kind"])}"><i class="swatch{outlined}" style="background: {fill}"></i>{escape(s["label"])}</span>')
    limits = sorted({b["limit_name"] for b in bars if b.get("limit_bytes") and b.get("limit_name")})
    for name in limits:
        entries.append(f'<span class="legend-entry mark-budget-limit"><i class="swatch line dashed" style="border-color: {BUDGET_COLOR}"></i>{escape(name)}: what the server may use</span>')
    if any(overrun(b) for b in bars):
        entries.append(f'<span class="legend-entry mark-overcommit"><i class="swatch line" style="border-color: {LIMIT_COLOR}"></i>card total: what runs past it does not fit</span>')
    if any(b.get("request") and b["request"].get("requested_bytes") is not None for b in bars):
        entries.append(f'<span class="legend-entry mark-free-at-failure"><i class="swatch" style="background: {FREE_AT_FAILURE_COLOR}"></i>free at the failure</span>')
        entries.append(f'<span class="legend-entry mark-request"><i class="swatch box" style="border-color: {REQUEST_COLOR}"></i>the failed request</span>')
    if not entries:
        return Markup("")
    return Markup(f'<div class="legend">{"".join(entries)}</div>')


def _svg_legend(names: list[str], width: float, x0: float, y0: float) -> tuple[list[str], float]:
    """Legend entries (a swatch and a name) in rows from (x0, y0); returns the parts and the height used."""
    parts: list[str] = []
    x, y = x0, y0
    for i, name in enumerate(names):
        color = _RANK_COLORS[i % len(_RANK_COLORS)]
        shown = _fit(name, width - x0 - 20, 10)
        w = 16 + text_width(shown, 10) + 14
        if x > x0 and x + w > width:
            x, y = x0, y + 15
        parts.append(
            f'<g class="legend-entry"><rect class="swatch" x="{x:.1f}" y="{y - 8:.1f}" width="12" height="4" rx="1" fill="{color}"/>'
            f'<text x="{x + 16:.1f}" y="{y:.1f}" class="small"><title>{escape(name)}</title>{escape(shown)}</text></g>'
        )
        x += w
    return parts, (y - y0) + 15


def timeline(series: dict[str, list[dict[str, Any]]]) -> Markup:
    """Free memory through the startup milestones up to the failure, one line per rank."""
    if not series:
        return Markup("")
    labels: list[str] = []
    for points in series.values():
        for p in points:
            if p["label"] not in labels:
                labels.append(p["label"])
    width, plot_h = 760, 176
    legend, legend_h = _svg_legend(list(series), width - 10, 60, 14)
    # The x labels are rotated by -30 degrees and end at their tick: they reach left by cos 30 and down by
    # sin 30 of their width, the first one past the axis' start.
    shown = {label: _fit(label, 180, 10) for label in labels}
    widest = max(text_width(s, 10) for s in shown.values())
    left = max(60.0, text_width(shown[labels[0]], 10) * 0.87 + 8, text_width("0000 GiB", 10) + 10)
    top = 14 + legend_h + 6
    bottom = widest * 0.5 + 26
    height = top + plot_h + bottom
    values = [p["bytes"] for pts in series.values() for p in pts]
    vmax = max(max(values), 1)
    inner_w, inner_h = width - left - 20, plot_h
    xs = {label: left + (inner_w * i / max(len(labels) - 1, 1)) for i, label in enumerate(labels)}

    def yof(v: float) -> float:
        return top + inner_h * (1 - max(v, 0) / vmax)

    parts = list(legend)
    parts.append(f'<line x1="{left:.1f}" y1="{top + inner_h:.1f}" x2="{left + inner_w:.1f}" y2="{top + inner_h:.1f}" stroke="#999"/>')
    for frac in (0, 0.5, 1):
        v = vmax * frac
        parts.append(f'<text x="{left - 6:.1f}" y="{yof(v) + 4:.1f}" text-anchor="end" class="small">{v / GIB:.0f} GiB</text>')
    ly = top + inner_h + 14
    for label, x in xs.items():
        parts.append(f'<text x="{x:.1f}" y="{ly:.1f}" text-anchor="end" transform="rotate(-30 {x:.1f} {ly:.1f})" class="small"><title>{escape(label)}</title>{escape(shown[label])}</text>')
    order = {label: i for i, label in enumerate(labels)}
    for i, (rank, points) in enumerate(series.items()):
        color = _RANK_COLORS[i % len(_RANK_COLORS)]
        parts.append(f'<g class="series" data-series="{escape(rank)}">')
        # A line joins two readings only at neighbouring milestones: where a rank has no reading at a
        # milestone between them, nothing is drawn, rather than a straight line through values never read.
        for run in _runs(points, order):
            if len(run) < 2:
                continue
            coords = " ".join(f"{xs[p['label']]:.1f},{yof(p['bytes']):.1f}" for p in run)
            parts.append(f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="2"><title>{escape(rank)}</title></polyline>')
        for p in points:
            parts.append(
                f'<circle cx="{xs[p["label"]]:.1f}" cy="{yof(p["bytes"]):.1f}" r="3.5" fill="{color}">'
                f"<title>{escape(rank)} {escape(p['label'])}: {escape(_g(p['bytes']))} (line {p['line']})</title></circle>"
            )
        parts.append("</g>")
    return _svg("timeline-chart", "free GPU memory over time", width, height, "".join(parts))


def _runs(points: list[dict[str, Any]], order: dict[str, int]) -> list[list[dict[str, Any]]]:
    """A rank's readings split where it skips a milestone the others have."""
    runs: list[list[dict[str, Any]]] = []
    for p in points:
        if runs and order[p["label"]] - order[runs[-1][-1]["label"]] == 1:
            runs[-1].append(p)
        else:
            runs.append([p])
    return runs


def samples_chart(series: dict[str, list[dict[str, Any]]]) -> Markup:
    """Memory over time per process from the flight recorder's samples."""
    if not series:
        return Markup("")
    width, plot_h, left, bottom = 760, 192, 60, 34
    names = sorted(series)
    legend, legend_h = _svg_legend(names, width - 10, left, 14)
    top = 14 + legend_h + 6
    height = top + plot_h + bottom
    tmax = max((p["t"] for pts in series.values() for p in pts), default=1) or 1
    vmax = max((p["bytes"] for pts in series.values() for p in pts), default=1) or 1
    inner_w, inner_h = width - left - 20, plot_h

    def xy(p: dict[str, Any]) -> str:
        return f"{left + inner_w * p['t'] / tmax:.1f},{top + inner_h * (1 - p['bytes'] / vmax):.1f}"

    parts = list(legend)
    parts.append(f'<line x1="{left}" y1="{top + inner_h:.1f}" x2="{left + inner_w}" y2="{top + inner_h:.1f}" stroke="#999"/>')
    parts.append(f'<text x="{left - 6}" y="{top + 4:.1f}" text-anchor="end" class="small">{vmax / GIB:.0f} GiB</text>')
    parts.append(f'<text x="{left - 6}" y="{top + inner_h + 4:.1f}" text-anchor="end" class="small">0 GiB</text>')
    parts.append(f'<text x="{left + inner_w}" y="{top + inner_h + 14:.1f}" text-anchor="end" class="small">{tmax:.1f} s</text>')
    parts.append(f'<text x="{left}" y="{top + inner_h + 14:.1f}" class="small">0 s</text>')
    for i, name in enumerate(names):
        color = _RANK_COLORS[i % len(_RANK_COLORS)]
        parts.append(
            f'<g class="series" data-series="{escape(name)}"><polyline points="{" ".join(xy(p) for p in series[name])}" fill="none" stroke="{color}" stroke-width="2">'
            f"<title>{escape(name)}</title></polyline></g>"
        )
    return _svg("samples-chart", "GPU memory per process over time", width, height, "".join(parts))


CAUSE_COLOR = "#d62728"
CONSEQUENCE_COLOR = "#f28e2b"
FAILURE_COLOR = "#b07aa1"
_LANE_MARKS = (("cause", CAUSE_COLOR, "the first failure (the cause)"), ("failure", FAILURE_COLOR, "another node's own failure"), ("consequence", CONSEQUENCE_COLOR, "what followed (a consequence)"))


def _mark(kind: str, x: float, y: float, title: str) -> str:
    color = dict((k, c) for k, c, _ in _LANE_MARKS)[kind]
    if kind == "cause":
        return f'<path class="mark {kind}" d="M{x:.1f},{y - 6:.1f} L{x + 6:.1f},{y:.1f} L{x:.1f},{y + 6:.1f} L{x - 6:.1f},{y:.1f} Z" fill="{color}"><title>{title}</title></path>'
    return f'<circle class="mark {kind}" cx="{x:.1f}" cy="{y:.1f}" r="5" fill="{color}"><title>{title}</title></circle>'


def _span_text(seconds: float) -> str:
    """An offset on the time axis: seconds, minutes or hours, signed."""
    sign = "-" if seconds < 0 else "+"
    s = abs(seconds)
    if s < 120:
        return f"{sign}{s:.0f} s" if s else "0 s"
    if s < 7200:
        return f"{sign}{s / 60:.1f} min"
    return f"{sign}{s / 3600:.1f} h"


def node_lanes(data: dict[str, Any] | None) -> Markup:
    """One lane per node on a shared time axis (seconds from the first failure): the cause, other failures, the consequences."""
    if not data or not data.get("lanes"):
        return Markup("")
    lanes = data["lanes"]
    width = 760
    names = [f"{lane['node']}" + (f" ({lane['role']})" if lane.get("role") else "") for lane in lanes]
    left = min(max(max(text_width(n) for n in names) + 14, 90.0), 260.0)
    right = 24.0
    times = [e["t"] for lane in lanes for e in lane["events"]] or [0.0]
    t_min, t_max = min(0.0, *times), max(0.0, *times)
    span = (t_max - t_min) or 1.0
    inner = width - left - right

    def xof(t: float) -> float:
        return left + inner * (t - t_min) / span

    legend: list[str] = []
    x = left
    for kind, _color, words in _LANE_MARKS:
        if not any(e["kind"] == kind for lane in lanes for e in lane["events"]):
            continue
        shape = _mark(kind, x + 6, 14, escape(words)).replace(f'class="mark {kind}"', f'class="swatch mark-{kind}"')
        legend.append(f'<g class="legend-entry">{shape}<text x="{x + 16:.1f}" y="18" class="small">{escape(words)}</text></g>')
        x += 16 + text_width(words, 10) + 18
    parts = list(legend)
    y = 34.0
    for name, lane in zip(names, lanes, strict=True):
        rows: list[float] = []  # the right end of the last label in each row
        placed: list[tuple[dict[str, Any], float, int, bool]] = []
        for e in lane["events"]:
            label = f"{str(e['rank']).split('/')[-1]} {e['what']}" if e.get("rank") else e["what"]
            ex = xof(e["t"])
            w = text_width(label, 10)
            flip = ex + 9 + w > width - 2
            start, end = (ex - 9 - w, ex) if flip else (ex, ex + 9 + w)
            row = next((i for i, last in enumerate(rows) if last < start - 4), None)
            if row is None:
                rows.append(end)
                row = len(rows) - 1
            else:
                rows[row] = end
            placed.append((e | {"label": label}, ex, row, flip))
        height = max(len(rows), 1) * 15 + 14
        mid = y + height / 2
        parts.append(f'<rect class="lane" x="{left:.1f}" y="{y:.1f}" width="{inner:.1f}" height="{height:.1f}" fill="#f6f8fa"/>')
        parts.append(f'<line x1="{left:.1f}" y1="{mid:.1f}" x2="{left + inner:.1f}" y2="{mid:.1f}" stroke="#d0d7de"/>')
        parts.append(f'<text x="{left - 8:.1f}" y="{mid + 4:.1f}" text-anchor="end" class="lbl"><title>{escape(name)}</title>{escape(_fit(name, left - 12))}</text>')
        if not lane["events"]:
            none = "no failure seen" + (f" ({lane['untimed']} without a time)" if lane.get("untimed") else "")
            parts.append(f'<text x="{left + 8:.1f}" y="{mid + 4:.1f}" class="small">{escape(none)}</text>')
        for e, ex, row, flip in placed:
            ly = y + 12 + row * 15
            title = escape(f"{name}: {e['label']} at {e.get('time') or '?'} ({_span_text(e['t'])}), line {e.get('line')}")
            parts.append(_mark(e["kind"], ex, mid, title))
            anchor = ' text-anchor="end"' if flip else ""
            tx = ex - 9 if flip else ex + 9
            parts.append(f'<text x="{tx:.1f}" y="{ly:.1f}" class="small"{anchor}><title>{title}</title>{escape(e["label"])}</text>')
        y += height + 6
    axis_y = y + 2
    parts.append(f'<line x1="{left:.1f}" y1="{axis_y:.1f}" x2="{left + inner:.1f}" y2="{axis_y:.1f}" stroke="#999"/>')
    for i in range(5):
        t = t_min + span * i / 4
        tx = xof(t)
        anchor = "start" if i == 0 else "end" if i == 4 else "middle"
        parts.append(f'<line x1="{tx:.1f}" y1="{axis_y:.1f}" x2="{tx:.1f}" y2="{axis_y + 4:.1f}" stroke="#999"/>')
        parts.append(f'<text x="{tx:.1f}" y="{axis_y + 15:.1f}" text-anchor="{anchor}" class="small">{escape(_span_text(t))}</text>')
    caption = _fit(f"time from the first failure: {data.get('origin', '')}", width - left - 4, 10)
    parts.append(f'<text x="{left:.1f}" y="{axis_y + 30:.1f}" class="small">{escape(caption)}</text>')
    return _svg("node-lanes-chart", "failures per node on one time axis", width, axis_y + 38, "".join(parts))

"""The self-contained HTML post-mortem: inline CSS and SVG, no script, a CSP that forbids the network."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from oomdoctor.base.units import GIB
from oomdoctor.report.render import svg
from oomdoctor.report.render.text import margin_text, recommendation_head, step_value

if TYPE_CHECKING:
    from typing import Any


def _env() -> Environment:
    # Autoescape on: every string from a log is untrusted; only the SVG built in render.svg (which
    # escapes its own text) is inserted as markup.
    return Environment(loader=PackageLoader("oomdoctor", "templates"), autoescape=select_autoescape(["html", "j2"]), undefined=StrictUndefined)


def window_text(window: list[float | None] | tuple[float | None, float | None], capitalize: bool = True) -> str:
    """The feasible window in words; an empty one (lowest needed above highest allowed) says that no value works."""
    low, high = window
    if low is None or high is None:
        return ""
    if low > high:
        text = f"no workable value: the lowest needed {low:.3f} is above the highest allowed {high:.3f}"
    else:
        text = f"feasible window: {low:.3f} to {high:.3f}"
    return text[0].upper() + text[1:] if capitalize else text


def render(view: dict, docs: dict[str, dict[str, str]] | None = None, redacted: bool = True) -> str:
    report = view.get("report", {})
    bars = (report.get("gpus") or []) + ([report["recommended_gpu"]] if report.get("recommended_gpu") else [])
    charts: dict[str, Any] = {
        "legend": svg.budget_legend(report.get("legend") or [], bars),
        "budget": svg.budget_bars(report.get("gpus") or [], layout=bars),
        "recommended": svg.budget_bars([report["recommended_gpu"]], "budget-chart-recommended", layout=bars) if report.get("recommended_gpu") else "",
        "timeline": svg.timeline(report.get("timeline") or {}),
        "lanes": svg.node_lanes(report.get("node_lanes")),
        "samples": svg.samples_chart(report.get("samples") or {}),
    }
    template = _env().get_template("report.html.j2")
    return template.render(
        v=view,
        r=report,
        charts=charts,
        colors=svg.COLORS,
        chart_css=Markup(svg.CHART_CSS),
        window_text=window_text,
        docs=docs or {},
        gib=GIB,
        rec_head=recommendation_head,
        margin_text=margin_text,
        show=step_value,
        redacted=redacted,
    )

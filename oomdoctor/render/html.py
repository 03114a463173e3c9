"""The self-contained HTML post-mortem: inline CSS and SVG, no script, a CSP that forbids the network."""

from __future__ import annotations

from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from oomdoctor.render import svg
from oomdoctor.render.text import recommendation_head, step_value
from oomdoctor.units import GIB


def _env() -> Environment:
    # Autoescape on: every string from a log is untrusted; only the SVG built in render.svg (which
    # escapes its own text) is inserted as markup.
    return Environment(loader=PackageLoader("oomdoctor", "templates"), autoescape=select_autoescape(["html", "j2"]), undefined=StrictUndefined)


def render(view: dict, docs: dict[str, dict[str, str]] | None = None, redacted: bool = True) -> str:
    report = view.get("report", {})
    charts: dict[str, Any] = {
        "budget": svg.budget_bars(report.get("gpus") or []),
        "recommended": svg.budget_bars([report["recommended_gpu"]], "budget-chart-recommended") if report.get("recommended_gpu") else "",
        "timeline": svg.timeline(report.get("timeline") or {}),
        "samples": svg.samples_chart(report.get("samples") or {}),
    }
    template = _env().get_template("report.html.j2")
    return template.render(
        v=view,
        r=report,
        charts=charts,
        colors=svg.COLORS,
        docs=docs or {},
        gib=GIB,
        rec_head=recommendation_head,
        show=step_value,
        redacted=redacted,
    )

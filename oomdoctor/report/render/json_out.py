"""JSON renderer: the contract part of the view model (oomdoctor.report.contract), as sorted, indented JSON."""

from __future__ import annotations

from oomdoctor.report.render.json_text import dumps


def render(view: dict) -> str:
    """The contract part of the view model (everything but the report's drawing data)."""
    data = {k: v for k, v in view.items() if k != "report"}
    return dumps(data) + "\n"  # json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False), without importing json

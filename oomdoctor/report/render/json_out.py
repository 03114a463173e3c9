"""JSON renderer: the contract part of the view model (oomdoctor.report.contract), as sorted, indented JSON."""

from __future__ import annotations

import json


def render(view: dict) -> str:
    """The contract part of the view model (everything but the report's drawing data)."""
    data = {k: v for k, v in view.items() if k != "report"}
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n"

"""`oomdoctor plan` in Markdown and HTML (the same self-contained, script-free, network-free page style)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jinja2 import Environment, StrictUndefined
from markupsafe import Markup

from oomdoctor.base.units import gib_text as _g
from oomdoctor.report.render import bars as bar_data
from oomdoctor.report.render import svg
from oomdoctor.report.render.markdown import _gpus as markdown_bars
from oomdoctor.report.render.text import step_value

if TYPE_CHECKING:
    from typing import Any


def _value(s: dict[str, Any]) -> str:
    return step_value(s["value"], s.get("unit", ""))


def _position(p: dict[str, Any]) -> str:
    return p.get("default_position") or ("inside" if p["default_in_window"] else "outside")


def _shorter(p: dict[str, Any]) -> str:
    s = p.get("shorter_context")
    return f"{s['flag']} {s['value']}" if s else ""


def _empty(p: dict[str, Any]) -> bool:
    return bool(p["window"][0] > p["window"][1])


def _window_sentence(p: dict[str, Any], code: str = "`") -> str:
    """The window and where the engine's default sits in it, or, when it is empty, that no value works."""
    flag = f"{code}{p['flag']}{code}"
    low, high = p["window"]
    if _empty(p):
        return f"No workable {flag} value: the lowest needed {low:.3f} is above the highest allowed {high:.3f}; {p['default_source']} {p['default']:g} does not work either."
    return f"Feasible {flag}: {low:.3f} to {high:.3f}; {p['default_source']} {p['default']:g} is {_position(p)}{'' if _position(p) == 'at the edge' else ' it'}."


def bars(p: dict[str, Any]) -> list[dict[str, Any]]:
    """The same GPU budget bars diagnose draws, at the recommended value, at the engine's default, and at --at.

    Built from the plan's own numbers (weights per rank, the estimated free memory before loading, the KV
    budget at each value), so the bar and the derivation cannot disagree.
    """
    total, weights = p["capacity_bytes"], p["weights_per_rank_bytes"]
    short = "u" if p["system"] == "vllm" else "y"
    values: list[tuple[float, str, int]] = []
    if p["recommended"] is not None:
        values.append((p["recommended"], "recommended", p["kv_bytes"]))
    if p["default"] != p["recommended"]:
        values.append((p["default"], "default" if p["system"] == "vllm" else "auto-tune", p["kv_at_default_bytes"]))
    at = p.get("at")
    if at and all(abs(at["value"] - v) > 1e-9 for v, _, _ in values):
        values.append((at["value"], "--at", at["kv_bytes"]))
    out = []
    for value, why, kv in values:
        name = f"{short}={value:g} ({why})"
        if p["system"] == "vllm":
            # plan's KV at u is round(u*total) - non_kv: the non-KV memory it assumed, back out of it.
            out.append(bar_data.vllm_bar(name, total, value, weights, round(total * value) - kv))
        else:
            out.append(bar_data.sglang_bar(name, total, p["pre_bytes"], weights, value))
    return out


def _legend(drawn: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The segment kinds the bars draw, in the order they first appear (vLLM draws its budget's parts first)."""
    seen: dict[tuple[str, str], None] = {}
    for b in drawn:
        for seg in b["segments"]:
            seen.setdefault((seg["kind"], seg["label"]), None)
    return [{"kind": k, "label": label} for k, label in seen]


def markdown(p: dict[str, Any]) -> str:
    lines = [
        f"## oomdoctor plan: {p['model']} on {p['gpu']} (tp={p['tp_size']}, {p['system']})",
        "",
        f"**{'Fits' if p['feasible'] else 'Does not fit'}.** {_window_sentence(p)}",
        "",
    ]
    if p.get("shorter_context"):
        s = p["shorter_context"]
        lines += [f"A shorter context fits (the usual fix): `{_shorter(p)}` with `{p['flag']} {s['recommended']:g}` ({s['kv_tokens']} KV tokens).", ""]
    if p["recommended"] is not None:
        lines += ["```bash", f"{p['flag']} {p['recommended']:g}", "```", "", f"KV {_g(p['kv_bytes'])}: {p['kv_tokens']} tokens, {p['max_concurrency']}x requests of {p['context_len']} tokens.", ""]
    if p.get("at"):
        a = p["at"]
        lines += [f"At `{p['flag']} {a['value']:g}`: KV {_g(a['kv_bytes'])} ({'feasible' if a['feasible'] else 'infeasible'}).", ""]
    drawn = bars(p)
    if drawn:
        lines += markdown_bars({"report": {"gpus": drawn, "segments": [{"kind": k, "label": label} for k, label in bar_data.SEGMENTS]}, "findings": []})
        lines += [f"- {b['name']}: {b['note']}" for b in drawn if b.get("note")] + [""]
    lines += ["| step | formula | value |", "|---|---|---|"]
    lines += [f"| {s['step']} | `{s['formula']}` | {_value(s)} |" for s in p["derivation"]]
    if p.get("fits_on"):
        lines += ["", "| fits on | tp | recommended |", "|---|---|---|"] + [f"| {f['gpu']} | {f['tp_size']} | {f['recommended']:g} |" for f in p["fits_on"]]
    return "\n".join(lines) + "\n"


_HTML = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'">
<title>oomdoctor plan: {{ p.model }}</title>
<style>body{font:14px/1.45 -apple-system,"Segoe UI",Helvetica,Arial,sans-serif;max-width:980px;margin:24px auto;padding:0 16px}
table{border-collapse:collapse}td,th{border:1px solid #d0d7de;padding:3px 8px}pre{background:#fffbe6;border:1px solid #e3b341;padding:8px}
.bad{color:#d62728}.ok{color:#2ca02c}
{{ chart_css }}</style></head><body>
<h1>Plan: {{ p.model }} on {{ p.gpu }}</h1>
<p id="verdict" class="{{ 'ok' if p.feasible else 'bad' }}">{{ 'Fits' if p.feasible else 'Does not fit' }}. {{ window_sentence(p, '') }}</p>
{% if p.get('shorter_context') %}<p id="shorter-context">A shorter context fits (the usual fix): <code>{{ shorter(p) }}</code> with <code>{{ p.flag }} {{ p.shorter_context.recommended }}</code> ({{ p.shorter_context.kv_tokens }} KV tokens).</p>{% endif %}
{% if p.recommended is not none %}<pre id="flags">{{ p.flag }} {{ p.recommended }}</pre>
<p>KV {{ g(p.kv_bytes) }}: {{ p.kv_tokens }} tokens, {{ p.max_concurrency }}x requests of {{ p.context_len }} tokens.</p>{% endif %}
{% if chart %}<h2>Memory budget</h2>
{{ legend }}
{{ chart }}
{% for b in drawn if b.get("note") %}<p class="chart-note">{{ b.name }}: {{ b.note }}</p>{% endfor %}{% endif %}
<h2>Derivation</h2>
<table><tr><th>step</th><th>formula</th><th>value</th></tr>{% for s in p.derivation %}<tr><td>{{ s.step }}</td><td><code>{{ s.formula }}</code></td><td>{{ value(s) }}</td></tr>{% endfor %}</table>
{% if p.fits_on %}<h2>Fits on</h2><table><tr><th>GPU</th><th>tp</th><th>{{ p.flag }}</th></tr>{% for f in p.fits_on %}<tr><td>{{ f.gpu }}</td><td>{{ f.tp_size }}</td><td>{{ f.recommended }}</td></tr>{% endfor %}</table>{% endif %}
</body></html>
"""


def html(p: dict[str, Any]) -> str:
    env = Environment(autoescape=True, undefined=StrictUndefined)
    drawn = bars(p)
    return env.from_string(_HTML).render(
        p=p,
        g=_g,
        value=_value,
        shorter=_shorter,
        window_sentence=_window_sentence,
        drawn=drawn,
        chart=svg.budget_bars(drawn, "plan-budget-chart"),
        legend=svg.budget_legend(_legend(drawn), drawn),
        chart_css=Markup(svg.CHART_CSS),
    )

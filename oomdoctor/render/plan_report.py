"""`oomdoctor plan` in Markdown and HTML (the same self-contained, script-free, network-free page style)."""

from __future__ import annotations

from typing import Any

from jinja2 import Environment, StrictUndefined

from oomdoctor.render.text import step_value
from oomdoctor.units import gib_text as _g


def _value(s: dict[str, Any]) -> str:
    return step_value(s["value"], s.get("unit", ""))


def _position(p: dict[str, Any]) -> str:
    return p.get("default_position") or ("inside" if p["default_in_window"] else "outside")


def _shorter(p: dict[str, Any]) -> str:
    s = p.get("shorter_context")
    return f"{s['flag']} {s['value']}" if s else ""


def markdown(p: dict[str, Any]) -> str:
    lines = [
        f"## oomdoctor plan: {p['model']} on {p['gpu']} (tp={p['tp_size']}, {p['system']})",
        "",
        f"**{'Fits' if p['feasible'] else 'Does not fit'}.** Feasible `{p['flag']}`: {p['window'][0]:.3f} to {p['window'][1]:.3f}; "
        f"{p['default_source']} {p['default']:g} is {_position(p)}{'' if _position(p) == 'at the edge' else ' it'}.",
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
.bad{color:#d62728}.ok{color:#2ca02c}</style></head><body>
<h1>Plan: {{ p.model }} on {{ p.gpu }}</h1>
<p id="verdict" class="{{ 'ok' if p.feasible else 'bad' }}">{{ 'Fits' if p.feasible else 'Does not fit' }}: feasible {{ p.flag }} {{ "%.3f"|format(p.window[0]) }} to {{ "%.3f"|format(p.window[1]) }};
{{ p.default_source }} {{ p.default }} is {{ position(p) }}{% if position(p) != 'at the edge' %} it{% endif %}.</p>
{% if p.get('shorter_context') %}<p id="shorter-context">A shorter context fits (the usual fix): <code>{{ shorter(p) }}</code> with <code>{{ p.flag }} {{ p.shorter_context.recommended }}</code> ({{ p.shorter_context.kv_tokens }} KV tokens).</p>{% endif %}
{% if p.recommended is not none %}<pre id="flags">{{ p.flag }} {{ p.recommended }}</pre>
<p>KV {{ g(p.kv_bytes) }}: {{ p.kv_tokens }} tokens, {{ p.max_concurrency }}x requests of {{ p.context_len }} tokens.</p>{% endif %}
<table><tr><th>step</th><th>formula</th><th>value</th></tr>{% for s in p.derivation %}<tr><td>{{ s.step }}</td><td><code>{{ s.formula }}</code></td><td>{{ value(s) }}</td></tr>{% endfor %}</table>
{% if p.fits_on %}<h2>Fits on</h2><table><tr><th>GPU</th><th>tp</th><th>{{ p.flag }}</th></tr>{% for f in p.fits_on %}<tr><td>{{ f.gpu }}</td><td>{{ f.tp_size }}</td><td>{{ f.recommended }}</td></tr>{% endfor %}</table>{% endif %}
</body></html>
"""


def html(p: dict[str, Any]) -> str:
    env = Environment(autoescape=True, undefined=StrictUndefined)
    return env.from_string(_HTML).render(p=p, g=_g, value=_value, position=_position, shorter=_shorter)

"""The terminal report: verdict first, then the flag to change with its arithmetic, then evidence."""

from __future__ import annotations

from typing import Any

from oomdoctor.units import format_bytes


def step_value(value: Any, step: str) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 1 << 20 and "token" not in step:
        return format_bytes(value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def fmt(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def recommendation_head(r: dict) -> str:
    if r["value"] is None:
        return f"{r['direction']} {r['flag']}"
    if r.get("current") is not None:
        return f"{r['direction']} {r['flag']} from {fmt(r['current'])} to {fmt(r['value'])}"
    return f"{r['direction']} {r['flag']} {'=' if r['direction'] == 'set' else 'to'} {fmt(r['value'])}"


def _finding(f: dict, primary: bool) -> list[str]:
    lines = [f"{'VERDICT' if primary else 'also'}: {f['class']} (confidence {f['confidence']:.2f}, rule {f['rule'] or '-'})", f"  {f['message']}"]
    if f["recommendations"]:
        lines.append(" change:")
        for r in f["recommendations"]:
            lines.append(f"  {recommendation_head(r)}")
            lines.append(f"    why: {r['why']}")
            for s in r["derivation"]:
                lines.append(f"    - {s['step']}: {s['formula']} -> {step_value(s['value'], s['step'])}")
    for p in f.get("processes", []):
        who = "the server itself" if p["is_self"] else "another process"
        lines.append(f"  process {p['pid'] if p['pid'] is not None else '(this process)'}: {format_bytes(p['used_bytes'])} ({who})")
    if f["evidence"]:
        lines.append(" evidence:")
        for ref in f["evidence"]:
            rank = f" [{ref['rank']}]" if ref["rank"] else ""
            text = ref["text"] if len(ref["text"]) <= 160 else ref["text"][:157] + "..."
            lines.append(f"  {ref['path']}:{ref['line']}{rank}: {text}")
    return lines


def _evidence_line(v: dict) -> str | None:
    """The first line whenever the evidence is not whole: the reader must know before the verdict."""
    if v.get("evidence") == "incomplete":
        head = "INCONCLUSIVE" if v.get("inconclusive") else "NOTE"
        return f"{head}: evidence incomplete - {v.get('evidence_reason') or 'the input was cut'}"
    if v.get("inconclusive"):
        return "INCONCLUSIVE: the evidence that decides it is not in the input"
    if v.get("evidence") == "fragment":
        return f"NOTE: evidence is a fragment - {v.get('evidence_reason')}"
    return None


def _factors(v: dict) -> list[str]:
    factors = v.get("confidence_factors") or []
    if not factors:
        return []
    return ["confidence moved by: " + "; ".join(f"{f['factor']} ({f['delta']:+.2f})" for f in factors)]


def render(view: dict) -> str:
    out: list[str] = []
    head = _evidence_line(view["verdict"])
    if head:
        out.append(head)
    phase = view["verdict"].get("phase") or {}
    if not view["findings"]:
        out.append(f"VERDICT: none - {view['verdict']['summary']}")
    for i, f in enumerate(view["findings"]):
        out.extend(_finding(f, i == 0))
        if i == 0:
            if phase.get("name") not in (None, "unknown"):
                out.append(f"  phase: {phase['name']} (from {phase['source']})")
            out.extend("  " + line for line in _factors(view["verdict"]))
        out.append("")
    b = view["budget"]
    if any(k in b for k in ("pre_bytes", "kv_budget_bytes", "capacity_bytes")):
        out.append("budget:")
        for key in ("likely_gpu", "capacity_bytes", "pre_bytes", "post_bytes", "weights_bytes", "mem_fraction_static", "kv_budget_bytes", "dynamic_region_bytes", "kv_tokens", "sglang_autotune_mfs"):
            if key in b:
                value = b[key]
                shown = format_bytes(value) if key.endswith("_bytes") else fmt(value)
                out.append(f"  {key}: {shown}")
    if len(view["incidents"]) > 1:
        out.append("incidents (oldest first):")
        for inc in view["incidents"]:
            out.append(f"  run {inc['run']} at {inc['path']}:{inc['first_line']}: {inc['class']}")
    if view["findings"] and view["findings"][0]["class"] == "unknown_oom" and view["not_evaluated"]:
        out.append("not evaluated (missing evidence):")
        for item in view["not_evaluated"]:
            out.append(f"  {item['rule']}: {', '.join(item['missing'])}")
    if view.get("implausible_values"):
        out.append(f"note: ignored implausible sizes in the OOM message: {', '.join(view['implausible_values'])}")
    for s in view["inputs"]:
        for w in s["warnings"]:
            out.append(f"note: {s['path']}: {w}")
    return "\n".join(out).rstrip() + "\n"

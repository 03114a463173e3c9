"""The terminal report: verdict first, then the flag to change with its arithmetic, then evidence."""

from __future__ import annotations

from oomdoctor.advice import Recommendation, format_value
from oomdoctor.diagnosis import Diagnosis, Finding
from oomdoctor.units import format_bytes


def _value(step_value: object, step: str) -> str:
    if isinstance(step_value, int) and not isinstance(step_value, bool) and abs(step_value) >= 1 << 20 and "token" not in step:
        return format_bytes(step_value)
    if isinstance(step_value, float):
        return f"{step_value:g}"
    return str(step_value)


def _recommendation(r: Recommendation) -> list[str]:
    if r.value is None:
        head = f"  {r.direction} {r.flag}"
    elif r.current is not None:
        head = f"  {r.direction} {r.flag} from {format_value(r.current)} to {format_value(r.value)}"
    else:
        head = f"  {r.direction} {r.flag} {'=' if r.direction == 'set' else 'to'} {format_value(r.value)}"
    lines = [head, f"    why: {r.why}"]
    for s in r.derivation:
        lines.append(f"    - {s.step}: {s.formula} -> {_value(s.value, s.step)}")
    return lines


def _finding(f: Finding, primary: bool) -> list[str]:
    lines = [f"{'VERDICT' if primary else 'also'}: {f.klass} (confidence {f.confidence:.2f}, rule {f.rule_id or '-'})", f"  {f.message}"]
    if f.recommendations:
        lines.append(" change:")
        for r in f.recommendations:
            lines.extend(_recommendation(r))
    for p in f.extra.get("processes", []):
        who = "the server itself" if p["is_self"] else "another process"
        lines.append(f"  process {p['pid'] if p['pid'] is not None else '(this process)'}: {format_bytes(p['used_bytes'])} ({who})")
    if f.evidence:
        lines.append(" evidence:")
        for ref in f.evidence:
            rank = f" [{ref.rank}]" if ref.rank else ""
            text = ref.text if len(ref.text) <= 160 else ref.text[:157] + "..."
            lines.append(f"  {ref.path}:{ref.line}{rank}: {text}")
    return lines


def render(d: Diagnosis) -> str:
    out: list[str] = []
    if not d.findings:
        out.append(f"VERDICT: none - {d.summary}")
    for i, f in enumerate(d.findings):
        out.extend(_finding(f, i == 0))
        out.append("")
    b = d.budget
    if any(k in b for k in ("pre_bytes", "kv_budget_bytes", "capacity_bytes")):
        out.append("budget:")
        for key in ("likely_gpu", "capacity_bytes", "pre_bytes", "post_bytes", "weights_bytes", "mem_fraction_static", "kv_budget_bytes", "dynamic_region_bytes", "kv_tokens", "sglang_autotune_mfs"):
            if key in b:
                value = b[key]
                shown = format_bytes(value) if key.endswith("_bytes") else (f"{value:g}" if isinstance(value, float) else str(value))
                out.append(f"  {key}: {shown}")
    if len(d.incidents) > 1:
        out.append("incidents (oldest first):")
        for inc in d.incidents:
            ref = inc.facts.first_line
            where = f"{ref.path}:{ref.line}" if ref else "?"
            out.append(f"  run {inc.run} at {where}: {inc.primary.klass}")
    if d.not_evaluated and d.findings and d.findings[0].klass == "unknown_oom":
        out.append("not evaluated (missing evidence):")
        for item in d.not_evaluated:
            out.append(f"  {item['rule']}: {', '.join(item['missing'])}")
    if d.facts is not None and d.facts.get("implausible_values"):
        out.append(f"note: ignored implausible sizes in the OOM message: {', '.join(d.facts.get('implausible_values'))}")
    for s in d.inputs:
        for w in s.warnings:
            out.append(f"note: {s.path}: {w}")
    return "\n".join(out).rstrip() + "\n"

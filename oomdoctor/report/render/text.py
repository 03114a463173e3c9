"""The terminal report: verdict first, then the flag to change with its arithmetic, then evidence."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomdoctor.base.units import format_bytes

if TYPE_CHECKING:
    from typing import Any


# How a derivation step's value is shown, by its unit (budget.Step.unit); never guessed from its size.
def step_value(value: Any, unit: str) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, (bool, str)) or not isinstance(value, (int, float)):
        return str(value)
    if unit == "bytes":
        return format_bytes(value)
    if unit == "bytes_per_token":
        return f"{value} bytes/token"
    if unit == "mib":
        return f"{value:g} MiB"
    if unit == "tokens":
        return f"{value} tokens"
    if unit == "count":
        return str(value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def step_line(s: dict, arrow: str = "->") -> str:
    """One derivation step as a line; its result once, even where the formula already ends with it."""
    value = step_value(s["value"], s.get("unit", ""))
    formula = s["formula"]
    if formula.rstrip().endswith(f"= {value}"):
        return f"{s['step']}: {formula}"
    return f"{s['step']}: {formula} {arrow} {value}"


def fmt(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def recommendation_head(r: dict) -> str:
    """One change in words; where it has a value, what to paste is in it verbatim."""
    if r["direction"] == "run":
        return f"run: {r['flag']}"
    if r["value"] is None:
        return f"{r['direction']} {r['flag']}"
    paste = r.get("paste")
    if r.get("current") is not None and r["flag"].startswith("--") and not isinstance(r["value"], bool):
        return f"{r['direction']} {r['flag']} from {fmt(r['current'])} to {fmt(r['value'])}"
    if paste:
        return f"{r['direction']}: {paste}"
    return f"{r['direction']} {r['flag']} to {fmt(r['value'])}"


def margin_text(m: dict | None) -> str:
    """What a set leaves, in words: the runtime gap's margin, the window's, or why it was not measured."""
    if not m:
        return ""
    if m.get("bytes") is None:
        return f"not measured: {m.get('unknown') or 'no figures to measure it against'}"
    if m.get("free_bytes") is not None and m.get("allocation_bytes") is not None:
        return f"{format_bytes(m['bytes'])}: {format_bytes(m['free_bytes'])} free after the changes against the failed allocation's {format_bytes(m['allocation_bytes'])} (as the changes leave it)"
    return f"{format_bytes(m['bytes'])} inside the window ({m.get('measures') or 'how far the fraction sits inside it'})"


_ROLE_TAGS = {"primary": "", "alternative": " [or]", "not_workable": " [not workable]"}


def change_block(report: dict) -> list[str]:
    """The verdict's one set to paste, then each alternative set ("or") with its cost, then what does not work."""
    lines: list[str] = []
    if report.get("flags"):
        title = "run first:" if report.get("flags_are_commands") else "change the launch flags (one consistent set):"
        lines.append(f" {title}")
        lines += [f"    {line}" for line in report["flags"].splitlines()]
        if report.get("flags_margin"):
            lines.append(f"    margin: {report['flags_margin']}")
    if report.get("no_primary"):
        lines.append(f" {report['no_primary']}")
    alternatives = report.get("alternatives") or []
    if alternatives:
        lines.append(" or, instead of that:")
        lines += [f"    {a['paste']}" + (f"   (cost: {a['cost']})" if a["cost"] else "") for a in alternatives]
    rejected = report.get("not_workable") or []
    if rejected:
        lines.append(" not workable on this budget:")
        lines += [f"    {a['paste'] or a['flag']}" + (f"   (cost: {a['cost']})" if a["cost"] else "") for a in rejected]
    return lines


def process_label(p: dict) -> str:
    if p.get("what"):
        return p["what"]
    return "the server itself" if p["is_self"] else "another process"


def _finding(f: dict, primary: bool, report: dict | None = None) -> list[str]:
    lines = [f"{'VERDICT' if primary else 'also'}: {f['class']} (confidence {f['confidence']:.2f}, rule {f['rule'] or '-'})", f"  {f['message']}"]
    if primary and report:
        lines += change_block(report)
    if f["recommendations"]:
        lines.append(" change:" if not primary else " each change, why and how it was computed:")
        for r in f["recommendations"]:
            lines.append(f"  {recommendation_head(r)}{_ROLE_TAGS.get(r.get('role', ''), '')}")
            for c in r.get("with", []):
                lines.append(f"    with {recommendation_head(c)}")
            lines.append(f"    why: {r['why']}")
            if r.get("margin"):
                lines.append(f"    margin: {margin_text(r['margin'])}")
            for s in r["derivation"]:
                lines.append(f"    - {step_line(s)}")
    for p in f.get("processes", []):
        pid = p["pid"] if p["pid"] is not None else ("(this process)" if p["is_self"] else "(unidentified)")
        lines.append(f"  process {pid}: {format_bytes(p['used_bytes'])} ({process_label(p)})")
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


def growth_sentence(g: dict) -> str:
    """One memory-growth finding in words: who grows, how fast, how well a line fits, when the card is full."""
    who = f"process {g['pid']}" if g.get("pid") is not None else "used memory"
    gpu = f" on GPU {g['gpu']}" if g.get("gpu") is not None else ""
    left = g.get("seconds_to_full")
    when = f"at that rate the card is full in {_duration(left)}" if left is not None else "the card's total is not in the samples, so no time to full"
    return (
        f"{who}{gpu} grows {g['gib_per_hour']:.2f} GiB/h ({format_bytes(round(g['bytes_per_second']))}/s; a line fits "
        f"{g['points']} samples over {_duration(g['span_s'])} with R^2 {g['r2']:.2f}); {when}"
    )


def _duration(seconds: float) -> str:
    if seconds >= 5400:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 90:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def render(view: dict) -> str:
    out: list[str] = []
    head = _evidence_line(view["verdict"])
    if head:
        out.append(head)
    phase = view["verdict"].get("phase") or {}
    if not view["findings"]:
        out.append(f"VERDICT: none - {view['verdict']['summary']}")
    for i, f in enumerate(view["findings"]):
        out.extend(_finding(f, i == 0, view.get("report")))
        if i == 0:
            if phase.get("name") not in (None, "unknown"):
                out.append(f"  phase: {phase['name']} (from {phase['source']})")
            out.extend("  " + line for line in _factors(view["verdict"]))
        out.append("")
    if view.get("memory_growth"):
        out.append("memory that grows until it fails (a leak or fragmentation):")
        out.extend(f"  {growth_sentence(g)}" for g in view["memory_growth"])
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
    if view["findings"] and (view["findings"][0]["class"] == "unknown_oom" or view["findings"][0].get("hypothesis")) and view["not_evaluated"]:
        # The rules that could still decide it, by the one command that would give each what it lacks.
        out.append("not evaluated (missing evidence), by what would collect it:")
        grouped: dict[str, list[str]] = {}
        for item in view["not_evaluated"]:
            for command in item.get("commands") or [""]:
                grouped.setdefault(command, []).append(f"{item['rule']} ({item.get('class', '?')})")
        for command, names in grouped.items():
            out.append(f"  {command or 'the whole log'}: {', '.join(dict.fromkeys(names))}")
    if view.get("implausible_values"):
        out.append(f"note: ignored implausible sizes in the OOM message: {', '.join(view['implausible_values'])}")
    for s in view["inputs"]:
        for w in s["warnings"]:
            out.append(f"note: {s['path']}: {w}")
    return "\n".join(out).rstrip() + "\n"

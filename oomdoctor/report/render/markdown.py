"""A GitHub-issue summary in Markdown: verdict, flags, GPU table, environment, budget, excerpts.

GitHub caps an issue body at 65,536 characters; the summary stays under LIMIT and says what it left
out when it has to cut.
"""

from __future__ import annotations

from oomdoctor.base.units import format_bytes
from oomdoctor.report.mdsafe import code_fence, code_span, escape_markdown_html, escape_markdown_prose
from oomdoctor.report.render.text import fmt, recommendation_head, step_line

LIMIT = 60_000


def _cell(text: object) -> str:
    return escape_markdown_prose(text, in_table=True)


def _fence(body: str, lang: str = "text") -> str:
    return code_fence(body, lang)


def _head(view: dict) -> list[str]:
    v = view["verdict"]
    out = [f"## oomdoctor: `{v['class']}` (confidence {v['confidence']:.2f})", "", escape_markdown_prose(v["summary"]), ""]
    report = view.get("report", {})
    if report.get("flags"):
        title = "### Run first" if report.get("flags_are_commands") else "### Change (one consistent set)"
        out += [title, "", _fence(report["flags"], "bash"), ""]
        if report.get("flags_margin"):
            out += [f"Margin this set leaves: {escape_markdown_prose(report['flags_margin'])}.", ""]
    if report.get("no_primary"):
        out += [escape_markdown_prose(report["no_primary"]), ""]
    if report.get("alternatives"):
        out += ["Or, instead of that:", ""] + [f"- {_code(a['paste'], in_table=False)}" + (f" (cost: {escape_markdown_prose(a['cost'])})" if a["cost"] else "") for a in report["alternatives"]] + [""]
    if report.get("not_workable"):
        out += ["Not workable on this budget:", ""] + [f"- {_code(a['paste'] or a['flag'], in_table=False)}: {escape_markdown_prose(a['why'])}" for a in report["not_workable"]] + [""]
    recs = view["findings"][0]["recommendations"] if view["findings"] else []
    if recs:
        out += ["| change | role | cost | why |", "|---|---|---|---|"]
        out += [f"| {_code(recommendation_head(r))} | {_ROLES.get(r.get('role', ''), '')} | {_cell(r.get('cost') or '')} | {_cell(r['why'])} |" for r in recs]
        out.append("")
    return out


_ROLES = {"primary": "the set above", "alternative": "or", "not_workable": "not workable"}


def _code(text: str, in_table: bool = True) -> str:
    """Inline code that survives backticks (and, in a table cell, pipes) in the text."""
    return code_span(text, in_table=in_table)


def _gpus(view: dict) -> list[str]:
    report = view.get("report", {})
    bars = report.get("gpus") or []
    out: list[str] = []
    if bars:
        # One column per segment as the bars label it (a kind's label differs by bar: "free at the failure").
        drawn = {(seg["kind"], seg["label"]) for b in bars for seg in b["segments"]}
        columns = [c for c in dict.fromkeys((s["kind"], s["label"]) for s in (report.get("legend") or report["segments"])) if c in drawn]
        columns += [c for c in dict.fromkeys((seg["kind"], seg["label"]) for b in bars for seg in b["segments"]) if c not in columns]
        out += ["### GPU memory", "", "| GPU | total | " + " | ".join(_cell(label) for _, label in columns) + " |", "|---|---|" + "---|" * len(columns)]
        for b in bars:
            by_column = {(s["kind"], s["label"]): s["bytes"] for s in b["segments"]}
            show = (lambda n: f"{n:,} tokens") if b.get("unit") == "tokens" else format_bytes
            total = show(b["total_bytes"]) + (" (assumed)" if b.get("total_assumed") else "")
            out.append(f"| {_cell(b['name'])} | {total} | " + " | ".join(show(by_column[c]) if c in by_column else "" for c in columns) + " |")
        out.append("")
    processes = [p for f in view["findings"] for p in f.get("processes", [])]
    if processes:
        out += ["| process | GPU memory | role |", "|---|---|---|"]
        out += [
            f"| {p['pid'] if p['pid'] is not None else ('this process' if p['is_self'] else 'unidentified')} | {format_bytes(p['used_bytes'])} | {_cell(p.get('what') or ('server' if p['is_self'] else 'other'))} |"
            for p in processes
        ]
        out.append("")
    return out


def _environment(view: dict) -> list[str]:
    env = view.get("report", {}).get("environment") or {}
    if not env:
        return []
    rows = [("oomdoctor", view["tool"]["version"])]
    names = {
        "system": "serving system",
        "gpu_names": "GPU (from the snapshot)",
        "gpu": "GPU (from the capacity)",
        "capacity_bytes": "GPU memory",
        "driver_version": "NVIDIA driver",
        "model": "model",
        "tp_size": "tensor parallel",
        "vllm_version": "vLLM",
    }
    for key, label in names.items():
        if key in env:
            rows.append((label, format_bytes(env[key]) if key.endswith("_bytes") else env[key]))
    return ["### Environment", "", "| | |", "|---|---|"] + [f"| {k} | {_cell(v)} |" for k, v in rows] + [""]


def _budget(view: dict) -> list[str]:
    b = view["budget"]
    keys = ("pre_bytes", "post_bytes", "weights_bytes", "mem_fraction_static", "kv_budget_bytes", "dynamic_region_bytes", "kv_tokens", "sglang_autotune_mfs", "requested_bytes", "free_bytes", "reserved_unallocated_bytes")
    rows = [(k, format_bytes(b[k]) if k.endswith("_bytes") else fmt(b[k])) for k in keys if k in b]
    if not rows:
        return []
    return ["### Budget", "", "| quantity | value |", "|---|---|"] + [f"| `{k}` | {v} |" for k, v in rows] + [""]


def _details(view: dict) -> list[list[str]]:
    blocks: list[list[str]] = []
    for f in view["findings"]:
        lines = [f"{e['path']}:{e['line']}{' [' + e['rank'] + ']' if e['rank'] else ''}: {e['text']}" for e in f["evidence"]]
        block = [
            f"<details><summary>{escape_markdown_html(f['class'])} ({escape_markdown_html(f['rule'] or 'no rule')}): {len(lines)} log line(s)</summary>",
            "",
            escape_markdown_prose(f["message"]),
            "",
        ]
        if lines:
            block.append(_fence("\n".join(lines)))
        for r in f["recommendations"]:
            if r["derivation"]:
                steps = "\n".join(step_line(s) for s in r["derivation"])
                block += ["", f"Derivation of `{recommendation_head(r)}`:", "", _fence(steps)]
        block += ["", "</details>", ""]
        blocks.append(block)
    return blocks


def _footer(view: dict) -> list[str]:
    out: list[str] = []
    unchecked = view.get("report", {}).get("unchecked") or []
    if unchecked:
        out += ["### Not checked", ""] + [f"- {escape_markdown_prose(u['what'])}: {_code(u['command'], in_table=False)}" for u in unchecked] + [""]
    inputs = ", ".join(f"{_code(i['path'], in_table=False)} ({i['lines']} lines{', damaged' if i.get('damaged') else ', truncated' if i['truncated'] else ''})" for i in view["inputs"])
    out.append(f"<sub>oomdoctor {view['tool']['version']} · inputs: {inputs}</sub>")
    return out


def render(view: dict) -> str:
    head = _head(view) + _gpus(view) + _environment(view) + _budget(view)
    footer = _footer(view)
    body: list[str] = []
    used = len("\n".join(head + footer)) + 200
    omitted = 0
    for block in _details(view):
        text = "\n".join(block)
        if used + len(text) > LIMIT:
            omitted += 1
            continue
        body += block
        used += len(text) + 1
    if used > LIMIT:
        head = head[: max(8, len(head) // 2)]
    if omitted:
        body.append(f"> Truncated: {omitted} finding detail block(s) left out to stay under {LIMIT} characters; the full report is in the bundle (`--bundle`).")
        body.append("")
    out = "\n".join([*head, "### Findings", "", *body, *footer]) + "\n"
    if len(out) > LIMIT:
        cut = out[: LIMIT - 200]
        out = cut + f"\n\n> Truncated at {LIMIT - 200} characters (GitHub's issue limit is 65,536).\n"
    return out

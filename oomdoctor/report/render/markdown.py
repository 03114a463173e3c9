"""A GitHub-issue summary in Markdown: versions, verdict, flags, GPU table, budget, the cited log lines.

It is the attachment of a bug report (``--format markdown``, a bundle's summary.md), so a maintainer reads
the versions first, sees the evidence lines without unfolding anything (only derivations are folded),
and finds no local path: inputs go by their base name, home directories as ``~`` (localpaths).

GitHub caps an issue body at 65,536 characters; the summary stays under LIMIT and says what it left
out when it has to cut.
"""

from __future__ import annotations

from oomdoctor.base.units import format_bytes
from oomdoctor.report.localpaths import display_names, local_free
from oomdoctor.report.mdsafe import code_fence, code_span, escape_markdown_html, escape_markdown_prose
from oomdoctor.report.render.text import fmt, growth_sentence, recommendation_head, step_line

LIMIT = 60_000


def _cell(text: object) -> str:
    return escape_markdown_prose(text, in_table=True)


def _fence(body: str, lang: str = "text") -> str:
    return code_fence(body, lang)


def _head(view: dict) -> list[str]:
    v = view["verdict"]
    out = [f"## oomdoctor: `{v['class']}` (confidence {v['confidence']:.2f})", ""]
    out += _environment(view)
    out += [escape_markdown_prose(v["summary"]), ""]
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


_ENGINES = {"sglang": "SGLang", "vllm": "vLLM", "torch": "PyTorch"}


def _environment(view: dict) -> list[str]:
    """Versions first (engine, PyTorch, CUDA, GPU, driver: those the inputs give), then the deployment."""
    env = view.get("report", {}).get("environment") or {}
    if not env:
        return []
    system = env.get("system")
    rows: list[tuple[str, object]] = []
    if system:
        engine = _ENGINES.get(system, system)
        version = env.get(f"{system}_version")
        rows.append(("engine", f"{engine} {version}" if version else f"{engine} (version not in the inputs)"))
    for key, label in (("torch_version", "PyTorch"), ("cuda_version", "CUDA")):
        if key in env:
            rows.append((label, env[key]))
    gpu = env.get("gpu_names") or env.get("gpu")
    if gpu or "capacity_bytes" in env:
        where = "" if env.get("gpu_names") else " (from the capacity)" if gpu else ""
        size = f", {format_bytes(env['capacity_bytes'])}" if "capacity_bytes" in env else ""
        count = f"{env['gpu_count']} x " if env.get("gpu_count") else ""
        rows.append(("GPU", f"{count}{gpu or 'unnamed'}{where}{size}"))
    if "driver_version" in env:
        rows.append(("NVIDIA driver", env["driver_version"]))
    for key, label in (("model", "model"), ("tp_size", "tensor parallel")):
        if key in env:
            rows.append((label, env[key]))
    rows.append(("oomdoctor", view["tool"]["version"]))
    return ["| component | version or value |", "|---|---|"] + [f"| {k} | {_cell(v)} |" for k, v in rows] + [""]


def _growth(view: dict) -> list[str]:
    rows = view.get("memory_growth") or []
    if not rows:
        return []
    return ["### Memory that grows until it fails", ""] + [f"- {escape_markdown_prose(growth_sentence(g))}" for g in rows] + [""]


def _budget(view: dict) -> list[str]:
    b = view["budget"]
    keys = ("pre_bytes", "post_bytes", "weights_bytes", "mem_fraction_static", "kv_budget_bytes", "dynamic_region_bytes", "kv_tokens", "sglang_autotune_mfs", "requested_bytes", "free_bytes", "reserved_unallocated_bytes")
    rows = [(k, format_bytes(b[k]) if k.endswith("_bytes") else fmt(b[k])) for k in keys if k in b]
    if not rows:
        return []
    return ["### Budget", "", "| quantity | value |", "|---|---|"] + [f"| `{k}` | {v} |" for k, v in rows] + [""]


def _details(view: dict, names: dict[str, str]) -> list[list[str]]:
    """One block per finding: its message and cited lines in the open; only the derivations are folded."""
    blocks: list[list[str]] = []
    for f in view["findings"]:
        lines = [f"{names.get(e['path'], e['path'])}:{e['line']}{' [' + e['rank'] + ']' if e['rank'] else ''}: {e['text']}" for e in f["evidence"]]
        block = [
            f"#### {_code(f['class'], in_table=False)} (rule {_code(f['rule'] or 'none', in_table=False)}): {len(lines)} log line(s)",
            "",
            escape_markdown_prose(f["message"]),
            "",
        ]
        if lines:
            block += [_fence("\n".join(lines)), ""]
        for r in f["recommendations"]:
            if r["derivation"]:
                steps = "\n".join(step_line(s) for s in r["derivation"])
                block += [f"<details><summary>Derivation of {escape_markdown_html(recommendation_head(r))}</summary>", "", _fence(steps), "", "</details>", ""]
        blocks.append(block)
    return blocks


def _footer(view: dict, names: dict[str, str]) -> list[str]:
    out: list[str] = []
    unchecked = view.get("report", {}).get("unchecked") or []
    if unchecked:
        out += ["### Not checked", ""] + [f"- {escape_markdown_prose(u['what'])}: {_code(u['command'], in_table=False)}" for u in unchecked] + [""]
    inputs = ", ".join(f"{_code(names.get(i['path'], i['path']), in_table=False)} ({i['lines']} lines{', damaged' if i.get('damaged') else ', truncated' if i['truncated'] else ''})" for i in view["inputs"])
    out.append(f"<sub>oomdoctor {view['tool']['version']} · inputs: {inputs}</sub>")
    return out


def render(view: dict) -> str:
    paths = [i["path"] for i in view["inputs"]] + [e["path"] for f in view["findings"] for e in f["evidence"]]
    names = display_names(paths)
    head = _head(view) + _growth(view) + _gpus(view) + _budget(view)
    footer = _footer(view, names)
    body: list[str] = []
    used = len("\n".join(head + footer)) + 200
    omitted = 0
    for block in _details(view, names):
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
    out = local_free("\n".join([*head, "### Findings", "", *body, *footer]) + "\n", paths, escape=escape_markdown_prose)
    if len(out) > LIMIT:
        cut = out[: LIMIT - 200]
        out = cut + f"\n\n> Truncated at {LIMIT - 200} characters (GitHub's issue limit is 65,536).\n"
    return out

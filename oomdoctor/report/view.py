"""The one view model every renderer reads: the JSON contract plus what the reports draw.

``build_view`` turns a Diagnosis into plain data (dicts, lists, numbers, strings), adds the report's
charts and tables under ``report``, and redacts secrets from every string, before any renderer sees it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomdoctor.base.units import gib_text
from oomdoctor.evidence.readings import Readings
from oomdoctor.inference import catalogue, classes
from oomdoctor.inference.facts import Facts
from oomdoctor.input.redact import redact_obj
from oomdoctor.memory import budget
from oomdoctor.pipeline.model import Diagnosis
from oomdoctor.report.contract import to_dict
from oomdoctor.report.what_if import recommended_value, what_if

if TYPE_CHECKING:
    from typing import Any


def build_view(d: Diagnosis, redact: bool = True, report: bool = True) -> dict[str, Any]:
    """The view; ``report=False`` leaves out what only the drawn reports read (a JSON or Prometheus
    report is the contract alone: building the charts for it would be thrown away)."""
    data = to_dict(d)
    if report:
        data["report"] = _report(d, data)
    return redact_obj(data) if redact else data


def _report(d: Diagnosis, data: dict[str, Any]) -> dict[str, Any]:
    from oomdoctor.report.render.bars import SEGMENTS

    f = d.facts
    recs = data["findings"][0]["recommendations"] if data["findings"] else []
    report: dict[str, Any] = {
        "flags": _flag_block(recs),
        "flags_margin": _flag_margin(recs),
        "no_primary": _no_primary(recs),
        "flags_are_commands": any(r["role"] == "primary" and r["direction"] == "run" for r in recs),
        "alternatives": _alternatives(recs, "alternative"),
        "not_workable": _alternatives(recs, "not_workable"),
        "gpus": [],
        "recommended_gpu": None,
        "timeline": {},
        "node_lanes": None,
        "what_if": None,
        "unchecked": _unchecked(d),
        "environment": _environment(f),
        "segments": [{"kind": k, "label": label} for k, label in SEGMENTS],
        "samples": {},
        "samples_title": "",
        "samples_note": "",
        "legend": [],
        "bar_notes": [],
    }
    if f is None:
        return report
    system = f.get("system")
    if system == "vllm":
        report["gpus"] = _vllm_bars(f)
    elif system == "torch" or f.get("pre_bytes") is None:
        report["gpus"] = _torch_bars(f)
    else:
        report["gpus"] = _sglang_bars(f, d.readings) or _torch_bars(f)
    if not report["gpus"]:
        report["gpus"] = _token_pool_bar(f, d.readings)
    _mark_first_failure(report["gpus"], f)
    report["bar_notes"] = _bar_notes(report["gpus"])
    report["recommended_gpu"] = _recommended_bar(d, f)
    report["legend"] = _legend(report["gpus"] + ([report["recommended_gpu"]] if report["recommended_gpu"] else []))
    report["timeline"] = _timeline(d.readings)
    report["node_lanes"] = _node_lanes(data)
    report["samples"] = _samples(f)
    report["samples_title"] = _samples_title(f)
    report["samples_note"] = _samples_note(f)
    report["what_if"] = what_if(d, f)
    return report


def _legend(bars: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The segments the bars actually draw, with the labels they use (PyTorch bars name them differently)."""
    seen: dict[tuple[str, str], None] = {}
    for b in bars:
        for s in b["segments"]:
            seen.setdefault((s["kind"], s["label"]), None)
    return [{"kind": k, "label": label} for k, label in seen]


def _set_lines(r: dict[str, Any]) -> list[str]:
    """The paste lines of a recommendation and the companions that make it one consistent set."""
    return [line for line in (r.get("paste"), *(c.get("paste") for c in r.get("with", []))) if line]


def _flag_block(recs: list[dict[str, Any]]) -> str:
    """The verdict's ONE consistent set of changes (its primary recommendation and companions), one per line."""
    primary = next((r for r in recs if r.get("role") == "primary"), None)
    return "\n".join(_set_lines(primary)) if primary else ""


def _flag_margin(recs: list[dict[str, Any]]) -> str:
    """The margin the verdict's set leaves, in words (every primary flag set states it; a command has none)."""
    from oomdoctor.report.render.text import margin_text

    primary = next((r for r in recs if r.get("role") == "primary"), None)
    if primary is None or primary["direction"] == "run":
        return ""
    return margin_text(primary.get("margin")) or "not measured: the advice carries no margin"


def _no_primary(recs: list[dict[str, Any]]) -> str:
    """Why there is no set to paste, when the advice has changes but none the budget lets through."""
    if not recs or any(r.get("role") == "primary" for r in recs):
        return ""
    if any(r.get("margin") and r["margin"].get("bytes") is not None and r["margin"]["bytes"] <= 0 for r in recs):
        return "No set with a value leaves room for the failed allocation by the log's own numbers, so none is given to paste; each change below says what it would take."
    return ""


def _alternatives(recs: list[dict[str, Any]], role: str) -> list[dict[str, Any]]:
    """The other sets ("or", each instead of the primary one) or the changes the budget rejects, with their cost."""
    out = []
    for r in recs:
        if r.get("role") != role:
            continue
        lines = _set_lines(r)
        if not lines and role == "alternative":
            continue
        out.append({"paste": " ".join(lines), "flag": r["flag"], "direction": r["direction"], "cost": r.get("cost") or "", "why": r["why"]})
    return out


def _sglang_bars(f: Facts, r: Readings, mfs: float | None = None) -> list[dict[str, Any]]:
    from oomdoctor.report.render.bars import sglang_bar

    pres = r.of("pre_bytes")
    posts = r.of("post_bytes")
    kvs = r.of("kv_pool_bytes")
    pool_ends = r.of("pool_end_bytes")
    graphs = r.of("cuda_graph_bytes")
    y = mfs if mfs is not None else f.get("mem_fraction_static")
    capacity = f.get("capacity_bytes")
    oom_rank = f.get("oom_rank")
    bars = []
    ranks: list[str | None] = list(sorted(pres)) or [None]
    for rank in ranks:
        pre = pres.get(rank, f.get("pre_bytes")) if rank else f.get("pre_bytes")
        post = posts.get(rank, f.get("post_bytes")) if rank else f.get("post_bytes")
        if pre is None or post is None or y is None:
            continue
        total = capacity or _card_for(pre)
        key = rank or ""
        kv = (kvs.get(key) or kvs.get("GPU")) if mfs is None else None
        graph = graphs.get(key, 0) if mfs is None else f.get("cuda_graph_bytes", 0)
        other, other_label = _sglang_other(f, total, pre, rank == oom_rank or len(pres) <= 1)
        bar = sglang_bar(
            rank or "GPU", total, pre, budget.sglang_weights_bytes(pre, post), y, kv=kv, graphs=graph or 0, other=other, total_assumed=capacity is None,
            pool_end=(pool_ends.get(key) or pool_ends.get("GPU")) if mfs is None and kv is not None else None, other_label=other_label,
        )
        if mfs is None and (rank == oom_rank or len(pres) <= 1) and f.get("requested_bytes") is not None:
            bar["request"] = {"requested_bytes": f.get("requested_bytes"), "free_bytes": f.get("free_bytes")}
        bars.append(bar)
    return bars


def _sglang_other(f: Facts, total: int, pre: int, failing: bool) -> tuple[int, str | None]:
    """Memory held by others on a GPU and its label: another tenant before the server started, else the OOM's processes."""
    from oomdoctor.memory import log_figures
    from oomdoctor.memory.oom_arithmetic import OTHERS_WITH_SELF_FIGURE_MIN_BYTES

    before = log_figures.sglang_startup_foreign_bytes(total, pre, f.get("init_mem_usage_bytes") or 0).value if f.get("capacity_bytes") else 0
    if before >= OTHERS_WITH_SELF_FIGURE_MIN_BYTES:
        return before, _other_label(f) or "held before the server started (another process)"
    if failing and f.get("foreign_process_bytes"):
        return f.get("foreign_process_bytes"), _other_label(f)
    return 0, None


def _lines(f: Facts, *names: str) -> str:
    """' (server.log:2, 4 and 6)': where the named facts were read, for a note that says which inputs disagree."""
    import os

    found = sorted({(ref.path or "", ref.line) for name in names if (ref := f.ref(name)) is not None and ref.line})
    if not found:
        return ""
    by_file: dict[str, list[int]] = {}
    for path, line in found:
        by_file.setdefault(os.path.basename(path), []).append(line)
    parts = []
    for name, numbers in by_file.items():
        words = ", ".join(str(n) for n in numbers[:-1]) + (" and " if len(numbers) > 1 else "") + str(numbers[-1])
        parts.append(f"{name}:{words}" if name else f"line{'s' if len(numbers) > 1 else ''} {words}")
    return f" ({'; '.join(parts)})"


def _bar_notes(bars: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each bar's note once, with the bars it is about (four ranks with one inconsistency get one note)."""
    notes: dict[str, list[str]] = {}
    for b in bars:
        if b.get("note"):
            notes.setdefault(b["note"], []).append(b["name"])
    return [{"names": names if len(bars) > 1 else [], "note": note} for note, names in notes.items()]


def _card_for(pre: int) -> int:
    from oomdoctor.memory.gpus import smallest_card_holding

    card = smallest_card_holding(pre)
    return card[1] if card else pre


# Stages of an OOM before the server serves: its bar is the startup budget's, not what the card held at a runtime failure.
_STARTUP_STAGES = ("weight_loading", "weight_creation", "kv_pool", "startup")


def _vllm_profile(f: Facts) -> dict[str, Any] | None:
    """vLLM's memory profile as the failure bar draws it: weights, activation peak, non-torch, graphs; None without one."""
    weights, act, non_torch, non_kv = (f.get(k) for k in ("weights_bytes", "activation_peak_bytes", "non_torch_bytes", "non_kv_bytes"))
    graphs = f.get("cuda_graph_bytes") or 0
    if weights is None or (non_kv is None and (act is None or non_torch is None)):
        return None
    if act is None or non_torch is None:
        return {"weights": weights, "activation": max(non_kv - weights, 0), "non_torch": 0, "graphs": graphs, "graphs_in_budget": False,
                "activation_label": "activation peak and non-PyTorch memory (vLLM's profile)"}
    counted = weights + act + non_torch
    # vLLM >= 0.21 counts the CUDA graphs inside u*total; its non-KV figure says whether this one did.
    in_budget = bool(graphs and non_kv is not None and abs(non_kv - counted - graphs) < abs(non_kv - counted))
    return {"weights": weights, "activation": act, "non_torch": non_torch, "graphs": graphs, "graphs_in_budget": in_budget}


def _vllm_failure_bar(f: Facts, total: int, u: float, other: int) -> dict[str, Any]:
    from oomdoctor.report.render.bars import vllm_failure_bar

    lines = _lines(f, "non_kv_bytes" if f.ref("non_kv_bytes") else "weights_bytes", "free_bytes")
    failure = {"allocated": f.get("allocated_bytes"), "unallocated": f.get("reserved_unallocated_bytes"), "graphs": f.get("private_pool_bytes"), "this_process": f.get("this_process_bytes")}
    bar = vllm_failure_bar("GPU", total, u, f.get("free_bytes"), _vllm_profile(f), failure, other=other, other_label=_other_label(f), lines=lines)
    bar["request"] = {"requested_bytes": f.get("requested_bytes"), "free_bytes": f.get("free_bytes")}
    return bar


def _vllm_bars(f: Facts, util: float | None = None) -> list[dict[str, Any]]:
    from oomdoctor.report.render.bars import vllm_bar

    total, u = f.get("capacity_bytes"), util if util is not None else f.get("gpu_memory_utilization")
    if not total or u is None:
        return _torch_bars(f)
    weights = f.get("weights_bytes") or 0
    non_kv = f.get("non_kv_bytes")
    graphs = f.get("cuda_graph_bytes", 0) or 0
    other = f.get("foreign_process_bytes", 0) or 0
    if f.get("startup_free_deficit_bytes") and f.get("free_at_start_bytes") is not None:
        other = max(total - f.get("free_at_start_bytes") - 600 * 1024 * 1024, 0)
    if util is None and f.get("requested_bytes") is not None and f.get("free_bytes") is not None and f.get("oom_stage") not in _STARTUP_STAGES:
        return [_vllm_failure_bar(f, total, u, other)]
    bar = vllm_bar("GPU", total, u, weights, non_kv, graphs=max(graphs, 0), other=other)
    if util is None and f.get("requested_bytes") is not None:
        bar["request"] = {"requested_bytes": f.get("requested_bytes"), "free_bytes": f.get("free_bytes")}
    return [bar]


def _other_label(f: Facts) -> str | None:
    """How the bars name memory held by others: the other tenant DCGM names, else the OOM message's processes."""
    pods = [p for p in f.get("_monitoring_pods") or () if p.get("pod")]
    if pods:
        names = ", ".join(f"{p['namespace'] + '/' if p.get('namespace') else ''}{p['pod']}" for p in pods[:3])
        return f"another tenant on this GPU: pod {names} (DCGM)"
    return None


def _torch_bars(f: Facts) -> list[dict[str, Any]]:
    total = f.get("capacity_bytes")
    if not total:
        return []
    allocated = f.get("allocated_bytes", 0) or 0
    unalloc = f.get("reserved_unallocated_bytes", 0) or 0
    this = f.get("this_process_bytes")
    non_torch = max(this - allocated - unalloc, 0) if this else 0
    other = f.get("foreign_process_bytes", 0) or 0
    free = f.get("free_bytes", 0) or 0
    known = allocated + unalloc + non_torch + other + free
    context = max(total - known, 0)
    bar = {
        "name": f"GPU {f.get('device', 0)}",
        "total_bytes": total,
        "total_assumed": False,
        "segments": [
            s
            for s in (
                {"kind": "weights", "label": "allocated by PyTorch", "bytes": allocated},
                {"kind": "torch_other", "label": "reserved, unallocated (fragments)", "bytes": unalloc},
                {"kind": "context", "label": "non-PyTorch (context, NCCL, cuBLAS) and unaccounted", "bytes": non_torch + context},
                {"kind": "other", "label": "other processes", "bytes": other},
                {"kind": "free", "label": "free", "bytes": free},
            )
            if int(s["bytes"] or 0) > 0
        ],
        "kv_budget_bytes": None,
        "mfs": None,
    }
    if f.get("requested_bytes") is not None:
        bar["request"] = {"requested_bytes": f.get("requested_bytes"), "free_bytes": free}
    return [bar]


def _token_pool_bar(f: Facts, r: Readings) -> list[dict[str, Any]]:
    """For KV allocator failures: the token pool, in tokens, with the batch that did not fit."""
    pool, available, wanted = f.get("kv_pool_tokens") or r.summary_tokens, f.get("kv_available_tokens"), f.get("kv_requested_tokens")
    if not pool or available is None:
        return []
    bar = {
        "name": "KV token pool",
        "unit": "tokens",
        "total_bytes": pool,
        "total_assumed": False,
        "segments": [
            {"kind": "kv", "label": "tokens held by running requests", "bytes": max(pool - available, 0)},
            {"kind": "free", "label": "tokens available", "bytes": available},
        ],
        "kv_budget_bytes": None,
        "mfs": None,
    }
    if wanted is not None:
        bar["request"] = {"requested_bytes": wanted, "free_bytes": available}
    return [bar]


# Changes that move the weights per GPU: with one of them in the set, "the same GPU at the recommended
# fraction" would draw today's weights against the new fraction, a bar that no launch would produce.
_RESHAPING_FLAGS = ("--tp-size", "--tensor-parallel-size", "--pp-size", "--pipeline-parallel-size", "--quantization")


def _reshapes_weights(d: Diagnosis) -> bool:
    for finding in d.findings[:1]:
        for r in finding.recommendations:
            if r.role == "primary" and any(change.flag in _RESHAPING_FLAGS for change in (r, *r.companions)):
                return True
    return False


def _keep_the_failure_s_peak(projected: dict[str, Any], now: list[dict[str, Any]]) -> None:
    """A vLLM runtime failure's bar at the recommended u: what was in use past the budget when the allocation
    failed (the forward pass's own peak) is in use again at the new u, not free, so it is drawn out of the
    memory past the line; the rest of that memory is what the margin counts as free."""
    beyond = sum(s["bytes"] for b in now for s in b.get("segments", ()) if s["kind"] == "beyond")
    outside = next((s for s in projected.get("segments", ()) if s["kind"] == "outside"), None)
    if not beyond or outside is None:
        return
    peak = min(beyond, outside["bytes"])
    at = projected["segments"].index(outside)
    projected["segments"][at:at] = [{"kind": "beyond", "label": "in use past the budget at the failure", "bytes": peak}]
    outside["bytes"] -= peak
    if outside["bytes"] <= 0:
        projected["segments"].remove(outside)
    projected["note"] = (
        f"{projected.get('note', '').split('; the KV pool')[0]}; the KV pool is what is left of it after the weights and activation peak. "
        f"Past the line, {gib_text(peak)} is what was in use past the budget when the allocation failed (in use again at this u) "
        f"and {gib_text(max(outside['bytes'], 0))} is free."
    )


def _recommended_bar(d: Diagnosis, f: Facts) -> dict[str, Any] | None:
    system = f.get("system")
    if _reshapes_weights(d):
        return None
    if system == "sglang":
        y = recommended_value(d, "--mem-fraction-static")
        bars = _sglang_bars(f, d.readings, mfs=y) if y is not None else []
    elif system == "vllm":
        u = recommended_value(d, "--gpu-memory-utilization")
        bars = _vllm_bars(f, util=u) if u is not None else []
        if bars:
            _keep_the_failure_s_peak(bars[0], _vllm_bars(f))
    else:
        bars = []
    if not bars:
        return None
    worst = min(bars, key=lambda b: b["kv_budget_bytes"] if b["kv_budget_bytes"] is not None else 0)
    worst["name"] = f"{worst['name']} at the recommended value"
    return worst


def _seconds_after(t0: str | None, ts: str | None) -> float | None:
    """Seconds from one log time to another at the precision both carry (a month-day stamp against a dated one)."""
    from oomdoctor.base import timestamps

    a, b = timestamps.parse(t0), timestamps.parse(ts)
    if a is None or b is None:
        return None
    precision = min(a[0], b[0])
    return round(timestamps.at_precision(b, precision) - timestamps.at_precision(a, precision), 3)


def _node_lanes(data: dict[str, Any]) -> dict[str, Any] | None:
    """One lane per node on a shared time axis: each node's first failure and what followed (the JSON's nodes and consequences)."""
    nodes = data.get("nodes") or []
    cause = next((n for n in nodes if n.get("is_cause")), None)
    if len(nodes) < 2 or cause is None or not cause.get("first_failure_time"):
        return None
    lanes = []
    for n in nodes:
        events = []
        if n.get("first_failure") and n.get("first_failure_time") and (n.get("is_cause") or n.get("class") != "consequence"):
            t = _seconds_after(cause["first_failure_time"], n["first_failure_time"])
            if t is not None:
                events.append({"t": t, "kind": "cause" if n.get("is_cause") else "failure", "what": n["first_failure"], "rank": n.get("first_failure_rank"), "time": n["first_failure_time"], "line": (n.get("first_failure_line") or {}).get("line")})
        untimed = 0
        for c in data.get("consequences") or []:
            if c["node"] != n["node"]:
                continue
            if c.get("seconds_after_cause") is None:
                untimed += 1
                continue
            events.append({"t": c["seconds_after_cause"], "kind": "consequence", "what": c["what"], "rank": c.get("rank"), "time": c.get("time"), "line": c.get("line")})
        lanes.append({"node": n["node"], "role": n.get("role"), "events": sorted(events, key=lambda e: e["t"]), "untimed": untimed})
    rank = cause.get("first_failure_rank")
    return {"lanes": lanes, "origin": f"{cause['node']}{' ' + str(rank).split('/')[-1] if rank else ''} {cause['first_failure']} at {cause['first_failure_time']}"}


def _timeline(r: Readings) -> dict[str, list[dict[str, Any]]]:
    return {rank: [{"label": p.label, "bytes": p.free_bytes, "line": p.line} for p in points] for rank, points in r.timeline.items()}


def _pod_name(p: dict[str, Any]) -> str:
    return f"{p['namespace']}/{p['pod']}" if p.get("namespace") else p["pod"]


def _gpu_series_name(f: Facts, g: dict[str, Any]) -> str:
    """A GPU's line: its index (and host), and for DCGM the pods on it, the server's and the other tenants' told apart."""
    name = f"GPU {g.get('index')}" + (f" on {g['hostname']}" if g.get("hostname") else "")
    gpu = next((m for m in f.get("_monitoring_gpus") or () if m.get("uuid") == g.get("uuid") and m.get("hostname") == g.get("hostname")), None)
    if gpu is None or not gpu.get("pods"):
        return f"{name} used"
    tenants = {_pod_name(p) for p in f.get("_monitoring_pods") or ()}
    pods = [_pod_name(p) + (" (another tenant)" if _pod_name(p) in tenants else " (the server)" if tenants else "") for p in gpu["pods"]]
    return f"{name} used: {' + '.join(pods)}"


def _samples_title(f: Facts) -> str:
    sources = {g.get("source") for g in f.get("_monitoring_gpus") or ()}
    if "prometheus query_range" in sources:
        return "GPU memory over time (DCGM_FI_DEV_FB_USED from Prometheus)"
    return "GPU memory over time (flight recorder)"


def _samples_note(f: Facts) -> str:
    """What a DCGM line cannot show by itself: how the GPU's used memory splits between the server and the other tenant."""
    pods = [p for p in f.get("_monitoring_pods") or () if p.get("other_bytes")]
    if not pods or not f.get("_monitoring_gpus"):
        return ""
    from oomdoctor.base.units import format_bytes

    names = ", ".join(_pod_name(p) for p in pods[:3])
    own = f.get("this_process_bytes")
    at = f"the server held {format_bytes(own)} (its OOM message) and " if own else ""
    return (
        f"DCGM reports each GPU's used memory as a whole, for every pod the GPU is shared with: at the peak {at}another tenant, "
        f"pod {names}, held the other {format_bytes(max(p['other_bytes'] for p in pods))}."
    )


def _samples(f: Facts) -> dict[str, list[dict[str, Any]]]:
    """Memory over time per process (and per GPU in total) from `oomdoctor run`'s samples or a DCGM query_range."""
    samples = f.get("_samples") or []
    if not samples:
        return {}
    t0 = samples[0]["t"]
    series: dict[str, list[dict[str, Any]]] = {}
    for s in samples:
        for g in s.get("gpus", []):
            if g.get("used_bytes") is not None:
                series.setdefault(_gpu_series_name(f, g), []).append({"t": round(s["t"] - t0, 3), "bytes": g["used_bytes"]})
        for p in s.get("processes", []):
            if p.get("used_bytes") is not None:
                series.setdefault(f"pid {p['pid']}", []).append({"t": round(s["t"] - t0, 3), "bytes": p["used_bytes"]})
    return series


def _unchecked(d: Diagnosis) -> list[dict[str, Any]]:
    """What the rules could not check and the one command that collects it; facts that share a command share a line."""
    known_classes = classes.load()
    spec = known_classes.get(d.verdict_class)
    if spec is not None and spec.host_steps:
        # Decided by the kernel's and the container's records, not by the GPU: these replace the GPU commands.
        sources = set(d.facts.get("host_kill_sources") or ()) if d.facts is not None else set()
        return [
            {"fact": s.fact, "facts": [s.fact], "what": s.what, "command": s.command}
            for s in known_classes.host_steps
            if not sources & set(s.answered_by)
        ]
    missing: list[str] = []
    for item in d.not_evaluated:
        for name in item["missing"]:
            if name not in missing:
                missing.append(name)
    f = d.facts
    if f is not None:
        for name in ("capacity_bytes", "process_list"):
            if name not in f.values and name not in missing:
                missing.append(name)
    return catalogue.load().asks(missing)


def _environment(f: Facts | None) -> dict[str, Any]:
    if f is None:
        return {}
    env = {
        "system": f.get("system"),
        "gpu": f.get("likely_gpu"),
        "capacity_bytes": f.get("capacity_bytes"),
        "model": f.get("model_path") or f.get("model_type"),
        "tp_size": f.get("tp_size"),
        "vllm_version": f.get("vllm_version"),
        "sglang_version": f.get("sglang_version"),
        "torch_version": f.get("torch_version"),
        "cuda_version": f.get("cuda_version"),
        "gpu_count": f.get("gpu_count"),
        "driver_version": f.get("driver_version"),
        "gpu_names": ", ".join(f.get("gpu_names")) if f.get("gpu_names") else None,
    }
    return {k: v for k, v in env.items() if v is not None}


def _mark_first_failure(bars: list[dict[str, Any]], f: Facts) -> None:
    """Across nodes, the bar of the rank that failed first says so, with its node (the cause, not a consequence)."""
    node, rank = f.get("failing_node"), f.get("failing_rank")
    if not node or not rank:
        return
    short = str(rank).split("/")[-1]
    for bar in bars:
        if bar.get("name") in (rank, short):
            bar["name"] = f"{node} {short}: failed first"
            bar["failed_first"] = True

"""Many independent incidents at once (``oomdoctor diagnose --summary PATH...``): one per log file, bundle or
immediate subdirectory of each PATH, diagnosed in a process pool on every core, then counted by class and
system with the most common fixes.

A worker gets only picklable arguments (a path and the options) and returns a plain dict: an incident's
class, system, confidence, evidence status and fix (the primary recommendation's flag and direction), or the
one-line reason the input could not be diagnosed. A bad input is listed, never fatal to the run.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from itertools import repeat
from typing import Any

SUMMARY_KIND = "oomdoctor-summary"


@dataclass(frozen=True)
class Options:
    """What every worker needs, picklable: the serving system override, extra rule directories, redaction."""

    system: str = "auto"
    rules_dirs: tuple[str, ...] = ()
    redact: bool = True
    pii: bool = False


def entries(paths: Sequence[str]) -> tuple[list[str], list[dict[str, Any]]]:
    """The incidents under ``paths`` and a row for each entry of a directory that is not read.

    An incident is a file, a bundle or run directory, or each visible entry of any other directory.
    An entry that is not a regular file or a directory (a FIFO, a socket, a device), a broken link
    and a link that leads out of its directory are never opened: each gets a ``skipped`` row with
    the reason. A PATH that is not there is kept, so its reason is listed with the others.
    """
    from oomdoctor.input.files import entry_problem, named_file_problem
    from oomdoctor.input.kinds import is_bundle_dir

    out: list[str] = []
    skipped: list[dict[str, Any]] = []
    for path in paths:
        if not os.path.isdir(path):
            # A PATH given by name (a shell glob, incidents/*) is one incident unless it is a FIFO or a device,
            # whose read would block or never end; a missing PATH is kept, for its reason.
            problem = named_file_problem(path) if os.path.lexists(path) else None
            if problem is not None and problem.startswith("not a regular file"):
                skipped.append(skipped_row(path, problem))
            else:
                out.append(path)
            continue
        if is_bundle_dir(path) or os.path.islink(os.path.join(path, "latest")):
            out.append(path)
            continue
        try:
            names = sorted(os.listdir(path))
        except OSError:
            out.append(path)
            continue
        real_root = os.path.realpath(path)
        for name in names:
            if name.startswith("."):
                continue
            full = os.path.join(path, name)
            problem = entry_problem(full, real_root, dirs=True)
            if problem is None:
                out.append(full)
            else:
                skipped.append(skipped_row(full, problem))
    return out, skipped


def incidents(paths: Sequence[str]) -> list[str]:
    """One entry per incident (see ``entries``; what is skipped is left out)."""
    return entries(paths)[0]


def skipped_row(path: str, reason: str) -> dict[str, Any]:
    """An entry that was not read (not a regular file, a link out of its directory), with its reason."""
    return {"path": path, "skipped": True, "reason": _one_line(reason)}


_RULES: dict[tuple[str, ...], list[Any]] = {}


def rules(dirs: tuple[str, ...]) -> list[Any]:
    """The rule catalogue, loaded once per worker process."""
    if dirs not in _RULES:
        from oomdoctor.api import load_rules

        _RULES[dirs] = load_rules(dirs)
    return _RULES[dirs]


def row(path: str, view: dict[str, Any]) -> dict[str, Any]:
    """One diagnosed incident's summary row, from its view (oomdoctor.report.view.build_view, built by the caller)."""
    verdict = view.get("verdict") or {}
    return {
        "path": path,
        "class": verdict.get("class") or "none",
        "system": (view.get("budget") or {}).get("system") or "unknown",
        "confidence": verdict.get("confidence"),
        "evidence": verdict.get("evidence"),
        "fix": _fix(view),
    }


def failed(path: str, reason: str) -> dict[str, Any]:
    """An input that could not be diagnosed, with its one-line reason (its secrets redacted: a reason may quote the input)."""
    from oomdoctor.input.secret_rules import redact_secrets

    reason = redact_secrets(_one_line(reason))
    return {"path": path, "error": reason.removeprefix(f"{path}: ") or reason}


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _fix(view: dict[str, Any]) -> str | None:
    """The primary recommendation of the verdict's finding as "direction flag" (e.g. "raise --mem-fraction-static")."""
    for finding in (view.get("findings") or [])[:1]:
        recs = finding.get("recommendations") or []
        primary = next((r for r in recs if r.get("role") == "primary"), recs[0] if recs else None)
        if primary and primary.get("flag"):
            return f"{primary.get('direction') or 'set'} {primary['flag']}"
    return None


Worker = Callable[[str, Options], dict[str, Any]]


def run(
    paths: Sequence[str], worker: Worker, options: Options, workers: int | None = None, progress: Callable[[int, int], None] | None = None
) -> list[dict[str, Any]]:
    """Run ``worker`` (a module-level function, so it pickles) on every incident under ``paths`` in a process pool of
    ``workers`` (default: every core); the rows come back in input order, then a row for each entry skipped."""
    items, skipped = entries(paths)
    workers = max(1, workers or os.cpu_count() or 1)
    rows: list[dict[str, Any]] = []
    results: Iterator[dict[str, Any]]
    if workers == 1 or len(items) <= 1:
        results = map(worker, items, repeat(options))
        for r in results:
            rows.append(r)
            if progress:
                progress(len(rows), len(items))
        return rows + skipped
    chunk = max(1, min(32, len(items) // (workers * 8)))
    # A worker keeps the default SIGTERM (the pool's own shutdown terminates it), whatever the parent installed.
    with ProcessPoolExecutor(max_workers=min(workers, len(items)), initializer=_default_sigterm) as pool:
        for r in pool.map(worker, items, repeat(options), chunksize=chunk):
            rows.append(r)
            if progress:
                progress(len(rows), len(items))
    return rows + skipped


def _default_sigterm() -> None:
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def aggregate(rows: Sequence[dict[str, Any]], top: int = 10) -> dict[str, Any]:
    """Counts of incidents by (class, system) and the most common fixes, most frequent first."""
    ok = [r for r in rows if "error" not in r and not r.get("skipped")]
    skipped = sum(1 for r in rows if r.get("skipped"))
    by = Counter((r["class"], r["system"]) for r in ok)
    fixes = Counter(r["fix"] for r in ok if r.get("fix"))
    fix_classes: dict[str, Counter[str]] = {}
    for r in ok:
        if r.get("fix"):
            fix_classes.setdefault(r["fix"], Counter())[r["class"]] += 1
    return {
        "incidents": len(rows) - skipped,
        "diagnosed": len(ok),
        "failed": len(rows) - skipped - len(ok),
        "skipped": skipped,
        "by_class_system": [{"class": k, "system": s, "count": n} for (k, s), n in sorted(by.items(), key=lambda kv: (-kv[1], kv[0]))],
        "fixes": [{"fix": f, "count": n, "classes": sorted(fix_classes[f])} for f, n in sorted(fixes.items(), key=lambda kv: (-kv[1], kv[0]))[:top]],
    }


def to_json(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The summary document: every incident (diagnosed or failed, in input order) and the aggregate."""
    return {
        "kind": SUMMARY_KIND,
        "schema_version": 1,
        "incidents": [r for r in rows if "error" not in r and not r.get("skipped")],
        "failed": [r for r in rows if "error" in r],
        "skipped": [{"path": r["path"], "reason": r["reason"]} for r in rows if r.get("skipped")],
        "aggregate": aggregate(rows),
    }


def render_text(rows: Sequence[dict[str, Any]]) -> str:
    agg = aggregate(rows)
    skipped_text = f", {agg['skipped']} skipped" if agg["skipped"] else ""
    lines = [f"{agg['incidents']} incident(s): {agg['diagnosed']} diagnosed, {agg['failed']} could not be read{skipped_text}", ""]
    if agg["by_class_system"]:
        width = max(len("class"), *(len(e["class"]) for e in agg["by_class_system"]))
        swidth = max(len("system"), *(len(e["system"]) for e in agg["by_class_system"]))
        lines.append(f"{'class':{width}}  {'system':{swidth}}  count")
        lines.extend(f"{e['class']:{width}}  {e['system']:{swidth}}  {e['count']:5d}" for e in agg["by_class_system"])
        lines.append("")
    if agg["fixes"]:
        lines.append("most common fixes:")
        lines.extend(f"  {e['count']:5d}  {e['fix']}  ({', '.join(e['classes'])})" for e in agg["fixes"])
        lines.append("")
    failed = [r for r in rows if "error" in r]
    if failed:
        lines.append("could not be diagnosed:")
        lines.extend(f"  {r['path']}: {r['error']}" for r in failed)
        lines.append("")
    skipped = [r for r in rows if r.get("skipped")]
    if skipped:
        lines.append("skipped (not read):")
        lines.extend(f"  {r['path']}: {r['reason']}" for r in skipped)
        lines.append("")
    return "\n".join(lines)

"""How much the engine knowledge catalogue (oomdoctor/data/knowledge/) holds, per engine and release range.

    python benchmarks/knowledge_stats.py [--data DIR]

For each engine: the releases it was built from, the memory messages (by level, by phase and by the
class they imply), the phase map's modules and the functions it lists with their own phase (by phase
and by how it was found), then messages and covered functions for each selected release, and what the
recognizer handles: the failure messages of recognizer.json (raised or logged as errors, with a class) and its notices,
how many of them report a memory failure (OOM evidence), and how many of them the parser recognises
when rendered with sample values (each is tried through parsers/engine_messages.recognise).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "oomdoctor" / "data" / "knowledge"
sys.path.insert(0, str(REPO))

from oomdoctor.evidence.parsers.engine_messages import recognise  # noqa: E402

_PH = re.compile(r"\{[a-z_][a-z0-9_]*:(int|float|str)\}")
_SAMPLE = {"int": "4096", "float": "12.50", "str": "worker-3"}


def expand(runs: list[str], order: list[str]) -> set[str]:
    """The releases a compact list names ("a..b" is every selected release from a to b)."""
    out: set[str] = set()
    for run in runs:
        first, _, last = run.partition("..")
        if last:
            out.update(order[order.index(first) : order.index(last) + 1])
        else:
            out.add(first)
    return out


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DATA)
    args = ap.parse_args(argv)
    sources = json.loads((args.data / "sources.json").read_text(encoding="utf-8"))
    messages = json.loads((args.data / "messages.json").read_text(encoding="utf-8"))
    phases = json.loads((args.data / "phases.json").read_text(encoding="utf-8"))
    table = json.loads((args.data / "recognizer.json").read_text(encoding="utf-8"))

    for engine, info in sorted(sources["engines"].items()):
        order = [r["version"] for r in info["releases"]]
        mine = [m for m in messages if m["engine"] == engine]
        print(f"{engine}: {len(order)} releases, {order[0]} .. {order[-1]}")
        rows = [row for row in phases if row["engine"] == engine]
        groups = [g for row in rows for g in row["groups"]]
        print(f"  memory messages: {len(mine)} templates ({sum(1 for m in mine if m['class'] != 'none')} imply a class)")
        print(f"    by level: {_counts(Counter(s['level'] for m in mine for s in m['sites']))}")
        print(f"    by phase: {_counts(Counter(m['phase'] for m in mine))}")
        print(f"    by class: {_counts(Counter(m['class'] for m in mine))}")
        print(f"  phase map: {len(rows)} modules ({_counts(Counter(row['phase'] for row in rows))})")
        listed: Counter[str] = Counter()
        for g in groups:
            listed[f"{g[0]} by {g[1]}"] += len(g[3])
        print(f"    functions listed with their own phase: {sum(listed.values())} ({_counts(listed)})")
        per_msg: Counter[str] = Counter()
        for m in mine:
            per_msg.update(expand(m["releases"], order))
        print("  per release: memory messages / functions in the phase map")
        for rel in info["releases"]:
            print(f"    {rel['version']:>14}  {per_msg[rel['version']]:6d} / {rel['phase_map_functions']:6d}")
        ours = [e for e in table if e["engine"] == engine]
        failures = [e for e in ours if not e.get("notice")]
        notices = [e for e in ours if e.get("notice")]
        handled = [e for e in ours if (found := recognise(_PH.sub(lambda m: _SAMPLE[m.group(1)], e["template"]))) and found[0].klass == e["class"]]
        print(
            f"  recognizer: {len(failures)} failure messages, {sum(e['memory_failure'] for e in failures)} of them memory failures; "
            f"{len(notices)} notices (progress bars, retractions, preemptions); recognised with their class: {len(handled)}/{len(ours)}"
        )
    for note in sources.get("notes", []):
        print(f"note: {note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

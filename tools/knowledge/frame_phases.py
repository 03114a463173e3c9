"""The phase map in the form the run time reads: a traceback frame's module and function name -> phase.

    python tools/knowledge/frame_phases.py        # oomdoctor/data/knowledge/phases.json -> frame_phases.tsv

extract.py runs it after writing phases.json; tests/test_data_knowledge.py checks frame_phases.tsv is
what this writes from the committed phase map. phases.json keeps every release of every qualified name
(2.3 MB of JSON, ~0.1 s to parse); a traceback shows only a function's bare name, never its class or
release, so this keeps per module what a frame can be matched on, one module per line, which
oomdoctor/evidence/phase_map.py finds by its name without parsing the rest:

    MODULE <tab> PHASE [<tab> own:PHASE=name,name...] [<tab> calls:PHASE=name,name...]

PHASE is the module's own phase (its path's), the fallback for a function the line does not list.
``own`` lists the names whose phase is their own (a declared root, or their name says it: ``how`` root
or name in phases.json; a name whose phase came from its class's name, ``Qwen2VisionBlock.forward``,
is left out: the traceback's bare ``forward`` may be any class's); ``calls`` the names that inherit a root's phase through the call graph, which a
frame only borrows (the root's own frame, when the paste holds it, says more). A name in several
classes or releases with several phases is listed under each; the run time takes an ambiguous name for
no answer. A module with neither a decisive phase of its own (``startup``, ``unknown``) nor a listed name is left
out.
The first line names the import packages the map covers, the only frames it is looked up for.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import callgraph

ROOT = Path(__file__).resolve().parent.parent.parent
DATA = ROOT / "oomdoctor" / "data" / "knowledge"
# The generated phases that say nothing about where a failure happened on their own.
UNDECIDED = {"startup", "unknown"}
OWN = {"root", "name"}


def build(rows: list[dict]) -> list[str]:
    lines = []
    for row in rows:
        by_kind: dict[tuple[str, str], set[str]] = defaultdict(set)
        for phase, how, _releases, functions in row["groups"]:
            kind = "own" if how in OWN else "calls"
            names = {f.rsplit(".", 1)[-1] for f in functions}
            if how == "name":
                names = {n for n in names if callgraph.phase_by_name(n, row["module"]) == phase}
            if names:
                by_kind[(kind, phase)].update(names)
        if not by_kind and row["phase"] in UNDECIDED:
            continue
        fields = [row["module"], row["phase"]]
        fields += [f"{kind}:{phase}=" + ",".join(sorted(names)) for (kind, phase), names in sorted(by_kind.items(), key=lambda kv: (kv[0][0] != "own", kv[0][1]))]
        lines.append("\t".join(fields))
    return sorted(lines)


def render(rows: list[dict]) -> str:
    lines = build(rows)
    packages = sorted({line.split("\t", 1)[0].split(".", 1)[0] for line in lines})
    return "packages\t" + " ".join(packages) + "\n" + "\n".join(lines) + "\n"


def write(data: Path = DATA) -> Path:
    rows = json.loads((data / "phases.json").read_text(encoding="utf-8"))
    path = data / "frame_phases.tsv"
    path.write_text(render(rows), encoding="utf-8")
    return path


if __name__ == "__main__":
    out = write(Path(sys.argv[1]) if len(sys.argv) > 1 else DATA)
    print(f"wrote {out}")

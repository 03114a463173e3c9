"""The recognizer's table: the engine failure messages of the catalogue, with what the scanner routes on.

    python tools/knowledge/recognizer.py        # oomdoctor/data/knowledge/messages.json -> recognizer.json

extract.py runs it after writing messages.json; tests/test_data_knowledge.py checks recognizer.json is
what this writes from the committed catalogue. An entry is a message the engines raise or log as an
error (not progress or warnings), whose class the catalogue gives (not ``none``): what an engine says
when something failed. ``anchor`` is a literal piece of the template, the scanner's literal for
it (the first long literal piece); ``notice`` marks the progress descriptions and the pressure warnings (NOTICE_LEVELS); ``memory_failure`` says the text itself reports a memory failure (an OOM, not enough memory, a
full pool, a failed allocation), as opposed to a configuration check the catalogue keeps because it
names memory: only a memory failure counts as evidence of an OOM.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
DATA = ROOT / "oomdoctor" / "data" / "knowledge"
FAILURE_LEVELS = {"raise", "error", "exception", "critical"}
# Lines the engines print while they run that say what they were doing (a progress bar's description)
# or that memory ran short without failing (a retraction, a preemption): ``notice`` entries, counted as
# a repeating kind by the parser, never evidence of an OOM by themselves.
NOTICE_LEVELS = {"warning", "info", "progress"}
PLACEHOLDER = re.compile(r"\{[a-z_][a-z0-9_]*:(?:int|float|str)\}")
# What a memory failure says in words (not a configuration rule that mentions memory).
MEMORY_FAILURE = re.compile(
    r"(?i)out of memory|\bOOM\b|not enough (?:\w+ )?(?:memory|space)|insufficient (?:free )?(?:\w+ )?memory|"
    r"no (?:free blocks|available memory|space left)|cannot get \S+ free blocks|is full!|exhausted|"
    r"failed to allocate|allocation failed|cannot allocate|memory exceeds|exceeds? (?:its |the )?(?:\w+ )?(?:memory|budget)|"
    r"less than (?:desired|the engine's budget)|larger than the (?:available|maximum)|does not fit|cannot fit|no room for|too small to serve|"
    r"cannot get .{0,12}free blocks|running low on memory|exceeds the (?:pre-)?allocated (?:[\w-]+ ){0,3}(?:cache )?(?:size|capacity|budget)"
)
# The shortest literal the scanner is given: shorter pieces ("Failed to ") would anchor unrelated lines.
MIN_ANCHOR = 12


def anchor(template: str) -> str:
    """The first literal piece of a template at least MIN_ANCHOR long (else its longest), its whitespace
    as a log line shows it: a paste cuts a long message at its end far more often than at its start."""
    pieces = [" ".join(p.split()) for p in PLACEHOLDER.split(template)]
    return next((p for p in pieces if len(p) >= MIN_ANCHOR), max(pieces, key=len))


def releases_span(releases: list[str]) -> str:
    """First..last of the catalogue's compact release list ("0.4.0..0.5.1", "0.5.23")."""
    first = releases[0].split("..")[0]
    last = releases[-1].split("..")[-1]
    return first if first == last else f"{first}..{last}"


def _reviewed_failure(m: dict) -> bool:
    return "override" in m and m["class"] not in ("none",)


def build(messages: list[dict]) -> list[dict]:
    out = []
    for m in messages:
        levels = {s["level"] for s in m["sites"]}
        failure = m["class"] != "none" and bool(levels & FAILURE_LEVELS)
        notice = not failure and bool(levels & NOTICE_LEVELS) and ("progress" in levels or m["class"] == "kv_exhaustion")
        if not failure and not notice:
            continue
        literal = anchor(m["template"])
        if len(literal) < MIN_ANCHOR:
            continue
        site = m["sites"][0]
        out.append(
            {
                "engine": m["engine"],
                "template": m["template"],
                "anchor": literal,
                "phase": m["phase"],
                "class": m["class"],
                # A reviewed entry (overrides.toml, libraries.toml) that gives a class vouches for it as a
                # failure even where its words do not say so (torch_memory_saver's "CUresult error result=2").
                "memory_failure": failure and (bool(MEMORY_FAILURE.search(PLACEHOLDER.sub(" ", m["template"]))) or _reviewed_failure(m)),
                **({"notice": True} if notice else {}),
                "site": f"{site['module']}.{site['function']}",
                "releases": releases_span(m["releases"]),
            }
        )
    return _one_per_text(out)


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))


def _one_per_text(entries: list[dict]) -> list[dict]:
    """One entry per message text: the same words with other placeholder names (a variable renamed between
    releases) are one message, named as the newest release names it, spanning every release of both."""
    kept: dict[tuple[str, str], dict] = {}
    order: list[tuple[str, str]] = []
    for e in entries:
        key = (e["engine"], PLACEHOLDER.sub(lambda m: "{:" + m.group(0).rsplit(":", 1)[1], e["template"]))
        other = kept.get(key)
        if other is None:
            kept[key] = e
            order.append(key)
            continue
        spans = [r.split("..") for r in (other["releases"], e["releases"])]
        first = min((s[0] for s in spans), key=_version)
        last = max((s[-1] for s in spans), key=_version)
        newest = e if _version(e["releases"].split("..")[-1]) > _version(other["releases"].split("..")[-1]) else other
        kept[key] = {**newest, "releases": first if first == last else f"{first}..{last}"}
    return [kept[k] for k in order]


def render(entries: list[dict]) -> str:
    """One entry per line, as the catalogue's files: two runs are byte-identical and a change is a diff."""
    lines = [json.dumps(e, sort_keys=True, ensure_ascii=False) for e in entries]
    return "[\n" + ",\n".join(lines) + "\n]\n"


def write(data: Path = DATA) -> Path:
    messages = json.loads((data / "messages.json").read_text(encoding="utf-8"))
    path = data / "recognizer.json"
    path.write_text(render(build(messages)), encoding="utf-8")
    return path


if __name__ == "__main__":
    out = write(Path(sys.argv[1]) if len(sys.argv) > 1 else DATA)
    print(f"wrote {out}")

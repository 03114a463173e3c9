"""The fact vocabulary (``data/facts.toml``): every name a rule may use, its type, unit and source.

Rules are validated against it, the facts store refuses names it does not declare, and the
"what would decide it" lists read each fact's source from it, so a missing fact is always named with
the command that would provide it.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

from oomdoctor.base import built_in

TYPES = ("bool", "bytes", "fraction", "count", "tokens", "int", "number", "str", "list", "object")


class FactSpec(NamedTuple):
    name: str
    type: str
    unit: str
    systems: tuple[str, ...]
    source: str
    doc: str
    ask: str = ""  # the fact in the words of a "what would decide it" list


    @property
    def internal(self) -> bool:
        """Internal facts carry objects for views and advice; rules never name them."""
        return self.name.startswith("_")


class Catalogue(NamedTuple):
    facts: dict[str, FactSpec]
    sources: dict[str, str]

    def __contains__(self, name: object) -> bool:
        return name in self.facts

    def suggest(self, name: str) -> str | None:
        """The declared fact nearest to a misspelled one, for a 'did you mean' line."""
        import difflib

        close = difflib.get_close_matches(name, [n for n in self.facts if not n.startswith("_")], n=1, cutoff=0.6)
        return close[0] if close else None

    def ask(self, name: str) -> str:
        """What a missing fact is, in words: its ``ask``, else its name spelled out."""
        spec = self.facts.get(name)
        return spec.ask if spec is not None and spec.ask else name.replace("_", " ")

    def asks(self, names: list[str]) -> list[dict[str, Any]]:
        """Missing facts as "what would decide it" rows, one per command: facts that share a source share a row.

        Each row: ``fact`` (the first), ``facts``, ``what`` (their asks, joined) and ``command``.
        """
        rows: dict[str, dict[str, Any]] = {}
        for name in names:
            command = self.how_to_get(name)
            row = rows.setdefault(command, {"fact": name, "facts": [], "what": [], "command": command})
            row["facts"].append(name)
            if self.ask(name) not in row["what"]:
                row["what"].append(self.ask(name))
        return [{**row, "what": "; ".join(row["what"])} for row in rows.values()]

    def how_to_get(self, name: str) -> str:
        spec = self.facts.get(name)
        if spec is None:
            return self.sources["whole_log"]
        return self.sources[spec.source]


def parse(data: dict[str, Any]) -> Catalogue:
    """The catalogue from facts.toml's tables, checked: a bad entry fails here, at the first load."""
    sources = {str(k): str(v) for k, v in data["sources"].items()}
    facts: dict[str, FactSpec] = {}
    for name, entry in data["facts"].items():
        spec = FactSpec(
            name=name,
            type=entry["type"],
            unit=entry.get("unit", ""),
            systems=tuple(entry["systems"]),
            source=entry["source"],
            doc=entry["doc"],
            ask=entry.get("ask", ""),
        )
        if spec.type not in TYPES:
            raise ValueError(f"facts.toml: {name}: type {spec.type!r} is not one of {', '.join(TYPES)}")
        if spec.source not in sources:
            raise ValueError(f"facts.toml: {name}: source {spec.source!r} is not a key of [sources]")
        if spec.type == "bytes" and not name.endswith("_bytes"):
            raise ValueError(f"facts.toml: {name}: a size in bytes must be named *_bytes")
        facts[name] = spec
    return Catalogue(facts=facts, sources=sources)


@functools.cache
def load() -> Catalogue:
    return parse(built_in.table("facts.toml"))


@functools.cache
def names() -> frozenset[str]:
    """The declared fact names: every fact write checks its name (the store refuses undeclared ones)."""
    return frozenset(built_in.table("facts.toml")["facts"])


def declared(name: str) -> bool:
    return name in names()

"""Facts from the engines' own failure messages that the knowledge catalogue recognised (parsers/engine_messages)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomdoctor.evidence.parsers.engine_messages import KIND_ENGINE_MESSAGE
from oomdoctor.input.patterns import LazyRegex

if TYPE_CHECKING:
    from oomdoctor.base.evidence import Event
    from oomdoctor.inference.facts.store import Facts


_PLACEHOLDER = LazyRegex(None, r"\{([a-z_][a-z0-9_]*):(?:int|float|str)\}")


def engine_message_facts(f: Facts, events: list[Event]) -> None:
    """The first engine memory failure of the run: what the engine said, where its code says it, and the
    phase and class its place in the code implies."""
    found = next((e for e in events if e.kind == KIND_ENGINE_MESSAGE and e.get("memory_failure")), None)
    if found is None:
        # Read, and no engine failure message among them: known, not missing (the rules on it are false).
        f.set("engine_message_class", "none")
        return
    ref = found.ref
    # The template as a reader reads it: "Cannot get <num_blocks> free blocks from the pool".
    f.set("engine_message", _PLACEHOLDER.sub(r"<\1>", found.get("template")), ref)
    engine = " ".join(filter(None, (found.get("engine"), found.get("releases"))))
    f.set("engine_message_site", f"{found.get('site')} ({engine})", ref)
    f.set("engine_message_phase", found.get("phase"), ref)
    f.set("engine_message_class", found.get("class"), ref)

"""Named facts: the typed evidence of one run turned into the flat values rules are written over.

Each fact may cite the lines it came from; a rule's finding cites the lines of the facts it used.
Facts that cannot be had are simply absent (a rule that needs them is reported as not evaluated).

Modules: ``store`` (the Facts class and the source precedence), ``common`` (system detection, event
look-ups, failure flags), ``sglang``, ``vllm``, ``torch`` (allocator messages), ``collected`` (bundles,
NVML, memory_stats), ``derived`` (budget arithmetic), ``phase_facts`` (phase and completeness) and
``build`` (build_facts: the order of the builders).
"""

from __future__ import annotations

from oomdoctor.inference.facts.build import build_facts
from oomdoctor.inference.facts.common import detect_system
from oomdoctor.inference.facts.store import PRECEDENCE, Facts, UndeclaredFact, UnrankedSource

__all__ = ["PRECEDENCE", "Facts", "UndeclaredFact", "UnrankedSource", "build_facts", "detect_system"]

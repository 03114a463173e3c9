"""The view model every renderer reads: a Diagnosis, its incidents and their findings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from oomdoctor import __version__
from oomdoctor.evidence import phase as phase_step
from oomdoctor.evidence.readings import Readings
from oomdoctor.inference.completeness import Completeness

if TYPE_CHECKING:
    from typing import Any

    from oomdoctor.advice.recommendation import Recommendation
    from oomdoctor.base.evidence import LineRef
    from oomdoctor.inference.confidence import Factor
    from oomdoctor.inference.facts import Facts
    from oomdoctor.inference.rule_engine import Rule
    from oomdoctor.input.files import InputStats


@dataclass(frozen=True)
class Finding:
    rule: Rule | None
    klass: str
    confidence: float
    message: str
    evidence: tuple[LineRef, ...]
    recommendations: list[Recommendation]
    extra: dict[str, Any] = field(default_factory=dict)
    factors: list[Factor] = field(default_factory=list)

    @property
    def rule_id(self) -> str | None:
        return self.rule.id if self.rule else None


@dataclass(frozen=True)
class Incident:
    run: int
    facts: Facts
    findings: list[Finding]
    not_evaluated: list[dict[str, Any]]

    @property
    def primary(self) -> Finding:
        return self.findings[0]


@dataclass(frozen=True)
class Diagnosis:
    """Everything a renderer shows: verdict, findings, budget, incidents, inputs."""

    verdict_class: str
    verdict_confidence: float
    verdict_rule: str | None
    summary: str
    findings: list[Finding]
    incidents: list[Incident]
    budget: dict[str, Any]
    not_evaluated: list[dict[str, Any]]
    inputs: list[InputStats]
    facts: Facts | None
    evidence: Completeness = field(default_factory=lambda: Completeness("complete"))
    phase: phase_step.Phase = phase_step.UNKNOWN
    confidence_factors: list[Factor] = field(default_factory=list)
    # The input stops before a failure is evident: the verdict (none, or a hypothesis) is inconclusive.
    inconclusive: bool = False
    # Per-rank values and the free-memory timeline, for the report's bars and chart.
    readings: Readings = field(default_factory=Readings)
    tool_version: str = __version__

    @property
    def oom(self) -> bool:
        return self.verdict_class != "none" and not self.inconclusive

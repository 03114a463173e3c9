"""Every incident a log holds: the newest whole, the earlier ones slimmed and counted."""

from __future__ import annotations

from collections import deque

from oomdoctor.inference.facts import Facts
from oomdoctor.pipeline.model import Finding, Incident


class IncidentHistory:
    """The incidents of a log, bounded: a crash loop of any length keeps a constant amount.

    The newest incident is kept whole (it is the verdict); earlier ones are slimmed to what the
    incident list shows (run, line, time, class, rule), and of those only the first _HEAD_INCIDENTS
    and the last _TAIL_INCIDENTS are kept, with counts per class for all of them.
    """

    def __init__(self) -> None:
        self.head: list[Incident] = []
        self.tail: deque[Incident] = deque(maxlen=_TAIL_INCIDENTS)
        self.newest: Incident | None = None
        self.newest_repeats = 0
        self.counts: dict[tuple[str, str | None], int] = {}
        self.earlier_total = 0

    def add(self, incident: Incident, repeats: int = 0) -> None:
        if self.newest is not None:
            slim = _slim(self.newest)
            key = (slim.primary.klass, slim.primary.rule_id)
            self.counts[key] = self.counts.get(key, 0) + 1 + self.newest_repeats
            self.earlier_total += 1 + self.newest_repeats
            if len(self.head) < _HEAD_INCIDENTS:
                self.head.append(slim)
            else:
                self.tail.append(slim)
        self.newest = incident
        self.newest_repeats = repeats

    def incidents(self) -> list[Incident]:
        return [*self.head, *self.tail, *([self.newest] if self.newest is not None else [])]

    def earlier_text(self) -> str:
        if not self.earlier_total:
            return ""
        if self.earlier_total <= 5:
            listed = "; ".join(f"run {i.run}: {i.primary.klass}" for i in self.incidents()[:-1])
            return f" (earlier incidents in this log: {listed})"
        by_class = ", ".join(f"{n:,} {klass}" for (klass, _rule), n in sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0][0])))
        return f" (this log holds {self.earlier_total:,} earlier incidents: {by_class})"


_HEAD_INCIDENTS = 16
_TAIL_INCIDENTS = 64


def _slim(incident: Incident) -> Incident:
    """An earlier incident as the incident list shows it, without its facts, events and advice."""
    f = incident.facts
    primary = incident.primary
    facts = Facts(run=f.run, first_line=f.first_line, time=f.time)
    finding = Finding(rule=primary.rule, klass=primary.klass, confidence=primary.confidence, message="", evidence=(), recommendations=[])
    return Incident(run=incident.run, facts=facts, findings=[finding], not_evaluated=[])

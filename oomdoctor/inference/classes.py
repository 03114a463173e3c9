"""The class catalogue (``data/classes.toml``): every class, its companions and the behaviour it brings."""

from __future__ import annotations

import functools
from typing import NamedTuple

from oomdoctor.base import built_in


class ClassSpec(NamedTuple):
    """One class of the taxonomy and what it changes downstream (the keys are documented in classes.toml)."""

    name: str
    summary: str
    companions: tuple[str, ...] = ()
    phase_decides_sufficiency: bool = False
    host_steps: bool = False
    monitoring_pods: bool = False
    lists_processes: bool = False
    hypothesis_fix: str | None = None
    engine_deferral: bool = False


class HostStep(NamedTuple):
    """One piece of host-side evidence for a host OOM, and the command that collects it."""

    fact: str
    what: str
    command: str
    # The host_kill_source values whose record already says this: then the step is not asked for.
    answered_by: tuple[str, ...] = ()


class ClassCatalogue(NamedTuple):
    classes: dict[str, ClassSpec]
    host_steps: tuple[HostStep, ...]

    def names(self) -> tuple[str, ...]:
        return tuple(self.classes)

    def get(self, name: str) -> ClassSpec | None:
        return self.classes.get(name)

    def hypothesis_fix(self, name: str) -> str:
        """What to do when the evidence only makes class ``name`` likely (an inconclusive or differential verdict)."""
        spec = self.classes.get(name)
        return spec.hypothesis_fix if spec is not None and spec.hypothesis_fix else "see the class documentation"

    def flagged(self, flag: str) -> str | None:
        """The class catalogued with ``flag`` set (a key classes.toml gives one class), or None."""
        return next((spec.name for spec in self.classes.values() if getattr(spec, flag)), None)

    def has(self, name: str, flag: str) -> bool:
        """Whether class ``name`` is catalogued with ``flag`` (a boolean key of classes.toml) set."""
        spec = self.classes.get(name)
        return spec is not None and bool(getattr(spec, flag))


@functools.cache
def load() -> ClassCatalogue:
    data = built_in.table("classes.toml")
    classes = {}
    for name, spec in data["classes"].items():
        classes[name] = ClassSpec(name=name, **{**spec, "companions": tuple(spec.get("companions", ()))})
    unknown = {c for spec in classes.values() for c in spec.companions} - set(classes)
    if unknown:
        raise ValueError(f"data/classes.toml: companions name unknown classes: {sorted(unknown)}")
    return ClassCatalogue(classes=classes, host_steps=tuple(HostStep(**{**s, "answered_by": tuple(s.get("answered_by", ()))}) for s in data.get("host_steps", ())))

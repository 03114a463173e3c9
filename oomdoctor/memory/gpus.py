"""The GPUs oomdoctor knows (data/gpus.toml): cards `plan` takes by name, and the card classes a
diagnosis names from the total capacity a log reports."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, NamedTuple

from oomdoctor.base import built_in
from oomdoctor.base.errors import GpuNotFound
from oomdoctor.base.units import GIB, MIB

if TYPE_CHECKING:
    from typing import Any


class Gpu(NamedTuple):
    name: str
    capacity_bytes: int
    aliases: tuple[str, ...] = ()


class CardClass(NamedTuple):
    label: str
    low_gib: float
    high_gib: float
    typical_bytes: int


@functools.cache
def _table() -> dict[str, Any]:
    return built_in.table("gpus.toml")


def gpu_table() -> list[Gpu]:
    return [Gpu(g["name"], g["capacity_mib"] * MIB, tuple(g.get("aliases", ()))) for g in _table()["gpu"]]


def _classes() -> list[CardClass]:
    return [CardClass(c["label"], c["low_gib"], c["high_gib"], c["typical_mib"] * MIB) for c in _table()["class"]]


def _norm(name: str) -> str:
    return name.lower().replace("-", "").replace("_", "").replace(" ", "")


def find_gpu(name: str) -> Gpu:
    """The card of this name or alias (case, '-', '_' and spaces ignored); GpuNotFound otherwise."""
    for g in gpu_table():
        if _norm(name) in {_norm(g.name), *(_norm(a) for a in g.aliases)}:
            return g
    known = ", ".join(g.name for g in gpu_table())
    raise GpuNotFound(f"unknown GPU {name!r}; use one of {known}, or --gpu-mem-gib N")


def likely_gpu(capacity_bytes: int | None) -> str | None:
    """The card class whose total capacity matches, e.g. 79.19 GiB -> the 80 GB H100/A100 class."""
    if not capacity_bytes:
        return None
    gib = capacity_bytes / GIB
    return next((c.label for c in _classes() if c.low_gib <= gib < c.high_gib), None)


def smallest_card_holding(free_bytes: int) -> tuple[str, int] | None:
    """The smallest known card class whose capacity exceeds a free-memory reading (label, bytes)."""
    return next(((c.label, c.typical_bytes) for c in _classes() if c.typical_bytes > free_bytes + GIB // 2), None)

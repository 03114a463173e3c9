"""The GPUs oomdoctor knows (data/gpus.toml): cards `plan` takes by name, and the card classes a
diagnosis names from the total capacity a log reports.

A card's capacity is its total as CUDA reports it (what the engines size their budgets from), not
nvidia-smi's memory.total, which also counts the memory the driver reserves for itself.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, NamedTuple

from oomdoctor.base import built_in
from oomdoctor.base.errors import GpuNotFound
from oomdoctor.base.units import GIB, MIB, gib_to_bytes

if TYPE_CHECKING:
    from typing import Any


class Gpu(NamedTuple):
    """A card: ``capacity_bytes`` as CUDA reports it; ``smi_total_bytes`` nvidia-smi's memory.total;
    ``capacity_source`` "log", "measured" or "estimated", and ``capacity_note`` where the figure is from."""

    name: str
    capacity_bytes: int
    aliases: tuple[str, ...] = ()
    smi_total_bytes: int | None = None
    capacity_source: str = ""
    capacity_note: str = ""


class CardClass(NamedTuple):
    """A class of cards; its common card's total as CUDA (``typical_bytes``) and nvidia-smi (``smi_bytes``) report it."""

    label: str
    low_gib: float
    high_gib: float
    typical_bytes: int
    smi_bytes: int


@functools.cache
def _table() -> dict[str, Any]:
    return built_in.table("gpus.toml")


def gpu_table() -> list[Gpu]:
    return [
        Gpu(g["name"], gib_to_bytes(g["cuda_total_gib"]), tuple(g.get("aliases", ())), g["smi_total_mib"] * MIB, g["cuda_total_source"], g["cuda_total_note"])
        for g in _table()["gpu"]
    ]


def _classes() -> list[CardClass]:
    return [CardClass(c["label"], c["low_gib"], c["high_gib"], gib_to_bytes(c["typical_cuda_gib"]), c["typical_smi_mib"] * MIB) for c in _table()["class"]]


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


def assumed_card(free_bytes: int) -> CardClass | None:
    """The smallest known card class whose capacity exceeds a free-memory reading.

    Both are CUDA's figures, and a free reading is always below the total (the CUDA context alone
    takes 0.3 GiB or more), so the total only has to exceed the reading.
    """
    return next((c for c in _classes() if c.typical_bytes > free_bytes), None)


def smallest_card_holding(free_bytes: int) -> tuple[str, int] | None:
    """The assumed card's label and its total as CUDA reports it (the scale a free reading is drawn on)."""
    card = assumed_card(free_bytes)
    return (card.label, card.typical_bytes) if card else None

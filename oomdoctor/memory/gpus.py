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


# Words of a marketing name that no card of the table is told apart by ("NVIDIA H100 80GB HBM3",
# "NVIDIA A100-SXM4-80GB", "NVIDIA GeForce RTX 4090", "Tesla V100-SXM2-32GB").
_NAME_NOISE = ("nvidia", "geforce", "tesla", "quadro", "rtx", "amd", "instinct", "hbm3e", "hbm3", "hbm2e", "hbm2", "sxm5", "sxm4", "sxm2", "sxm")


def gpu_of_name(name: str) -> Gpu | None:
    """The card a device name (nvidia-smi, torch.cuda.get_device_name) is, when the table knows it for sure.

    The memory size the name states decides between sizes of one model (A100 40GB / 80GB); a model the
    table has in one size only needs none. A name cut by nvidia-smi's column ("NVIDIA A100-SXM...") or
    naming a card the table lacks gives None: its capacity is then not guessed.
    """
    import re

    text = name.lower().replace("...", " ")
    size = re.search(r"(\d+)\s*gb\b", text)
    words = [w for w in re.split(r"[\s_-]+", re.sub(r"\d+\s*gb\b", " ", text)) if w and w not in _NAME_NOISE]
    if not words:
        return None
    model = _norm("".join(words))
    # A model the table holds in several sizes (A100 40GB and 80GB) is decided by a stated size only.
    sizes_of_model = {g.name for g in gpu_table() if _norm(g.name.split("-")[0]) == model}
    exact = [g for g in gpu_table() if model in {_norm(g.name), *(_norm(a) for a in g.aliases)}]
    if size is None and len(exact) == 1 and len(sizes_of_model) <= 1:
        return exact[0]
    model = _norm("".join(w for w in words if w not in ("pcie", "nvl")))
    by_model = [g for g in gpu_table() if model in {_norm(g.name.split("-")[0]), _norm(g.name), *(_norm(a) for a in g.aliases)}]
    if size is not None:
        gib = int(size.group(1))
        sized = [g for g in gpu_table() if _norm(g.name) in (model + str(gib) + "gb", _norm(f"{model}-{gib}GB")) or any(_norm(a) == f"{model}{gib}gb" for a in g.aliases)]
        if sized:
            return sized[0]
        fitting = [g for g in by_model if abs(g.capacity_bytes / GIB - gib) <= max(2.0, 0.05 * gib)]
        return fitting[0] if len(fitting) == 1 else None
    models = {g.name for g in by_model}
    return by_model[0] if len(models) == 1 and not any(_norm(a) == model for g in gpu_table() for a in g.aliases if g.name not in models) else None

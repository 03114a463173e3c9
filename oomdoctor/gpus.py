"""Known GPU capacities, to name the likely card when a log gives the total capacity."""

from __future__ import annotations

from oomdoctor.units import GIB

# (low GiB, high GiB, name, typical capacity MiB) of the total capacity CUDA reports; ranges cover
# driver and ECC variants. The MiB column is what nvidia-smi shows for the common card of the class.
_CARDS: tuple[tuple[float, float, str, int], ...] = (
    (14.5, 16.1, "16 GB class (V100 16GB / T4)", 16384),
    (21.5, 24.1, "24 GB class (L4 / A10 / RTX 3090 / RTX 4090)", 24564),
    (31.0, 32.6, "32 GB class (V100 32GB / RTX 5090)", 32607),
    (39.0, 40.1, "A100 40GB", 40960),
    (44.0, 48.1, "48 GB class (L40S / A6000 / L20)", 46068),
    (78.5, 80.1, "80 GB class (H100 / A100 80GB / H800)", 81559),
    (92.5, 94.1, "H100 NVL 94GB", 95830),
    (94.1, 96.1, "H20 96GB", 97871),
    (139.0, 141.1, "H200 141GB", 143771),
    (177.0, 192.1, "B200 / MI300X class (180-192 GB)", 183359),
)


def likely_gpu(capacity_bytes: int | None) -> str | None:
    """The card class whose total capacity matches, e.g. 79.19 GiB -> the 80 GB H100/A100 class."""
    if not capacity_bytes:
        return None
    gib = capacity_bytes / GIB
    for low, high, name, _ in _CARDS:
        if low <= gib < high:
            return name
    return None


def smallest_card_holding(free_bytes: int) -> tuple[str, int] | None:
    """The smallest known card class whose capacity exceeds a free-memory reading (name, bytes)."""
    for _, _, name, mib in _CARDS:
        if mib * 1024 * 1024 > free_bytes + GIB // 2:
            return name, mib * 1024 * 1024
    return None

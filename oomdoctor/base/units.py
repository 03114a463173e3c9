"""Memory units: the one place that parses "7.38 GiB" and formats bytes for display.

Sizes are ``int`` bytes everywhere else. SGLang prints "GB" but divides by 2**30, and so does
vLLM V0's "Loading model weights took X GB", so "GB" here means GiB unless a caller says otherwise.
"""

from __future__ import annotations

import math
import re

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30
TIB = 1 << 40

# No single GPU today holds more than a few hundred GiB; a parsed size above this is a
# misprint or NVML's NOT_AVAILABLE sentinel, and must be flagged rather than trusted.
MAX_PLAUSIBLE_DEVICE_BYTES = 4 * TIB

_UNIT_BYTES = {
    "b": 1,
    "byte": 1,
    "bytes": 1,
    "k": KIB,
    "kb": KIB,
    "kib": KIB,
    "m": MIB,
    "mb": MIB,
    "mib": MIB,
    "g": GIB,
    "gb": GIB,
    "gib": GIB,
    "t": TIB,
    "tb": TIB,
    "tib": TIB,
}

_SIZE_RE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([A-Za-z]+)?\s*$")


class UnitError(ValueError):
    """A size string that cannot be read as a number of bytes."""


def parse_size_bytes(text: str, default_unit: str = "bytes") -> int:
    """Parse "7.38 GiB", "1.25GiB", "981.56 MiB", "512 bytes" or "0.62" (in default_unit) to bytes."""
    m = _SIZE_RE.match(text)
    if not m:
        raise UnitError(f"not a size: {text!r}")
    number, unit = m.group(1), (m.group(2) or default_unit)
    factor = _UNIT_BYTES.get(unit.lower())
    if factor is None:
        raise UnitError(f"unknown unit {unit!r} in {text!r}")
    return round(float(number) * factor)


def gib_to_bytes(gib: float) -> int:
    """GiB (as SGLang and vLLM print them) to bytes."""
    return round(gib * GIB)


def gb_to_bytes(gb: float) -> int:
    """Decimal GB (10**9 bytes: SGLang's host-memory pool lines divide by 1e9) to bytes."""
    return round(gb * 10**9)


def optional_number(text: str | None) -> float | None:
    """A regex group that may be absent: its number, or None."""
    return float(text) if text not in (None, "") else None


def optional_gib_to_bytes(text: str | None) -> int | None:
    """A regex group holding a "GB" figure as SGLang and vLLM print it (they mean GiB), as bytes."""
    value = optional_number(text)
    return gib_to_bytes(value) if value is not None else None


def mib_to_bytes(mib: float) -> int:
    """MiB (as nvidia-smi and SGLang's auto-tune reserves use them) to bytes."""
    return round(mib * MIB)


def format_bytes(n_bytes: int | float | None) -> str:
    """Format bytes for people: "7.38 GiB", "981.56 MiB", "512 bytes"; None as "n/a"."""
    if n_bytes is None:
        return "n/a"
    sign = "-" if n_bytes < 0 else ""
    value = abs(n_bytes)
    if value >= GIB:
        return f"{sign}{value / GIB:.2f} GiB"
    if value >= MIB:
        return f"{sign}{value / MIB:.2f} MiB"
    if value >= KIB:
        return f"{sign}{value / KIB:.2f} KiB"
    return f"{sign}{int(value)} bytes"


def format_gib(n_bytes: int | float | None, digits: int = 2) -> str:
    """Format bytes as a bare GiB number, the way SGLang's "avail mem=78.00 GB" does."""
    if n_bytes is None:
        return "n/a"
    return f"{n_bytes / GIB:.{digits}f}"


def gib_text(n_bytes: int | float) -> str:
    """Bytes as "78.00 GiB": the one unit the budget arithmetic and the charts speak."""
    return f"{n_bytes / GIB:.2f} GiB"


def is_plausible_device_bytes(n_bytes: int | float) -> bool:
    """Whether a size could describe memory on one GPU (finite and below a few TiB)."""
    return isinstance(n_bytes, (int, float)) and math.isfinite(n_bytes) and abs(n_bytes) <= MAX_PLAUSIBLE_DEVICE_BYTES


def floor_to(value: float, step: float) -> float:
    """Round value down to a multiple of step, free of binary-float noise (0.85, not 0.8500000001)."""
    return round(math.floor(round(value / step, 9)) * step, 6)


def ceil_to(value: float, step: float) -> float:
    """Round value up to a multiple of step, free of binary-float noise."""
    return round(math.ceil(round(value / step, 9)) * step, 6)

"""What `collect` and `plan` return instead of an exit code; ``oomdoctor.commands.exits`` maps them to one.

Apart from errors.py so that a plain ``diagnose``, which returns neither, does not build these
enums at every start (an Enum class costs ~0.1 ms to create).
"""

from __future__ import annotations

from enum import Enum


class GpuEvidence(Enum):
    """What `collect` could read of the GPUs; the bundle is written either way."""

    AVAILABLE = "available"
    UNAVAILABLE = "unavailable"


class PlanFit(Enum):
    """Whether `plan` finds the model fits (and the value given with --at is in the window)."""

    FITS = "fits"
    DOES_NOT_FIT = "does_not_fit"

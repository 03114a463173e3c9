"""Exit codes (contract, DESIGN §4), the typed errors library code raises and the outcomes it returns.

Library code never chooses an exit code: it raises one of these errors or returns one of these
outcomes, and the CLI maps them to ``ExitCode`` in one table (``oomdoctor.cli._exit_code``).
"""

from __future__ import annotations

from enum import Enum, IntEnum


class ExitCode(IntEnum):
    """Process exit codes; never renumber."""

    NO_OOM = 0
    INTERNAL = 1
    USAGE = 2
    OOM_DIAGNOSED = 3
    INCONCLUSIVE = 4
    BAD_INPUT = 5
    INTERRUPTED = 130


class OomdoctorError(Exception):
    """An expected failure with a one-line message; its type decides the exit code (in the CLI)."""


class InputError(OomdoctorError):
    """An input that cannot be read at all (missing, binary, empty, unsupported)."""


class RuleError(OomdoctorError):
    """A rule file that does not validate; the message names file, field and what to write."""


class OutputError(OomdoctorError):
    """A report, bundle or directory that cannot be written."""


class UsageError(OomdoctorError):
    """Options or arguments that cannot be used together or name nothing known (a rule, a fact)."""


class GpuNotFound(OomdoctorError):
    """A GPU name that is not in the table (data/gpus.toml); the message lists the known ones."""


class GpuEvidence(Enum):
    """What `collect` could read of the GPUs; the bundle is written either way."""

    AVAILABLE = "available"
    UNAVAILABLE = "unavailable"


class PlanFit(Enum):
    """Whether `plan` finds the model fits (and the value given with --at is in the window)."""

    FITS = "fits"
    DOES_NOT_FIT = "does_not_fit"

"""Exit codes (contract, DESIGN §4) and the typed errors library code raises.

Library code never chooses an exit code: it raises one of these errors or returns an outcome
(outcomes.py), and the entry points map them to ``ExitCode`` in one table (``oomdoctor.commands.exits``).
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes; never renumber."""

    NO_OOM = 0
    INTERNAL = 1
    USAGE = 2
    OOM_DIAGNOSED = 3
    INCONCLUSIVE = 4
    BAD_INPUT = 5
    INTERRUPTED = 130
    TERMINATED = 143  # 128 + SIGTERM


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


class Terminated(BaseException):
    """SIGTERM turned into an exception while oomdoctor holds a temporary file (the copy of standard input),
    so that its cleanup runs. Not an Exception: no ``except Exception`` swallows it."""

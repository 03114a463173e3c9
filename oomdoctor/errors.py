"""Exit codes (contract, DESIGN §4) and the one typed error the CLI maps to them."""

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


class OomdoctorError(Exception):
    """An expected failure with a one-line message and the exit code it maps to."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(self, message: str, exit_code: ExitCode | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class InputError(OomdoctorError):
    """An input that cannot be read at all (missing, binary, empty, unsupported)."""

    exit_code = ExitCode.BAD_INPUT


class RuleError(OomdoctorError):
    """A rule file that does not validate; the message names file, field and what to write."""

    exit_code = ExitCode.BAD_INPUT

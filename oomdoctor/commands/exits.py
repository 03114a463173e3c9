"""Outcomes and errors to exit codes: the one table (README "Exit codes", DESIGN §4).

Library code raises typed errors (base.errors) or returns typed outcomes (base.outcomes); the commands
turn them into an exit code here and nowhere else (``guarded`` runs a command and maps what it raises).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from oomdoctor.base.errors import ExitCode, GpuNotFound, InputError, OomdoctorError, OutputError, RuleError, Terminated, UsageError
from oomdoctor.base.outcomes import GpuEvidence, PlanFit
from oomdoctor.report.console import fail

if TYPE_CHECKING:
    from oomdoctor.pipeline.model import Diagnosis

# Errors (by class, the nearest in the error's MRO wins) to exit codes; anything else is INTERNAL.
_ERROR_EXIT_CODES: dict[type[BaseException], ExitCode] = {
    InputError: ExitCode.BAD_INPUT,
    RuleError: ExitCode.BAD_INPUT,
    OutputError: ExitCode.BAD_INPUT,
    UsageError: ExitCode.USAGE,
    GpuNotFound: ExitCode.USAGE,
    click.UsageError: ExitCode.USAGE,  # bad options
    click.Abort: ExitCode.INTERRUPTED,  # Ctrl-C at a prompt
    KeyboardInterrupt: ExitCode.INTERRUPTED,
    Terminated: ExitCode.TERMINATED,  # SIGTERM while a temporary file was held (input.files.spool_stdin)
    # The reader closed the pipe (| head): what it wanted was written.
    BrokenPipeError: ExitCode.NO_OOM,
}
# collect's and plan's outcomes.
_OUTCOME_EXIT_CODES: dict[GpuEvidence | PlanFit, ExitCode] = {
    GpuEvidence.AVAILABLE: ExitCode.NO_OOM,
    GpuEvidence.UNAVAILABLE: ExitCode.BAD_INPUT,
    PlanFit.FITS: ExitCode.NO_OOM,
    PlanFit.DOES_NOT_FIT: ExitCode.OOM_DIAGNOSED,
}


def exit_code(outcome: BaseException | GpuEvidence | PlanFit | Diagnosis) -> ExitCode:
    """The exit code of an outcome: an exception, collect's GpuEvidence, plan's PlanFit, or diagnose's Diagnosis."""
    if isinstance(outcome, BaseException):
        for c in type(outcome).__mro__:
            # `in`, not a truthy .get(): NO_OOM is 0.
            if c in _ERROR_EXIT_CODES:
                return _ERROR_EXIT_CODES[c]
        return ExitCode.INTERNAL
    if isinstance(outcome, (GpuEvidence, PlanFit)):
        return _OUTCOME_EXIT_CODES[outcome]
    if outcome.inconclusive:
        return ExitCode.INCONCLUSIVE
    return ExitCode.OOM_DIAGNOSED if outcome.oom else ExitCode.NO_OOM


def guarded(work: Callable[[], int]) -> int:
    """Run ``work`` and return its exit code; the one place an error becomes a message and a code."""
    try:
        return work()
    except KeyboardInterrupt as exc:
        fail("interrupted", exit_code(exc))
    except Terminated as exc:
        fail("terminated", exit_code(exc))
    except OomdoctorError as exc:
        fail(str(exc), exit_code(exc))
    except BrokenPipeError as exc:
        return int(exit_code(exc))
    except Exception as exc:  # noqa: BLE001 - the one place an unexpected error becomes exit code 1
        fail(f"internal error: {type(exc).__name__}: {exc} (please report this with the input)", exit_code(exc))

"""Outcomes and errors to exit codes: the one table (README "Exit codes", DESIGN §4).

Library code raises typed errors (errors.py) or returns typed outcomes; the entry points turn them
into an exit code here and nowhere else. click's own errors are matched by name, so that the
click-free path of a plain ``diagnose`` (oomdoctor.commands.entry) can use this table without importing click.
"""

from __future__ import annotations

from oomdoctor.base.errors import ExitCode, GpuNotFound, InputError, OutputError, RuleError, UsageError

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost); mypy reads this as True
if TYPE_CHECKING:
    from oomdoctor.base.outcomes import GpuEvidence, PlanFit
    from oomdoctor.pipeline.diagnosis import Diagnosis

# Errors (by class, the nearest in the error's MRO wins) to exit codes; anything else is INTERNAL.
_ERROR_EXIT_CODES: dict[type[BaseException], ExitCode] = {
    InputError: ExitCode.BAD_INPUT,
    RuleError: ExitCode.BAD_INPUT,
    OutputError: ExitCode.BAD_INPUT,
    UsageError: ExitCode.USAGE,
    GpuNotFound: ExitCode.USAGE,
    KeyboardInterrupt: ExitCode.INTERRUPTED,
    # The reader closed the pipe (| head): what it wanted was written.
    BrokenPipeError: ExitCode.NO_OOM,
}
# click.UsageError (bad options) and click.Abort (Ctrl-C at a prompt), by module and name.
_CLICK_EXIT_CODES: dict[tuple[str, str], ExitCode] = {
    ("click.exceptions", "UsageError"): ExitCode.USAGE,
    ("click.exceptions", "Abort"): ExitCode.INTERRUPTED,
}
# collect's and plan's outcomes (oomdoctor.base.outcomes), by class and value name: diagnose never imports them.
_OUTCOME_EXIT_CODES: dict[tuple[str, str], ExitCode] = {
    ("GpuEvidence", "AVAILABLE"): ExitCode.NO_OOM,
    ("GpuEvidence", "UNAVAILABLE"): ExitCode.BAD_INPUT,
    ("PlanFit", "FITS"): ExitCode.NO_OOM,
    ("PlanFit", "DOES_NOT_FIT"): ExitCode.OOM_DIAGNOSED,
}


def exit_code(outcome: BaseException | GpuEvidence | PlanFit | Diagnosis) -> ExitCode:
    """The exit code of an outcome: an exception, collect's GpuEvidence, plan's PlanFit, or diagnose's Diagnosis."""
    if isinstance(outcome, BaseException):
        for c in type(outcome).__mro__:
            # `in`, not a truthy .get(): NO_OOM is 0.
            if c in _ERROR_EXIT_CODES:
                return _ERROR_EXIT_CODES[c]
            if (c.__module__, c.__name__) in _CLICK_EXIT_CODES:
                return _CLICK_EXIT_CODES[(c.__module__, c.__name__)]
        return ExitCode.INTERNAL
    if type(outcome).__module__ == "oomdoctor.base.outcomes":
        return _OUTCOME_EXIT_CODES[(type(outcome).__name__, outcome.name)]  # type: ignore[union-attr]
    diagnosis: Diagnosis = outcome  # type: ignore[assignment]  # the only other kind
    if diagnosis.inconclusive:
        return ExitCode.INCONCLUSIVE
    return ExitCode.OOM_DIAGNOSED if diagnosis.oom else ExitCode.NO_OOM

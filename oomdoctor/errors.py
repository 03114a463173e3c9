"""Exit codes (contract, DESIGN §4) and the typed errors library code raises.

Library code never chooses an exit code: it raises one of these errors or returns an outcome
(outcomes.py), and the entry points map them to ``ExitCode`` in one table (``oomdoctor.exits``).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost); mypy reads this as True
if TYPE_CHECKING:
    from enum import IntEnum

    class ExitCode(IntEnum):
        """Process exit codes; never renumber (the same members as _CODES below; a test compares them)."""

        NO_OOM = 0
        INTERNAL = 1
        USAGE = 2
        OOM_DIAGNOSED = 3
        INCONCLUSIVE = 4
        BAD_INPUT = 5
        INTERRUPTED = 130

else:

    class ExitCode(int):
        """Process exit codes; never renumber. What the package uses of an IntEnum (an int with a name and
        an enum's repr), without importing enum: with re, enum is most of a plain diagnose's imports (~3 ms)."""

        name: str

        def __new__(cls, value: int, name: str = "") -> ExitCode:
            self = int.__new__(cls, value)
            self.name = name
            return self

        @property
        def value(self) -> int:
            return int(self)

        def __repr__(self) -> str:
            return f"<ExitCode.{self.name}: {int(self)}>"

        __str__ = int.__repr__  # as IntEnum's (3.11): the number

    for _name, _value in (("NO_OOM", 0), ("INTERNAL", 1), ("USAGE", 2), ("OOM_DIAGNOSED", 3), ("INCONCLUSIVE", 4), ("BAD_INPUT", 5), ("INTERRUPTED", 130)):
        setattr(ExitCode, _name, ExitCode(_value, _name))


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

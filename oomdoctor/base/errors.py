"""Exit codes (contract, DESIGN §4) and the typed errors library code raises.

Library code never chooses an exit code: it raises one of these errors or returns an outcome
(outcomes.py), and the entry points map them to ``ExitCode`` in one table (``oomdoctor.commands.exits``).
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

    class _Codes(type):
        """What an Enum class answers: iteration, ``in``, ``ExitCode["NAME"]``, ``len``, ``__members__``."""

        _members: dict[str, ExitCode]

        def __iter__(cls):  # type: ignore[no-untyped-def]
            return iter(cls._members.values())

        def __contains__(cls, item: object) -> bool:
            return item in cls._members.values()

        def __getitem__(cls, name: str) -> ExitCode:
            return cls._members[name]

        def __len__(cls) -> int:
            return len(cls._members)

        @property
        def __members__(cls) -> dict[str, ExitCode]:
            return dict(cls._members)

    class ExitCode(int, metaclass=_Codes):
        """Process exit codes; never renumber. An IntEnum's behaviour (members by value and name, their repr
        and str, iteration) without importing enum: with re, enum is most of a plain diagnose's imports (~3 ms)."""

        _members: dict[str, ExitCode] = {}  # noqa: RUF012 - the class-level tables of its members
        _by_value: dict[int, ExitCode] = {}  # noqa: RUF012

        def __new__(cls, value: int) -> ExitCode:
            """The member of ``value``, as ``IntEnum(value)`` gives it; ValueError for any other number."""
            try:
                return cls._by_value[int(value)]
            except KeyError:
                raise ValueError(f"{value!r} is not a valid ExitCode") from None

        @classmethod
        def _member(cls, name: str, value: int) -> None:
            member = int.__new__(cls, value)
            member._name = name  # type: ignore[attr-defined]
            cls._members[name] = cls._by_value[value] = member
            setattr(cls, name, member)

        @property
        def name(self) -> str:
            return self._name  # type: ignore[attr-defined,no-any-return]

        @property
        def value(self) -> int:
            return int(self)

        def __repr__(self) -> str:
            return f"<ExitCode.{self.name}: {int(self)}>"

        __str__ = int.__repr__  # as IntEnum's (3.11): the number

        def __reduce__(self) -> tuple[type, tuple[int]]:
            return ExitCode, (int(self),)  # unpickles to the member itself

    for _name, _value in (("NO_OOM", 0), ("INTERNAL", 1), ("USAGE", 2), ("OOM_DIAGNOSED", 3), ("INCONCLUSIVE", 4), ("BAD_INPUT", 5), ("INTERRUPTED", 130)):
        ExitCode._member(_name, _value)


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

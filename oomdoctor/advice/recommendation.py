"""A recommended change (flag, value, why and how it was derived) and the line that pastes it."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, NamedTuple

from oomdoctor.memory.derivation import Step

if TYPE_CHECKING:
    from typing import Any

    from oomdoctor.inference.facts import Facts
    from oomdoctor.memory.margins import Margin


# A recommendation's role among its finding's: the one set to paste, an alternative to it, or a change
# the budget shows does not work (listed with why, never pasted).
# A companion is a change another one needs (its ``with``), shown only as part of that set.
PRIMARY, ALTERNATIVE, NOT_WORKABLE, COMPANION = "primary", "alternative", "not_workable", "companion"


class Recommendation(NamedTuple):
    """Change ``flag`` in ``direction`` to ``value``; ``why`` says why, ``derivation`` shows how.

    ``companions`` are the changes it needs to form one consistent set (TP 2 *with* the fraction the
    new window allows); ``feasible`` is the budget's verdict on that set (None where the budget does not
    decide it); ``cost`` is what the change gives up; ``margin`` what the set leaves by the arithmetic
    that produced it (memory.margins; None where it was not measured). ``direction`` "run" is a command,
    not a flag.
    """

    flag: str
    value: Any
    direction: str
    why: str
    current: Any = None
    derivation: tuple[Step, ...] = ()
    role: str = ALTERNATIVE
    cost: str = ""
    feasible: bool | None = None
    companions: tuple[Recommendation, ...] = ()
    margin: Margin | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "flag": self.flag,
            "value": self.value,
            "direction": self.direction,
            "current": self.current,
            "why": self.why,
            "derivation": [s.to_json() for s in self.derivation],
            "role": self.role,
            "cost": self.cost,
            "feasible": self.feasible,
            "with": [c.to_json() for c in self.companions],
            "paste": self.paste,
            "margin": self.margin.to_json() if self.margin is not None else None,
        }

    @property
    def paste(self) -> str | None:
        """The change as it is pasted: a launch flag, an ``export`` line, a command, or a commented script setting."""
        return paste_line(self.flag, self.value, self.direction)

    @property
    def paste_set(self) -> list[str]:
        """The paste lines of the whole set: this change and its companions."""
        return [line for line in (self.paste, *(c.paste for c in self.companions)) if line]


def _shell_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (dict, list)):
        import json  # a dict or list flag value is rare; the diagnose path stays without json

        value = json.dumps(value)
    return shell_word(str(value))


def shell_word(text: str) -> str:
    """``text`` as one word a POSIX shell reads back unchanged."""
    return shlex.quote(text)


def paste_line(flag: str, value: Any, direction: str) -> str | None:
    """One change, ready to paste: ``--flag value`` (JSON and spaces quoted for the shell), ``export NAME=value``,
    the command itself for "run", ``# in your script: name = value`` for a script setting; None without a value."""
    if direction == "run":
        return flag
    if value is None or value is False:
        return None
    if flag.startswith("--"):
        return flag if value is True else f"{flag} {_shell_value(value)}"
    if flag.isupper():
        return f"export {flag}={_shell_value(value)}"
    return f"# in your script: {flag} = {value}"


def format_value(value: Any) -> str:
    """A flag value as a recommendation's text writes it (floats without trailing zeros)."""
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def tensor_parallel_flag(f: Facts) -> str:
    """The tensor-parallel flag as the incident's engine spells it."""
    return "--tensor-parallel-size" if f.get("system") == "vllm" else "--tp-size"

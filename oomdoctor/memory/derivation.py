"""A computed number with its working: the ``Step`` lines and the ``Derived`` value every memory formula returns."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from typing import Any


class Step(NamedTuple):
    """One line of working: what was computed, the formula with numbers, and the result."""

    step: str
    formula: str
    value: float | int | str | None
    # What the value is: "bytes", "fraction", "tokens", "count", "ratio", "mib", "text" (UNITS);
    # every step says it, so no renderer guesses a unit from a number's size.
    unit: str

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "formula": self.formula, "value": self.value, "unit": self.unit}


class Derived(NamedTuple):
    """A computed number and how it was computed."""

    value: Any
    steps: tuple[Step, ...] = ()

"""oomdoctor.base.records: the part of dataclasses the package uses, checked against dataclasses itself.

Each behaviour the package relies on is compared with what ``@dataclass`` does for the same class:
construction (positional, keyword, defaults, fresh default factories), equality, hashing, repr,
immutability, slots, ``replace``, copy and pickle. What records refuse is refused with a TypeError.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from oomdoctor.base import records
from oomdoctor.base.records import field, record, replace


@record(frozen=True, slots=True)
class Frozen:
    """A frozen slotted record, as most of the model is."""

    name: str
    size_bytes: int = 0
    tags: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)


@dataclasses.dataclass(frozen=True, slots=True)
class FrozenDC:
    name: str
    size_bytes: int = 0
    tags: tuple[str, ...] = ()
    notes: list[str] = dataclasses.field(default_factory=list)


@record
class Mutable:
    """A plain record, as the fact store is."""

    values: dict[str, int] = field(default_factory=dict)
    count: int = 0

    def bump(self) -> int:
        self.count += 1
        return self.count


def test_construction_matches_dataclasses() -> None:
    for args, kwargs in [(("a",), {}), (("a", 5), {}), ((), {"name": "b", "tags": ("x",)}), (("c", 1, ("t",), ["n"]), {})]:
        ours, theirs = Frozen(*args, **kwargs), FrozenDC(*args, **kwargs)
        assert [getattr(ours, f) for f in records.fields(ours)] == [getattr(theirs, f.name) for f in dataclasses.fields(theirs)]
    assert records.fields(Frozen) == ("name", "size_bytes", "tags", "notes")
    with pytest.raises(TypeError):
        Frozen()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Frozen("a", unknown=1)  # type: ignore[call-arg]


def test_default_factory_is_called_per_record() -> None:
    one, two = Frozen("a"), Frozen("a")
    one.notes.append("x")
    assert two.notes == [] and one.notes == ["x"]
    first, second = Mutable(), Mutable()
    first.values["k"] = 1
    assert second.values == {}


def test_equality_hash_and_repr_match_dataclasses() -> None:
    assert Frozen("a", 1) == Frozen("a", 1) and Frozen("a", 1) != Frozen("a", 2)
    assert Frozen("a") != FrozenDC("a")  # like dataclasses: only the same class compares equal
    assert hash(Frozen("a", 1, ("t",), None)) == hash(FrozenDC("a", 1, ("t",), None))  # type: ignore[arg-type]
    assert {Frozen("a", 1, ("t",), None): 1}[Frozen("a", 1, ("t",), None)] == 1  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        hash(Frozen("a"))  # its notes are a list, as with dataclasses
    with pytest.raises(TypeError):
        hash(FrozenDC("a"))
    assert repr(Frozen("a", 2, ("t",), ["n"])) == repr(FrozenDC("a", 2, ("t",), ["n"])).replace("FrozenDC", "Frozen")
    assert Mutable() == Mutable() and Mutable.__hash__ is None  # mutable and comparable: unhashable, as dataclasses make it


def test_frozen_refuses_assignment_and_slots_hold_the_fields() -> None:
    item = Frozen("a")
    with pytest.raises(records.FrozenInstanceError):
        item.name = "b"  # type: ignore[misc]
    with pytest.raises(AttributeError):  # FrozenInstanceError is an AttributeError, as in dataclasses
        del item.size_bytes  # type: ignore[misc]
    assert Frozen.__slots__ == ("name", "size_bytes", "tags", "notes")
    assert not hasattr(item, "__dict__")
    assert records.is_frozen(Frozen) and not records.is_frozen(Mutable)
    assert Frozen.__doc__ == "A frozen slotted record, as most of the model is." and Frozen.__qualname__ == "Frozen"
    counter = Mutable()
    assert counter.bump() == 1 and counter.count == 1  # methods and assignment on a plain record


def test_replace_copy_and_pickle() -> None:
    item = Frozen("a", 1, ("t",), ["n"])
    changed = replace(item, size_bytes=2)
    assert changed == Frozen("a", 2, ("t",), ["n"]) and item.size_bytes == 1
    with pytest.raises(TypeError, match="no field 'size'"):
        replace(item, size=2)
    assert copy.copy(item) == item and copy.deepcopy(item) == item
    assert pickle.loads(pickle.dumps(item)) == item


def test_unsupported_declarations_are_refused() -> None:
    with pytest.raises(TypeError, match="ClassVar"):

        @record
        class WithClassVar:
            limit: ClassVar[int] = 3  # type: ignore[name-defined]  # noqa: F821 - the annotation stays a string

    with pytest.raises(TypeError, match="__post_init__"):

        @record
        class WithPostInit:
            a: int

            def __post_init__(self) -> None:
                pass

    with pytest.raises(TypeError, match="non-default argument 'b'"):

        @record
        class DefaultFirst:
            a: int = 0
            b: int  # type: ignore[misc]

    with pytest.raises(TypeError, match="inherit"):

        @record
        class Derived(Frozen):
            extra: int = 0


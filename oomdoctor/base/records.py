"""Typed records (``@record``, ``field``, ``replace``): the part of ``dataclasses`` this package uses, at a
fraction of its start-up cost.

``oomdoctor diagnose small.log`` is started by hand and by runbook steps during an incident, and its start
is measured against a bare interpreter (issue 15). ``import dataclasses`` alone costs about as much as the
bare interpreter's whole start (it imports inspect, which imports ast, dis, tokenize and more), and each
``@dataclass`` class then compiles up to six generated methods and, for a docstring-less class, calls
``inspect.signature``: the ~40 records on a small log's path cost ~20 ms, a third of the run. Here a
class has one generated method, its ``__init__`` (so building records stays as fast as with dataclasses,
which matters on a 1 GiB log), and its compiled code is kept in ``disk_cache`` (a table named by the
interpreter build, as ``__pycache__`` files are) so a later start does not compile it again; equality,
hashing, ``repr`` and immutability are shared functions that read the class's field names.

What is kept of dataclasses, and checked by tests/test_records.py: fields from the class's annotations
in order, defaults and ``field(default_factory=...)``, ``frozen`` (assignment
raises ``FrozenInstanceError``, an ``AttributeError``), ``slots``, ``__eq__`` between instances of the
same class only, ``__hash__`` for frozen records and none for mutable ones, the same ``repr``, and
``replace``. Type checkers see a dataclass (``dataclass_transform``). Not supported, and refused where a
class asks for it: ``ClassVar``/``InitVar`` annotations, ``__post_init__``, ordering, keyword-only fields, a record
derived from another.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs ~2 ms to import; mypy reads this name as True
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar

    from typing_extensions import dataclass_transform

    T = TypeVar("T")
else:

    def dataclass_transform(**_kwargs):
        return lambda decorator: decorator


class FrozenInstanceError(AttributeError):
    """Assignment to a field of a frozen record."""


_MISSING = object()


class Field:
    """A field's default factory, as ``dataclasses.field(default_factory=...)`` declares it."""

    __slots__ = ("default_factory",)

    def __init__(self, default_factory: Callable[[], Any]) -> None:
        self.default_factory = default_factory


def field(*, default_factory: Callable[[], Any]) -> Any:
    """A field whose default is built anew for each record (a list, a dict)."""
    return Field(default_factory)


def fields(obj_or_cls: Any) -> tuple[str, ...]:
    """The field names of a record (class or instance), in order."""
    return obj_or_cls.__record_fields__


def is_frozen(cls: type) -> bool:
    return bool(getattr(cls, "__record_frozen__", False))


def replace(obj: T, **changes: Any) -> T:
    """A copy of ``obj`` with some fields changed (``dataclasses.replace``)."""
    names = type(obj).__record_fields__  # type: ignore[attr-defined]
    for name in changes:
        if name not in names:
            raise TypeError(f"{type(obj).__name__} has no field {name!r}")
    values = {name: changes[name] if name in changes else getattr(obj, name) for name in names}
    return type(obj)(**values)


@dataclass_transform(field_specifiers=(field,))
def record(cls: type[T] | None = None, /, *, frozen: bool = False, slots: bool = False) -> Any:
    """``@dataclass`` with only what this package uses; ``@record`` or ``@record(frozen=True, slots=True)``."""

    def wrap(cls: type[T]) -> type[T]:
        return _build(cls, frozen, slots)

    return wrap if cls is None else wrap(cls)


def _build(cls: type, frozen: bool, slots: bool) -> type:
    if any(hasattr(base, "__record_fields__") for base in cls.__mro__[1:]):
        raise TypeError(f"{cls.__name__}: a record cannot inherit from another record here")
    names: list[str] = []
    defaults: dict[str, Any] = {}
    own = cls.__dict__.get("__annotations__", {})  # noqa: RUF063 - inspect is the import this module avoids
    for name, annotation in own.items():
        text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
        if text.startswith(("ClassVar", "typing.ClassVar", "InitVar", "dataclasses.InitVar")):
            raise TypeError(f"{cls.__name__}.{name}: ClassVar and InitVar fields are not supported by records")
        names.append(name)
        value = cls.__dict__.get(name, _MISSING)
        if value is not _MISSING:
            defaults[name] = value
    if "__post_init__" in cls.__dict__:
        raise TypeError(f"{cls.__name__}: __post_init__ is not supported by records")
    seen_default = False
    for name in names:
        if name in defaults:
            seen_default = True
        elif seen_default:
            raise TypeError(f"non-default argument {name!r} follows default argument")

    namespace = dict(cls.__dict__)
    for name in names:
        namespace.pop(name, None)  # a class default would shadow a slot; __init__ holds the defaults
    namespace.pop("__dict__", None)
    namespace.pop("__weakref__", None)
    namespace["__record_fields__"] = tuple(names)
    namespace["__record_defaults__"] = defaults
    namespace["__record_frozen__"] = frozen
    namespace["__match_args__"] = tuple(names)
    namespace["__init__"] = _init(cls, names, defaults, frozen)
    namespace.setdefault("__repr__", _repr)
    if "__eq__" not in cls.__dict__:
        namespace["__eq__"] = _eq
        # As dataclasses do: a frozen record hashes by its fields, a mutable one is unhashable.
        namespace["__hash__"] = _hash if frozen else None
    if frozen:
        namespace["__setattr__"] = _frozen_setattr
        namespace["__delattr__"] = _frozen_delattr
    if slots:
        namespace["__slots__"] = tuple(names)
        if frozen:
            # Without a __dict__, copy and pickle need the state spelled out (what dataclasses add too).
            namespace["__getstate__"] = _getstate
            namespace["__setstate__"] = _setstate
        built = type(cls)(cls.__name__, cls.__bases__, namespace)
        built.__qualname__ = cls.__qualname__
        return built
    for name, value in namespace.items():
        if name not in cls.__dict__ or cls.__dict__[name] is not value:
            setattr(cls, name, value)
    for name in names:
        if name in cls.__dict__:
            delattr(cls, name)
    return cls


def _init(cls: type, names: list[str], defaults: dict[str, Any], frozen: bool) -> Callable[..., None]:
    # One compiled function per class, as dataclasses write it: records are built per log line on large
    # logs, where a generic loop over the fields would cost several times more per record.
    params, body = [], []
    scope: dict[str, Any] = {"__setattr": object.__setattr__}
    for i, name in enumerate(names):
        default = defaults.get(name, _MISSING)
        if isinstance(default, Field):
            scope[f"__factory{i}"] = default.default_factory
            params.append(f"{name}=__missing")
            value = f"__factory{i}() if {name} is __missing else {name}"
        elif default is not _MISSING:
            scope[f"__default{i}"] = default
            params.append(f"{name}=__default{i}")
            value = name
        else:
            params.append(name)
            value = name
        body.append(f"  __setattr(self, {name!r}, {value})" if frozen else f"  self.{name} = {value}")
    scope["__missing"] = _MISSING
    source = f"def __init__(self, {', '.join(params)}):\n" + ("\n".join(body) or "  pass")
    table = _init_code()
    code = table.get(source)
    if not isinstance(code, _CodeType):
        code = compile(source, "<oomdoctor.base.records __init__>", "exec")
        table.add(source, code)
    exec(code, scope)
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init


_CodeType = type(_build.__code__)
_init_table: Any = None


def _init_code() -> Any:
    """The compiled ``__init__`` sources, kept across runs: compiling them is most of a record's class cost."""
    global _init_table
    if _init_table is None:
        from oomdoctor.base import disk_cache

        _init_table = disk_cache.Table(b"oomdoctor-record-init-1", disk_cache.interpreter_build(), limit=1024)
    return _init_table


def _repr(self: Any) -> str:
    fields_text = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__record_fields__)
    return f"{type(self).__qualname__}({fields_text})"


def _values(self: Any) -> tuple[Any, ...]:
    return tuple(getattr(self, name) for name in self.__record_fields__)


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _values(self) == _values(other)


def _hash(self: Any) -> int:
    return hash(_values(self))


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


def _getstate(self: Any) -> tuple[Any, ...]:
    return _values(self)


def _setstate(self: Any, state: tuple[Any, ...]) -> None:
    for name, value in zip(self.__record_fields__, state, strict=True):
        object.__setattr__(self, name, value)

"""Per-process memoisation without functools: ``functools`` imports ``collections`` (~2 ms of a start
that issue 15 holds to 3x a bare interpreter's), for what a dict does here."""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost); mypy reads this as True
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import ParamSpec, TypeVar

    P = ParamSpec("P")
    T = TypeVar("T")


def memo(maxsize: int | None = None) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """``functools.lru_cache(maxsize)`` for functions of hashable positional arguments; past ``maxsize``
    entries the oldest is dropped (first in, first out: these caches see a handful of keys)."""

    def wrap(fn: Callable[P, T]) -> Callable[P, T]:
        results: dict[tuple[object, ...], T] = {}

        def cached(*args: P.args, **kwargs: P.kwargs) -> T:
            if kwargs:
                return fn(*args, **kwargs)
            try:
                return results[args]
            except KeyError:
                pass
            value = results[args] = fn(*args, **kwargs)
            if maxsize is not None and len(results) > maxsize:
                results.pop(next(iter(results)), None)  # another thread may have dropped it first
            return value

        cached.__name__ = getattr(fn, "__name__", "cached")
        cached.__doc__ = fn.__doc__
        cached.__wrapped__ = fn  # type: ignore[attr-defined]
        return cached

    return wrap

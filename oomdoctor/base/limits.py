"""Small shared guards for untrusted structured input and small-input stream transforms."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from typing import Any


def nesting_depth(data: Any, limit: int) -> int:
    """Depth of nested tables/objects and arrays, counted without recursion; stops once past ``limit``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def whole_if_small(chunks: Iterable[bytes], max_bytes: int) -> tuple[bytes | None, Iterator[bytes]]:
    """The whole input when it is at most ``max_bytes`` (and an empty rest), else None and every chunk, in order.

    For transforms that only apply to small inputs (a pasted bug report, a console export): a large
    log streams on untouched, with only the first ``max_bytes`` held at a time.
    """
    buffered: list[bytes] = []
    size = 0
    it = iter(chunks)
    for chunk in it:
        buffered.append(chunk)
        size += len(chunk)
        if size > max_bytes:
            return None, _chain(buffered, it)
    return b"".join(buffered), iter(())


def _chain(head: list[bytes], rest: Iterator[bytes]) -> Iterator[bytes]:
    yield from head
    yield from rest

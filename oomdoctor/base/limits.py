"""Small shared guards for untrusted structured input and small-input stream transforms.

Every input that is read whole (evidence files, configs, issue bodies) has a size cap, checked before
its bytes are read (``read_capped``), and is parsed inside ``memory_budget``: the one resource limit
for a single input, so that no parse of a hostile file (a pickle or JSON bomb) takes the process past
about 500 MB of RSS. Logs are not read whole: they stream in chunks of whole lines.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

from oomdoctor.base.errors import InputError

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from typing import Any

MIB = 1 << 20
# What parsing one input may add to the process's address space (README "Input caps"): with the
# interpreter and the rest of a diagnosis, the process stays under 500 MB of RSS.
INPUT_MEMORY_BYTES = 384 * MIB


def read_capped(path: str, max_bytes: int, what: str) -> bytes:
    """The bytes of ``path``; InputError when it holds more than ``max_bytes`` (a file's size is checked before reading).

    Reads at most ``max_bytes + 1`` bytes whatever the file is: /dev/zero, a FIFO or a file that
    grows while it is read cannot make this read more.
    """
    try:
        with open(path, "rb") as fh:
            try:
                size = os.fstat(fh.fileno()).st_size
            except OSError:
                size = 0
            if size > max_bytes:
                raise InputError(too_large(path, size, max_bytes, what))
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if len(data) > max_bytes:
        raise InputError(too_large(path, None, max_bytes, what))
    return data


def too_large(path: str, size: int | None, max_bytes: int, what: str) -> str:
    got = f" ({size / MIB:.1f} MiB)" if size is not None else ""
    return f"{path}: larger{got} than the {max_bytes // MIB} MiB cap for {what} (README \"Input caps\"); not read"


@contextlib.contextmanager
def memory_budget(path: str, what: str, max_bytes: int = INPUT_MEMORY_BYTES) -> Iterator[None]:
    """Inside the block the process may grow its address space by at most ``max_bytes`` (Linux RLIMIT_AS).

    An allocation past it raises MemoryError, which leaves the block as InputError naming the input:
    a hostile file is refused with the limit named instead of taking the host's memory. A no-op where
    the limit cannot be set (no /proc, no RLIMIT_AS) and inside another budget that is already tighter.
    """
    old = _tighten_address_space(max_bytes)
    try:
        yield
    except MemoryError:
        raise InputError(
            f"{path}: reading this {what} needs more than {max_bytes // MIB} MiB of memory, "
            "the limit for one input (README \"Input caps\"); a file built to exhaust memory, or far larger than any real one"
        ) from None
    finally:
        if old is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, old)


def _tighten_address_space(max_bytes: int) -> tuple[int, int] | None:
    """Lower RLIMIT_AS to the current size plus ``max_bytes``; the limit it replaced, or None when unchanged."""
    try:
        import resource

        with open("/proc/self/statm") as fh:
            current = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        new = current + max_bytes
        if hard != resource.RLIM_INFINITY:
            new = min(new, hard)
        if soft != resource.RLIM_INFINITY and soft <= new:
            return None  # already as tight (an enclosing budget, or the user's ulimit -v)
        resource.setrlimit(resource.RLIMIT_AS, (new, hard))
        return (soft, hard)
    except (ImportError, OSError, ValueError, AttributeError):
        return None


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


def take_head(chunks: Iterable[bytes], min_bytes: int) -> tuple[list[bytes], Iterator[bytes]]:
    """The first chunks, until they hold more than ``min_bytes`` (or all there are), and the rest after them.

    For a decision on an input's head (a paste's damage, a bug report's fences) that lets the input
    stream on as it came when the head says nothing is to be done.
    """
    head: list[bytes] = []
    size = 0
    it = iter(chunks)
    for chunk in it:
        head.append(chunk)
        size += len(chunk)
        if size > min_bytes:
            break
    return head, it


def chained(head: list[bytes], rest: Iterator[bytes]) -> Iterator[bytes]:
    """``head``'s chunks, then the rest (what take_head split)."""
    return _chain(head, rest)


def _chain(head: list[bytes], rest: Iterator[bytes]) -> Iterator[bytes]:
    yield from head
    yield from rest

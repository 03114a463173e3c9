"""Named, typed regex captures: a group's name says what it holds, one function makes it a value.

Every capture group of a parser pattern is named ``<key>_<suffix>``, grok-style; the suffix says the
group's unit or type, and ``typed`` turns a match into ``{output key: value}`` by it:

=========  ===============================================  ===========================  ============
suffix     the group holds                                  value                        output key
=========  ===============================================  ===========================  ============
``_gib``   a number in GiB (SGLang's and vLLM's "GB" too:   ``int`` bytes                ``<key>_bytes``
           both divide by 2**30)
``_mib``   a number in MiB                                  ``int`` bytes                ``<key>_bytes``
``_gb``    a number of decimal GB (SGLang's host-memory     ``int`` bytes                ``<key>_bytes``
           pool lines divide by 1e9)
``_size``  a number with its unit ("2.00 GiB", "512 bytes", ``int`` bytes, or None when  ``<key>_bytes``
           "1.5GiB"); blanks inside are ignored             unreadable or implausible
``_ask``   a requested size with its unit (as ``_size``,    ``int`` bytes, or None when  ``<key>_bytes``
           but a request may exceed any GPU: only sizes     unreadable or >= 1 EiB
           the allocator itself words otherwise are
           implausible)
``_bytes`` a number of bytes                                ``int``                      ``<key>_bytes``
``_n``     an integer count, thousands separators allowed   ``int``                      ``<key>``
``_f``     a plain number (fraction, ratio, seconds)        ``float``                    ``<key>``
``_str``   text                                             ``str`` as matched           ``<key>``
``_flag``  a word whose presence is the information         ``bool``: matched or not     ``<key>``
=========  ===============================================  ===========================  ============

A group that did not take part in the match gives None (``_flag``: False), so an optional clause
never shifts another group. ``named`` checks the suffixes when a pattern is declared (at import);
``typed`` refuses a pattern with an unnamed capture group the first time it converts one of its matches.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from oomdoctor.base.units import UnitError, gb_to_bytes, gib_to_bytes, is_plausible_device_bytes, mib_to_bytes, parse_size_bytes
from oomdoctor.input.patterns import LazyRegex, Needle, lazy

if TYPE_CHECKING:
    import re
    from collections.abc import Callable
    from typing import Any

    _Converter = Callable[[str], Any]
    _Plan = tuple[tuple[str, _Converter | None], ...]

# A number as the engines print it: optional minus, optional decimals.
NUM = r"-?\d+(?:\.\d+)?"
# A thousands-separated count: "1,048,576".
COUNT = r"\d[\d,]*"


_IMPLAUSIBLE = object()  # what _size returns for a size no GPU has; typed reports it and stores None


class CaptureNameError(ValueError):
    """A pattern with a capture group that is unnamed or whose name has no known unit suffix."""


def _size(text: str) -> Any:
    try:
        value = parse_size_bytes(text.replace(" ", ""))
    except UnitError:
        return None
    # NVML's NOT_AVAILABLE sentinel and misprints produce sizes no GPU has; flag, do not trust.
    return value if is_plausible_device_bytes(value) else _IMPLAUSIBLE


# PyTorch's allocators word a request of 1 EiB or more as "Tried to allocate more than 1EB memory", so a
# printed request size is below it; a request larger than any card (a shape bug asking for 127 TiB) is
# real, and it is the diagnosis.
MAX_PRINTED_REQUEST_BYTES = 1 << 60


def _asked(text: str) -> Any:
    try:
        value = parse_size_bytes(text.replace(" ", ""))
    except UnitError:
        return None
    return value if 0 <= value < MAX_PRINTED_REQUEST_BYTES else _IMPLAUSIBLE


def _count(text: str) -> int:
    return int(text.replace(",", ""))


# suffix -> (what replaces it in the output key, converter of a group that took part in the match)
SUFFIXES: dict[str, tuple[str, _Converter]] = {
    "_gib": ("_bytes", lambda t: gib_to_bytes(float(t))),
    "_mib": ("_bytes", lambda t: mib_to_bytes(float(t))),
    "_gb": ("_bytes", lambda t: gb_to_bytes(float(t))),
    "_size": ("_bytes", _size),
    "_ask": ("_bytes", _asked),
    "_bytes": ("_bytes", _count),
    "_n": ("", _count),
    "_f": ("", float),
    "_str": ("", str),
    "_flag": ("", bool),  # not called: a flag is whether its group took part
}
_FLAG = "_flag"

_GROUP_NAME_RE = re.compile(r"\(\?P<(\w+)>")

# A pattern's plan: per capture group, in group order, its output key and converter (None: a flag).
# Keyed by id() (hashing a compiled pattern hashes its whole code), with the pattern kept to check it.
_PLANS: dict[int, tuple[re.Pattern[str], _Plan]] = {}


def _split(name: str) -> tuple[str, str]:
    """(output key, suffix) of a group name, or CaptureNameError."""
    for suffix, (out_suffix, _) in SUFFIXES.items():
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)] + out_suffix, suffix
    raise CaptureNameError(f"capture group {name!r} has no unit suffix (one of {', '.join(SUFFIXES)})")


def check_source(source: str) -> None:
    """Refuse a pattern source with a named group whose name has no known suffix."""
    for name in _GROUP_NAME_RE.findall(source):
        _split(name)


def named(needle: Needle, source: str, flags: int = 0) -> LazyRegex:
    """``patterns.lazy`` for a pattern read with ``typed``: its group names are checked now."""
    check_source(source)
    return lazy(needle, source, flags)


def _plan(pattern: re.Pattern[str]) -> _Plan:
    if pattern.groups != len(pattern.groupindex):
        raise CaptureNameError(f"pattern {pattern.pattern!r} has an unnamed capture group; name it <key>_<suffix>")
    steps = []
    for name in sorted(pattern.groupindex, key=pattern.groupindex.__getitem__):
        key, suffix = _split(name)
        steps.append((key, None if suffix == _FLAG else SUFFIXES[suffix][1]))
    plan = tuple(steps)
    _PLANS[id(pattern)] = (pattern, plan)
    return plan


def typed(m: re.Match[str], implausible: dict[str, str] | None = None) -> dict[str, Any]:
    """A match's groups as ``{output key: typed value}``, in group order; absent groups are None.

    A ``_size`` group too large for any GPU is None too; ``implausible`` (when given) gets its output
    key and text.
    """
    pattern = m.re
    entry = _PLANS.get(id(pattern))
    plan = entry[1] if entry is not None and entry[0] is pattern else _plan(pattern)
    values: dict[str, Any] = {}
    for (key, convert), text in zip(plan, m.groups()):  # noqa: B905 (the plan has one step per group)
        if convert is None:
            values[key] = text is not None
        elif text is None:
            values[key] = None
        else:
            value = convert(text)
            if value is _IMPLAUSIBLE:
                if implausible is not None:
                    implausible[key] = text.strip()
                value = None
            values[key] = value
    return values


def present(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` without the keys of absent groups (for messages whose optional clauses are simply missing)."""
    return {k: v for k, v in values.items() if v is not None}

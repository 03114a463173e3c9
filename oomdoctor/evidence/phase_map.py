"""The engines' generated phase map (data/knowledge/frame_phases.tsv, from tools/knowledge/): a traceback
frame's file and function -> the phase the engine's own code puts that function in.

The map is read only when a traceback has a frame under one of the engines' packages, and a module's
functions are split only when a traceback names it (the file is one module per line: its layout is
described in tools/knowledge/frame_phases.py). The phases here are the generated vocabulary (prefill_decode, kv_pool, ...); the phase
step maps them onto its own (data/phases.toml, [frame_map]).
"""

from __future__ import annotations

import functools
import os
from typing import NamedTuple

from oomdoctor.base.built_in import DATA_DIR

PATH = os.path.join(DATA_DIR, "knowledge", "frame_phases.tsv")
_INSTALL_ROOTS = ("site-packages", "dist-packages")


class ModulePhases(NamedTuple):
    """One module of the map: its own phase, and the names listed with theirs (``own``: a declared root or
    its name says it; ``calls``: reached from a root through the call graph)."""

    phase: str
    own: dict[str, frozenset[str]]
    calls: dict[str, frozenset[str]]

    def function(self, name: str) -> tuple[frozenset[str], frozenset[str]]:
        """The phases a bare function name has in this module (a traceback names no class or release)."""
        name = name.rsplit(".", 1)[-1]
        return self.own.get(name, frozenset()), self.calls.get(name, frozenset())


@functools.cache
def packages() -> frozenset[str]:
    """The import packages the map covers (its first line): only their frames are looked up."""
    with open(PATH, encoding="utf-8") as fh:
        head = fh.readline().rstrip("\n").split("\t")
    return frozenset(head[1].split()) if len(head) == 2 and head[0] == "packages" else frozenset()


@functools.cache
def _lines() -> dict[str, str]:
    """Module -> the rest of its line (its phase and named functions), for every module the map lists."""
    with open(PATH, encoding="utf-8") as fh:
        next(fh)  # the packages line
        return dict(line.rstrip("\n").split("\t", 1) for line in fh)


def package_path(path: str) -> str:
    """A frame's file path from its installed package on ("/vllm/v1/engine/core.py"): the directories
    above it are the user's (an environment named "whisperx" is no audio encoder). A path outside any
    install root (a source checkout) is kept whole."""
    cut = max(path.rfind(root) for root in _INSTALL_ROOTS)
    return path[cut + len("site-packages") :] if cut >= 0 else path


def module_of(path: str) -> str | None:
    """The dotted module of a frame's file under one of the engines' packages, or None."""
    if not path.endswith(".py"):
        return None
    path = path.replace("\\", "/")
    installed = package_path(path)
    if installed != path:
        parts = installed.lstrip("/").split("/")
    else:
        # A checkout: the last folder named like an engine's package is where its modules start
        # (…/sglang/python/sglang/srt/…).
        parts = path.split("/")
        known = packages()
        starts = [i for i, part in enumerate(parts) if part in known]
        if not starts:
            return None
        parts = parts[starts[-1] :]
    if parts[0] not in packages():
        return None
    parts[-1] = parts[-1][: -len(".py")]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache
def module(name: str) -> ModulePhases | None:
    """The map's line for a module, or None (a module no release of the engines has, or one that says nothing)."""
    rest = _lines().get(name)
    if rest is None:
        return None
    fields = [name, *rest.split("\t")]
    own: dict[str, set[str]] = {}
    calls: dict[str, set[str]] = {}
    for field in fields[2:]:
        kind, _, rest = field.partition(":")
        phase, _, names = rest.partition("=")
        into = own if kind == "own" else calls
        for fn in names.split(","):
            into.setdefault(fn, set()).add(phase)
    return ModulePhases(fields[1], {k: frozenset(v) for k, v in own.items()}, {k: frozenset(v) for k, v in calls.items()})


def frame(path: str, func: str) -> tuple[frozenset[str], frozenset[str], str] | None:
    """A frame's phases by the map: (own, calls, the module's phase), or None when the map has no such module."""
    name = module_of(path)
    found = module(name) if name is not None else None
    if found is None:
        return None
    own, calls = found.function(func)
    return own, calls, found.phase

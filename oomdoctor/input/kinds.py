"""What kind of input a path is: an oomdoctor bundle folder, an evidence file, monitoring data or a log.

The one place these names and suffixes live: the directory walk (input.files), the evidence readers
(evidence.collected), the pipeline and the commands all ask here.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from oomdoctor.base.errors import InputError
from oomdoctor.base.limits import nesting_depth

if TYPE_CHECKING:
    from typing import Any

BUNDLE_KIND = "oomdoctor-bundle"
BUNDLE_VERSION = 1

SNAPSHOT_SUFFIXES = (".pickle", ".pkl")
# Monitoring evidence a directory walk hands over with the logs: a saved DCGM exporter /metrics scrape.
MONITORING_SUFFIXES = (".prom", ".metrics")
# Evidence JSON (manifests, memory_stats, samples, snapshots) is a few levels deep; deeper nesting is
# hostile or corrupt and is refused before anything walks it.
MAX_JSON_DEPTH = 64
# = oomdoctor.evidence.collected.MAX_EVIDENCE_JSON_BYTES (a manifest is evidence JSON).
MAX_MANIFEST_BYTES = 64 << 20


def read_json(text: str, path: str, finite: bool = True) -> Any:
    """Parsed evidence JSON; InputError (never RecursionError or a huge-int ValueError) when it is not sane.

    ``finite``: a NaN or an infinity anywhere (NaN, Infinity, 1e400) is refused with where it is; no
    evidence oomdoctor reads has one, and arithmetic on it gives nonsense rather than an error.
    """
    import json  # here: a plain log diagnosis reads no JSON and need not import it

    try:
        data = json.loads(text)
    except RecursionError:
        raise InputError(f"{path}: JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:
        raise InputError(f"{path}: not JSON ({str(exc)[:200]})") from None
    if nesting_depth(data, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
        raise InputError(f"{path}: JSON nested deeper than {MAX_JSON_DEPTH} levels")
    if finite:
        bad = _non_finite(data)
        if bad is not None:
            where, value = bad
            raise InputError(f"{path}: {where or 'the document'} is {value}, not a byte count or any finite number (NaN and infinities are refused)")
    return data


def _non_finite(data: Any) -> tuple[str, float] | None:
    """Where the first NaN or infinity of parsed JSON is (``a.b[3]``), without recursion; None when there is none."""
    import math

    stack: list[tuple[Any, str]] = [(data, "")]
    while stack:
        node, where = stack.pop()
        if isinstance(node, float):
            if not math.isfinite(node):
                return where, node
        elif isinstance(node, dict):
            stack.extend((v, f"{where}.{k}" if where else str(k)) for k, v in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(node))))
    return None


def is_bundle_dir(path: str) -> bool:
    """A folder that `collect`, `run` or the capture hook wrote: its manifest says so."""
    manifest = os.path.join(path, "manifest.json")
    if not os.path.isfile(manifest):
        return False
    if os.path.islink(manifest):
        # A manifest that is a link out of the folder does not make it a bundle (nor is it read).
        root = os.path.realpath(path)
        if not os.path.realpath(manifest).startswith(root.rstrip(os.sep) + os.sep):
            return False
    from oomdoctor.base.limits import memory_budget, read_capped

    try:
        # Whether its values are sane is for the evidence reader to say (with the reason); only the kind here.
        with memory_budget(manifest, "bundle manifest"):
            text = read_capped(manifest, MAX_MANIFEST_BYTES, "a bundle manifest").decode("utf-8", "replace")
            return read_json(text, manifest, finite=False).get("kind") == BUNDLE_KIND
    except (OSError, InputError, AttributeError):
        return False


def is_evidence_file(path: str) -> bool:
    """A file read as evidence rather than as a log: snapshots, JSON, nvidia-smi CSV/XML, monitoring scrapes."""
    return path.endswith((*SNAPSHOT_SUFFIXES, ".json", ".csv", ".xml", *MONITORING_SUFFIXES))


def plain_name(path: str) -> str:
    """A log's file name without its compression suffix (copies are stored decompressed)."""
    return os.path.basename(path).removesuffix(".gz").removesuffix(".bz2").removesuffix(".xz")

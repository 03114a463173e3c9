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


def read_json(text: str, path: str) -> Any:
    """Parsed evidence JSON; InputError (never RecursionError or a huge-int ValueError) when it is not sane."""
    import json  # here: a plain log diagnosis reads no JSON and need not import it

    try:
        data = json.loads(text)
    except RecursionError:
        raise InputError(f"{path}: JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:
        raise InputError(f"{path}: not JSON ({str(exc)[:200]})") from None
    if nesting_depth(data, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
        raise InputError(f"{path}: JSON nested deeper than {MAX_JSON_DEPTH} levels")
    return data


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
    try:
        with open(manifest, encoding="utf-8", errors="replace") as fh:
            return read_json(fh.read(), manifest).get("kind") == BUNDLE_KIND
    except (OSError, InputError, AttributeError):
        return False


def is_evidence_file(path: str) -> bool:
    """A file read as evidence rather than as a log: snapshots, JSON, nvidia-smi CSV/XML, monitoring scrapes."""
    return path.endswith((*SNAPSHOT_SUFFIXES, ".json", ".csv", ".xml", *MONITORING_SUFFIXES))

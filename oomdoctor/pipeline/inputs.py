"""Which inputs are logs to read and which are collected evidence (bundles, DCGM scrapes, memory stats, nvidia-smi)."""

from __future__ import annotations

import os

from oomdoctor.input import kinds
from oomdoctor.input.files import file_head


def _is_issue_export(path: str) -> bool:
    """An issue's JSON export (body and comments) is a bug report to read, not collected evidence."""
    if not path.lower().endswith(".json"):
        return False
    head = file_head(path, 4 << 20)
    if head is None:
        return False
    from oomdoctor.input import issue_body

    return issue_body.is_issue_json(head.decode("utf-8", "replace"))


def split_evidence(paths: list[str]) -> tuple[list[str], list[str]]:
    """Log paths, and non-log evidence files (bundle manifests, memory_stats, snapshots, nvidia-smi)."""
    logs: list[str] = []
    evidence: list[str] = []
    for path in paths:
        if path != "-" and os.path.isdir(path) and kinds.is_bundle_dir(path):
            from oomdoctor.evidence import collected  # a bundle's reader: a plain log never needs it

            evidence.extend(collected.evidence_files(path))
            logs.append(path)
        elif path != "-" and os.path.isfile(path) and not _is_issue_export(path) and kinds.is_evidence_file(path):
            evidence.append(path)
        else:
            logs.append(path)
    return logs, evidence


def is_monitoring_text(path: str) -> bool:
    """A DCGM exporter scrape given by path, whatever its name (`curl .../metrics > metrics.txt`)."""
    if path == "-" or not os.path.isfile(path) or path.lower().endswith((".json", ".csv", ".xml", ".gz", ".bz2", ".xz")):
        return False
    if path.lower().endswith(kinds.MONITORING_SUFFIXES):
        return True
    head = file_head(path, 64 << 10)
    if head is None or not head.lstrip().startswith((b"# HELP DCGM_", b"# TYPE DCGM_", b"DCGM_FI_")):
        return False
    from oomdoctor.evidence import monitoring

    return monitoring.looks_like_dcgm(head)

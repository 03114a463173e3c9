"""The one library entry point: paths in, a Diagnosis out. The CLI, `oomdoctor run` and the gallery use it.

    from oomdoctor.api import diagnose
    d = diagnose(["server.log"])
    d.verdict_class, d.verdict_confidence, d.evidence.status, d.phase.name

Errors are typed (oomdoctor.base.errors): InputError for unreadable input, RuleError for a bad rule
file; the CLI maps them to exit codes, nothing here exits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomdoctor.inference.rule_engine import Rule
from oomdoctor.pipeline.model import Diagnosis

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Any


def load_rules(extra_dirs: Iterable[str] = (), advice_ids: Iterable[str] | None = None) -> list[Rule]:
    """The shipped rules plus those in ``extra_dirs``, validated against the advice registry given."""
    from oomdoctor.advice.registry import known_advice
    from oomdoctor.inference.rule_engine import load_rules as _load

    return _load(tuple(extra_dirs), known_advice() if advice_ids is None else advice_ids)


def diagnose(
    paths: Sequence[str], *, rules: list[Rule] | None = None, system: str = "auto", recommenders: Mapping[str, Any] | None = None
) -> Diagnosis:
    """Diagnose one incident from its inputs (logs, compressed logs, bundle directories, '-' for stdin).

    ``rules``: the rule catalogue (default: the shipped one); ``system``: auto, sglang, vllm or torch;
    ``recommenders``: the advice registry, by name (default: the shipped one, oomdoctor.advice.registry.registry()).
    Redaction is applied when the Diagnosis is turned into a view (oomdoctor.report.view.build_view).
    """
    from oomdoctor.advice.registry import registry
    from oomdoctor.pipeline.diagnosis import diagnose as _diagnose

    table = recommenders if recommenders is not None else registry()
    return _diagnose(list(paths), rules if rules is not None else load_rules(advice_ids=table.keys()), system=None if system == "auto" else system, recommenders=table)

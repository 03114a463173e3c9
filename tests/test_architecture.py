"""The layers (README "Architecture") as an import graph over oomdoctor/, checked statically."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "oomdoctor"

# Who may import the view model: the CLI, the library entry points that render, and the renderers.
VIEW_USERS = {"oomdoctor.cli", "oomdoctor.diagnose_command", "oomdoctor.flight", "oomdoctor.view"}
PIPELINE = {"oomdoctor.diagnosis", "oomdoctor.facts", "oomdoctor.api", "oomdoctor.runs"}


def _module(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    return ".".join(rel.parts).removesuffix(".__init__")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return {m for m in out if m.startswith("oomdoctor")}


GRAPH = {_module(p): _imports(p) for p in PKG.rglob("*.py")}


def test_graph_is_read() -> None:
    assert "oomdoctor.render.text" in GRAPH and "oomdoctor.diagnosis" in GRAPH
    assert "oomdoctor.parsers.torch_oom" in GRAPH["oomdoctor.diagnosis"]


def test_renderers_import_neither_the_pipeline_nor_a_parser() -> None:
    for mod, deps in GRAPH.items():
        if not mod.startswith("oomdoctor.render"):
            continue
        bad = {d for d in deps if d in PIPELINE or d.startswith("oomdoctor.parsers") or d == "oomdoctor.view"}
        assert not bad, f"{mod} imports {sorted(bad)}"


def test_nothing_below_the_view_imports_it() -> None:
    for mod, deps in GRAPH.items():
        if mod in VIEW_USERS:
            continue
        assert "oomdoctor.view" not in deps, f"{mod} imports the view model"


def test_parsers_import_no_higher_layer() -> None:
    higher = PIPELINE | {"oomdoctor.view", "oomdoctor.contract", "oomdoctor.rule_engine", "oomdoctor.advice"}
    for mod, deps in GRAPH.items():
        if mod.startswith("oomdoctor.parsers"):
            bad = {d for d in deps if d in higher or d.startswith("oomdoctor.render")}
            assert not bad, f"{mod} imports {sorted(bad)}"


def test_parsers_are_imported_only_by_fact_builders_and_pipeline() -> None:
    allowed = {"oomdoctor.diagnosis", "oomdoctor.facts", "oomdoctor.runs", "oomdoctor.readings"}
    for mod, deps in GRAPH.items():
        if mod.startswith(("oomdoctor.parsers", "oomdoctor.facts")) or mod in allowed:
            continue
        bad = {d for d in deps if d.startswith("oomdoctor.parsers")}
        assert not bad, f"{mod} imports a parser: {sorted(bad)}"


def test_the_advice_registry_is_passed_explicitly(tmp_path) -> None:
    """api.diagnose takes the recommenders it uses; a custom registry reaches the findings."""
    from oomdoctor import advice
    from oomdoctor.api import diagnose

    log = PKG.parent / "tests" / "fixtures" / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log"
    table = dict(advice.registry())
    table["raise-mem-fraction-static"] = lambda facts: [advice.Recommendation("--custom-flag", 1, "set", "from a custom registry")]
    d = diagnose([str(log)], recommenders=table)
    assert [r.flag for r in d.findings[0].recommendations] == ["--custom-flag"]
    assert diagnose([str(log)]).findings[0].recommendations[0].flag == "--mem-fraction-static"

"""The layers (``oomdoctor.LAYERS``, README "Architecture") checked on the real import graph of oomdoctor/.

One rule: a module imports only from its own layer and the layers before it. Every import counts,
those inside functions and under TYPE_CHECKING too, because a lazy upward import is still an upward
dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import oomdoctor

# The checkout's source, whatever the installed copy (CI installs the package non-editable).
PKG = Path(__file__).resolve().parent.parent / "oomdoctor"
# The top level besides the layer packages: the package itself, ``python -m oomdoctor``, and the
# in-server capture hook with its site directory.
ENTRY = {"oomdoctor", "oomdoctor.__main__"}
CAPTURE = {"oomdoctor.capture", "oomdoctor._capture_site"}


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    return ".".join(rel.parts).removesuffix(".__init__")


def imported_modules(text: str, module: str, is_package: bool = False) -> set[str]:
    """Every oomdoctor module or package the source ``text`` of ``module`` imports, relative imports resolved."""
    tree = ast.parse(text)
    here = module.split(".")
    package = here if is_package else here[:-1]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            target = ".".join(p for p in (base, node.module or "") if p)
            out.add(target)
            out.update(f"{target}.{a.name}" for a in node.names)
    return {m for m in out if m == "oomdoctor" or m.startswith("oomdoctor.")}


def import_graph() -> dict[str, set[str]]:
    return {module_name(p): imported_modules(p.read_text(encoding="utf-8"), module_name(p), p.name == "__init__.py") for p in PKG.rglob("*.py")}


def layer_of(module: str) -> str | None:
    """The layer a module belongs to: the first name under oomdoctor, when it is a declared layer."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in oomdoctor.LAYERS else None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a layer above the importing module's, as 'importer -> imported'."""
    rank = {name: i for i, name in enumerate(oomdoctor.LAYERS)}
    bad = []
    for importer, targets in graph.items():
        own = layer_of(importer)
        for target in targets:
            theirs = layer_of(target)
            if theirs is None:
                continue  # oomdoctor itself (__version__, LAYERS) or a name inside it
            if importer in CAPTURE or (own is not None and rank[theirs] > rank[own]):
                bad.append(f"{importer} -> {target}")
    return sorted(bad)


def test_every_module_is_in_a_layer_or_is_the_entry_or_capture() -> None:
    graph = import_graph()
    assert len(graph) > 50 and "oomdoctor.pipeline.diagnosis" in graph
    strays = [m for m in graph if layer_of(m) is None and m not in ENTRY and not m.startswith(tuple(CAPTURE))]
    assert strays == [], f"modules outside the declared layers (oomdoctor.LAYERS): {strays}"


def test_every_layer_is_a_package_on_disk() -> None:
    for name in oomdoctor.LAYERS:
        assert (PKG / name / "__init__.py").is_file() or (PKG / f"{name}.py").is_file(), name


# A module a newcomer can read whole: past this a module holds more than one job (issue 22's god modules
# were 1,164 and 988 lines; the two last split were the scanner and its matchers, the torch parser and
# its tables of other runtimes' OOM signatures).
MAX_MODULE_LINES = 600
# The top level of oomdoctor/: what users import or run there; everything else lives in a layer package.
TOP_LEVEL_FILES = {"__init__.py", "__main__.py", "api.py", "capture.py", "py.typed"}


def modules_over(limit: int, root: Path = PKG) -> dict[str, int]:
    sizes = {str(p.relative_to(root)): len(p.read_text(encoding="utf-8").splitlines()) for p in root.rglob("*.py")}
    return {name: n for name, n in sizes.items() if n > limit}


def test_no_module_is_over_600_lines() -> None:
    assert modules_over(MAX_MODULE_LINES) == {}


def test_a_long_module_is_caught(tmp_path: Path) -> None:
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert modules_over(MAX_MODULE_LINES, tmp_path) == {"pkg/long.py": MAX_MODULE_LINES + 1}


def test_the_top_level_holds_only_the_user_facing_modules_and_packages() -> None:
    files = {p.name for p in PKG.iterdir() if p.is_file()}
    assert files == TOP_LEVEL_FILES
    folders = {p.name for p in PKG.iterdir() if p.is_dir() and p.name != "__pycache__"}
    # Layer packages, the capture hook's site directory, and data folders (no Python in those).
    others = folders - set(oomdoctor.LAYERS) - {"_capture_site"}
    assert others == {"data", "templates"}
    assert not [p for name in others for p in (PKG / name).rglob("*.py")]


def test_no_module_imports_a_layer_above_its_own() -> None:
    assert upward_imports(import_graph()) == []


def test_an_upward_import_is_caught() -> None:
    """The check itself: one import from the lowest layer up to the renderers is reported, and capture importing anything is."""
    graph = import_graph()
    graph["oomdoctor.base.units"] = graph["oomdoctor.base.units"] | {"oomdoctor.report.view"}
    graph["oomdoctor.capture"] = graph["oomdoctor.capture"] | {"oomdoctor.base.errors"}
    assert upward_imports(graph) == ["oomdoctor.base.units -> oomdoctor.report.view", "oomdoctor.capture -> oomdoctor.base.errors"]


def test_a_lazy_upward_import_in_a_function_is_read() -> None:
    """Imports inside functions and under TYPE_CHECKING are edges too, parsed from source as the graph is."""
    text = (PKG / "base" / "units.py").read_text(encoding="utf-8")
    text += "\n\ndef _late():\n    from oomdoctor.report import view\n    return view\n"
    text += "\nif TYPE_CHECKING:\n    from ..pipeline.model import Diagnosis\n"
    graph = import_graph()
    graph["oomdoctor.base.units"] = imported_modules(text, "oomdoctor.base.units")
    assert {"oomdoctor.base.units -> oomdoctor.report.view", "oomdoctor.base.units -> oomdoctor.pipeline.model.Diagnosis"} <= set(upward_imports(graph))


def test_the_advice_registry_is_passed_explicitly() -> None:
    """api.diagnose takes the recommenders it uses; a custom registry reaches the findings."""
    from oomdoctor.advice.recommendation import Recommendation
    from oomdoctor.advice.registry import registry
    from oomdoctor.api import diagnose

    log = PKG.parent / "tests" / "fixtures" / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log"
    table = dict(registry())
    table["raise-mem-fraction-static"] = lambda facts: [Recommendation("--custom-flag", 1, "set", "from a custom registry")]
    d = diagnose([str(log)], recommenders=table)
    assert [r.flag for r in d.findings[0].recommendations] == ["--custom-flag"]
    assert diagnose([str(log)]).findings[0].recommendations[0].flag == "--mem-fraction-static"


# Suites that check the whole program rather than one package: the rule fixtures and their snapshots,
# properties over every parser, packaging, lint and Python-version gates, hostile and trust inputs.
CROSS_CUTTING = {"test_architecture", "test_fixtures", "test_snapshots", "test_properties", "test_packaging", "test_lint_types", "test_py310", "test_hostile_inputs", "test_trust", "test_capture"}


def test_unit_tests_are_named_after_the_package_they_test() -> None:
    tests = sorted(p.stem for p in (PKG.parent / "tests").glob("test_*.py"))
    # test_data_<file>: a generated or shipped data file of oomdoctor/data/ checked on its own.
    stray = [t for t in tests if t not in CROSS_CUTTING and t.removeprefix("test_").split("_")[0] not in (*oomdoctor.LAYERS, "data")]
    assert stray == [], f"name these test_<layer>_<module>.py: {stray}"


def rule_ids_spelled_in(text: str, ids: set[str]) -> set[str]:
    """The rule ids that appear as string literals in a module's source."""
    return {node.value for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Constant) and node.value in ids}


def test_no_rule_id_is_spelled_in_python() -> None:
    """A rule's behaviour comes from its file (class, advice ids, facts), never from code keyed on its id:
    renaming the rule would silently drop that behaviour while `rules check` says OK."""
    ids = {p.stem for p in (PKG.parent / "rules").glob("*.toml")}
    assert len(ids) > 20
    spelled = {str(p.relative_to(PKG)): found for p in PKG.rglob("*.py") if (found := rule_ids_spelled_in(p.read_text(encoding="utf-8"), ids))}
    assert spelled == {}


def test_a_rule_id_in_code_is_caught() -> None:
    assert rule_ids_spelled_in('if f.rule_id == "sglang-startup-foreign-memory":\n    pass\n', {"sglang-startup-foreign-memory"}) == {"sglang-startup-foreign-memory"}

"""The package runs on Python 3.10 (setup.cfg: python_requires >=3.10): no newer syntax, no newer stdlib.

Checked from whatever interpreter runs the tests: every module of the package parses as 3.10 grammar
(``ast.parse(feature_version=(3, 10))``: ``except*``, PEP 695 type parameters and ``type`` aliases are
refused), f-strings do not reuse their own quotes (PEP 701, 3.12), and no name that only 3.11+ has is
imported or used. tomllib comes from oomdoctor.base.toml_data, which falls back to tomli on 3.10.
"""

from __future__ import annotations

import ast
import configparser
import io
import re
import sys
import tokenize
from pathlib import Path

import pytest

from conftest import REPO

PACKAGE = REPO / "oomdoctor"
SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)

# Standard-library names that 3.10 lacks: (module, name) pairs, used as `from module import name` or
# `module.name`. Whole modules: tomllib (only through oomdoctor/base/toml_data.py) and wsgiref.types.
NEW_IN_311 = {
    ("typing", "Self"),
    ("typing", "LiteralString"),
    ("typing", "Never"),
    ("typing", "assert_never"),
    ("typing", "assert_type"),
    ("typing", "reveal_type"),
    ("typing", "Required"),
    ("typing", "NotRequired"),
    ("typing", "TypeVarTuple"),
    ("typing", "Unpack"),
    ("typing", "dataclass_transform"),
    ("typing", "get_overloads"),
    ("typing", "clear_overloads"),
    ("typing", "override"),
    ("typing", "TypeAliasType"),
    ("datetime", "UTC"),
    ("enum", "StrEnum"),
    ("enum", "ReprEnum"),
    ("enum", "EnumCheck"),
    ("enum", "FlagBoundary"),
    ("enum", "verify"),
    ("enum", "member"),
    ("enum", "nonmember"),
    ("enum", "global_enum"),
    ("enum", "show_flag_values"),
    ("asyncio", "TaskGroup"),
    ("asyncio", "timeout"),
    ("asyncio", "timeout_at"),
    ("asyncio", "Runner"),
    ("asyncio", "Barrier"),
    ("hashlib", "file_digest"),
    ("operator", "call"),
    ("contextlib", "chdir"),
    ("logging", "getLevelNamesMapping"),
    ("inspect", "markcoroutinefunction"),
    ("itertools", "batched"),
    ("math", "cbrt"),
    ("math", "exp2"),
    ("re", "NOFLAG"),
    ("sys", "exception"),
}
NEW_MODULES = {"tomllib", "wsgiref.types"}
# Builtins (and methods) that 3.10 lacks.
NEW_BUILTINS = {"ExceptionGroup", "BaseExceptionGroup"}
NEW_METHODS = {"add_note"}  # BaseException.add_note


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO))


@pytest.mark.parametrize("path", SOURCES, ids=_rel)
def test_parses_as_python_310(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    ast.parse(source, filename=str(path), feature_version=(3, 10))
    compile(source, str(path), "exec", dont_inherit=True)


def _fstring_quote_reuse(source: str) -> list[int]:
    """Lines where an f-string's replacement field holds a string with the f-string's own quote (3.12+ only).

    On 3.11 and older the tokenizer already refuses it (the parse test fails); on 3.12+ it tokenizes into
    FSTRING_START/MIDDLE/END, where the reuse is visible.
    """
    fstring_start = getattr(tokenize, "FSTRING_START", None)
    if fstring_start is None:
        return []
    bad: list[int] = []
    quotes: list[str] = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == fstring_start:
            quote = re.sub(r"^[A-Za-z]*", "", tok.string)
            if any(quote[0] == q[0] for q in quotes):
                bad.append(tok.start[0])
            quotes.append(quote)
        elif tok.type == getattr(tokenize, "FSTRING_END", -1):
            quotes.pop()
        elif tok.type == tokenize.STRING and quotes:
            quote = re.sub(r"^[A-Za-z]*", "", tok.string)[:1]
            if any(quote == q[0] for q in quotes):
                bad.append(tok.start[0])
    return bad


def test_no_fstring_reuses_its_quotes() -> None:
    bad = [f"{_rel(p)}:{line}" for p in SOURCES for line in _fstring_quote_reuse(p.read_text(encoding="utf-8"))]
    assert bad == []


def _newer_stdlib(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    aliases: dict[str, str] = {}  # local name -> module, for `import typing as t`
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in NEW_MODULES:
                    found.append((node.lineno, f"import {a.name}"))
                aliases[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module in NEW_MODULES:
                found.append((node.lineno, f"from {node.module} import ..."))
            for a in node.names:
                if (node.module, a.name) in NEW_IN_311:
                    found.append((node.lineno, f"from {node.module} import {a.name}"))
                if f"{node.module}.{a.name}" in NEW_MODULES:
                    found.append((node.lineno, f"from {node.module} import {a.name}"))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            module = aliases.get(node.value.id)
            if module and (module, node.attr) in NEW_IN_311:
                found.append((node.lineno, f"{module}.{node.attr}"))
            if node.attr in NEW_METHODS:
                found.append((node.lineno, f".{node.attr}()"))
        elif isinstance(node, ast.Name) and node.id in NEW_BUILTINS:
            found.append((node.lineno, node.id))
        elif isinstance(node, getattr(ast, "TryStar", ())):
            found.append((node.lineno, "except*"))
    return found


def test_no_stdlib_newer_than_310() -> None:
    bad = []
    for path in SOURCES:
        if path.name == "toml_data.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        bad += [f"{_rel(path)}:{line}: {what}" for line, what in _newer_stdlib(tree)]
    assert bad == [], "3.11+ only (use oomdoctor.base.toml_data for tomllib): " + "; ".join(bad)


def test_the_checks_catch_newer_code() -> None:
    # The control: each kind of 3.11+ code is reported.
    with pytest.raises(SyntaxError):
        ast.parse("try:\n    pass\nexcept* ValueError:\n    pass\n", feature_version=(3, 10))
    sample = (
        "import tomllib\nfrom typing import Self\nimport datetime as dt\nimport enum\nx = dt.UTC\n"
        "class C(enum.StrEnum): pass\nraise ExceptionGroup('x', [])\ne.add_note('y')\n"
    )
    found = " ".join(what for _, what in _newer_stdlib(ast.parse(sample)))
    for needle in ("import tomllib", "from typing import Self", "datetime.UTC", "enum.StrEnum", "ExceptionGroup", ".add_note()"):
        assert needle in found, (needle, found)
    if sys.version_info >= (3, 12):
        assert _fstring_quote_reuse('x = f"{d["k"]}"\n') == [1]
    assert _fstring_quote_reuse("x = f'{d[\"k\"]}'\n") == []


def test_toml_compat_and_the_install_requirements() -> None:
    from oomdoctor.base.toml_data import tomllib

    assert tomllib.loads('a = "b"') == {"a": "b"}
    with pytest.raises(tomllib.TOMLDecodeError):
        tomllib.loads("a = ")
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg", encoding="utf-8")
    assert cfg["options"]["python_requires"].strip() == ">=3.10"
    requires = [line.strip() for line in cfg["options"]["install_requires"].splitlines() if line.strip() and not line.strip().startswith("#")]
    assert 'tomli>=2; python_version < "3.11"' in requires
    direct = [_rel(p) for p in SOURCES if p.name != "toml_data.py" and re.search(r"^\s*(import tomllib|from tomllib import)", p.read_text(encoding="utf-8"), re.M)]
    assert direct == []

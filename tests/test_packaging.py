"""The built wheel holds every package under oomdoctor/, a newly added one too, and the data it reads."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from conftest import REPO


def test_a_package_added_under_oomdoctor_is_in_the_wheel(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("setup.py", "setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "oomdoctor", src / "oomdoctor", ignore=ignore)
    shutil.copytree(REPO / "rules", src / "rules", ignore=ignore)
    added = src / "oomdoctor" / "report" / "newformat"
    added.mkdir()
    (added / "__init__.py").write_text('"""A package nobody listed anywhere."""\n')

    res = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr
    (wheel,) = (tmp_path / "dist").glob("oomdoctor-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())

    packages = sorted(str(p.parent.relative_to(src)) for p in (src / "oomdoctor").rglob("__init__.py"))
    assert "oomdoctor/report/newformat" in packages and len(packages) > 10
    # Every Python file, a package's or the capture hook's site directory's (not a package: PYTHONPATH names it).
    sources = sorted(str(p.relative_to(src)) for p in (src / "oomdoctor").rglob("*.py"))
    assert "oomdoctor/_capture_site/sitecustomize.py" in sources
    assert [s for s in sources if s not in names] == []
    data = [str(p.relative_to(src)) for p in (src / "oomdoctor").rglob("*") if p.suffix in (".toml", ".j2") or p.name == "py.typed"]
    assert data and [d for d in data if d not in names] == []
    rules = sorted(p.name for p in (src / "rules").glob("*.toml"))
    assert rules and [r for r in rules if f"oomdoctor/rules/{r}" not in names] == []
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "oomdoctor = oomdoctor.commands.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_the_license_file_is_the_one_setup_cfg_declares() -> None:
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    assert cfg["metadata"]["license"].strip() == "Apache-2.0" and cfg["metadata"]["license_files"].strip() == "LICENSE"
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text


def test_the_changelog_has_the_released_version_and_an_unreleased_section() -> None:
    from oomdoctor import __version__

    heads = re.findall(r"^## (.+)$", (REPO / "CHANGELOG.md").read_text(), re.M)
    assert heads[0] == "Unreleased" and __version__ in heads

"""The compiled-regex cache: patterns built from kept opcodes are the patterns re.compile builds.

CPython compares two patterns by flags, text and opcodes, so ``==`` between a cached pattern and
``re.compile``'s is the strongest check there is; it is made for every pattern a diagnosis of every
fixture uses. The rest: a second process is served from the entry, and nothing the cache can hold
(garbage, another interpreter's entry, opcodes that are not valid) changes a result.
"""

from __future__ import annotations

import marshal
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from oomdoctor.base import disk_cache, regex_cache

from conftest import FIXTURES

SMALL = FIXTURES / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log"


@pytest.fixture
def fresh(disk_cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache directory and a regex cache that has neither loaded nor compiled anything."""
    _restart(monkeypatch)
    return disk_cache_dir


def _restart(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a new process sees: the entry on disk, nothing in memory."""
    monkeypatch.setattr(regex_cache, "_memo", {})
    monkeypatch.setattr(regex_cache, "TABLE", disk_cache.Table(regex_cache._FORMAT, regex_cache._build_id(), limit=regex_cache.MAX_PATTERNS))
    monkeypatch.setattr(disk_cache, "_pending", [])


# Run in a process of its own: patterns compiled earlier in the test session stay compiled in their
# modules (and LazyRegex objects) and would never reach the cache again.
EVERY_PATTERN = """
import re, sys
from pathlib import Path
from oomdoctor.base import regex_cache
from oomdoctor.api import diagnose
logs = sorted(p for p in Path(sys.argv[1]).glob("*/*.log") if p.stat().st_size < 200_000)
for log in logs:
    diagnose([str(log)])
used = dict(regex_cache.TABLE.added)
regex_cache.TABLE.save()
regex_cache.TABLE._data = None
same = [regex_cache._from_table(p, f) == re.compile(p, f) for (p, f) in used]
groups = [regex_cache._from_table(p, f).groupindex == re.compile(p, f).groupindex for (p, f) in used]
print(len(logs), len(used), sum(same), sum(groups))
"""


def test_every_pattern_a_diagnosis_uses_is_the_pattern_re_compile_builds(fresh: Path) -> None:
    env = dict(os.environ, OOMDOCTOR_CACHE_DIR=str(fresh))
    out = subprocess.run([sys.executable, "-c", EVERY_PATTERN, str(FIXTURES)], capture_output=True, text=True, env=env, check=True).stdout
    logs, used, same, groups = map(int, out.split())
    assert logs > 100
    assert used > 100  # the parsers', the phase step's, the redaction's, the prefixes' patterns
    assert same == groups == used


def test_a_second_process_compiles_nothing_afresh(fresh: Path) -> None:
    code = (
        "import io, contextlib, sys\n"
        "from oomdoctor.base import regex_cache\n"
        "from oomdoctor.api import diagnose\n"
        f"diagnose([{str(SMALL)!r}])\n"
        "print(len(regex_cache._memo), len(regex_cache.TABLE.added))\n"
    )
    env = dict(os.environ, OOMDOCTOR_CACHE_DIR=str(fresh))
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout.split()
    second = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout.split()
    assert int(first[0]) > 30 and first[1] == first[0]  # everything compiled afresh, then written at exit (atexit)
    assert second == [first[0], "0"]  # the same patterns, all from the entry
    assert len(list(fresh.glob("*.marshal"))) >= 2  # the regex entry beside the parsed TOML


def test_the_console_entry_writes_the_entry_before_its_fast_exit(fresh: Path) -> None:
    script = Path(sys.executable).with_name("oomdoctor")
    env = dict(os.environ, OOMDOCTOR_CACHE_DIR=str(fresh))
    r = subprocess.run([str(script), "diagnose", "--format", "json", str(SMALL)], capture_output=True, text=True, env=env)
    assert r.returncode == 3
    name = regex_cache.TABLE.name
    table = marshal.loads((fresh / (name + disk_cache.ENTRY_SUFFIX)).read_bytes())
    assert len(table) > 30 and all(isinstance(k[0], (str, bytes)) and isinstance(k[1], int) for k in table)


DIAGNOSE = """
import json, re, sys
from oomdoctor.base import regex_cache
from oomdoctor.api import diagnose
from oomdoctor.report.contract import to_dict
report = json.dumps(to_dict(diagnose([sys.argv[1]])), sort_keys=True)
print(all(p == re.compile(k[0], k[1]) for k, p in regex_cache._memo.items()), len(regex_cache.TABLE.added))
print(report)
"""


def test_damaged_or_foreign_entries_change_no_result(fresh: Path) -> None:
    env = dict(os.environ, OOMDOCTOR_CACHE_DIR=str(fresh))

    def run() -> tuple[str, str]:
        out = subprocess.run([sys.executable, "-c", DIAGNOSE, str(SMALL)], capture_output=True, text=True, env=env, check=True).stdout
        status, report = out.split("\n", 1)
        return status, report

    status, expected = run()
    assert status.startswith("True ") and int(status.split()[1]) > 30
    entry = fresh / (regex_cache.TABLE.name + disk_cache.ENTRY_SUFFIX)
    table = marshal.loads(entry.read_bytes())
    # Opcodes that are not valid (what another Python's entry would hold): _sre refuses them, re.compile is used.
    assert all(isinstance(args[1], bytes) for args in table.values())  # opcodes kept packed
    packed_bad = b"".join(c.to_bytes(4, sys.byteorder) for c in (999999, 1, 2))
    bad_opcodes = marshal.dumps({key: (args[0], packed_bad, *args[2:]) for key, args in table.items()})
    cut_opcodes = marshal.dumps({key: (args[0], args[1][:-1], *args[2:]) for key, args in table.items()})  # not whole opcodes
    listed_opcodes = marshal.dumps({key: (args[0], [1, 2, 3], *args[2:]) for key, args in table.items()})  # the old form
    for damage in (bad_opcodes, cut_opcodes, listed_opcodes, b"\x00garbage", b"", marshal.dumps(["not", "a", "table"])):
        entry.write_bytes(damage)
        status, report = run()
        assert report == expected and status.startswith("True "), damage[:20]


def test_the_entry_is_named_by_the_interpreter_build(monkeypatch: pytest.MonkeyPatch) -> None:
    name = disk_cache.Table(regex_cache._FORMAT, regex_cache._build_id(), limit=1).name
    assert name == regex_cache.TABLE.name
    monkeypatch.setattr(sys, "version", sys.version + " (another build)")
    assert disk_cache.Table(regex_cache._FORMAT, regex_cache._build_id(), limit=1).name != name


def test_no_cache_and_bad_patterns_behave_as_re(monkeypatch: pytest.MonkeyPatch, fresh: Path) -> None:
    monkeypatch.setenv("OOMDOCTOR_CACHE_DIR", "off")
    monkeypatch.setattr(disk_cache, "_cache_dir", False)
    assert regex_cache.compile(r"(?P<n>\d+) GiB").search("at 12 GiB")["n"] == "12"  # type: ignore[index]
    assert regex_cache.compile(rb"avail mem=(\d+)", re.I).search(b"AVAIL MEM=3")[1] == b"3"  # type: ignore[index]
    with pytest.raises(re.error):
        regex_cache.compile(r"(unclosed")
    disk_cache.write_back()  # nowhere to write: no error
    assert not fresh.exists()


def test_the_entry_is_bounded(fresh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    regex_cache.TABLE.limit = 5
    for i in range(10):
        regex_cache.compile(rf"pattern{i}")
    assert len(regex_cache.TABLE.added) == 5
    disk_cache.write_back()
    _restart(monkeypatch)
    assert len(regex_cache.TABLE.data()) == 5 and regex_cache.compile("pattern9").match("pattern9")


def test_the_flags_and_escape_are_res() -> None:
    from hypothesis import given
    from hypothesis import strategies as st

    assert (regex_cache.I, regex_cache.IGNORECASE, regex_cache.M, regex_cache.MULTILINE, regex_cache.S, regex_cache.DOTALL) == (re.I, re.I, re.M, re.M, re.S, re.S)
    assert (regex_cache.X, regex_cache.A, regex_cache.ASCII, regex_cache.DEBUG) == (re.X, re.A, re.A, re.DEBUG)

    @given(st.text(), st.binary())
    def same(text: str, data: bytes) -> None:
        assert regex_cache.escape(text) == re.escape(text)
        assert regex_cache.escape(data) == re.escape(data)

    same()
    every = "".join(chr(c) for c in range(0x300))
    assert regex_cache.escape(every) == re.escape(every) and regex_cache.escape(bytes(range(256))) == re.escape(bytes(range(256)))

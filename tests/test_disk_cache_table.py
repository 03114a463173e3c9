"""disk_cache.Table: one entry that runs add to, written back once at exit, merged, bounded; and its
two users' entries (compiled records' __init__, regex opcodes) as a second process finds them."""

from __future__ import annotations

import marshal
import os
import subprocess
import sys
from pathlib import Path

import pytest

from oomdoctor import disk_cache

from conftest import FIXTURES

SMALL = FIXTURES / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("OOMDOCTOR_CACHE_DIR", str(d))
    monkeypatch.setattr(disk_cache, "_cache_dir", False)
    monkeypatch.setattr(disk_cache, "_pending", [])
    return d


def test_two_runs_adding_different_keys_both_keep_theirs(cache: Path) -> None:
    first, second = disk_cache.Table(b"t", limit=10), disk_cache.Table(b"t", limit=10)
    assert first.get("a") is None and second.get("b") is None  # both read the empty entry
    first.add("a", 1)
    second.add("b", [2])
    disk_cache.write_back()
    assert disk_cache.Table(b"t", limit=10).data() == {"a": 1, "b": [2]}
    assert disk_cache._pending == []


def test_the_limit_bounds_the_entry_and_nothing_unstorable_breaks_it(cache: Path) -> None:
    table = disk_cache.Table(b"bounded", limit=3)
    for i in range(5):
        table.add(i, i)
    assert table.added == {0: 0, 1: 1, 2: 2}
    disk_cache.write_back()
    odd = disk_cache.Table(b"odd", limit=3)
    odd.add("x", object())  # not marshal data: the write is skipped, no error
    disk_cache.write_back()
    assert disk_cache.Table(b"bounded", limit=3).data() == {0: 0, 1: 1, 2: 2} and disk_cache.Table(b"odd", limit=3).data() == {}


def test_names_differ_by_every_part(cache: Path) -> None:
    assert len({disk_cache.Table(*parts, limit=1).name for parts in [(b"a", b"b"), (b"a", b"c"), (b"ab",), (b"a",)]}) == 4


RECORDS = """
from oomdoctor import records
from oomdoctor.api import diagnose
diagnose([{small!r}])
table = records._init_code()
print(len(table.data()), len(table.added))
"""


def test_a_second_process_compiles_no_record_init(cache: Path) -> None:
    env = dict(os.environ, OOMDOCTOR_CACHE_DIR=str(cache))
    code = RECORDS.format(small=str(SMALL))
    cold = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout.split()
    warm = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout.split()
    assert cold[0] == "0" and int(cold[1]) > 20  # every record's __init__ compiled, then written at exit
    assert int(warm[0]) == int(cold[1]) and warm[1] == "0"


def test_a_damaged_record_entry_still_builds_working_records(cache: Path) -> None:
    env = dict(os.environ, OOMDOCTOR_CACHE_DIR=str(cache))
    code = RECORDS.format(small=str(SMALL))
    subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, check=True)
    from oomdoctor import records

    entry = cache / (records._init_code().name + disk_cache.ENTRY_SUFFIX)
    sources = marshal.loads(entry.read_bytes())
    entry.write_bytes(marshal.dumps(dict.fromkeys(sources, "not code")))
    r = subprocess.run([sys.executable, "-m", "oomdoctor", "diagnose", "--format", "json", str(SMALL)], capture_output=True, text=True, env=env)
    assert r.returncode == 3 and '"startup_kv"' in r.stdout

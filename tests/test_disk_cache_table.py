"""disk_cache.Table: one entry that runs add to, written back once at exit, merged, bounded; and its
two users' entries (compiled records' __init__, regex opcodes) as a second process finds them."""

from __future__ import annotations

import marshal
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from oomdoctor.base import disk_cache

from conftest import FIXTURES

SMALL = FIXTURES / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log"


@pytest.fixture
def cache(disk_cache_dir: Path) -> Path:
    return disk_cache_dir


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
from oomdoctor.base import records
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
    from oomdoctor.base import records

    entry = cache / (records._init_code().name + disk_cache.ENTRY_SUFFIX)
    sources = marshal.loads(entry.read_bytes())
    entry.write_bytes(marshal.dumps(dict.fromkeys(sources, "not code")))
    r = subprocess.run([sys.executable, "-m", "oomdoctor", "diagnose", "--format", "json", str(SMALL)], capture_output=True, text=True, env=env)
    assert r.returncode == 3 and '"startup_kv"' in r.stdout


def test_the_validated_catalogue_is_served_whole_and_an_edit_is_validated_again(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from oomdoctor.base.errors import RuleError
    from oomdoctor.inference import rule_engine

    first = rule_engine.load_rules()
    assert len(list(cache.glob("*.marshal"))) >= 2  # the parsed TOML entries and the catalogue's

    def no_parse(*args: object, **kwargs: object) -> None:
        raise AssertionError("validated again")

    monkeypatch.setattr(rule_engine, "parse_rule", no_parse)
    assert rule_engine.load_rules() == first  # served whole: no rule is parsed or checked
    extra = tmp_path / "rules"
    extra.mkdir()
    mine = extra / "my-rule.toml"
    mine.write_text((Path(first[0].path)).read_text().replace(f'id = "{first[0].id}"', 'id = "my-rule"'))
    with pytest.raises(AssertionError, match="validated again"):
        rule_engine.load_rules([str(extra)])  # a new file: the catalogue is validated again
    monkeypatch.undo()
    monkeypatch.setenv("OOMDOCTOR_CACHE_DIR", str(cache))
    monkeypatch.setattr(disk_cache, "_cache_dir", False)
    assert [r.id for r in rule_engine.load_rules([str(extra)])][-1] == "my-rule"
    mine.write_text(re.sub(r"(?m)^confidence = .*$", "confidence = 7.5", mine.read_text()))
    with pytest.raises(RuleError, match="field 'confidence'"):
        rule_engine.load_rules([str(extra)])  # an edit is validated: the bad value is refused
    for entry in cache.glob("*.marshal"):  # every entry damaged: the same rules, validated afresh
        entry.write_bytes(marshal.dumps([("not", "a", "rule")]))
    assert rule_engine.load_rules() == first

"""The parsed-TOML cache: same results as parsing, keyed by content, never trusted from an unsafe place."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from oomdoctor.base import disk_cache
from oomdoctor.base import toml_data as _toml

DOC = '[rule]\nid = "x"\nfraction = 0.85\nlimits = [1, 2, 3]\n[rule.docs]\nwhy = "because"\n'


@pytest.fixture
def cache(disk_cache_dir: Path) -> Path:
    return disk_cache_dir


def test_second_load_is_served_from_the_cache(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _toml.loads(DOC)
    assert first == _toml.tomllib.loads(DOC)
    entries = list(cache.glob("*.marshal"))
    assert len(entries) == 1 and oct(cache.stat().st_mode & 0o777) == "0o700"

    def no_parse(text: str) -> dict:
        raise AssertionError("parsed again")

    monkeypatch.setattr(_toml._tomllib(), "loads", no_parse)
    assert _toml.loads(DOC) == first


def test_an_edited_text_is_a_new_entry(cache: Path) -> None:
    assert _toml.loads(DOC)["rule"]["fraction"] == 0.85
    assert _toml.loads(DOC.replace("0.85", "0.9"))["rule"]["fraction"] == 0.9
    assert len(list(cache.glob("*.marshal"))) == 2


def test_a_damaged_entry_falls_back_to_parsing(cache: Path) -> None:
    _toml.loads(DOC)
    (entry,) = cache.glob("*.marshal")
    entry.write_bytes(b"\x00garbage")
    assert _toml.loads(DOC) == _toml.tomllib.loads(DOC)
    entry.write_bytes(b"")
    assert _toml.loads(DOC)["rule"]["limits"] == [1, 2, 3]


def test_invalid_toml_still_raises_and_is_not_cached(cache: Path) -> None:
    with pytest.raises(_toml.tomllib.TOMLDecodeError):
        _toml.loads("[rule\nid = ")
    assert not list(cache.glob("*.marshal"))


def test_a_document_with_a_date_is_parsed_every_time(cache: Path) -> None:
    data = _toml.loads("when = 2026-11-30\n")
    assert str(data["when"]) == "2026-11-30" and not list(cache.glob("*.marshal"))


def test_a_directory_others_can_write_is_not_used(cache: Path) -> None:
    cache.mkdir(mode=0o700)
    os.chmod(cache, 0o777)
    assert disk_cache.cache_dir() is None
    assert _toml.loads(DOC)["rule"]["id"] == "x" and not list(cache.glob("*.marshal"))


def test_off_turns_the_cache_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OOMDOCTOR_CACHE_DIR", "off")
    monkeypatch.setattr(disk_cache, "_cache_dir", False)
    assert disk_cache.cache_dir() is None and _toml.loads(DOC)["rule"]["id"] == "x"


def test_unwritable_cache_location_still_gives_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("OOMDOCTOR_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setattr(disk_cache, "_cache_dir", False)
    assert disk_cache.cache_dir() is None and _toml.loads(DOC)["rule"]["id"] == "x"


def test_shipped_data_parse_the_same_through_the_cache(cache: Path) -> None:
    from oomdoctor.inference.rule_engine import builtin_rule_paths

    texts = [_toml.data_text(n) for n in ("facts.toml", "phases.toml", "gpus.toml")] + [Path(p).read_text() for p in builtin_rule_paths()]
    for text in texts:
        assert _toml.loads(text) == _toml.tomllib.loads(text)  # stored
        assert _toml.loads(text) == _toml.tomllib.loads(text)  # served
    assert len(list(cache.glob("*.marshal"))) == len(set(texts))


def test_entries_untouched_for_the_prune_age_are_removed_when_a_new_one_is_written(cache: Path) -> None:
    _toml.loads(DOC)
    (old,) = cache.glob("*.marshal")
    stale = time.time() - (disk_cache.PRUNE_AFTER_DAYS + 1) * 86400
    os.utime(old, (stale, stale))
    leftover_tmp = cache / (old.stem + ".marshal.123.tmp")
    leftover_tmp.write_bytes(b"half")
    os.utime(leftover_tmp, (stale, stale))
    foreign = cache / "notes.txt"  # not a name this cache writes: never touched
    foreign.write_text("mine")
    os.utime(foreign, (stale, stale))
    _toml.loads(DOC.replace("0.85", "0.5"))  # a miss: stores, then prunes
    names = sorted(p.name for p in cache.iterdir())
    assert old.name not in names and leftover_tmp.name not in names
    assert "notes.txt" in names and len([n for n in names if n.endswith(".marshal")]) == 1


def test_an_entry_in_use_is_touched_so_pruning_spares_it(cache: Path) -> None:
    _toml.loads(DOC)
    (entry,) = cache.glob("*.marshal")
    aged = time.time() - (disk_cache.PRUNE_AFTER_DAYS - 1) * 86400  # old, but not yet prunable
    os.utime(entry, (aged, aged))
    assert _toml.loads(DOC)["rule"]["id"] == "x"  # a hit on an entry older than a day refreshes it
    assert entry.stat().st_mtime > time.time() - 60
    assert disk_cache.prune(str(cache), now=time.time() + (disk_cache.PRUNE_AFTER_DAYS - 1) * 86400) == 0
    assert disk_cache.prune(str(cache), now=time.time() + (disk_cache.PRUNE_AFTER_DAYS + 1) * 86400) == 1

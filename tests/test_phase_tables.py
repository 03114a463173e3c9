"""The phase step's tables (oomdoctor/data/phases.toml): compiled when first used, so checked here."""

from __future__ import annotations

import re

from oomdoctor import phase


def test_every_table_pattern_compiles() -> None:
    t = phase.tables()
    sources = [r.source for f in t.frames for r in (f.func, f.path, f.within) if r is not None] + [c.pattern.source for c in t.context]
    assert len(sources) >= 20
    for source in sources:
        re.compile(source)  # compiled lazily in use: a bad pattern must fail here, not in a user's diagnosis


def test_a_bad_pattern_fails_at_first_use_not_silently() -> None:
    text = '[phases.serving]\nstage = "serving"\n[[context]]\nphase = "serving"\npattern = "(unclosed"\n'
    tables = phase.parse_tables(text)
    try:
        tables.context[0].pattern.search("x")
    except re.error:
        return
    raise AssertionError("an invalid table pattern did not raise")

"""What replaces re, enum and functools on a plain diagnose's path does what they do: redaction's
replacement templates, the exit codes, the memo decorator."""

from __future__ import annotations

import ast
import enum
from pathlib import Path

import pytest

from oomdoctor.base import errors
from oomdoctor.base.errors import ExitCode
from oomdoctor.base.memo import memo
from oomdoctor.input import redact


def test_each_redaction_template_expands_as_re_would() -> None:
    rules = {name: (pattern, repl) for name, pattern, repl in redact._RULES}
    assert set(redact._TEMPLATES) == {name for name, (_, repl) in rules.items() if isinstance(repl, str) and "\\" in repl}
    samples = {
        "bearer": ["Authorization: Bearer abcdefghijklmnop"],
        "url_userinfo": ["pulled from https://user:pass@example.com/repo"],
        "flag": ["--api-key sk-abcdefghijklmnopqrstuv", "--hf-token=hf_abcdefghijklmnopqrstuvwxyz"],
        "env": ["HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz"],
        # The optional quote group matched, and not.
        "authorization": ["authorization: Basic dXNlcjpwYXNzd29yZA==", "{'Authorization': 'Digest username=\"a\", response=\"b\"'}"],
    }
    assert set(samples) == set(redact._TEMPLATES)  # every template has a sample
    for name, template in redact._TEMPLATES.items():
        pattern, repl = rules[name]
        for text in samples[name]:
            m = pattern.compiled.search(text)
            assert m is not None, (name, text)
            assert template(m) == m.expand(repl), name
            assert pattern.compiled.sub(template, text) == pattern.compiled.sub(repl, text), name


@pytest.mark.parametrize("repl", [r"\g<1>x", r"\10", "a\\nb", r"\\"])
def test_a_template_this_cannot_expand_is_refused(repl: str) -> None:
    with pytest.raises(ValueError, match="group references"):
        redact._template(repl)


def test_exit_codes_are_the_intenum_mypy_reads() -> None:
    # errors.py declares an IntEnum for mypy and builds a light int class at run time: the same members.
    tree = ast.parse(Path(errors.__file__).read_text())
    declared = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "ExitCode" and any(getattr(b, "id", "") == "IntEnum" for b in n.bases))
    members = {t.targets[0].id: t.value.value for t in declared.body if isinstance(t, ast.Assign)}  # type: ignore[attr-defined]
    reference = enum.IntEnum("ExitCode", members)  # type: ignore[misc]
    for name, value in members.items():
        code, ref = getattr(ExitCode, name), reference[name]
        assert (int(code), code.name, code.value) == (value, name, value)
        assert (repr(code), f"{code}", code == value, hash(code) == hash(value)) == (repr(ref), f"{ref}", True, True)
        assert str(code) == str(value)  # as IntEnum's from 3.11 (3.10's said "ExitCode.NAME"; nothing prints it)
    assert sorted(n for n in vars(ExitCode) if n.isupper()) == sorted(members)


def test_exit_codes_answer_as_an_enum_does() -> None:
    import pickle

    assert ExitCode(3) is ExitCode.OOM_DIAGNOSED and ExitCode(ExitCode.USAGE) is ExitCode.USAGE
    with pytest.raises(ValueError):
        ExitCode(99)
    assert [int(c) for c in ExitCode] == [0, 1, 2, 3, 4, 5, 130] and len(ExitCode) == 7
    assert ExitCode.USAGE in ExitCode and ExitCode["USAGE"] is ExitCode.USAGE and set(ExitCode.__members__) >= {"NO_OOM", "INTERRUPTED"}
    assert pickle.loads(pickle.dumps(ExitCode.INCONCLUSIVE)) is ExitCode.INCONCLUSIVE
    with pytest.raises(AttributeError):
        ExitCode.USAGE.name = "OTHER"  # type: ignore[misc]


def test_memo_remembers_by_arguments_and_drops_the_oldest_past_its_size() -> None:
    calls: list[tuple[int, ...]] = []

    @memo(maxsize=2)
    def square(n: int) -> int:
        calls.append((n,))
        return n * n

    assert [square(2), square(2), square(3), square(2)] == [4, 4, 9, 4] and calls == [(2,), (3,)]
    square(4)  # a third key: 2, the oldest, is dropped
    square(2)
    assert calls == [(2,), (3,), (4,), (2,)]
    assert square.__name__ == "square"

    @memo()
    def once() -> object:
        return object()

    assert once() is once()


def test_memo_does_not_cache_errors() -> None:
    attempts = []

    @memo()
    def flaky() -> int:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("first")
        return 7

    with pytest.raises(RuntimeError):
        flaky()
    assert flaky() == 7 and flaky() == 7 and len(attempts) == 2

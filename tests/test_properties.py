"""Property tests: no parser, the prefix stripper, the units, the rule loader or the budget model
raises on arbitrary input, sizes round-trip, and the budget's invariants hold."""

from __future__ import annotations

import math
from pathlib import Path

from hypothesis import assume, given
from hypothesis import strategies as st

from oomdoctor.advice.registry import known_advice
from oomdoctor.base.errors import InputError, RuleError
from oomdoctor.base.evidence import Line, LineRef
from oomdoctor.base.units import GIB, KIB, MIB, TIB, format_bytes, parse_size_bytes
from oomdoctor.evidence.parsers.sglang import SGLangParser
from oomdoctor.evidence.parsers.torch_oom import TorchParser, parse_oom_message
from oomdoctor.evidence.parsers.vllm import VLLMParser
from oomdoctor.inference.rule_engine import evaluate, load_rules, parse_rule
from oomdoctor.input.prefixes import split_prefix, strip_ansi
from oomdoctor.memory import budget
from oomdoctor.pipeline.diagnosis import diagnose
from oomdoctor.pipeline.events import ANCHORS

ANCHOR_TEXT = [a.decode() for a in ANCHORS]
# Fragments of real lines, so that generated text reaches the parsers' deeper branches.
FRAGMENTS = [
    *ANCHOR_TEXT,
    "[2026-03-02 10:00:41 TP0] ",
    "(EngineCore_DP0 pid=1) INFO 08-19 07:51:03 [core.py:1] ",
    "[rank1]: ",
    "sglang-1  | ",
    "^[[0;36m",
    "\x1b[0m",
    "Tried to allocate 1.25 GiB. ",
    "GPU 0 has a total capacity of 79.19 GiB of which 1.02 GiB is free. ",
    "Process 42 has 3.20 GiB memory in use. ",
    "and 1.40 GiB is reserved by PyTorch but unallocated.",
    "avail mem=78.00 GB",
    "mem_fraction_static=0.7, ",
    "File \"x.py\", line 1, in forward_extend",
    "(GPU 0; 15.90 GiB total capacity; 14.25 GiB already allocated; 981.56 MiB free; 14.50 GiB reserved in total by PyTorch)",
    "99999999999999999999999 GiB",
    "-1.5 GB",
    "\r",
    "(((",
    "'",
]
line_text = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=40)), max_size=8).map("".join)


def _feed_all(texts: list[str]) -> None:
    parsers = (SGLangParser(), VLLMParser(), TorchParser())
    for i, raw in enumerate(texts, 1):
        s = split_prefix(raw)
        line = Line(LineRef("x", i, s.rank, raw, s.ts), s.msg, s.ts)
        for p in parsers:
            for e in p.feed(line):
                assert e.refs and all(r.line <= i for r in e.refs)
    for p in parsers:
        p.finish()


@given(st.lists(line_text, max_size=30))
def test_parsers_never_raise(texts: list[str]) -> None:
    _feed_all(texts)


@given(line_text)
def test_oom_message_parser_never_raises_and_sizes_are_plausible(text: str) -> None:
    values = parse_oom_message(text)
    for key, value in values.items():
        if key.endswith("_bytes"):
            assert isinstance(value, int) and abs(value) <= 4 * TIB


@given(st.text())
def test_prefix_split_never_raises_and_keeps_a_suffix(raw: str) -> None:
    s = split_prefix(raw)
    cleaned = strip_ansi(raw)
    assert s.msg in cleaned or "\r" in raw


@given(st.integers(min_value=0, max_value=4 * TIB))
def test_format_then_parse_round_trips_within_display_rounding(n: int) -> None:
    shown = format_bytes(n)
    back = parse_size_bytes(shown)
    unit = GIB if "GiB" in shown else MIB if "MiB" in shown else KIB if "KiB" in shown else 1
    assert abs(back - n) <= unit * 0.005 + 1


@given(st.floats(min_value=0, max_value=4096, allow_nan=False), st.sampled_from(["GiB", "MiB", "KiB", "GB", "MB", "bytes"]))
def test_parse_size_is_exact_for_two_decimals(x: float, unit: str) -> None:
    text = f"{x:.2f} {unit}"
    factor = {"GiB": GIB, "GB": GIB, "MiB": MIB, "MB": MIB, "KiB": KIB, "bytes": 1}[unit]
    assert parse_size_bytes(text) == round(float(f"{x:.2f}") * factor)


@given(st.text(max_size=30))
def test_parse_size_rejects_or_parses(text: str) -> None:
    try:
        value = parse_size_bytes(text)
    except ValueError:
        return
    assert isinstance(value, int)


toml_scalar = st.one_of(st.booleans(), st.integers(-10, 10**12), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12))
toml_value = st.recursive(toml_scalar, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=20)
condition = st.recursive(
    st.fixed_dictionaries({"fact": st.text(max_size=10)}).flatmap(
        lambda d: st.sampled_from(["gt", "ge", "lt", "le", "eq", "ne", "in", "present", "bogus"]).flatmap(
            lambda op: toml_value.map(lambda v: {**d, op: v})
        )
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda xs: {"all": xs}),
        st.lists(inner, max_size=3).map(lambda xs: {"any": xs}),
        inner.map(lambda x: {"not": x}),
    ),
    max_leaves=8,
)


@given(
    st.fixed_dictionaries(
        {
            "id": st.just("x"),
            "title": toml_value,
            "class": st.sampled_from(["startup_kv", "none", "bogus"]),
            "systems": st.one_of(st.just(["sglang"]), toml_value),
            "severity": st.sampled_from(["error", "info", "loud"]),
            "confidence": toml_value,
            "priority": toml_value,
            "when": st.one_of(condition, toml_value),
            "message": toml_value,
            "advice": st.one_of(st.just([]), toml_value),
            "docs": toml_value,
            "references": toml_value,
        },
        optional={"extra": toml_value},
    )
)
def test_rule_loader_accepts_or_rejects_cleanly(data: dict) -> None:
    try:
        rule = parse_rule(data, "rules/x.toml", known_advice())
    except RuleError as exc:
        assert str(exc).startswith("rules/x.toml: ")
        return
    evaluate(rule.when, {})


@given(condition, st.dictionaries(st.text(max_size=10), toml_scalar, max_size=5))
def test_evaluator_is_total_on_valid_conditions(node: dict, facts: dict) -> None:
    from oomdoctor.inference.rule_engine import _check_condition

    try:
        _check_condition(node, "x", "when")
    except RuleError:
        return
    ev = evaluate(node, facts)
    assert ev.result in (True, False, None)


gib_f = st.floats(min_value=1, max_value=300, allow_nan=False)


@given(pre=gib_f, weights_share=st.floats(0.0, 1.2), floor=st.floats(0.01, 20), reserve=st.floats(0.5, 40))
def test_recommended_y_respects_the_window(pre: float, weights_share: float, floor: float, reserve: float) -> None:
    pre_b, w_b = round(pre * GIB), round(pre * weights_share * GIB)
    floor_b, reserve_b = round(floor * GIB), round(reserve * GIB)
    window = budget.sglang_feasible_window(pre_b, w_b, floor_b, reserve_b)
    y = budget.choose_in_window(window)
    if y is None:
        return
    assert 0 < y < 1
    assert window.low - 1e-9 <= y <= window.high + 1e-9
    post_b = pre_b - w_b
    assert budget.sglang_kv_budget_bytes(pre_b, post_b, y) >= floor_b - 2  # the KV floor holds at y
    assert budget.sglang_dynamic_region_bytes(pre_b, y) >= reserve_b - 2  # and so does the reserve


@given(pre=gib_f, post_share=st.floats(-0.5, 1.0), y1=st.floats(0, 1), y2=st.floats(0, 1))
def test_raising_y_never_lowers_kv(pre: float, post_share: float, y1: float, y2: float) -> None:
    assume(not math.isclose(y1, y2))
    lo, hi = sorted((y1, y2))
    pre_b, post_b = round(pre * GIB), round(pre * post_share * GIB)
    assert budget.sglang_kv_budget_bytes(pre_b, post_b, lo) <= budget.sglang_kv_budget_bytes(pre_b, post_b, hi)


@given(total=gib_f, non_kv_share=st.floats(0, 0.95), need=st.floats(0.01, 30))
def test_vllm_util_for_kv_holds_the_need(total: float, non_kv_share: float, need: float) -> None:
    total_b, non_kv_b, need_b = round(total * GIB), round(total * non_kv_share * GIB), round(need * GIB)
    u = budget.vllm_util_for_kv(total_b, non_kv_b, need_b).value
    assert budget.vllm_kv_budget_bytes(total_b, u, non_kv_b) >= need_b


@given(st.binary(max_size=3000) | line_text.map(str.encode))
def test_diagnose_on_arbitrary_bytes_gives_a_diagnosis_or_an_input_error(tmp_path_factory, data: bytes) -> None:
    path = Path(tmp_path_factory.mktemp("fuzz")) / "x.log"
    path.write_bytes(data)
    try:
        d = diagnose([str(path)], [])
    except InputError:
        return
    # No rules given: never a confident class. A cut traceback may carry its phase's class, but only
    # as an inconclusive hypothesis at <= 0.45.
    if d.inconclusive:
        assert d.verdict_confidence <= 0.45
    else:
        assert d.verdict_class in ("none", "unknown_oom")


def _positive_fixtures_with_tracebacks() -> list[Path]:
    root = Path(__file__).resolve().parent / "fixtures"
    out = []
    for p in sorted(root.glob("*/pos_*.log")):
        if p.parent.name == "field":
            continue
        lines = p.read_text(errors="replace").splitlines()
        if any("Traceback (most recent call last)" in ln for ln in lines) and any(ln.lstrip().startswith('File "') for ln in lines):
            out.append(p)
    return out


_CUT_CASES = _positive_fixtures_with_tracebacks()


@given(st.sampled_from(_CUT_CASES), st.integers(min_value=0, max_value=10_000))
def test_cutting_inside_a_traceback_is_incomplete_and_never_confident_none(tmp_path_factory, fixture: Path, pick: int) -> None:
    """A paste that stops anywhere inside a traceback (after a frame, before its exception line) is
    incomplete, and its verdict is never `none` above 0.35 (DESIGN §2.1)."""
    lines = fixture.read_text(errors="replace").splitlines(keepends=True)
    start = next(i for i, ln in enumerate(lines) if "Traceback (most recent call last)" in ln)
    frames = [i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith('File "') or lines[i].split("]: ", 1)[-1].lstrip().startswith('File "')]
    # Cut right after a frame line or its source line, before any line that ends the traceback.
    end_of_tb = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith((" ", "\t")) and "File " not in lines[i] and "Traceback" not in lines[i]), len(lines))
    frames = [i for i in frames if i < end_of_tb]
    if not frames:
        return
    cut = frames[pick % len(frames)] + 1
    path = Path(tmp_path_factory.mktemp("cut")) / fixture.name
    path.write_text("".join(lines[:cut]))
    d = diagnose([str(path)], load_rules(known_advice=known_advice()))
    assert d.evidence.status == "incomplete", (fixture.name, cut, d.evidence)
    if d.verdict_class == "none":
        assert d.verdict_confidence <= 0.35

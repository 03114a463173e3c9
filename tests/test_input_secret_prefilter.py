"""The kv fast path of in-flight redaction (``secret_prefilter.kv_only_line``): a line that only the kv rule can
change is redacted where its keys start, not by every rule scanning it, and writes exactly what every rule writes.

The superset and selectivity of the whole prefilter are tests/test_input_redact_trust.py's.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_input_redact_trust import FRAGMENTS, _corpus_lines, _file_lines

from oomdoctor.input import redact, secret_prefilter, secret_rules
from oomdoctor.input.redact import Redactor

# vLLM's request logger (--enable-log-requests) as vllm/entrypoints/logger.py formats it, with SamplingParams.__repr__;
# and SGLang's request log of a GenerateReqInput.
SAMPLING = (
    "SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0, temperature={t}, top_p=1.0, top_k=0, "
    "min_p=0.0, seed=None, stop=[], stop_token_ids=[], bad_words=[], include_stop_str_in_output=False, ignore_eos=False, max_tokens={m}, "
    "min_tokens=0, logprobs=None, prompt_logprobs=None, skip_special_tokens=True, spaces_between_special_tokens=True, "
    "truncate_prompt_tokens=None, structured_outputs=None, extra_args=None)"
)


def _request_lines(n: int, seed: int = 24) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        ids = [rng.randrange(100, 151000) for _ in range(rng.randrange(1, 300))]
        prompt = " ".join(rng.choice(["the", "KV", "cache", "was", "full", "\u6a21\u578b", "caf\u00e9"]) for _ in range(len(ids) // 2 + 1))
        params = SAMPLING.format(t=round(rng.random(), 2), m=rng.choice((16, 128)))
        lines.append(
            f"(APIServer pid=7) INFO 03-02 10:00:{i % 60:02d} [logger.py:43] Received request cmpl-{rng.getrandbits(64):016x}-0: prompt: {prompt!r}, "
            f"params: {params}, prompt_token_ids: {ids}, prompt_embeds shape: None, lora_request: None."
        )
        lines.append(
            f"[2026-03-02 10:00:{i % 60:02d}] Receive: obj=GenerateReqInput(text={prompt!r}, sampling_params={{'max_new_tokens': 128, 'stop_token_ids': None}}, "
            f"rid='{rng.getrandbits(64):016x}', return_logprob=False, token_ids_logprob=None)"
        )
    return lines


def test_a_request_log_line_never_goes_through_every_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """A busy server's request lines (`stop_token_ids=[]`, `prompt_token_ids: [...]`, `'stop_token_ids': None`) are
    flagged by the kv piece alone: before issue 24 each went through every rule (~2 MB/s, 55x the server under `run`)."""
    lines = [line + "\n" for line in _request_lines(200)]
    expected = "".join(Redactor().text(line) for line in lines).encode()
    # Token ids are no secret (the rules keep a value whose key names an id or a count): nothing changes.
    assert b"prompt_token_ids: [" in expected and b"<redacted>" not in expected
    calls = []
    real = redact.redact_secrets

    def counting(text: str) -> str:
        calls.append(text)
        return real(text)

    monkeypatch.setattr(redact, "redact_secrets", counting)
    data = "".join(lines).encode()
    assert secret_prefilter.secret_line_starts(data)  # every one of them is flagged ...
    assert Redactor().log_bytes(data) == expected  # ... and redacted as every rule redacts it ...
    assert calls == []  # ... without running the rules over it


def test_a_line_another_piece_flags_goes_through_every_rule() -> None:
    for line in ("prompt_token_ids: [1, 2] Authorization: Bearer abcdefgh12345678", "token://user:pass@host x", "api_key=x sk-proj-abcdefghijklmnop12\n"):
        assert secret_prefilter.kv_only_line(line.encode()) is None, line


def _one_rule(name: str, text: str) -> str:
    pattern, repl = next((p, r) for n, p, r in secret_rules._RULES if n == name)
    return pattern.sub(secret_rules._REPLACERS.get(name, repl), text)


def _pieces_hit(data: bytes) -> set[str]:
    return {name for name, piece in secret_prefilter._pieces() if secret_prefilter._compile(b"(?m)" + piece, "re").search(data)}


def _pieces_cover_their_rules(line: str) -> None:
    data = line.encode("utf-8", "surrogateescape")
    text = data.decode("utf-8", "surrogateescape")
    if secret_rules.redact_secrets(text) == text:
        return  # no rule changes it (the rules only ever put <redacted> in)
    changed = {name for name, _, _ in secret_rules._RULES if _one_rule(name, text) != text}
    assert changed <= _pieces_hit(data), line


def test_every_rule_has_a_piece_of_its_own_name() -> None:
    """The fast path leans on it: no other piece on a line means no other rule can change it."""
    assert [name for name, _ in secret_prefilter._pieces()] == [name for name, _, _ in secret_rules._RULES]
    assert secret_prefilter._fast_path("auto") is not None


def test_each_piece_covers_its_own_rule_on_the_corpora() -> None:
    for line in [*_corpus_lines(), *(b.decode("utf-8", "surrogateescape") for b in _file_lines())]:
        _pieces_cover_their_rules(line)


@given(st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=6)), min_size=1, max_size=14))
def test_each_piece_covers_its_own_rule_on_generated_lines(parts: list[str]) -> None:
    _pieces_cover_their_rules("".join(parts).replace("\n", " "))


KV_FRAGMENTS = [
    *FRAGMENTS, "prompt_token_ids", "stop_token_ids", "token_ids", "_ids", ": [", "=[", "]", "[]", "1, 22, 333", "1,2", ", ", "0",
    "'", '"', "\u00e9", "\u3000", "(", ")", "{", "}", ",", "None", "api_key", "=token=", "\u00e9token=", "x_token: ", "tokenizer_ids",
]


def _fast_equals_the_rules(line: str) -> None:
    raw = (line + "\n").encode("utf-8", "surrogateescape")
    text = raw.decode("utf-8", "surrogateescape")
    expected = secret_rules.redact_secrets(text).encode("utf-8", "surrogateescape")
    for engine in ("auto", "re"):
        fast = secret_prefilter.kv_only_line(raw, engine)
        assert fast is None or fast == expected, (engine, line)


@settings(max_examples=400)
@given(st.lists(st.one_of(st.sampled_from(KV_FRAGMENTS), st.text(max_size=4)), min_size=1, max_size=16))
def test_the_fast_path_writes_what_every_rule_writes(parts: list[str]) -> None:
    _fast_equals_the_rules("".join(parts).replace("\n", " "))


@given(
    st.sampled_from(["prompt_token_ids", "stop_token_ids", "api_key", "x_token", "hf_tokens", "tokenizer_ids", "my_secret_ids"]),
    st.sampled_from(["", "'", '"']),
    st.sampled_from([": ", "=", " = ", ":"]),
    st.lists(st.integers(0, 10**12), max_size=40),
)
def test_lists_of_numbers_are_replaced_as_the_rule_replaces_them(key: str, quote: str, sep: str, numbers: list[int]) -> None:
    """The fast path asks the rule once per key and length of a list (zeros stand in for the digits)."""
    _fast_equals_the_rules(f"x {quote}{key}{quote}{sep}{numbers}, y")
    _fast_equals_the_rules(f"{key}{sep}{numbers}")


def test_the_fast_path_on_the_corpora_and_the_request_lines() -> None:
    for line in [*_corpus_lines(), *_request_lines(50, seed=7), *(b.decode("utf-8", "surrogateescape").rstrip("\n") for b in _file_lines()[:20000])]:
        _fast_equals_the_rules(line)


def _log_bytes_equals_the_rules(line: str) -> None:
    data = (line + "\n").encode("utf-8", "surrogateescape")
    expected = Redactor().text(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
    assert Redactor().log_bytes(data) == expected, line


@settings(max_examples=400)
@given(st.lists(st.one_of(st.sampled_from(KV_FRAGMENTS), st.text(max_size=4)), min_size=1, max_size=16))
def test_log_bytes_with_the_prefilter_s_own_key_hits_writes_what_every_rule_writes(parts: list[str]) -> None:
    """log_bytes hands the fast path the kv piece's matches from its one pass over the chunk, instead of a second search."""
    _log_bytes_equals_the_rules("".join(parts).replace("\n", " "))


@pytest.mark.parametrize(
    "line",
    [
        "\u00e9token=token=secret0123",  # the first key is no key to the rule (\u00e9 is a word character), the second is
        "x_token=api_key=s3cr3t0123 and token: [1, 2]",
        "a: prompt_token_ids: [1, 2, 3], token=abc",
        "'api_key': 'k3y' \"token\"= x",
        "token://user:pass@host",  # url_userinfo starts at the kv piece's ':': hidden from the one pass
    ],
)
def test_keys_hidden_from_the_one_pass_are_still_tried(line: str) -> None:
    _log_bytes_equals_the_rules(line)
    _fast_equals_the_rules(line)


# --- the narrow prefilter (issue 24): keys the kv rule keeps flag no line ---------------------------


@pytest.fixture(params=["hyperscan", "one pass"])
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Redactor.log_bytes with each way of finding the flagged lines: hyperscan's every match, or RE2's one leftmost pass."""
    if request.param == "hyperscan":
        pytest.importorskip("hyperscan")
        return "hyperscan"
    monkeypatch.setattr(secret_prefilter, "_hs_db", [None])
    return "auto"


def test_a_request_log_flags_no_line(engine: str) -> None:
    """vLLM's request lines name only token ids (`stop_token_ids=[]`, `prompt_token_ids: [...]`): no line to redact, so the
    log costs the one pass over its bytes (before, each was flagged and went through the kv fast path: 38 MB/s)."""
    lines = [line + "\n" for line in _request_lines(100)[::2]]  # the vLLM ones
    data = "".join(lines).encode()
    assert b"prompt_token_ids: [" in data and b"stop_token_ids=[]" in data
    assert secret_prefilter.secret_line_starts(data, engine) == []
    assert Redactor().log_bytes(data) is data


@pytest.mark.parametrize(
    "line",
    [
        "_authToken=npm0123456789secret",  # npm's .npmrc line: the key at the line's start begins with '_'
        "_auth=dXNlcjpwYXNzd29yZA==",
        "prompt_token_ids: [1, 2] x_token=s3cr3t0123",  # a kept key, then one that is not
        "stop_token_ids=x_token=s3cr3t0123",  # the rule takes the second key as the first one's value (kept, as the rules keep it)
        "stop_token_ids=_authToken=s3cr3t0123 token=abc",
        "eos_token_id: 2 Authorization: Bearer abcdefgh12345678",  # a kept key and another piece on the line
        "stop_token_ids\u3000= [1] token=abc",  # a Unicode space before the separator: the key is not read back
    ],
)
def test_kept_keys_and_the_keys_around_them(line: str, engine: str) -> None:
    """log_bytes writes what the rules write; `_authToken=` at a line's start reached server.log in clear before (the key
    was taken to start one byte later)."""
    _log_bytes_equals_the_rules(line)


@settings(max_examples=300)
@given(st.lists(st.one_of(st.sampled_from([*KV_FRAGMENTS, "_authToken=", "eos_token_id", "token_count=", "\n"]), st.text(max_size=4)), min_size=1, max_size=16))
def test_the_narrow_prefilter_flags_every_line_the_rules_change(parts: list[str]) -> None:
    for engine in ("hyperscan", "re") if _has_hyperscan() else ("re",):
        data = "".join(parts).encode("utf-8", "surrogateescape") + b"\n"
        flagged = set(secret_prefilter.secret_line_starts(data, engine))
        start = 0
        for line in data.split(b"\n")[:-1]:  # the lines as log_bytes splits them
            text = line.decode("utf-8", "surrogateescape") + "\n"
            if secret_rules.redact_secrets(text) != text:
                assert start in flagged, (engine, line)
            start += len(line) + 1


def _has_hyperscan() -> bool:
    try:
        import hyperscan  # noqa: F401
    except ImportError:
        return False
    return True


def test_auto_takes_hyperscan_once_a_long_stream_went_through(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its compilation costs 0.3-0.5 s of CPU: a short run or a diagnosis never pays it, a chatty server's log soon does."""
    pytest.importorskip("hyperscan")
    monkeypatch.setattr(secret_prefilter, "_hs_db", [])
    monkeypatch.setattr(secret_prefilter, "_seen", [0])
    monkeypatch.setattr(secret_prefilter, "HYPERSCAN_AFTER_BYTES", 1200)
    used = []
    real = secret_prefilter._lines_from_reports
    monkeypatch.setattr(secret_prefilter, "_lines_from_reports", lambda *a: used.append(1) or real(*a))
    data = b"x stop_token_ids=[] api_key=abc\nAuthorization: Bearer abcdefgh12345678\n" + b"plain line\n" * 40
    first = secret_prefilter.flagged_lines(data)  # 513 bytes: the one pass
    assert used == [] and [start for start, _ in first] == [0, 32]
    second = secret_prefilter.flagged_lines(data)  # 1026: still
    assert used == [] and second == first
    third = secret_prefilter.flagged_lines(data)  # past 1200 bytes: hyperscan, the same lines
    assert used == [1] and [start for start, _ in third] == [0, 32]
    assert Redactor().log_bytes(data) == Redactor().text(data.decode()).encode()

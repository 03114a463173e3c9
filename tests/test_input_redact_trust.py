"""Redaction that holds: multi-line PEM blocks, header-style keys, Google keys, and the opt-in PII mode.

A corpus of secret forms goes through redact_text line by line (as bundle and collect copies do),
through Redactor on arbitrary chunks, and through `diagnose` in every format and in every member of
`--bundle`; no secret may survive anywhere.
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oomdoctor.input import redact, secret_prefilter, secret_rules
from oomdoctor.input.pseudonyms import Pseudonyms
from oomdoctor.input.redact import Redactor, redact_obj, redact_text

from conftest import FIXTURES

SEED = FIXTURES / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log"

# A PEM body: every line a distinct secret fragment, the last line short as in real keys.
PEM_BODY = [
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj",
    "MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu",
    "NMoSfm76oqFvAp8Gy0iz5sxjZmSnXyCdPEovGhLa0VzMaQ8s+CLOyS56YyCFGeJZ",
    "qgtzJ6GR3eqoYSW9b9UMvkBpZODSctWSNGj3P7jRFDO5VoTwCQAWbFnOjDfH5Ulg",
    "p2PKSQnSJP3AJLQNFNe7br1XbrhV//eO+t51mIpGSDCUv3E0DDFcWDTH9cXDTTlR",
    "ZVEiR2BwpZOOkE/Z0/BVnhZYL71oZV34bKfWjQIt6V/isSMahdsAASACp4ZTGtwi",
    "VuNd9tybAgMBAAE=",
]
PEM_LINES = ["-----BEGIN PRIVATE KEY-----", *PEM_BODY, "-----END PRIVATE KEY-----"]
ENCRYPTED_PEM = [
    "-----BEGIN RSA PRIVATE KEY-----",
    "Proc-Type: 4,ENCRYPTED",
    "DEK-Info: AES-128-CBC,3F17F5316E2BAC89A1B2C3D4E5F60718",
    "",
    "hvZCNmPa3nDNN3tNdNFl1mdM8GWqj9RGXx0yIpgLaKxZyl1cYvGTyHSCO2PjLcpQ",
    "Zr9bWkSQfdNqLqw0gFxA",
    "-----END RSA PRIVATE KEY-----",
]
ENCRYPTED_SECRETS = ["3F17F5316E2BAC89A1B2C3D4E5F60718", "hvZCNmPa3nDNN3tNdNFl1mdM8GWqj9RGXx0yIpgLaKxZyl1cYvGTyHSCO2PjLcpQ", "Zr9bWkSQfdNqLqw0gFxA"]

# One line each: the secret, and the line it appears on.
LINE_SECRETS = {
    "k3y-0123456789abcdef": "INFO request headers: {'x-api-key': 'k3y-0123456789abcdef', 'content-type': 'application/json'}",
    "XAPI0123456789XYZ": "curl -H 'X-API-KEY: XAPI0123456789XYZ' http://server:30000/v1/models",
    "azkey9876543210zz": 'headers={"api-key": "azkey9876543210zz"}',
    "authtok-55aa66bb77cc": "X-Auth-Token: authtok-55aa66bb77cc",
    "goog-hdr-secret-123": "x-goog-api-key=goog-hdr-secret-123",
    "amzsecuritytoken0001": "X-Amz-Security-Token: amzsecuritytoken0001",
    "apimsub0123456789": "Ocp-Apim-Subscription-Key: apimsub0123456789",
    "uppercasebearer0123": "AUTHORIZATION: BEARER uppercasebearer0123",
    "proxyauth0123456": "Proxy-Authorization: Basic proxyauth0123456",
    "dictbearer0123456": "{'Authorization': 'Bearer dictbearer0123456'}",
    "digestresp0123456789": 'Authorization: Digest username="u", realm="r", response="digestresp0123456789"',
    "AIzaSyA1234567890abcdefghijklmnopqrstuv": "google key AIzaSyA1234567890abcdefghijklmnopqrstuv in the config",
    "AIzaSyZ_-ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ": "GOOGLE_KEY AIzaSyZ_-ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ",
    "glpat-abcdefghij0123456789": "gitlab glpat-abcdefghij0123456789",
    "sk_live_0123456789abcdefABCD": "stripe sk_live_0123456789abcdefABCD",
    "MIIBOgIBAAJBAKj34GkxFhD90vcN": "ssl_key='-----BEGIN RSA PRIVATE KEY-----\\nMIIBOgIBAAJBAKj34GkxFhD90vcN\\n-----END RSA PRIVATE KEY-----\\n'",
}
ALL_SECRETS = [*PEM_BODY, *ENCRYPTED_SECRETS, *LINE_SECRETS]


def _leaks(text: str) -> list[str]:
    return [s for s in ALL_SECRETS if s in text]


# --- redact_text / Redactor ---------------------------------------------------------------------


@pytest.mark.parametrize("secret, line", list(LINE_SECRETS.items()))
def test_each_line_form_is_redacted(secret: str, line: str) -> None:
    out = Redactor().text(line)
    assert secret not in out and "<redacted>" in out


def test_header_redaction_keeps_the_name_and_quotes() -> None:
    r = Redactor()
    assert r.text("{'x-api-key': 'abc123456'}") == "{'x-api-key': '<redacted>'}"
    assert r.text("X-Auth-Token: abc123456 next") == "X-Auth-Token: <redacted> next"
    # Not secrets: counts and ids with similar names stay.
    for harmless in ("x-ratelimit-remaining-tokens: 100", "x-request-id: 42", "--max-total-tokens 4096", "num-tokens: 7"):
        assert r.text(harmless) == harmless


@pytest.mark.parametrize(
    "prefix",
    ["", "[2026-03-02 10:00:41 TP0] ", "sglang-1  | ", "2026-03-02T10:00:41.123Z ", "[rank1]: ", "Mar 02 10:00:41 node7 python[123]: "],
)
def test_pem_block_redacted_line_by_line(prefix: str) -> None:
    """The bundle and collect copies call redact_text once per line: the body must go too."""
    redact.active().end_of_stream()
    lines = [f"{prefix}loading TLS key\n"] + [f"{prefix}{line}\n" for line in PEM_LINES] + [f"{prefix}server ready on port 30000\n"]
    out = "".join(redact_text(line) for line in lines)
    assert not _leaks(out), out
    assert "loading TLS key" in out and "server ready on port 30000" in out
    assert out.count("\n") == len(lines)  # line numbers in the copy match the original


def test_pem_block_split_across_chunks() -> None:
    r = Redactor()
    text = "\n".join(["before", *PEM_LINES, "after"]) + "\n"
    for cut in (10, 60, 200, 300, len(text) - 30):
        r.end_of_stream()
        head, tail = text[:cut], text[cut:]
        # Chunks are whole lines, as iter_line_chunks yields them.
        split = head.rfind("\n") + 1
        out = r.text(text[:split]) + r.text(text[split:])
        assert not _leaks(out), (cut, out)
        assert out.startswith("before\n") and out.endswith("after\n"), out
        assert head + tail == text


def test_encrypted_pem_headers_and_blank_line() -> None:
    out = Redactor().text("\n".join([*ENCRYPTED_PEM, "Load weight end."]) + "\n")
    assert not _leaks(out) and "Load weight end." in out


def test_truncated_pem_keeps_the_first_ordinary_line() -> None:
    r = Redactor()
    lines = ["-----BEGIN OPENSSH PRIVATE KEY-----", PEM_BODY[0], PEM_BODY[1], "[2026-03-02 10:00:42] Load weight begin. avail mem=78.5 GB"]
    out = r.text("\n".join(lines))
    assert not _leaks(out)
    assert out.endswith("[2026-03-02 10:00:42] Load weight begin. avail mem=78.5 GB")
    assert r.text("plain") == "plain"  # not key material: kept (the block waits PEM_GAP_LINES for more of it)


def test_redact_obj_and_module_functions_still_work() -> None:
    assert redact_obj({"a": ["x-api-key: abcdef123", 3]}) == {"a": ["x-api-key: <redacted>", 3]}


# --- the corpus through the CLI -----------------------------------------------------------------


@pytest.fixture
def secret_log(tmp_path: Path) -> Path:
    seed = SEED.read_text().splitlines()
    body = ["[2026-03-02 10:00:40] loading ssl key from env"]
    body += [f"[2026-03-02 10:00:40] {line}" for line in PEM_LINES]
    body += ENCRYPTED_PEM
    body += list(LINE_SECRETS.values())
    log = tmp_path / "secret.log"
    log.write_text("\n".join(body + seed) + "\n")
    return log


def _all_outputs(run_cli, log: Path, tmp_path: Path) -> dict[str, str]:
    outputs = {}
    for fmt in ("text", "json", "markdown", "html"):
        res = run_cli("diagnose", str(log), "--format", fmt)
        assert res.code == 3
        outputs[fmt] = res.out + res.err
    bundle = tmp_path / "b.zip"
    assert run_cli("diagnose", str(log), "--bundle", str(bundle)).code == 3
    with zipfile.ZipFile(bundle) as zf:
        for name in zf.namelist():
            outputs[f"bundle:{name}"] = zf.read(name).decode()
    return outputs


def test_no_secret_of_the_corpus_survives_any_output(run_cli, secret_log: Path, tmp_path: Path) -> None:
    assert _leaks(secret_log.read_text()) == ALL_SECRETS
    outputs = _all_outputs(run_cli, secret_log, tmp_path)
    assert "bundle:inputs/secret.log" in outputs
    for where, text in outputs.items():
        assert not _leaks(text), f"{_leaks(text)} leaked into {where}"
    copy = outputs["bundle:inputs/secret.log"]
    assert copy.count("\n") == secret_log.read_text().count("\n")
    assert "server_args=ServerArgs(" in copy  # the log itself survives


def test_no_secret_survives_collect_copies(run_cli, secret_log: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    res = run_cli("collect", "-o", str(out), "--log", str(secret_log))
    assert res.code in (0, 5)
    copies = list((out / "logs").iterdir())
    assert copies
    for p in copies:
        assert not _leaks(p.read_text()), p


# --- PII ----------------------------------------------------------------------------------------


def test_pii_off_by_default() -> None:
    line = "connect to 10.1.2.3:29500 host=gpu-node-07 owner alice@example.com"
    assert Redactor().text(line) == line


def test_pii_pseudonyms_are_consistent() -> None:
    r = Redactor(pii=True)
    a = r.text("[2026-03-02 10:00:41] init_process_group tcp://10.1.2.3:29500 from 10.1.2.4 (alice@example.com)")
    b = r.text("NCCL INFO peer 10.1.2.4 ok, rendezvous 10.1.2.3; mail ALICE@example.com bob@example.com")
    assert a == "[2026-03-02 10:00:41] init_process_group tcp://<ip-1>:29500 from <ip-2> (<email-1>)"
    assert b == "NCCL INFO peer <ip-2> ok, rendezvous <ip-1>; mail <email-1> <email-2>"
    assert r.pseudonyms.table()["<ip-1>"] == "10.1.2.3"


def test_pii_hosts_ipv6_and_what_is_kept() -> None:
    r = Redactor(pii=True)
    out = r.text("hostname=gpu-node-07 fqdn gpu-node-07.cluster.internal addr fe80::1ff:fe23:4567:890a")
    assert "gpu-node-07" not in out and "fe80" not in out
    assert "<host-1>" in out and "<host-2>" in out and "<ip-1>" in out
    # Learned once, the bare name is replaced everywhere after.
    bare = next(k for k, v in r.pseudonyms.table().items() if v == "gpu-node-07")
    assert f"hostname={bare} " in out
    assert r.text("gpu-node-07:1234:1234 [0] NCCL INFO Bootstrap") == f"{bare}:1234:1234 [0] NCCL INFO Bootstrap"
    assert r.text("reading /logs/gpu-node-07.log") == f"reading /logs/{bare}.log"
    kept = [
        "--host 0.0.0.0 --port 30000 and 127.0.0.1 and ::1",
        "[2026-03-02 10:00:41 TP0] torch.cuda.memory.mem_get_info() in sglang.srt.model_executor.model_runner",
        "c10::Error at::Tensor std::vector",
        "download https://huggingface.co/Qwen/Qwen3-8B/resolve/main/config.json",
        "NCCL version 2.21.5+cuda12.4 torch 2.5.1 vllm 0.6.3.post1 10:00:41",
        "model.safetensors.index.json config.json setup.py",
    ]
    for line in kept:
        assert r.text(line) == line


def test_pii_is_consistent_across_every_output_and_bundle_member(run_cli, tmp_path: Path) -> None:
    """How the CLI wires --redact-pii: one session around the view, the renderers and the bundle."""
    seed = SEED.read_text().splitlines()
    node0 = tmp_path / "node0.log"
    node1 = tmp_path / "node1.log"
    node0.write_text("\n".join(["[2026-03-02 10:00:40] hostname=gpu-node-07 master 10.9.8.7:29500 admin ops@corp.example.com", *seed]) + "\n")
    node1.write_text("[2026-03-02 10:00:40] hostname=gpu-node-08 joined master 10.9.8.7:29500, peer gpu-node-07\n")
    bundle = tmp_path / "pii.zip"
    res = run_cli("diagnose", str(node0), str(node1), "--redact-pii", "--bundle", str(bundle), "--format", "json")
    assert res.code == 3
    with zipfile.ZipFile(bundle) as zf:
        files = {n: zf.read(n).decode() for n in zf.namelist()}
    everything = "".join(files.values()) + res.out
    for private in ("10.9.8.7", "gpu-node-07", "gpu-node-08", "ops@corp.example.com"):
        assert private not in everything
    # The same address and host get the same pseudonym in every member (node identity survives).
    ip = re.search(r"master (<ip-\d+>):29500", files["inputs/node0.log"]).group(1)
    assert f"master {ip}:29500" in files["inputs/node1.log"]
    host7 = re.search(r"hostname=(<host-\d+>)", files["inputs/node0.log"]).group(1)
    assert f"peer {host7}" in files["inputs/node1.log"]
    json.loads(files["diagnosis.json"])
    # Outside the session nothing is pseudonymised.
    assert redact_text("10.9.8.7") == "10.9.8.7"


def test_shared_pseudonym_table_between_redactors() -> None:
    table = Pseudonyms()
    assert Redactor(pii=True, pseudonyms=table).text("10.0.0.5") == "<ip-1>"
    assert Redactor(pii=True, pseudonyms=table).text("10.0.0.6 10.0.0.5") == "<ip-2> <ip-1>"
    assert len(table) == 2


def test_every_secret_form_passes_the_one_search_prefilter() -> None:
    """redact passes over lines holding none of its needles; every secret of the corpus holds one."""
    # PEM body lines are redacted by the block state before this filter; their BEGIN line holds a needle.
    for text in [*LINE_SECRETS.values(), PEM_LINES[0], ENCRYPTED_PEM[0]]:
        assert any(n in text.lower() for n in secret_rules._NEEDLES), text[:60]


# --- the byte prefilter of in-flight redaction (`oomdoctor run`) ---------------------------------

REPO_TESTS = Path(__file__).resolve().parent


def _corpus_lines() -> list[str]:
    """Every secret form the tests know, one per line (the PEM blocks line by line)."""
    import test_report_markdown_bundle
    import test_trust

    return [
        *LINE_SECRETS.values(),
        *PEM_LINES,
        *ENCRYPTED_PEM,
        *test_report_markdown_bundle.SECRETS.values(),
        f"launch --api-key {test_trust.SECRET} --port 30000",
        "X-API-\u212aEY: kelvin0123456789",  # KELVIN SIGN: re.IGNORECASE takes it for a k
        "\u017fession-token: longs0123456789",  # LONG S
        "\u0131d-token: dotlessi0123456789",  # DOTLESS I
        "\u0130d-token: dottedi0123456789",  # CAPITAL I WITH DOT
        "api_key\u3000=\u3000ideographic-space-0123",
        "token\x1c=fileseparator0123",
        "'hf_token': 'quoted-0123456789'",
        "x-goog-api-key=goog-hdr-secret-123",
        "downloading with hf_abcdefghijklmnopqrstuvwxyz0123 from the cache",
        "api_key: at-line-start-0123",
    ]


def _file_lines() -> list[bytes]:
    """Every line of every fixture file and test source (which hold the corpora above as literals)."""
    lines: list[bytes] = []
    for path in sorted(REPO_TESTS.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            lines += path.read_bytes().split(b"\n")
    return lines


def _changed_by_the_redactor(line: bytes) -> bool:
    text = line.decode("utf-8", "surrogateescape")
    return Redactor().text(text) != text


def test_prefilter_flags_every_line_the_redactor_changes() -> None:
    """The prefilter may flag more lines than hold secrets, never fewer: checked on the corpora and on every fixture line."""
    corpus = [line.encode() for line in _corpus_lines()]
    files = _file_lines()
    changed = [line for line in corpus + files if _changed_by_the_redactor(line)]
    assert len(changed) > 80  # the corpora, the fixtures' own secrets and the test sources that spell them out
    missed = [line for line in changed if not secret_prefilter.secret_line_starts(line)]
    assert missed == []
    # And it is selective: of the ~40,000 lines, few are flagged that the redactor leaves alone.
    flagged = [line for line in files if secret_prefilter.secret_line_starts(line)]
    assert len(flagged) < 2 * len([line for line in files if _changed_by_the_redactor(line)]) + 50


def test_prefilter_leaves_serving_statistics_alone() -> None:
    """'#token: 81234' and 'token usage:' are on every statistics line; none of these can hold a secret."""
    stats = [
        "[2026-03-02 10:00:41 TP0] Decode batch. #running-req: 233, #token: 81234, token usage: 0.28, cuda graph: True, gen throughput (token/s): 4012.55, #queue-req: 0",
        "[2026-03-02 10:00:41 DP1 TP3] Prefill batch. #new-seq: 1, #new-token: 8192, #cached-token: 0, token usage: 0.03, #running-req: 0, #queue-req: 3, input throughput (token/s): 9120.33",
        "[2026-03-02 10:01:04 TP0] max_total_num_tokens=287375, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=3592, context_len=40960, available_gpu_mem=10.85 GB",
        "INFO 03-02 10:00:41 metrics.py:351] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 2044.3 tokens/s, Running: 64 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 28.1%, CPU KV cache usage: 0.0%.",
        "(APIServer pid=1) INFO 08-19 07:51:03 [loggers.py:123] Engine 000: Avg prompt throughput: 512.3 tokens/s, Avg generation throughput: 1821.0 tokens/s, Running: 48 reqs, Waiting: 0 reqs, GPU KV cache usage: 41.2%, Prefix cache hit rate: 12.5%",
        "[2026-03-02 10:00:41] INFO:     127.0.0.1:51234 - \"POST /v1/chat/completions HTTP/1.1\" 200 OK",
        "[2026-03-02 10:00:41 TP0] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=47.80 GB, mem usage=30.71 GB.",
        "x-ratelimit-remaining-tokens: 100",
        "skip_tokenizer_init=False, tokenizer_mode='auto', max_num_batched_tokens=8192",
    ]
    for line in stats:
        assert Redactor().text(line) == line
        assert secret_prefilter.secret_line_starts(line.encode()) == [], line
    chunk = "".join(line + "\n" for line in stats * 100).encode()
    assert secret_prefilter.secret_line_starts(chunk) == []


def test_prefilter_engines_agree_and_name_the_line_a_match_is_on() -> None:
    lines = [*(line.encode() for line in _corpus_lines()), *_file_lines()[:4000]]
    data = b"\n".join(lines) + b"\n"
    starts = secret_prefilter.secret_line_starts(data)
    assert starts == secret_prefilter.secret_line_starts(data, "re")
    assert all(s == 0 or data[s - 1 : s] == b"\n" for s in starts)
    expected, pos = [], 0
    for line in lines:
        if secret_prefilter.secret_line_starts(line):
            expected.append(pos)
        pos += len(line) + 1
    assert starts == expected  # no match spans two lines: each is charged to its own line


def test_prefilter_knows_every_space_and_case_fold_of_python_re() -> None:
    """What makes a str regex match more than its bytes twin: `\\s` beyond ASCII and re.IGNORECASE folds."""
    everything = "".join(map(chr, range(0x110000)))
    assert set(re.findall(r"\s", everything)) - {"\n"} == set(secret_prefilter._WS_CHARS)
    beyond_ascii = everything[0x80:]
    for letter in "abcdefghijklmnopqrstuvwxyz":
        assert set(re.findall("(?i)" + letter, beyond_ascii)) == set(secret_prefilter._FOLDS.get(letter, "")), letter


FRAGMENTS = [
    "token", "tokens", "api_key", "API_KEY", "HF_TOKEN", "apikey", "x-api-key", "X-Auth-Token", "x-foo-", "auth", "Authorization",
    "authorization", "bearer ", "Basic ", "password", "passwd", "cookie", "Set-Cookie", "secret", "client-secret", "credentials",
    "max_total_num_", "tokenizer", "#", ".", "-", "_", "'", '"', ":", "=", " ", "\t", "\x1c", "\u3000", "\xa0", "\u212a", "\u0131",
    "\u0130", "\u017f", "é", "\r", "hf_", "sk-", "sk_live_", "AKIA", "AIza", "ghp_", "github_pat_", "glpat-", "xoxb-", "eyJ",
    "://", "@", "user", "--api-key", "--token", "--password", "0123456789abcdef", "ABCDEFGHIJKLMNOP", "xyzXYZ0123456789",
    "-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----", "[2026-03-02 10:00:41 TP0] ", "None",
    # The forms of issue 24: camelCase, dotted and npm keys, Azure and SAS, an empty user name, ids and counts.
    "accessToken", "clientSecret", "AccountKey", "SharedAccessSignature", "ACCOUNTKEY", "user.", "_authToken", "_auth", "?", "&", "sig=",
    ";", "redis://:", "Ids", "_ids", "_count", "Expiry",
]


@given(st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=6)), min_size=1, max_size=14))
def test_prefilter_is_a_superset_of_the_rules_on_generated_lines(parts: list[str]) -> None:
    line = "".join(parts).replace("\n", " ")
    data = line.encode("utf-8", "surrogateescape")
    if _changed_by_the_redactor(data):
        assert secret_prefilter.secret_line_starts(data), line


def test_log_bytes_equals_redacting_every_line() -> None:
    """In-flight redaction (prefiltered, in arbitrary whole-line chunks) writes what redacting each line would."""
    import random

    corpus = [*(line.encode() for line in _corpus_lines()), b"[2026-03-02 10:00:40] raw \xff\xfe bytes and api_key=sk-proj-abcdefghijklmnop12"]
    corpus += [f"[2026-03-02 10:00:40] {line}".encode() for line in PEM_LINES]  # a prefixed block
    assert not _leaks(Redactor().log_bytes(b"\n".join(corpus) + b"\n").decode("utf-8", "surrogateescape"))
    data = b"\n".join(corpus + _file_lines()) + b"\n"
    reference = Redactor()  # line by line at each b"\\n", as the post-exit pass read server.log
    expected = b"".join(reference.text(piece.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape") for piece in _split_newlines(data))
    assert expected != data
    rng = random.Random(15)
    for _ in range(3):
        r = Redactor()
        out, pos = [], 0
        while pos < len(data):
            cut = data.rfind(b"\n", pos, pos + rng.randint(1, 300_000)) + 1
            cut = cut if cut > pos else data.find(b"\n", pos) + 1 or len(data)
            out.append(r.log_bytes(data[pos:cut]))
            pos = cut
        assert b"".join(out) == expected


def _split_newlines(data: bytes) -> list[bytes]:
    pieces = data.split(b"\n")
    return [p + b"\n" for p in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])


def test_sessions_nest_per_thread_and_fall_back_to_the_default() -> None:
    """The redactor a session opens serves its thread until it closes; another thread keeps its own."""
    import threading

    default = redact.active()
    assert not default.pii and redact.active() is default
    with redact.session(pii=True) as outer:
        assert redact.active() is outer
        first = redact_text("from alice@example.org")
        with redact.session() as inner:
            assert redact.active() is inner and redact_text("from alice@example.org") == "from alice@example.org"
        assert redact.active() is outer and redact_text("again alice@example.org") == first.replace("from", "again")
        seen: list[object] = []
        worker = threading.Thread(target=lambda: seen.append(redact.active()))
        worker.start()
        worker.join()
        assert seen and seen[0] is not outer and not seen[0].pii  # type: ignore[attr-defined]
    assert redact.active() is default
    with pytest.raises(RuntimeError), redact.session(pii=True):
        raise RuntimeError("the session closes anyway")
    assert redact.active() is default


# --- PEM blocks with other lines between their lines (issue 24) ----------------------------------


def _interleaved(block: list[str], other: list[str], prefix_block: str = "", prefix_other: str = "") -> list[str]:
    """The block's lines with one line of ``other`` after each of them (a merged log, two streams)."""
    lines = []
    for i, line in enumerate(block):
        lines.append(f"{prefix_block}{line}\n")
        lines.append(f"{prefix_other}{other[i % len(other)]}\n")
    return lines


# What another process or stream writes meanwhile: numbers, single words, statistics (evidence, all of it).
OTHER_LINES = [
    "[2026-03-02 10:00:41 TP0] Load weight begin. avail mem=78.50 GB",
    "12345",
    "Done",
    "[2026-03-02 10:00:41 TP0] Decode batch. #running-req: 233, #token: 81234, token usage: 0.28",
    "Loading safetensors checkpoint shards: 100%|##########| 16/16",
    "abcdefgh",
]


@pytest.mark.parametrize(
    "prefix_block, prefix_other",
    [("", ""), ("[pod/a/server] ", "[pod/b/server] "), ("sglang-1  | ", "sglang-2  | "), ("", "[2026-03-02 10:00:41 TP0] ")],
)
def test_pem_lines_with_other_lines_between_them_are_redacted(prefix_block: str, prefix_other: str) -> None:
    """A merged log (kubectl --prefix of two pods, run's stdout and stderr) puts other lines inside a block."""
    for block, secrets in ((PEM_LINES, PEM_BODY), (ENCRYPTED_PEM, ENCRYPTED_SECRETS)):
        lines = _interleaved(block, OTHER_LINES, prefix_block, prefix_other)
        r = Redactor()
        out = "".join(r.text(line) for line in lines)
        assert [s for s in secrets if s in out] == [], out
        # Every line of the other stream is there as it was, and the line count is the input's.
        for line in lines:
            if line.startswith(prefix_other) and line[len(prefix_other) :].rstrip("\n") in OTHER_LINES:
                assert line in out
        assert out.count("\n") == len(lines)
        assert r.text("after the block: MIIBOgIBAAJBAKj34GkxFhD90vcN0123\n") == "after the block: MIIBOgIBAAJBAKj34GkxFhD90vcN0123\n"


def test_a_block_left_open_stops_taking_lines_after_a_while() -> None:
    """A cut block (BEGIN, no END) must not eat the rest of the log: base64-like lines far after it stay."""
    r = Redactor()
    r.text("-----BEGIN PRIVATE KEY-----\n")
    r.text(PEM_BODY[0] + "\n")
    for i in range(200):
        r.text(f"[2026-03-02 10:00:41 TP0] line {i}\n")
    assert r.text("QWxhZGRpbjpvcGVuIHNlc2FtZQ==\n") == "QWxhZGRpbjpvcGVuIHNlc2FtZQ==\n"


def test_bundle_of_a_merged_log_keeps_no_key_line(run_cli, tmp_path: Path) -> None:
    log = tmp_path / "merged.log"
    body = _interleaved(PEM_LINES, OTHER_LINES, "[pod/a/server] ", "[pod/b/server] ")
    log.write_text("".join(body) + SEED.read_text())
    bundle = tmp_path / "b.zip"
    assert run_cli("diagnose", str(log), "--bundle", str(bundle)).code == 3
    with zipfile.ZipFile(bundle) as zf:
        copy = zf.read("inputs/merged.log").decode()
    assert [s for s in PEM_BODY if s in copy] == []
    assert "[pod/b/server] 12345\n" in copy and "[pod/b/server] Done\n" in copy
    assert copy.count("\n") == log.read_text().count("\n")


# --- a line longer than run's piece (issue 24) ----------------------------------------------------


CUT_FORMS = ["hf_abcdefghijklmnopqrstuvwxyz0123456789", "api_key=s3cr3tValueAcrossTheCut0123", "Authorization: Bearer eyBearerTokenAcrossTheCut456",
             "--hf-token tokenAfterTheFlagAcrossTheCut789", "https://bob:hunter2passAcrossTheCut@db.internal/x"]


@pytest.mark.parametrize("form", CUT_FORMS)
def test_split_long_line_never_cuts_a_secret_in_two(form: str) -> None:
    window = redact.LONG_LINE_WINDOW
    secret = form.split()[-1].split("=")[-1].split("@")[0].split(":")[-1]
    for filler in (b"x" * (2 * window), b"12345 MiB, " * (2 * window // 11)):
        for shift in range(-len(form) - 2, 3, 4):  # the cut a window before the end falls at every fourth byte of the form
            line = filler + b" " + form.encode() + b" " + b"y" * (window + shift)
            head, rest = redact.split_long_line(line)
            assert head + rest == line  # a clean cut loses nothing
            written = Redactor().log_bytes(head) + Redactor().log_bytes(rest)
            assert secret[:8].encode() not in written and secret[-8:].encode() not in written, (shift, written[-200:])


def test_split_long_line_drops_the_word_it_must_cut_when_no_cut_is_clean() -> None:
    """A Digest header takes the rest of its line: every cut after it changes what is redacted, so the word at the cut goes."""
    window = redact.LONG_LINE_WINDOW
    line = b"x" * window + b' Authorization: Digest username="u", response="SECRETRESP0123456789" ' + b"a b c d e f g h " + b"z" * window
    head, rest = redact.split_long_line(line)
    assert head.endswith(b"<redacted>") and len(head) + len(rest) < len(line)
    written = Redactor().log_bytes(head) + rest
    assert b"SECRETRESP" not in written and written.startswith(b"x" * window)


def test_two_blocks_open_at_once_in_a_merged_log_are_both_redacted() -> None:
    """Two pods write keys at the same time: the first END must not end the other pod's block (found by the fuzz test)."""
    a = ["-----BEGIN EC PRIVATE KEY-----", PEM_BODY[0], PEM_BODY[1], "-----END EC PRIVATE KEY-----"]
    b = ["-----BEGIN PRIVATE KEY-----", PEM_BODY[2], PEM_BODY[3], PEM_BODY[4], "-----END PRIVATE KEY-----"]
    lines = [f"[rank3]: {a[0]}", f"sglang-1  | {b[0]}", f"[rank3]: {a[1]}", f"sglang-1  | {b[1]}", f"[rank3]: {a[2]}", f"[rank3]: {a[3]}",
             f"sglang-1  | {b[2]}", "[2026-03-02 10:00:41 TP0] Load weight begin. avail mem=78.50 GB", f"sglang-1  | {b[3]}", f"sglang-1  | {b[4]}",
             "sglang-1  | 12345"]
    r = Redactor()
    out = "".join(r.text(line + "\n") for line in lines)
    assert [s for s in PEM_BODY[:5] if s in out] == [], out
    assert out.splitlines()[-4:] == ["[2026-03-02 10:00:41 TP0] Load weight begin. avail mem=78.50 GB", "sglang-1  | <redacted>", "sglang-1  | <redacted>", "sglang-1  | 12345"]

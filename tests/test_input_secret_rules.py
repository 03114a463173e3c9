"""The secret rules on the forms issue 24 found in clear, and the counts and ids beside them that must stay.

Each form is checked three ways: the rule replaces the secret and keeps what is around it, the byte
prefilter of `run` flags its line (it must stay a superset of the rules), and `diagnose` writes it in
no output format and in no bundle member.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from oomdoctor.input import secret_prefilter
from oomdoctor.input.redact import Redactor
from oomdoctor.input.secret_rules import redact_secrets

from conftest import FIXTURES

SEED = FIXTURES / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log"

# secret -> (the line it is on, text of that line that is not secret and must survive)
NEW_FORMS = {
    "s3cretpassw0rd": ("[2026-03-02 10:00:40] cache at redis://:s3cretpassw0rd@redis-host:6379/0 ready", ["redis://", "@redis-host:6379/0 ready"]),
    "abcDEF1234567890xyz": ("config accessToken=abcDEF1234567890xyz refresh in 3600 s", ["config accessToken=", " refresh in 3600 s"]),
    "cs-0987654321abcdef": ('{"clientSecret": "cs-0987654321abcdef", "tenant": "t1"}', ['"clientSecret": ', '"tenant": "t1"']),
    "rt-55aa66bb77cc88dd": ("oauth refreshToken: rt-55aa66bb77cc88dd expires", ["refreshToken: ", " expires"]),
    "ut-1234567890abcdef": ("loaded user.token=ut-1234567890abcdef from profile", ["user.token=", " from profile"]),
    "db-pw-0099887766": ("spring.datasource.password: db-pw-0099887766", ["spring.datasource.password: "]),
    "AZk3yAZk3yAZk3yAZk3y+/Zm9vYmFy==": (
        "conn DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=AZk3yAZk3yAZk3yAZk3y+/Zm9vYmFy==;EndpointSuffix=core.windows.net",
        ["AccountName=acct;AccountKey=", ";EndpointSuffix=core.windows.net"],
    ),
    "sbK3yK3yK3yK3y0123=": ("Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey=sbK3yK3yK3yK3y0123=", ["SharedAccessKeyName=Root;"]),
    "sv=2021&sig=fullSAS0123%2B": ("BlobEndpoint=https://a.blob.core.windows.net/;SHAREDACCESSSIGNATURE=sv=2021&sig=fullSAS0123%2B", ["BlobEndpoint=https://a.blob"]),
    "SASsig0123456789abcdefXYZ%3D": (
        "GET https://acct.blob.core.windows.net/c/b?sv=2020-08-04&ss=b&sig=SASsig0123456789abcdefXYZ%3D&se=2026-03-02 200",
        ["?sv=2020-08-04&ss=b&sig=", "&se=2026-03-02 200"],
    ),
    "npm_abcdefghijklmnopqrstuvwxyz0123": ("//registry.npmjs.org/:_authToken=npm_abcdefghijklmnopqrstuvwxyz0123", ["//registry.npmjs.org/:_authToken="]),
    "bnBtOnBhc3N3b3Jk": ("//npm.corp.example/:_auth=bnBtOnBhc3N3b3Jk", ["//npm.corp.example/:_auth="]),
}

# Counts, ids, lengths and times whose names hold a secret word: evidence, never redacted.
KEPT = [
    "SamplingParams(n=1, stop_token_ids=[151645, 151643], max_tokens=16)",
    "prompt_token_ids: [1, 2, 3], eos_token_id=2, pad_token_id: 0, token_count=5",
    "promptTokenIds=[1, 2, 3] maxTokens=512 numTokens: 8192 eosTokenId=2",
    "token_budget=8192 secret_len=5 api_key_id=42 accessTokenExpiry=3600",
    "kill -9 pid=12345 received sig=15",
    "[2026-03-02 10:00:41 TP0] Decode batch. #running-req: 233, #token: 81234, token usage: 0.28, gen throughput (token/s): 4012.55",
    "KV Cache is allocated. #tokens: 287375, K size: 13.16 GB, V size: 13.16 GB",
    "self.tokenizer.pad_token_id = 0",
]


@pytest.mark.parametrize("secret", list(NEW_FORMS))
def test_each_new_form_is_redacted_and_its_neighbours_stay(secret: str) -> None:
    line, kept = NEW_FORMS[secret]
    out = Redactor().text(line)
    assert secret not in out and "<redacted>" in out, out
    for text in kept:
        assert text in out, (text, out)


@pytest.mark.parametrize("secret", list(NEW_FORMS))
def test_the_prefilter_flags_each_new_form(secret: str) -> None:
    """`run` redacts only the lines the byte prefilter flags: a form it missed would reach server.log in clear."""
    assert secret_prefilter.secret_line_starts(NEW_FORMS[secret][0].encode()) == [0]


@pytest.mark.parametrize("line", KEPT)
def test_counts_and_ids_named_like_secrets_stay(line: str) -> None:
    assert Redactor().text(line) == line


def test_pii_replaces_the_host_after_user_info() -> None:
    """`user:pass@host`: the user info is a secret, and with --redact-pii the host is a host like any other."""
    r = Redactor(pii=True)
    out = r.text("connect postgres://bob:hunter2pass@db7-node.corp.internal:5432/x and redis://:pw12345678@cachebox:6379/0")
    assert "hunter2pass" not in out and "pw12345678" not in out
    assert "db7-node" not in out and "cachebox" not in out, out
    assert out == "connect postgres://<redacted>@<host-1>:5432/x and redis://<redacted>@<host-2>:6379/0"
    # Learned, the bare name goes everywhere after, as a host named by hostname= does.
    assert r.text("cachebox is slow") == "<host-2> is slow"
    # A public service and localhost stay.
    kept = "https://<redacted>@huggingface.co/org/m and http://u:p@localhost:8000/v1"
    assert r.text(kept) == "https://<redacted>@huggingface.co/org/m and http://<redacted>@localhost:8000/v1"


def test_no_new_form_reaches_any_output(run_cli, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("\n".join([line for line, _ in NEW_FORMS.values()] + SEED.read_text().splitlines()) + "\n")
    outputs = {}
    for fmt in ("text", "json", "markdown", "html", "prometheus"):
        res = run_cli("diagnose", str(log), "--format", fmt)
        assert res.code == 3, res.err
        outputs[fmt] = res.out + res.err
    bundle = tmp_path / "b.zip"
    assert run_cli("diagnose", str(log), "--bundle", str(bundle)).code == 3
    with zipfile.ZipFile(bundle) as zf:
        outputs.update({f"bundle:{n}": zf.read(n).decode() for n in zf.namelist()})
    assert "bundle:inputs/server.log" in outputs
    leaks = {where: [s for s in NEW_FORMS if s in text] for where, text in outputs.items()}
    assert {where: found for where, found in leaks.items() if found} == {}
    assert "EndpointSuffix=core.windows.net" in outputs["bundle:inputs/server.log"]


@pytest.mark.parametrize(
    ("line", "want"),
    [
        ("stop_token_ids=x_token=s3cr3t0123", "stop_token_ids=x_token=<redacted>"),
        ("eos_token_id=api_key=s3cr3t0123", "eos_token_id=api_key=<redacted>"),
        ("stop_token_ids=_authToken=s3cr3t0123 token=abc", "stop_token_ids=_authToken=<redacted> token=<redacted>"),
        ("stop_token_ids=[2, 3] max_tokens=100", "stop_token_ids=[2, 3] max_tokens=100"),
    ],
)
def test_a_kept_key_s_bare_value_does_not_swallow_the_pair_after_it(line: str, want: str) -> None:
    """A kept key (token ids) keeps its value, and a secret pair that its bare value ran into is still redacted
    (before, `stop_token_ids=x_token=SECRET` came out unchanged)."""
    assert redact_secrets(line) == want

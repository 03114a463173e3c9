"""The secret rules: an ordered table of patterns, and one string redacted by them.

Each rule replaces only the secret and keeps its key (and, for lists, the number of items), so a
redacted report still says *that* a key was set.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from oomdoctor.input.patterns import LazyRegex, lazy

if TYPE_CHECKING:
    from typing import Any

REDACTED = "<redacted>"

SECRET_FLAGS = (
    "api-key",
    "admin-api-key",
    "hf-token",
    "token",
    "ssl-keyfile-password",
    "password",
    "secret",
    "aws-secret-access-key",
    "openai-api-key",
)
# Parameter names that hold secrets: api_key, hf_token, access_token, password, ..., but not the
# token *counts* (max_total_num_tokens) nor the tokenizer settings SGLang and vLLM print beside them.
# Also camelCase and PascalCase names (accessToken, clientSecret, AccountKey; JSON and Java configs), npm's
# _auth/_authToken (a leading underscore), and dotted paths (user.token, spring.datasource.password). Case
# matters: written for bytes, the same text is the prefilter's (secret_prefilter), which must flag every match.
_SNAKE_KEY = r"(?:[A-Za-z0-9]+_)*(?:api_?key|apikey|token|secret|password|passwd|credentials?|access_?key|private_?key|auth)(?:_[A-Za-z0-9]+)*"
_CAMEL_WORD = r"(?:Token|Secret|Password|Passwd|Credentials?|Auth|(?:Api|Access|Private|Secret|Account|Auth|Subscription|Master|Signing)Key)"
_CAMEL_KEY = (
    r"(?:(?:[a-z][a-z0-9]*|[A-Z][a-z0-9]+)(?:[A-Z][a-z0-9]*)*" + _CAMEL_WORD + r"|(?:api|access|private|secret|account|auth)Key|"
    + _CAMEL_WORD + r")(?:[A-Z][a-z0-9]*)*"
)
KEY_WORD = r"(?:[A-Za-z_][A-Za-z0-9_-]*\.)*_*(?:" + _SNAKE_KEY + "|" + _CAMEL_KEY + ")"
# A value: quoted, a list, or a bare word up to a delimiter (';' and '&' too: connection strings and
# query strings put the next key there, and no bare secret in them holds one).
_VALUE = r"""(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|\[[^\]]*\]|[^\s,;&)}\]]+)"""
# HTTP-header style names (hyphens, any case): x-api-key, api-key, x-goog-api-key, x-auth-token,
# x-amz-security-token, ocp-apim-subscription-key, client-secret, cookie, ...
_HEADER_NAME = (
    r"(?:[a-z0-9]+-)*(?:api-?key|subscription-key|(?:auth|access|security|session|refresh|id|api|csrf|xsrf)-token|"
    r"client-secret|secret-key|private-key|password|passwd|set-cookie|cookie)"
    r"|x-(?:[a-z0-9]+-)*(?:key|token|secret|signature|password|credentials?)"
)

_RULES: tuple[tuple[str, LazyRegex, Any], ...] = (
    # A whole block on one line (real or escaped "\n" newlines between BEGIN and END).
    ("pem", lazy("-----BEGIN", r"-----BEGIN [A-Z0-9 ]{1,60}-----.*?-----END [A-Z0-9 ]{1,60}-----", re.S), REDACTED),
    (
        "authorization",
        lazy(
            None,
            r"(?i)\b((?:proxy-|x-)?authorization['\"]?\s*[:=]\s*(['\"])?)"
            r"(?:(?:digest|negotiate|ntlm|aws4-hmac-sha256|hmac-sha256|signature)\s(?(2)(?:(?!\2)[^\n])*|[^\n]*)|(?:(?:bearer|basic|token|apikey|key|sso-key)\s+)?[^\s'\",}]+)",
        ),
        rf"\1{REDACTED}",
    ),
    ("bearer", lazy(None, r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"), rf"\1 {REDACTED}"),
    (
        "header",
        lazy(None, r"(?i)(?<![\w-])(['\"]?)(" + _HEADER_NAME + r""")\1(\s*[:=]\s*)(?:(['"])(?:(?!\4).)*\4|[^\s'",;}]+)"""),
        None,
    ),
    # user:password@ and, with an empty user name (redis://:password@host), :password@.
    ("url_userinfo", lazy("://", r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)(?:[^/\s:@'\"]+(?::[^/\s@'\"]*)?|:[^/\s@'\"]+)@"), rf"\1{REDACTED}@"),
    # Azure storage and service-bus connection strings (AccountKey=...;) and SAS tokens (?...&sig=...).
    ("azure", lazy(None, r"(?i)(?<![\w-])((?:account|sharedaccess)key|sharedaccesssignature)=[^;\s'\"]+"), rf"\1={REDACTED}"),
    ("sas", lazy(None, r"(?i)([?&]sig=)[^&\s'\"#]+"), rf"\1{REDACTED}"),
    (
        "flag",
        lazy("--", r"(--(?:" + "|".join(re.escape(f) for f in SECRET_FLAGS) + r"))(=|\s+)(?!-)(\S+)"),
        rf"\1\2{REDACTED}",
    ),
    (
        "env",
        lazy("=", r"\b([A-Z][A-Z0-9_]*(?:TOKEN|API_KEY|APIKEY|SECRET|PASSWORD|PASSWD|CREDENTIALS?|ACCESS_KEY|PRIVATE_KEY)[A-Z0-9_]*)=(\S+)"),
        rf"\1={REDACTED}",
    ),
    ("kv", lazy(None, r"""(['"]?)(?<![\w#.-])(""" + KEY_WORD + r""")\1(\s*[=:]\s*)(""" + _VALUE + ")"), None),
    ("hf", lazy("hf_", r"\bhf_[A-Za-z0-9]{20,}"), REDACTED),
    ("openai", lazy("sk-", r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{16,}"), REDACTED),
    ("stripe", lazy("_", r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"), REDACTED),
    ("aws", lazy(None, r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"), REDACTED),
    ("google", lazy("AIza", r"\bAIza[0-9A-Za-z_-]{35}"), REDACTED),
    ("github", lazy(None, r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{20,})"), REDACTED),
    ("gitlab", lazy("glpat-", r"\bglpat-[A-Za-z0-9_-]{20,}"), REDACTED),
    ("slack", lazy("xox", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), REDACTED),
    ("jwt", lazy("eyJ", r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), REDACTED),
)


# Every rule's match holds one of these (case-insensitively): a line without any cannot hold a secret,
# and is passed over with one search. ("token" is on every serving-statistics line, so the rules
# below also gate themselves on their own words before running.)
_NEEDLES = (
    "-----begin", "authorization", "bearer", "basic", "key", "token", "secret", "passw", "cookie", "signature",
    "credential", "auth", "://", "--", "sig=", "hf_", "sk-", "_live_", "_test_", "akia", "asia", "aiza",
    "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "xox", "eyj",
)



# The words that name a secret, as _key_words splits a key (api_key -> api, key; clientSecret -> client, secret).
_SECRET_WORDS = frozenset({"token", "secret", "password", "passwd", "credential", "credentials", "auth", "key", "apikey"})
# A key that ends in one of these after its secret word names something *about* the secret (its count,
# ids, length, name, path, type, lifetime): token counts and token ids are evidence, never redacted.
METADATA_WORDS = frozenset(
    {"id", "ids", "count", "counts", "num", "len", "length", "size", "budget", "limit", "usage", "type", "name", "path", "file", "dir",
     "env", "url", "expiry", "expires", "expiration", "ttl", "version"}
)


def _key_words(key: str) -> list[str]:
    """The words of a key's last dotted part, lower-cased: snake_case, kebab-case, camelCase and PascalCase."""
    last = key.rsplit(".", 1)[-1]
    return [w.lower() for w in re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])").findall(last)]


def _names_metadata(key: str) -> bool:
    words = _key_words(key)
    secret_at = max((i for i, w in enumerate(words) if w in _SECRET_WORDS), default=-1)
    return 0 <= secret_at < len(words) - 1 and words[-1] in METADATA_WORDS


def keeps_key(key: str) -> bool:
    """Whether the kv rule keeps every value of ``key`` as it is: the key names token counts, the tokenizer, or something
    about a secret (its ids, count, length, name: ``stop_token_ids``, ``eos_token_id``). The in-flight prefilter asks
    this too, so that a request log's ``prompt_token_ids: [...]`` is no line to redact (secret_prefilter)."""
    lowered = key.rsplit(".", 1)[-1].lower()
    return lowered.endswith(("tokens", "tokenizer")) or "tokenizer" in lowered or _names_metadata(key)


def _kv_replacement(m: re.Match[str]) -> str:
    quote, key, sep, value = m.group(1), m.group(2), m.group(3), m.group(4)
    if value in ("None", "null", "''", '""', "[]", "False", "True"):
        return m.group(0)
    if keeps_key(key):
        # The value is kept, but a bare value runs to the next space and may swallow a pair of its
        # own (`stop_token_ids=x_token=SECRET`): what it holds is redacted as text on its own.
        return f"{quote}{key}{quote}{sep}{redact_secrets(value)}"
    if value.startswith(REDACTED):  # an earlier rule's work (AccountKey=)
        return m.group(0)
    if value.startswith("["):
        items = [v for v in re.compile(r",\s*").split(value[1:-1]) if v.strip()]
        inner = ", ".join(f"'{REDACTED}'" for _ in items)
        return f"{quote}{key}{quote}{sep}[{inner}]"
    if value[:1] in "'\"":
        return f"{quote}{key}{quote}{sep}{value[0]}{REDACTED}{value[0]}"
    return f"{quote}{key}{quote}{sep}{REDACTED}"


def _header_replacement(m: re.Match[str]) -> str:
    quote, name, sep, value_quote = m.group(1), m.group(2), m.group(3), m.group(4) or ""
    return f"{quote}{name}{quote}{sep}{value_quote}{REDACTED}{value_quote}"


# A rule's replacement when it is no template string: its function.
_REPLACERS: dict[str, Any] = {"kv": _kv_replacement, "header": _header_replacement}


# Case-insensitive rules are tried only when the lower-cased line holds one of their words.
_LOWER_NEEDLES: dict[str, tuple[str, ...]] = {
    "authorization": ("authorization",),
    "bearer": ("bearer", "basic"),
    "header": ("key", "token", "secret", "passw", "cookie", "signature", "credential"),
    "kv": ("key", "token", "secret", "passw", "credential", "auth"),
    "env": ("token", "key", "secret", "passw", "credential"),
    "azure": ("key", "signature"),
    "sas": ("sig=",),
    "aws": ("akia", "asia"),
    "github": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
}


# One search for any of the needles: a report redacts a few hundred strings, nearly all without one.
_NEEDLES_RE = re.compile("|".join(re.escape(n) for n in _NEEDLES))


def redact_secrets(text: str) -> str:
    """``text`` with every secret the rules know replaced (PEM blocks over several lines are ``Redactor``'s)."""
    if not text:
        return text
    lowered = text.lower()
    if _NEEDLES_RE.search(lowered) is None:
        return text
    for name, pattern, repl in _RULES:
        needles = _LOWER_NEEDLES.get(name)
        if needles is not None and not any(n in lowered for n in needles):
            continue
        text = pattern.sub(_REPLACERS.get(name, repl), text)
    return text

"""Secret redaction, on by default, applied to the view model before any renderer and to bundled inputs.

An ordered table of patterns, each replacing only the secret and keeping its key (and, for lists,
the number of items), so a redacted report still says *that* a key was set.
"""

from __future__ import annotations

import re
from typing import Any

from oomdoctor.patterns import LazyRegex, lazy

REDACTED = "<redacted>"

_SECRET_FLAGS = (
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
_KEY_WORD = r"(?:[A-Za-z0-9]+_)*(?:api_?key|apikey|token|secret|password|passwd|credentials?|access_?key|private_?key|auth)(?:_[A-Za-z0-9]+)*"
_VALUE = r"""(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|\[[^\]]*\]|[^\s,)}\]]+)"""

_RULES: tuple[tuple[str, LazyRegex, Any], ...] = (
    (
        "pem",
        lazy("-----BEGIN", r"-----BEGIN [A-Z0-9 ]*(?:PRIVATE KEY|CERTIFICATE|OPENSSH PRIVATE KEY)-----.*?(?:-----END [A-Z0-9 ]*-----|$)", re.S),
        REDACTED,
    ),
    ("authorization", lazy(None, r"(?i)\b((?:proxy-)?authorization['\"]?\s*[:=]\s*['\"]?)(?:(?:bearer|basic|token)\s+)?[^\s'\",}]+"), rf"\1{REDACTED}"),
    ("bearer", lazy(None, r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"), rf"\1 {REDACTED}"),
    ("url_userinfo", lazy("://", r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s:@'\"]+(?::[^/\s@'\"]*)?@"), rf"\1{REDACTED}@"),
    (
        "flag",
        lazy("--", r"(--(?:" + "|".join(re.escape(f) for f in _SECRET_FLAGS) + r"))(=|\s+)(?!-)(\S+)"),
        rf"\1\2{REDACTED}",
    ),
    (
        "env",
        lazy("=", r"\b([A-Z][A-Z0-9_]*(?:TOKEN|API_KEY|APIKEY|SECRET|PASSWORD|PASSWD|CREDENTIALS?|ACCESS_KEY|PRIVATE_KEY)[A-Z0-9_]*)=(\S+)"),
        rf"\1={REDACTED}",
    ),
    ("kv", lazy(None, r"""(['"]?)(?<![\w#.-])(""" + _KEY_WORD + r""")\1(\s*[=:]\s*)(""" + _VALUE + ")"), None),
    ("hf", lazy("hf_", r"\bhf_[A-Za-z0-9]{20,}"), REDACTED),
    ("openai", lazy("sk-", r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{16,}"), REDACTED),
    ("aws", lazy(None, r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"), REDACTED),
    ("github", lazy(None, r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{20,})"), REDACTED),
    ("slack", lazy("xox", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), REDACTED),
    ("jwt", lazy("eyJ", r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), REDACTED),
)

_TRIGGERS = (
    "BEGIN",
    "uthorization",
    "earer",
    "asic",
    "://",
    "--",
    "=",
    ":",
    "hf_",
    "sk-",
    "AKIA",
    "ASIA",
    "gh",
    "github_pat_",
    "xox",
    "eyJ",
)


def _kv_replacement(m: re.Match[str]) -> str:
    quote, key, sep, value = m.group(1), m.group(2), m.group(3), m.group(4)
    lowered = key.lower()
    if lowered.endswith(("tokens", "tokenizer")) or "tokenizer" in lowered or value in ("None", "null", "''", '""', "[]", "False", "True"):
        return m.group(0)
    if value.startswith("["):
        items = [v for v in re.split(r",\s*", value[1:-1]) if v.strip()]
        inner = ", ".join(f"'{REDACTED}'" for _ in items)
        return f"{quote}{key}{quote}{sep}[{inner}]"
    if value[:1] in "'\"":
        return f"{quote}{key}{quote}{sep}{value[0]}{REDACTED}{value[0]}"
    return f"{quote}{key}{quote}{sep}{REDACTED}"


def redact_text(text: str) -> str:
    """Replace every secret this module knows in one string."""
    if not text or not any(t in text for t in _TRIGGERS):
        return text
    for name, pattern, repl in _RULES:
        text = pattern.sub(_kv_replacement if name == "kv" else repl, text)
    return text


def redact_obj(obj: Any) -> Any:
    """Redact every string in a JSON-like structure (dict keys are identifiers and stay)."""
    if isinstance(obj, str):
        return redact_text(obj)
    if isinstance(obj, dict):
        return {k: redact_obj(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact_obj(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(redact_obj(v) for v in obj)
    return obj

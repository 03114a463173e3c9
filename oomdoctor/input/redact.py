"""Secret redaction, on by default, applied to the view model before any renderer and to bundled inputs.

An ordered table of patterns, each replacing only the secret and keeping its key (and, for lists,
the number of items), so a redacted report still says *that* a key was set.

PEM blocks span lines, and bundle and ``collect`` copies are redacted one line at a time, so a
``Redactor`` remembers that it is inside a block: every line after ``-----BEGIN ...-----`` that is
key material (base64, a ``Proc-Type:``/``DEK-Info:`` header, blank) is replaced up to and including
``-----END ...-----``, whatever prefix (timestamp, rank tag, compose service) each line carries.

Opt-in PII mode (``Redactor(pii=True)``, the CLI's ``--redact-pii``) replaces e-mail addresses, IP
addresses and host names by consistent pseudonyms (``<email-1>``, ``<ip-2>``, ``<host-1>``): one
``Pseudonyms`` table per run, so the same node keeps the same name in every output and in every file
of a bundle and multi-node timelines still line up. Loopback and wildcard addresses and well-known
public domains (huggingface.co, github.com, ...) are kept: they identify nobody.

The module functions ``redact_text`` / ``redact_obj`` use the redactor of the current ``session``
(or a per-thread default with PII off), so callers that take no redactor argument (view, bundle,
collect) follow whatever the CLI chose::

    with redact.session(pii=True) as r:   # one pseudonym table for the whole run
        view = build_view(result)          # redact_obj -> r.obj
        write_bundle(...)                  # redact_text per line -> r.text
"""

from __future__ import annotations

import re
import threading
from typing import TYPE_CHECKING

from oomdoctor.input.patterns import LazyRegex, lazy
from oomdoctor.input.prefixes import split_prefix

if TYPE_CHECKING:
    import re
    from collections.abc import Iterable, Iterator
    from typing import Any, Protocol

    # Only annotations name it: typing (Protocol) stays off the start-up path.
    class _Prefilter(Protocol):
        def finditer(self, text: bytes) -> Iterator[Any]: ...

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
# HTTP-header style names (hyphens, any case): x-api-key, api-key, x-goog-api-key, x-auth-token,
# x-amz-security-token, ocp-apim-subscription-key, client-secret, cookie, ...
_HEADER_NAME = (
    r"(?:[a-z0-9]+-)*(?:api-?key|subscription-key|(?:auth|access|security|session|refresh|id|api|csrf|xsrf)-token|"
    r"client-secret|secret-key|private-key|password|passwd|set-cookie|cookie)"
    r"|x-(?:[a-z0-9]+-)*(?:key|token|secret|signature|password|credentials?)"
)
_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]{1,60}-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]{1,60}-----")
# One line of a block: base64 (RFC 7468 bodies, OpenSSH keys), an RFC 1421 header, or blank.
_PEM_BODY = re.compile(r"[A-Za-z0-9+/=]*|(?:Proc-Type|DEK-Info|Comment|Version)\s*:.*")

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
    "credential", "auth", "://", "--", "hf_", "sk-", "_live_", "_test_", "akia", "asia", "aiza",
    "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "xox", "eyj",
)


# --- the byte prefilter: which lines of a stream can hold a secret at all -------------------------
#
# `oomdoctor run` redacts server.log while the server writes it, a chunk of lines at a time. Decoding
# every line and running the rules costs ~20 MB/s, far slower than a chatty server, and the needle
# pass above lets every serving-statistics line through ("#token: 81234", "token usage: 0.28"). So one
# regex over the raw chunk (RE2's DFA, several hundred MB/s) finds the few lines any rule could match,
# and only those go through `Redactor`. It must be a SUPERSET of every rule in _RULES: each piece below
# is its rule (or a part every match of it contains) written for bytes, with the differences that make
# a str regex match more than a bytes one put back in:
# - `\s` in a str pattern also matches \x1c-\x1f and the Unicode spaces: ws lists them all (without
#   \n: a line's only newline is its last byte, so no rule can need one before a ':' or '=');
# - under re.IGNORECASE, i, k and s also match U+0130/U+0131, U+212A and U+017F (see `_ci`);
# - the kv rule's `(?<![\w#.-])` (what keeps "#token: 81234" and "num_tokens=" out) becomes one
#   consumed byte that is not an ASCII word char, '#', '.', '-' or a newline, or a line start; a
#   non-ASCII byte counts as allowed, since the str rule's Unicode `\w` refuses more, never fewer;
# - `\b`, backreferences and the value after a separator are left out (they only narrow a match).
# No piece can match a newline, so a match never spans two lines and is charged to the line it starts
# on. tests/test_trust_redaction.py checks the superset on every corpus line, every fixture line and
# generated lines; benchmarks/run.py measures the pass-through with it.

# Characters Python's str `\s` matches, newline aside (tests compare it with all of Unicode).
_WS_CHARS = "\t\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
# Non-ASCII characters that re.IGNORECASE matches for an ASCII letter (tests compare it with all of Unicode).
_FOLDS = {"i": "\u0130\u0131", "k": "\u212a", "s": "\u017f"}


def _byte_alternatives(chars: str) -> bytes:
    """One character of ``chars`` as a bytes regex: a class of the ASCII ones, or one of the UTF-8 sequences."""
    ascii_part = b"".join(b"\\x%02x" % ord(c) for c in chars if ord(c) < 0x80)
    alts = [b"[" + ascii_part + b"]"] if ascii_part else []
    alts += [b"".join(b"\\x%02x" % b for b in c.encode()) for c in chars if ord(c) >= 0x80]
    return b"(?:" + b"|".join(alts) + b")"


def _ci(word: str) -> bytes:
    """``word`` as a bytes regex matching what ``(?i)word`` matches in a str pattern (ASCII letters and their Unicode folds)."""
    out = b""
    for c in word:
        if c.isalpha():
            out += _byte_alternatives(c.lower() + c.upper() + _FOLDS.get(c.lower(), ""))
        else:
            out += re.escape(c).encode()
    return out


_prefilter_text: bytes | None = None


def _prefilter_source() -> bytes:
    """The prefilter's text, built when a prefilter is first asked for: only a log stream's redaction
    uses it, and building it costs ~0.3 ms that a plain diagnose's start need not pay."""
    global _prefilter_text
    if _prefilter_text is not None:
        return _prefilter_text
    ws = _byte_alternatives(_WS_CHARS)
    # `[a-z0-9]` under re.IGNORECASE (the header rule's x-...- parts).
    ci_alnum = _byte_alternatives("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789" + "".join(_FOLDS.values()))
    sep = rb"""['"]?""" + ws + rb"*[:=]"  # `\1\s*[:=]`, the backreference loosened to any quote or none
    pieces: tuple[tuple[str, bytes], ...] = (
        ("pem", rb"-----BEGIN"),
        ("authorization", _ci("authorization")),
        ("bearer", rb"(?:" + _ci("bearer") + rb"|" + _ci("basic") + rb")" + ws),
        (
            "header",
            rb"(?:"
            + rb"|".join(
                [
                    _ci("api") + rb"-?" + _ci("key"),
                    *(_ci(w) for w in ("subscription-key", "client-secret", "secret-key", "private-key", "password", "passwd", "cookie")),
                    rb"(?:" + rb"|".join(_ci(w) for w in ("auth", "access", "security", "session", "refresh", "id", "api", "csrf", "xsrf")) + rb")-" + _ci("token"),
                    _ci("x-")
                    + rb"(?:"
                    + ci_alnum
                    + rb"+-)*(?:"
                    + rb"|".join([*(_ci(w) for w in ("key", "token", "secret", "signature", "password")), _ci("credential") + rb"(?:" + _ci("s") + rb")?"])
                    + rb")",
                ]
            )
            + rb")"
            + sep,
        ),
        ("url_userinfo", rb"://[^/@'\"\t\n\x0b\x0c\r \x1c-\x1f]+@"),
        ("flag", rb"--(?:" + rb"|".join(re.escape(f).encode() for f in _SECRET_FLAGS) + rb")(?:=|" + ws + rb")"),
        ("env", rb"(?:TOKEN|API_KEY|APIKEY|SECRET|PASSWORD|PASSWD|CREDENTIALS?|ACCESS_KEY|PRIVATE_KEY)[A-Z0-9_]*="),
        ("kv", rb"(?:^|[^A-Za-z0-9_#.\-\n])" + _KEY_WORD.encode() + sep),
        ("hf", rb"hf_[A-Za-z0-9]{20}"),
        ("openai", rb"sk-[A-Za-z0-9_\-]{16}"),
        ("stripe", rb"[sr]k_(?:live|test)_[A-Za-z0-9]{16}"),
        ("aws", rb"(?:AKIA|ASIA)[A-Z0-9]{16}"),
        ("google", rb"AIza[0-9A-Za-z_\-]{35}"),
        ("github", rb"gh[pousr]_[A-Za-z0-9]{30}|github_pat_[A-Za-z0-9_]{20}"),
        ("gitlab", rb"glpat-[A-Za-z0-9_\-]{20}"),
        ("slack", rb"xox[abposr]-[A-Za-z0-9\-]{10}"),
        ("jwt", rb"eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8}"),
    )
    _prefilter_text = rb"(?m)(?:" + rb"|".join(rb"(?:" + piece + rb")" for _, piece in pieces) + rb")"
    return _prefilter_text


_prefilter: _Prefilter | None = None


def prefilter(engine: str = "auto") -> _Prefilter:
    """The prefilter compiled: RE2 (a DFA, Latin-1 so that each byte is one character) or, forced or without RE2, ``re``."""
    global _prefilter
    if engine == "re":
        return re.compile(_prefilter_source())
    if _prefilter is None:
        try:
            import re2

            options = re2.Options()
            options.encoding = re2.Options.Encoding.LATIN1
            _prefilter = re2.compile(_prefilter_source(), options)
        except ImportError:
            _prefilter = re.compile(_prefilter_source())
    return _prefilter


def secret_line_starts(data: bytes, engine: str = "auto") -> list[int]:
    """Offsets of the lines of ``data`` (split at b"\\n") that the prefilter flags: every line a rule could change is among them."""
    starts: list[int] = []
    rfind = data.rfind
    last = -1
    for m in prefilter(engine).finditer(data):
        start = rfind(b"\n", 0, m.start()) + 1
        if start != last:
            starts.append(start)
            last = start
    return starts


def _kv_replacement(m: re.Match[str]) -> str:
    quote, key, sep, value = m.group(1), m.group(2), m.group(3), m.group(4)
    lowered = key.lower()
    if lowered.endswith(("tokens", "tokenizer")) or "tokenizer" in lowered or value in ("None", "null", "''", '""', "[]", "False", "True"):
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
    "aws": ("akia", "asia"),
    "github": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
}


# One search for any of the needles: a report redacts a few hundred strings, nearly all without one.
_NEEDLES_RE = re.compile("|".join(re.escape(n) for n in _NEEDLES))


def _redact_secrets(text: str) -> str:
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


# --- PII: consistent pseudonyms ----------------------------------------------------------------

# Public services whose names identify nobody; kept so links and download errors stay readable.
PUBLIC_DOMAINS = (
    "huggingface.co",
    "hf.co",
    "github.com",
    "githubusercontent.com",
    "pytorch.org",
    "python.org",
    "pypi.org",
    "nvidia.com",
    "vllm.ai",
    "ray.io",
    "sglang.ai",
    "docs.sglang.ai",
    "readthedocs.io",
    "modelscope.cn",
    "docker.com",
    "docker.io",
    "nvcr.io",
    "ghcr.io",
    "googleapis.com",
    "anaconda.org",
    "conda.io",
)
_KEEP_IPS = ("0.0.0.0", "255.255.255.255", "::", "::1")
# Top-level domains a host name in a server log ends with (public and the usual internal ones);
# file suffixes and attribute names that are also TLDs (.py, .sh, .md, .so, .rs, .info, .app, .in,
# .it) are left out on purpose: torch.cuda.memory or server.app is not a host.
_TLDS = (
    "com|net|org|edu|gov|mil|io|ai|dev|cloud|co|internal|local|localdomain|lan|corp|intranet|intra|"
    "svc|arpa|us|uk|de|fr|cn|jp|kr|ca|au|nl|se|ch|eu|ru|br|sg|tw|hk|il|pl|fi|dk"
)
_EMAIL_RE = lazy("@", r"(?<![\w.+%-])[A-Za-z0-9._%+-]{1,64}@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}(?![\w-])")
_IPV4_RE = lazy(".", r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w]|\.\d)")
_IPV6_RE = lazy(":", r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")
_FQDN_RE = lazy(
    ".",
    r"(?<![\w.@-])(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+(?:" + _TLDS + r")(?![\w-]|\.[A-Za-z0-9])",
    re.I,
)
# Where a bare host name is named: hostname=..., host: ..., --host ..., MASTER_ADDR=..., NCCL's
# "node-7:1234:1234 [0] NCCL INFO" prefix, torch's "connect to [node-7]:29500".
_HOST_CONTEXT = (
    lazy(
        None,
        r"(?i)(?:(?<![\w-])--(?:host|dist-init-addr|master-addr|master_addr|node-name)[ =]"
        r"|(?<![\w-])['\"]?(?:host_?name|host|node_?name|nodename|master_addr|server_name|dist_init_addr)['\"]?\s*[=:]\s*['\"]?)"
        r"(?P<h>[A-Za-z][A-Za-z0-9-]{1,62})(?![\w.-]*\.\w)",
    ),
    lazy("NCCL", r"(?:^|\s)(?P<h>[A-Za-z][A-Za-z0-9-]{1,62}):\d+:\d+ \[\d+\] NCCL"),
    lazy("]:", r"\[(?P<h>[A-Za-z][A-Za-z0-9-]{1,62})\]:\d+"),
)
_NOT_HOSTS = frozenset(
    {
        "localhost", "none", "null", "true", "false", "auto", "any", "all", "default", "unknown", "info", "warning", "error", "debug", "the", "and",
        "for", "with", "from", "node", "host", "server", "gpu", "cpu", "cuda", "nccl", "gloo", "tcp", "udp", "http", "https", "env", "file",
    }
)


class Pseudonyms:
    """One table of stand-ins per run: the same value always gets the same ``<kind-N>``."""

    def __init__(self) -> None:
        self._names: dict[tuple[str, str], str] = {}
        self._counts: dict[str, int] = {}

    def get(self, kind: str, value: str) -> str:
        key = (kind, value.lower())
        name = self._names.get(key)
        if name is None:
            self._counts[kind] = self._counts.get(kind, 0) + 1
            name = self._names[key] = f"<{kind}-{self._counts[kind]}>"
        return name

    def table(self) -> dict[str, str]:
        """Placeholder -> original, for the user to keep privately (never written into a report)."""
        return {name: value for (_, value), name in self._names.items()}

    def __len__(self) -> int:
        return len(self._names)


def _public(host: str) -> bool:
    host = host.lower().rstrip(".")
    return any(host == d or host.endswith("." + d) for d in PUBLIC_DOMAINS)


_MEMO_MAX_LINES = 4096  # a bound on the memo: a log stream's lines are mostly distinct
_MEMO_MAX_CHARS = 4096


class Redactor:
    """Redacts secrets (always) and, with ``pii=True``, e-mails, IPs and host names (consistently).

    ``text`` takes any string: a line, a chunk of lines, a single value. State carried between calls:
    whether the last line ended inside a PEM block (so a block split over lines or chunks is removed
    whole), and the pseudonym table and learned host names when ``pii`` is on.
    """

    def __init__(self, pii: bool = False, pseudonyms: Pseudonyms | None = None, hostnames: Iterable[str] = ()) -> None:
        self.pii = pii
        self.pseudonyms = pseudonyms if pseudonyms is not None else Pseudonyms()
        self._hosts: set[str] = set()
        self._hosts_re: re.Pattern[str] | None = None
        self._pem_prefix: str | None = None  # inside a block: the text before BEGIN on its line
        # Secret redaction is a pure function of the line, and a report repeats its evidence lines
        # (findings, incidents, derivations): each distinct line is redacted once.
        self._secrets_memo: dict[str, str] = {}
        for h in hostnames:
            self.add_hostname(h)

    # -- public API --

    def text(self, text: str) -> str:
        """Redact one string; a string of several lines is redacted line by line, block state kept."""
        if not text:
            return text
        if "\n" not in text.rstrip("\n"):
            return self._line(text)
        return "".join(self._line(line) for line in text.splitlines(keepends=True))

    def lines(self, lines: Iterable[str]) -> Iterator[str]:
        """Redact a stream of lines (a log), carrying PEM state from line to line."""
        for line in lines:
            yield self._line(line)

    def log_bytes(self, data: bytes) -> bytes:
        """Redact raw log bytes made of lines (split at b"\\n"; the last one may lack its newline), as ``text`` on each line would.

        Only the lines ``secret_line_starts`` flags, and every line while inside a PEM block, are decoded
        and redacted; the others keep their bytes untouched (invalid UTF-8 included), and ``data`` itself
        comes back when nothing changed. Lines are decoded with surrogateescape, so a redacted line keeps
        the bytes around its secrets. With ``pii`` every line is redacted (pseudonyms are not prefiltered).
        """
        every = self.pii
        starts = iter(() if every else secret_line_starts(data))
        out: list[bytes] = []
        done = pos = 0  # bytes of data already in `out`; start of the next line to look at
        size = len(data)
        flagged = next(starts, None)
        while pos < size:
            if self._pem_prefix is None and not every:  # outside a block: jump to the next flagged line
                while flagged is not None and flagged < pos:
                    flagged = next(starts, None)
                if flagged is None:
                    break
                pos = flagged
            end = data.find(b"\n", pos) + 1 or size
            text = data[pos:end].decode("utf-8", "surrogateescape")
            red = self._line(text)
            if red != text:
                out += (data[done:pos], red.encode("utf-8", "surrogateescape"))
                done = end
            pos = end
        if not out:
            return data
        out.append(data[done:])
        return b"".join(out)

    def obj(self, obj: Any) -> Any:
        """Redact every string in a JSON-like structure (dict keys are identifiers and stay)."""
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, dict):
            return {k: self.obj(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.obj(v) for v in obj]
        if isinstance(obj, tuple):
            return tuple(self.obj(v) for v in obj)
        return obj

    def end_of_stream(self) -> None:
        """Forget an unfinished PEM block (call between files; a cut block then stops at the file's end)."""
        self._pem_prefix = None

    def learn(self, text: str) -> None:
        """Collect host names named in ``text`` (hostname=..., NCCL prefixes) without redacting it.

        A pre-pass over the inputs lets a host name be replaced even where it appears before the line
        that names it as a host.
        """
        for pattern in _HOST_CONTEXT:
            for m in pattern.finditer(text):
                self.add_hostname(m.group("h"))

    def add_hostname(self, name: str) -> None:
        """Treat ``name`` as a host name everywhere from now on (like ``sos clean --domains``)."""
        name = name.strip().rstrip(".")
        if len(name) < 3 or name.lower() in _NOT_HOSTS or _public(name) or name.lower() in self._hosts:
            return
        self._hosts.add(name.lower())
        words = "|".join(re.escape(h) for h in sorted(self._hosts, key=len, reverse=True))
        self._hosts_re = re.compile(r"(?<![\w.-])(?:" + words + r")(?![\w-])", re.I)  # node7.log -> <host-1>.log

    # -- internals --

    def _line(self, line: str) -> str:
        if self._pem_prefix is not None:
            out = self._pem_continuation(line)
            if out is not None:
                return self._pseudonymize(out) if self.pii else out
        text = self._secrets_memo.get(line)
        if text is None:
            text = _redact_secrets(line)
            if len(line) <= _MEMO_MAX_CHARS:
                if len(self._secrets_memo) >= _MEMO_MAX_LINES:
                    self._secrets_memo.clear()
                self._secrets_memo[line] = text
        begin = _PEM_BEGIN.search(text) if "-----BEGIN" in text else None
        if begin is not None:
            # A block that does not end on this line: drop the rest of it, expect key lines next.
            end = len(text.rstrip("\r\n"))
            text = text[: begin.start()] + REDACTED + text[end:]
            self._pem_prefix = line[: line.find("-----BEGIN")] if "-----BEGIN" in line else ""
        if self.pii:
            text = self._pseudonymize(text)
        return text

    def _pem_continuation(self, line: str) -> str | None:
        """The redacted line while inside a block; None when the line is not part of the block."""
        body = line.rstrip("\r\n")
        newline = line[len(body) :]
        prefix = self._pem_prefix or ""
        candidates = []
        if prefix and len(body) >= len(prefix) and _shape(body[: len(prefix)]) == _shape(prefix):
            candidates.append(len(prefix))
        msg = split_prefix(body).msg
        if body.endswith(msg):
            candidates.append(len(body) - len(msg))
        candidates.append(0)
        for start in candidates:
            rest = body[start:].strip()
            end = _PEM_END.search(rest)
            if end is not None and _PEM_BODY.fullmatch(rest[: end.start()].strip()):
                self._pem_prefix = None
                tail = _redact_secrets(rest[end.end() :])
                return body[:start] + REDACTED + (" " + tail.strip() if tail.strip() else "") + newline
            if _PEM_BODY.fullmatch(rest):
                return body[:start] + REDACTED + newline if rest else line
        self._pem_prefix = None
        return None

    def _pseudonymize(self, text: str) -> str:
        p = self.pseudonyms
        text = _EMAIL_RE.sub(lambda m: p.get("email", m.group(0)), text)
        text = _IPV4_RE.sub(lambda m: _ip(p, m.group(0)), text)
        if "::" in text or text.count(":") >= 7:
            text = _IPV6_RE.sub(lambda m: _ip(p, m.group(0)), text)
        self.learn(text)
        text = _FQDN_RE.sub(lambda m: m.group(0) if _public(m.group(0)) else p.get("host", m.group(0).rstrip(".")), text)
        if self._hosts_re is not None:
            text = self._hosts_re.sub(lambda m: p.get("host", m.group(0)), text)
        return text


def _shape(prefix: str) -> str:
    """A prefix with its digits levelled, so lines stamped a second apart have the same shape."""
    return re.compile(r"\d").sub("0", prefix)


def _ip(p: Pseudonyms, text: str) -> str:
    import ipaddress  # only when a log holds an address-like token: a plain diagnose never pays for it

    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return text  # 999.1.2.3, a version string, a C++ scope "c10::"
    if text in _KEEP_IPS or addr.is_loopback or addr.is_unspecified:
        return text
    if addr.version == 6 and "::" not in text and text.count(":") < 7:
        return text
    return p.get("ip", addr.compressed)


# --- the active redactor -----------------------------------------------------------------------

# Per thread: the sessions open on it (innermost last) and its default redactor. A thread-local stack,
# not a ContextVar: nothing here runs sessions in interleaved asyncio tasks, and contextvars would cost
# every start an import.
_LOCAL = threading.local()


def _sessions() -> list[Redactor]:
    stack: list[Redactor] | None = getattr(_LOCAL, "sessions", None)
    if stack is None:
        stack = _LOCAL.sessions = []
    return stack


def active() -> Redactor:
    """The redactor of this thread's innermost ``session``, else this thread's default (PII off)."""
    stack = _sessions()
    if stack:
        return stack[-1]
    r: Redactor | None = getattr(_LOCAL, "redactor", None)
    if r is None:
        r = _LOCAL.redactor = Redactor()
    return r


# A class, not contextlib.contextmanager: importing contextlib costs ~0.4 ms of a plain diagnose's start.
class session:  # used as a function: ``with redact.session(pii=True) as r``
    """Make one redactor (one pseudonym table) serve every ``redact_text``/``redact_obj`` call inside, on this thread."""

    def __init__(self, pii: bool = False, redactor: Redactor | None = None) -> None:
        self.redactor = redactor if redactor is not None else Redactor(pii=pii)

    def __enter__(self) -> Redactor:
        self._stack = _sessions()  # the entering thread's: popped there even if the exit runs elsewhere
        self._stack.append(self.redactor)
        return self.redactor

    def __exit__(self, *exc_info: object) -> None:
        self._stack.pop()


def redact_text(text: str) -> str:
    """Replace every secret this module knows in one string (and PII, in a PII session)."""
    return active().text(text)


def redact_obj(obj: Any) -> Any:
    """Redact every string in a JSON-like structure (dict keys are identifiers and stay)."""
    return active().obj(obj)

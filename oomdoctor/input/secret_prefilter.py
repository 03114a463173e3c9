"""The byte prefilter of in-flight redaction: one regex over a raw chunk of log that flags every line a secret rule could change."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from oomdoctor.input.secret_rules import KEY_WORD, SECRET_FLAGS

if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any, Protocol

    # Only annotations name it.
    class _Prefilter(Protocol):
        def finditer(self, text: bytes) -> Iterator[Any]: ...


# `oomdoctor run` redacts server.log while the server writes it, a chunk of lines at a time. Decoding
# every line and running the rules costs ~20 MB/s, far slower than a chatty server, and the rules'
# needle pass lets every serving-statistics line through ("#token: 81234", "token usage: 0.28"). So one
# regex over the raw chunk (RE2's DFA, several hundred MB/s) finds the few lines any rule could match,
# and only those go through `Redactor`. It must be a SUPERSET of every rule in secret_rules._RULES: each piece below
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
# on. tests/test_input_redact_trust.py checks the superset on every corpus line, every fixture line and
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
        ("flag", rb"--(?:" + rb"|".join(re.escape(f).encode() for f in SECRET_FLAGS) + rb")(?:=|" + ws + rb")"),
        ("env", rb"(?:TOKEN|API_KEY|APIKEY|SECRET|PASSWORD|PASSWD|CREDENTIALS?|ACCESS_KEY|PRIVATE_KEY)[A-Z0-9_]*="),
        ("kv", rb"(?:^|[^A-Za-z0-9_#.\-\n])" + KEY_WORD.encode() + sep),
        ("azure", rb"(?:" + rb"|".join(_ci(w) for w in ("accountkey=", "sharedaccesskey=", "sharedaccesssignature=")) + rb")"),
        ("sas", rb"[?&]" + _ci("sig=")),
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

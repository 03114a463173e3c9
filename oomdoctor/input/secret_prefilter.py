"""The byte prefilter of in-flight redaction: one regex over a raw chunk of log that flags every line a secret rule could change."""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, cast

from oomdoctor.input import secret_rules
from oomdoctor.input.secret_rules import KEY_WORD, SECRET_FLAGS

if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any, Protocol

    # Only annotations name it.
    class _Prefilter(Protocol):
        def finditer(self, text: bytes) -> Iterator[Any]: ...
        def search(self, text: bytes, pos: int = 0, endpos: int = ...) -> Any: ...
        def match(self, text: bytes, pos: int = 0) -> Any: ...


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


def _separator() -> bytes:
    """`\\1\\s*[:=]` of the kv and header rules as bytes, the backreference loosened to any quote or none."""
    return rb"""['"]?""" + _byte_alternatives(_WS_CHARS) + rb"*[:=]"


@functools.lru_cache(maxsize=1)
def _pieces() -> tuple[tuple[str, bytes], ...]:
    """Each rule's piece, named as the rule in secret_rules._RULES it stands for (the kv fast path below relies on the names); built once."""
    ws = _byte_alternatives(_WS_CHARS)
    # `[a-z0-9]` under re.IGNORECASE (the header rule's x-...- parts).
    ci_alnum = _byte_alternatives("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789" + "".join(_FOLDS.values()))
    sep = _separator()
    return (
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
        ("azure", rb"(?:" + rb"|".join(_ci(w) for w in ("accountkey=", "sharedaccesskey=", "sharedaccesssignature=")) + rb")"),
        ("sas", rb"[?&]" + _ci("sig=")),
        ("flag", rb"--(?:" + rb"|".join(re.escape(f).encode() for f in SECRET_FLAGS) + rb")(?:=|" + ws + rb")"),
        ("env", rb"(?:TOKEN|API_KEY|APIKEY|SECRET|PASSWORD|PASSWD|CREDENTIALS?|ACCESS_KEY|PRIVATE_KEY)[A-Z0-9_]*="),
        ("kv", rb"(?:^|[^A-Za-z0-9_#.\-\n])" + KEY_WORD.encode() + sep),
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


def _alternation(pieces: tuple[tuple[str, bytes], ...], capture: str = "") -> bytes:
    """The pieces as one regex; the piece named ``capture`` in the one capturing group (which piece a match is)."""
    return rb"(?m)(?:" + rb"|".join((rb"(" if name == capture else rb"(?:") + piece + rb")" for name, piece in pieces) + rb")"


def _prefilter_source() -> bytes:
    """The prefilter's text, built when a prefilter is first asked for: only a log stream's redaction
    uses it, and building it costs ~0.3 ms that a plain diagnose's start need not pay."""
    global _prefilter_text
    if _prefilter_text is None:
        _prefilter_text = _alternation(_pieces(), capture="kv")
    return _prefilter_text


_prefilter: _Prefilter | None = None


def _compile(source: bytes, engine: str) -> _Prefilter:
    """``source`` compiled by RE2 (a DFA, Latin-1 so that each byte is one character) or, forced or without RE2, by ``re``."""
    if engine != "re":
        try:
            import re2

            options = re2.Options()
            options.encoding = re2.Options.Encoding.LATIN1
            return cast("_Prefilter", re2.compile(source, options))
        except ImportError:
            pass
    return re.compile(source)


def prefilter(engine: str = "auto") -> _Prefilter:
    """The prefilter compiled: RE2 or, forced or without RE2, ``re``."""
    global _prefilter
    if engine == "re":
        return _compile(_prefilter_source(), engine)
    if _prefilter is None:
        _prefilter = _compile(_prefilter_source(), engine)
    return _prefilter


def secret_line_starts(data: bytes, engine: str = "auto") -> list[int]:
    """Offsets of the lines of ``data`` (split at b"\\n") that the prefilter flags: every line a rule could change is among them."""
    return [start for start, _ in flagged_lines(data, engine)]


_ALNUM = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
# Bytes a key the kv rule reads can start with: the piece's leading byte is never one of them, so a kv match that
# starts on one matched at the line's start (`^`), its key included (npm's `_authToken=` first on a line).
_KEY_START = _ALNUM | frozenset(b"_")
# A kv match with its key: (where the key starts, where the match ends), in bytes from the line's start.
KeyHits = list[tuple[int, int]]

# --- keys the kv rule keeps -----------------------------------------------------------------------
# A busy server's request log names token ids on every request (vLLM's `stop_token_ids=[]` and
# `prompt_token_ids: [...]`, SGLang's `'stop_token_ids': None`), and the kv rule keeps every value of
# such a key (secret_rules.keeps_key: ids and counts are no secret). A line whose kv matches all name
# such keys, and that no other piece matches, cannot change: it is not flagged, so a request log costs
# the one pass over its bytes and no per-line work (issue 24: 55x the server's time under `run` when
# each such line went through the rules). The key of a match is read back from its separator: the
# rule's key is the whole run of key characters before it (its look-behind refuses a start inside the
# run), after an optional quote and ASCII spaces; a non-ASCII byte there (a Unicode space) or a key
# longer than _KEY_BACK leaves the match flagged.
_KEY_BACK = 256
_BACK = re.compile(rb"""[\t\x0b\x0c\r\x1c-\x1f ]*['"]?([A-Za-z0-9_.\-]*)""")
_KEPT_MAX = 4096
_kept: dict[bytes, bool] = {}


# A request log repeats the text before its keys (vLLM's `..., stop=[], stop_token_ids=`): the bytes just before a
# separator, when the key and what ends it lie within them, say the key without reading back again.
_MEMO_BEFORE = 40
_before_memo: dict[bytes, tuple[int, bytes]] = {}


def _key_before(data: bytes, sep_end: int) -> tuple[int, bytes] | None:
    """(where it starts, the key) of the kv match ending at ``sep_end`` (just after its ':' or '='); None when unsure."""
    near = data[max(0, sep_end - 1 - _MEMO_BEFORE) : sep_end - 1]
    known = _before_memo.get(near)
    if known is not None:
        return sep_end - 1 - known[0], known[1]
    low = max(0, sep_end - 1 - _KEY_BACK)
    m = _BACK.match(data[low : sep_end - 1][::-1])
    if m is None or not m.group(1) or (m.end() == sep_end - 1 - low and low > 0):
        return None
    key = m.group(1)[::-1]
    if m.end() < len(near):  # the byte before the key is among `near`: they alone decide it
        if len(_before_memo) >= _KEPT_MAX:
            _before_memo.clear()
        _before_memo[near] = (m.end(), key)
    return sep_end - 1 - m.end(), key


def _keeps(data: bytes, sep_end: int) -> bool:
    """Whether the kv rule keeps whatever follows the key of the match ending at ``sep_end``."""
    found = _key_before(data, sep_end)
    return found is not None and _keeps_key(found[1])


def _keeps_key(key: bytes) -> bool:
    """secret_rules.keeps_key on a key read back from bytes, asked once per distinct key."""
    kept = _kept.get(key)
    if kept is None:
        if len(_kept) >= _KEPT_MAX:
            _kept.clear()
        kept = _kept[key] = secret_rules.keeps_key(key.decode("ascii"))
    return kept


def flagged_lines(data: bytes, engine: str = "auto") -> list[tuple[int, KeyHits | None]]:
    """The lines of ``data`` the prefilter flags: (offset, the kv piece's matches on it, or None when another piece matched there).

    A line whose kv matches all name keys the rule keeps (and no other piece matched) is not flagged. With hyperscan
    ("hyperscan", or "auto" once HYPERSCAN_AFTER_BYTES went through, where it is installed) every match of every piece
    is reported; with RE2 or re the one leftmost pass can hide a piece inside a kv match, so such a line is searched for
    the other pieces again."""
    if engine == "hyperscan" or (engine == "auto" and _long_stream(len(data))):
        db = _hyperscan(engine == "hyperscan")
        if db is not None:
            return _lines_from_reports(data, db.reports(data), db.kv_id)
    return _lines_from_one_pass(data, engine)


# Hyperscan's compilation (0.3-0.5 s of CPU) pays for itself after ~200 MB of log (1.5-2.5 ms/MB less than RE2):
# "auto" takes RE2's one pass until this much has gone through the prefilter in this process, then hyperscan.
# A `run` around a chatty server switches within minutes; a short one, or a diagnosis, never pays the compilation.
HYPERSCAN_AFTER_BYTES = 256 << 20
_seen = [0]
_hs_db: list[Any] = []


def _long_stream(size: int) -> bool:
    """Whether "auto" uses hyperscan now (counts ``size`` bytes as seen)."""
    if _hs_db:
        return _hs_db[0] is not None
    _seen[0] += size
    return _seen[0] >= HYPERSCAN_AFTER_BYTES


def _hyperscan(required: bool) -> Any:
    """The pieces as one hyperscan database (prefilter_hyperscan), None where hyperscan is not installed."""
    if not _hs_db or (required and _hs_db[0] is None):
        from oomdoctor.input import prefilter_hyperscan

        _hs_db[:] = [prefilter_hyperscan.database(_pieces(), required=required)]
    return _hs_db[0]


def _lines_from_reports(data: bytes, reports: list[tuple[int, int]], kv_id: int) -> list[tuple[int, KeyHits | None]]:
    """flagged_lines from every match's (end, piece id), in order of their ends (hyperscan's reports)."""
    lines: list[tuple[int, KeyHits | None]] = []
    rfind = data.rfind
    start = -1
    hits: KeyHits | None = None
    changing = False  # the current line has a match that can change it
    for to, piece in reports:
        line = rfind(b"\n", 0, to) + 1  # no piece matches a newline: the match is on the line its end is on
        if line != start:
            if changing:
                lines.append((start, hits))
            start, hits, changing = line, [], False
        if piece != kv_id:
            hits, changing = None, True
            continue
        found = _key_before(data, to)
        if found is None:  # a key not read back: every rule reads the line
            hits, changing = None, True
            continue
        if hits is not None:
            hits.append((found[0] - start, to - start))
        changing = changing or not _keeps_key(found[1])
    if changing:
        lines.append((start, hits))
    return lines


def _lines_from_one_pass(data: bytes, engine: str) -> list[tuple[int, KeyHits | None]]:
    """flagged_lines from the prefilter's one leftmost pass (RE2 or re)."""
    lines: list[tuple[int, KeyHits | None]] = []
    rfind = data.rfind
    start = -1
    hits: KeyHits | None = None
    changing = False
    keys = _keys(engine)

    def close() -> None:
        # Only kept keys, as the pass saw them: another piece hidden inside one of those matches still sends the line to every rule.
        if changing:
            lines.append((start, hits))
        elif start >= 0:
            end = data.find(b"\n", start) + 1 or len(data)
            if _others(engine).search(data, start, end) is not None:
                lines.append((start, None))

    for m in prefilter(engine).finditer(data):
        at = m.start()
        line = rfind(b"\n", 0, at) + 1
        if line != start:
            close()
            start, hits, changing = line, [], False
        if m.start(1) < 0:  # another piece
            hits, changing = None, True
            continue
        if hits is not None:  # the kv piece: its key starts after the byte before it, or at the line's start (`^`)
            hits.append((at - start + (data[at] not in _KEY_START), m.end() - start))
        end = m.end()
        changing = changing or not _keeps(data, end)
        # Keys right after this match's separator are hidden from the pass (it took their leading byte): each must be kept too.
        while not changing and data[end : end + 1] and data[end] in _KEY_START:
            hidden = keys.match(data, end)
            if hidden is None:
                break
            end = hidden.end()
            changing = not _keeps(data, end)
    close()
    return lines


_others_compiled: dict[str, _Prefilter] = {}


def _others(engine: str) -> _Prefilter:
    """Every piece but kv's, as one regex."""
    if engine not in _others_compiled:
        _others_compiled[engine] = _compile(_alternation(tuple((name, piece) for name, piece in _pieces() if name != "kv")), engine)
    return _others_compiled[engine]


_keys_compiled: dict[str, _Prefilter] = {}


def _keys(engine: str) -> _Prefilter:
    """KEY_WORD and the separator: a key the kv rule could match, without the piece's leading byte."""
    if engine not in _keys_compiled:
        _keys_compiled[engine] = _compile(KEY_WORD.encode() + _separator(), engine)
    return _keys_compiled[engine]


# --- the kv fast path ------------------------------------------------------------------------------
# On a busy server nearly every flagged line is flagged by the kv piece alone, at a key that names a
# token and holds no secret: vLLM logs each request with `stop_token_ids=[]` and `prompt_token_ids:
# [...]` (--enable-log-requests), SGLang's request log has `'stop_token_ids': None`. The rules' `sub`
# calls scan such a line with Python's re, rule after rule: ~2 MB/s on vLLM's 2 KB request lines, 55x
# the server's own time under `oomdoctor run` (issue 24). Yet when no other piece matches the line, no
# other rule can change it (each piece is a superset of its own rule: tests/test_input_secret_prefilter.py
# checks that), and the kv rule can only match where a key starts: at the key itself or at a quote
# just before it (its `(['"]?)(?<![\w#.-])KEY_WORD`). Every such key is found in bytes by KEY_WORD and
# the separator without the piece's leading byte: a key the rule accepts follows a character that is
# no word character, so no match of that regex can start earlier and run over it (the piece's own
# leading byte, consumed, could hide a key that starts right after the previous one's `=`). So the kv
# rule is tried with `match` at those few offsets, never scanned over the line: O(bytes) in all. The
# rules before kv see the line as it was: a piece of theirs on it sends it to every rule. The rules
# after kv see what kv wrote: their pieces are looked for there (a piece of theirs that kv's
# replacement took away could not have matched either), and a hit sends the line to every rule too.

_fast: dict[str, tuple[_Prefilter, _Prefilter, _Prefilter, re.Pattern[str], Any] | None] = {}

# The kv rule replaces a list item by item (`prompt_token_ids: ['<redacted>', ...]`), in Python: ~170 us
# for one request's few hundred token ids, most of the fast path's time. What it writes for a list of
# numbers depends on how many there are, not on their digits, so it is asked once per key and length:
# a list of that many zeros stands for every list of numbers as Python prints one (`[1, 22, 333]`), and
# a replacement that keeps the stand-in (an exempted key's) keeps the real list. Other values go to the
# rule as they are. tests/test_input_secret_prefilter.py compares the two ways on generated lists, so a
# rule that comes to read the numbers shows there.
_SHAPES_MAX = 4096
_shapes: dict[tuple[str, str, str, int], str | None] = {}


def _number_count(value: str) -> int:
    """How many numbers the list ``value`` holds when it is printed as Python prints a list of ints, else 0."""
    if value[:1] != "[" or value[-1:] != "]" or not value.isascii():
        return 0
    # In bytes (str's digit tests are Unicode's, several times slower): digits and ", " only, each ", "
    # between two numbers. A split into a few hundred items would cost more than the rule's own work saved.
    inner = value[1:-1].encode("ascii")
    separators = inner.translate(None, b"0123456789")
    count = len(separators) // 2 + 1
    if not inner or separators != b", " * (count - 1) or b", , " in inner or inner.startswith(b", ") or inner.endswith(b", "):
        return 0
    return count


def _replaced(m: re.Match[str], kv: re.Pattern[str], replace: Any) -> str:
    """What the kv rule writes for its match ``m``: its replacement, asked once per length of a list of numbers."""
    quote, key, sep, value = m.group(1), m.group(2), m.group(3), m.group(4)
    count = _number_count(value)
    if not count:
        return cast(str, replace(m))
    shape = (quote, key, sep, count)
    if shape not in _shapes:
        if len(_shapes) >= _SHAPES_MAX:
            _shapes.clear()
        zeros = "[" + ", ".join(["0"] * count) + "]"
        stand_in = f"{quote}{key}{quote}{sep}{zeros}"
        sm = kv.fullmatch(stand_in)
        # None: the stand-in is not matched as the list was (another split of key and value), so it cannot stand for it.
        written = None if sm is None or sm.group(2, 3, 4) != (key, sep, zeros) else cast(str, replace(sm))
        _shapes[shape] = None if written is None else ("" if written == stand_in else written)
    written = _shapes[shape]
    if written is None:
        return cast(str, replace(m))
    return written or m.group(0)  # "": the rule keeps such a list as it is


def _fast_path(engine: str) -> tuple[_Prefilter, _Prefilter, _Prefilter, re.Pattern[str], Any] | None:
    """(the pieces of the rules before kv, of those after it, the key finder, the kv rule, its replacement), or None
    when the pieces and the rules are not named alike."""
    if engine not in _fast:
        pieces = dict(_pieces())
        order = [name for name, _, _ in secret_rules._RULES]
        if set(pieces) != set(order) or "kv" not in order:
            _fast[engine] = None  # a rule without its own piece (or the reverse): every flagged line goes through all the rules
        else:
            kv_at = order.index("kv")
            before = _alternation(tuple((name, pieces[name]) for name in order[:kv_at]))
            after = _alternation(tuple((name, pieces[name]) for name in order[kv_at + 1 :]))
            keys = KEY_WORD.encode() + _separator()
            _, pattern, repl = secret_rules._RULES[kv_at]
            _fast[engine] = (_compile(before, engine), _compile(after, engine), _compile(keys, engine), pattern.compiled, secret_rules._REPLACERS.get("kv", repl))
    return _fast[engine]


def _key_starts(raw: bytes, keys: _Prefilter, hits: KeyHits | None) -> list[int]:
    """Where keys the kv rule could match start in ``raw``: found by ``keys``, or from the kv piece's ``hits`` on the line
    (``flagged_lines``) and the keys that start right where one of them ends (hidden from the piece: it took their leading byte)."""
    if hits is None:
        return [m.start() for m in keys.finditer(raw)]
    starts = []
    for key, end in hits:
        starts.append(key)
        while raw[end : end + 1] and raw[end] in _KEY_START:
            m = keys.match(raw, end)
            if m is None:
                break
            starts.append(end)
            end = m.end()
    return starts


def kv_only_line(raw: bytes, engine: str = "auto", hits: KeyHits | None = None) -> bytes | None:
    """One line (its newline included) redacted as ``redact_secrets`` would, when no rule but kv can change it; None when another could.

    ``raw`` itself comes back when nothing changed. Lines are decoded with surrogateescape, as ``Redactor.log_bytes``
    decodes them. ``hits``: the kv piece's matches on the line when no other piece matched it (``flagged_lines``),
    which saves looking for its keys.
    """
    fast = _fast_path(engine)
    if fast is None:
        return None
    before, after, keys, kv, replace = fast
    if before.search(raw) is not None:
        return None
    text = raw.decode("utf-8", "surrogateescape")
    ascii_only = len(text) == len(raw)
    out: list[str] = []
    done = 0  # characters of text already in `out` (a match's end: `sub` goes on from there too)
    for key in _key_starts(raw, keys, hits):
        at = key if ascii_only else len(raw[:key].decode("utf-8", "surrogateescape"))
        for start in (at - 1, at) if at and text[at - 1] in "'\"" else (at,):
            if start < done:
                continue
            m = kv.match(text, start)
            if m is not None:
                out += (text[done:start], _replaced(m, kv, replace))
                done = m.end()
                break
    red = raw
    if out:
        out.append(text[done:])
        red = "".join(out).encode("utf-8", "surrogateescape")
        if red == raw:
            red = raw
    return None if after.search(red) is not None else red

"""Secret redaction, on by default, applied to the view model before any renderer and to bundled inputs.

The rules (``secret_rules``) replace each secret in a line. PEM blocks span lines, and bundle and
``collect`` copies are redacted one line at a time, so a ``Redactor`` remembers that it is inside a
block: every line after ``-----BEGIN ...-----`` that is key material (base64, a
``Proc-Type:``/``DEK-Info:`` header, blank) is replaced up to and including ``-----END ...-----``,
whatever prefix (timestamp, rank tag, compose service) each line carries. A log stream
(``log_bytes``) goes through the byte prefilter (``secret_prefilter``) first.

Opt-in PII mode (``Redactor(pii=True)``, the CLI's ``--redact-pii``) also replaces e-mail addresses,
IP addresses and host names by consistent pseudonyms (``pseudonyms``).

The module functions ``redact_text`` / ``redact_obj`` use the redactor of the current ``session``
(or a per-thread default with PII off), so callers that take no redactor argument (view, bundle,
collect) follow whatever the CLI chose::

    with redact.session(pii=True) as r:   # one pseudonym table for the whole run
        view = build_view(result)          # redact_obj -> r.obj
        write_bundle(...)                  # redact_text per line -> r.text
"""

from __future__ import annotations

import contextlib
import re
import threading
from typing import TYPE_CHECKING

from oomdoctor.input.patterns import LazyRegex
from oomdoctor.input.prefixes import split_prefix
from oomdoctor.input.pseudonyms import Pseudonymizer, Pseudonyms
from oomdoctor.input.secret_rules import REDACTED, redact_secrets

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from typing import Any

# PEM blocks: compiled when a line holds "-----BEGIN", which most logs never do.
_PEM_BEGIN = LazyRegex(None, r"-----BEGIN ([A-Z0-9 ]{1,60})-----")
_PEM_END = LazyRegex(None, r"-----END ([A-Z0-9 ]{1,60})-----")
# One line of a block: base64 (RFC 7468 bodies, OpenSSH keys), an RFC 1421 header, or blank.
_PEM_BODY = LazyRegex(None, r"[A-Za-z0-9+/=]*|(?:Proc-Type|DEK-Info|Comment|Version)\s*:.*")
# A key line told apart from the other stream's lines once one came between (a merged log, run's stdout
# and stderr): base64 with an upper- and a lower-case letter and a digit (or + /) or 16 characters,
# or with padding, its length a multiple of 4 as every base64 line's is; or an encrypted key's
# Proc-Type/DEK-Info header. "12345", "Done" and a word of a progress bar are not. (A last line
# shorter than 16 characters with letters only is taken for a word: a fragment that short may pass.)
_PEM_KEY_LINE = LazyRegex(None,
    r"(?=.*[A-Z])(?=.*[a-z])(?:(?=.*[0-9+/])[A-Za-z0-9+/]{8,}|[A-Za-z0-9+/]{16,})={0,2}|[A-Za-z0-9+/]{2,}={1,2}|(?:Proc-Type|DEK-Info)\s*:.*"
)
# Lines of other sources a block may have between its own before it counts as cut (BEGIN and no END).
PEM_GAP_LINES = 64
# Blocks open at once (several pods of a merged log writing keys at the same time); the oldest goes first.
_PEM_MAX_OPEN = 8


class _OpenBlock:
    """A PEM block whose END has not come: the text before its BEGIN, its label, and the other lines since its last."""

    __slots__ = ("gap", "label", "prefix")

    def __init__(self, prefix: str, label: str) -> None:
        self.prefix, self.label, self.gap = prefix, label, 0

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
        self._pseudonymizer = Pseudonymizer(self.pseudonyms)  # holds the learned host names
        self._pem_blocks: list[_OpenBlock] = []  # the blocks open, the newest last
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
        and redacted (a line only the kv rule can change by ``kv_only_line``, where its keys start); the
        others keep their bytes untouched (invalid UTF-8 included), and ``data`` itself comes back when
        nothing changed. Lines are decoded with surrogateescape, so a redacted line keeps
        the bytes around its secrets. With ``pii`` every line is redacted (pseudonyms are not prefiltered).
        """
        # Imported here: only a log stream uses the prefilter, so a plain diagnose's start does not load it.
        from oomdoctor.input.secret_prefilter import flagged_lines, kv_only_line

        every = self.pii
        lines = iter(() if every else flagged_lines(data))
        out: list[bytes] = []
        done = pos = 0  # bytes of data already in `out`; start of the next line to look at
        size = len(data)
        flagged = next(lines, None)
        while pos < size:
            hits = None
            if not self._pem_blocks and not every:  # outside a block: jump to the next flagged line
                while flagged is not None and flagged[0] < pos:
                    flagged = next(lines, None)
                if flagged is None:
                    break
                pos, hits = flagged
            end = data.find(b"\n", pos) + 1 or size
            if hits is not None:
                # Flagged by the kv piece alone (a request log's `stop_token_ids=[]`), as most lines are: the kv
                # rule is tried where the keys start, not every rule scanned over the line (secret_prefilter).
                line = data[pos:end]
                fast = kv_only_line(line, hits=hits)
                if fast is not None:
                    if fast is not line:  # the line itself comes back when nothing changed
                        out += (data[done:pos], fast)
                        done = end
                    pos = end
                    continue
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
        """Forget the unfinished PEM blocks (call between files; a cut block then stops at the file's end)."""
        self._pem_blocks = []

    def after_gap(self) -> None:
        """Lines are missing here (a log writer that fell behind): they may have held a PEM block's BEGIN line, so the
        key material that follows is redacted as the rest of a block until a line that is none (an alphanumeric-only
        line right after the gap is redacted too; a key in clear would be worse)."""
        if not self._pem_blocks:
            # A block of unknown label and prefix, already past its first line: it takes only key-shaped lines.
            gap = _OpenBlock("", "")
            gap.gap = 1
            self._pem_blocks = [gap]

    def learn(self, text: str) -> None:
        """Collect host names named in ``text`` (hostname=..., NCCL prefixes) without redacting it.

        A pre-pass over the inputs lets a host name be replaced even where it appears before the line
        that names it as a host.
        """
        self._pseudonymizer.learn(text)

    def add_hostname(self, name: str) -> None:
        """Treat ``name`` as a host name everywhere from now on (like ``sos clean --domains``)."""
        self._pseudonymizer.add_hostname(name)

    # -- internals --

    def _line(self, line: str) -> str:
        if self._pem_blocks:
            out = self._pem_continuation(line)
            if out is not None:
                return self._pseudonymizer.text(out) if self.pii else out
        text = self._secrets_memo.get(line)
        if text is None:
            text = redact_secrets(line)
            if len(line) <= _MEMO_MAX_CHARS:
                if len(self._secrets_memo) >= _MEMO_MAX_LINES:
                    self._secrets_memo.clear()
                self._secrets_memo[line] = text
        begin = _PEM_BEGIN.search(text) if "-----BEGIN" in text else None
        if begin is not None:
            # A block that does not end on this line: drop the rest of it, expect key lines next.
            end = len(text.rstrip("\r\n"))
            text = text[: begin.start()] + REDACTED + text[end:]
            prefix = line[: line.find("-----BEGIN")] if "-----BEGIN" in line else ""
            self._pem_blocks = [*self._pem_blocks[-_PEM_MAX_OPEN + 1 :], _OpenBlock(prefix, begin.group(1))]
        if self.pii:
            text = self._pseudonymizer.text(text)
        return text

    def _pem_continuation(self, line: str) -> str | None:
        """The redacted line when it is part of an open block; None when it is not.

        A line that is not part of a block does not end it: in a merged log (several pods, or `run`'s
        stdout and stderr) other sources write between its lines, and may have blocks of their own
        open. After such a line a block takes only lines shaped like key material (``_PEM_KEY_LINE``),
        up to its END, or until PEM_GAP_LINES other lines passed (a cut block must not swallow the
        rest of the log).
        """
        body = line.rstrip("\r\n")
        newline = line[len(body) :]
        msg = split_prefix(body).msg
        for block in reversed(self._pem_blocks):
            for start in _starts(block.prefix, body, msg):
                rest = body[start:].strip()
                end = _PEM_END.search(rest)
                if end is not None and _PEM_BODY.compiled.fullmatch(rest[: end.start()].strip()):
                    self._close(body[:start], end.group(1))
                    tail = redact_secrets(rest[end.end() :])
                    return body[:start] + REDACTED + (" " + tail.strip() if tail.strip() else "") + newline
                if block.gap == 0 and _PEM_BODY.compiled.fullmatch(rest):
                    self._claimed(block)
                    return body[:start] + REDACTED + newline if rest else line
                if block.gap and (len(rest) % 4 == 0 or ":" in rest) and _PEM_KEY_LINE.compiled.fullmatch(rest):
                    self._claimed(block)
                    return body[:start] + REDACTED + newline
        self._claimed(None)
        return None

    def _claimed(self, owner: _OpenBlock | None) -> None:
        """A line went to ``owner`` (None: to no block): for every other block it is a line between its own."""
        for block in self._pem_blocks:
            if block is not owner:
                block.gap += 1
        self._pem_blocks = [b for b in self._pem_blocks if b.gap <= PEM_GAP_LINES]

    def _close(self, prefix: str, label: str) -> None:
        """Close the block an END line ends: the one with its prefix and label, else its label, else its prefix, else the newest."""
        blocks = self._pem_blocks
        shape = _shape(prefix)
        for fits in (lambda b: b.label == label and _shape(b.prefix) == shape, lambda b: b.label == label, lambda b: _shape(b.prefix) == shape, lambda b: True):
            match = next((b for b in reversed(blocks) if fits(b)), None)
            if match is not None:
                blocks.remove(match)
                return


def _starts(prefix: str, body: str, msg: str) -> list[int]:
    """Where a block's line may start in ``body``: after a prefix shaped like its BEGIN line's, after the prefixes the parsers know, at 0."""
    starts = []
    if prefix and len(body) >= len(prefix) and _shape(body[: len(prefix)]) == _shape(prefix):
        starts.append(len(prefix))
    if body.endswith(msg):
        starts.append(len(body) - len(msg))
    starts.append(0)
    return starts


# A line longer than `run` redacts at once (its READ_BYTES) is written in pieces. A cut is clean where the
# text on either side, redacted apart, reads as it does redacted together: no match of any rule crosses
# it, and no key on one side names a value on the other. This far on each side is checked, so a secret
# up to this long is never cut in two (real ones are shorter: a one-line RSA-4096 PEM block is 3.3 KiB).
LONG_LINE_WINDOW = 8 << 10
# Bytes after which a cut leaves words whole: tried when the cut a window before the end is not clean.
_WORD_END = re.compile(rb"[ \t\r,;&|]")
_CUT_TRIES = 4


def split_long_line(line: bytes, window: int = LONG_LINE_WINDOW) -> tuple[bytes, bytes]:
    """An unfinished line (no newline yet, longer than two windows) as (the head to redact and write now, the rest to carry).

    The cut is the first clean one of: a window before the end, then the last few word ends before
    that. When none is clean (secrets all around), the word the cut falls in is replaced by REDACTED,
    so no piece of a secret is written in clear on either side.
    """
    target = len(line) - window
    low = max(0, target - window)
    word_ends = [m.end() for m in _WORD_END.finditer(line, low, target)][-_CUT_TRIES:]
    for cut in (target, *reversed(word_ends)):
        if _clean_cut(line, cut, window):
            return line[:cut], line[cut:]
    start = word_ends[-1] if word_ends else low
    after = _WORD_END.search(line, target, target + window)
    end = after.start() if after is not None else target + window
    return line[:start] + REDACTED.encode(), line[end:]


def _clean_cut(line: bytes, cut: int, window: int) -> bool:
    left = line[max(0, cut - window) : cut].decode("utf-8", "surrogateescape")
    right = line[cut : cut + window].decode("utf-8", "surrogateescape")
    return redact_secrets(left) + redact_secrets(right) == redact_secrets(left + right)


def _shape(prefix: str) -> str:
    """A prefix with its digits levelled, so lines stamped a second apart have the same shape."""
    return re.compile(r"\d").sub("0", prefix)


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


@contextlib.contextmanager
def session(pii: bool = False, redactor: Redactor | None = None) -> Iterator[Redactor]:
    """Make one redactor (one pseudonym table) serve every ``redact_text``/``redact_obj`` call inside, on this thread."""
    redactor = redactor if redactor is not None else Redactor(pii=pii)
    stack = _sessions()  # the entering thread's: popped there even if the exit runs elsewhere
    stack.append(redactor)
    try:
        yield redactor
    finally:
        stack.pop()


def redact_text(text: str) -> str:
    """Replace every secret this module knows in one string (and PII, in a PII session)."""
    return active().text(text)


def redact_obj(obj: Any) -> Any:
    """Redact every string in a JSON-like structure (dict keys are identifiers and stay)."""
    return active().obj(obj)

"""Triage an OOM bug report: from an issue (body, comments, title) to a first reply, or to silence.

The reply is one of three kinds:
- ``answer``: an OOM class is evident and whole, at or above the confidence threshold: the class, the
  launch flags to paste and the arithmetic behind them.
- ``ask``: an OOM is evident or likely but the pasted evidence is cut or does not decide the class:
  a short, specific request for exactly the lines that would decide it.
- ``silent``: no OOM evidence, or a class below the threshold: no reply at all.
The reply is computed from the whole thread (the body and every comment, the bot's own replies left
out) and carries a hidden marker with its state (kind, class, confidence, labels and a fingerprint of
the evidence it was computed from): the poster (oomdoctor.commands.github_reply) edits that one comment,
only with a reply at least as sure, and only when the thread's evidence changed. Pure apart from the
diagnosis it is given.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from oomdoctor.base.oom_words import failure_pattern
from oomdoctor.commands.engine_hints import HINT_CONFIDENCE, EngineHint, engine_hint

if TYPE_CHECKING:
    from typing import Any

# Every reply starts with this hidden HTML comment; the rest of the line is the reply's state as JSON:
# <!-- oomdoctor-triage {"v": 1, "kind": "answer", ...} -->. A reply from before the state is the bare
# "<!-- oomdoctor-triage -->".
MARKER = "<!-- oomdoctor-triage"  # the same string as oomdoctor.input.issue_body.TRIAGE_MARKER
_STATE_RE = re.compile(r"<!-- oomdoctor-triage(?: (\{[^\n]*?\}))? -->")
STATE_VERSION = 1
DEFAULT_THRESHOLD = 0.7
DEFAULT_LABEL_PREFIX = "oom:"
# GitHub refuses comments over 65,536 characters; the reply stays well under it.
REPLY_LIMIT = 20_000

# What to ask for, by what is missing. Each names where the lines come from.
_ASK_LOG = (
    "the complete server log from its start (`Load weight begin` / the `server_args` or `non-default args` line) to the "
    "end of the error, e.g. `kubectl logs --previous POD`, `docker logs CONTAINER` or the log file itself, pasted in a "
    "```text fenced block (or attached as a file)"
)


@dataclass(frozen=True)
class Issue:
    """One issue (or pull request) thread as triage reads it."""

    title: str
    markdown: str  # body and comments, oldest first, oomdoctor's own replies left out
    number: int | None = None
    repo: str | None = None
    action: str | None = None  # the webhook event's action: opened, edited, created
    pull_request: bool = False  # the thread is a pull request's (an issue_comment event on a PR)
    comment: str | None = None  # the new comment an issue_comment event carries
    comment_author: str | None = None


@dataclass
class Reply:
    kind: str  # answer | ask | silent
    body: str = ""
    labels: list[str] = field(default_factory=list)
    klass: str = "none"
    confidence: float = 0.0
    missing: list[str] = field(default_factory=list)
    evidence: str = ""  # fingerprint of the thread's evidence (evidence_key)
    comment_evidence: bool | None = None  # the event's new comment carries evidence (None: not a comment event)
    ignored: str = ""  # why the event is not triaged at all (a pull request, the bot's own comment)

    def state(self) -> dict[str, Any]:
        """What the marker records: enough for a later run to tell whether its reply may replace this one."""
        return {"v": STATE_VERSION, "kind": self.kind, "class": self.klass, "confidence": round(self.confidence, 4), "labels": self.labels, "evidence": self.evidence}

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "reply": self.body,
            "labels": self.labels,
            "class": self.klass,
            "confidence": self.confidence,
            "missing": self.missing,
            "marker": MARKER,
            "state": self.state(),
            "comment_evidence": self.comment_evidence,
            "ignored": self.ignored,
        }


def marker_line(reply: Reply) -> str:
    """The hidden first line of a reply: the marker and the reply's state (no ``-->`` can occur in it)."""
    state = json.dumps(reply.state(), sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    state = state.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return f"{MARKER} {state} -->"


def is_reply(body: object) -> bool:
    """The text is (or quotes the first line of) an oomdoctor triage reply."""
    return isinstance(body, str) and _STATE_RE.search(body) is not None


def reply_state(body: object) -> dict[str, Any] | None:
    """The state a reply's marker records; {} for a reply without one (an older oomdoctor); None for no reply."""
    if not isinstance(body, str):
        return None
    m = _STATE_RE.search(body)
    if m is None:
        return None
    if not m.group(1):
        return {}
    try:
        state = json.loads(m.group(1))
    except ValueError:
        return {}
    return state if isinstance(state, dict) else {}


_KIND_RANK = {"silent": 0, "ask": 1, "answer": 2}


def supersedes(new: dict[str, Any], old: dict[str, Any] | None) -> bool:
    """A reply with state ``new`` may replace one with state ``old``: at least as confident, and not the same evidence.

    An answer is never replaced by an ask or by silence, nor by an answer less sure than itself; a reply
    computed from the same evidence changes nothing. A reply without state (an older oomdoctor) may be replaced.
    """
    if new.get("kind") not in ("answer", "ask"):
        return False
    if not old:
        return True
    if old.get("evidence") and old.get("evidence") == new.get("evidence"):
        return False
    rank_new, rank_old = _KIND_RANK.get(str(new.get("kind")), 0), _KIND_RANK.get(str(old.get("kind")), 0)
    if rank_new != rank_old:
        return rank_new > rank_old
    return float(new.get("confidence") or 0.0) >= float(old.get("confidence") or 0.0)


# --- reading an issue ------------------------------------------------------------------------------
_TITLE_ERROR_RE = re.compile(
    "(?i)" + failure_pattern(r"No available memory", r"KV cache (?:is needed|memory)", r"less than desired", r"Try to allocate", r"Retract", r"insufficient GPU memory")
)


def issue_from_json(data: Any, comments: list[Any] | None = None) -> Issue:
    """An Issue from a GitHub webhook payload (issues / issue_comment) or a REST issue export.

    The thread is the issue's body and every comment, oldest first: ``comments`` (the REST list of the
    issue's comments, e.g. ``gh api repos/R/issues/N/comments --paginate``), else comments embedded in
    the export, plus the event's own new comment when the list lacks it. oomdoctor's own replies (and
    any comment carrying its marker) are not evidence and are left out.
    """
    from oomdoctor.input.issue_body import thread_markdown

    issue = data.get("issue") if isinstance(data, dict) and isinstance(data.get("issue"), dict) else data
    if not isinstance(issue, dict) or thread_markdown(data) is None:
        raise ValueError("not a GitHub issue: expected an object with a body, or an event payload with an issue")
    listed = comments
    if listed is None:
        embedded = [c for c in (issue.get("comments"), data.get("comments") if isinstance(data, dict) else None) if isinstance(c, list)]
        listed = embedded[0] if embedded else []
    event_comment = data.get("comment") if isinstance(data, dict) and isinstance(data.get("comment"), dict) else None
    thread = [c for c in listed if isinstance(c, dict)]
    if event_comment is not None and not any(_same_comment(c, event_comment) for c in thread):
        thread.append(event_comment)
    parts = [issue["body"]] if isinstance(issue.get("body"), str) else []
    parts += [c["body"] for c in thread if isinstance(c.get("body"), str) and not is_reply(c["body"])]
    repo = None
    if isinstance(data, dict) and isinstance(data.get("repository"), dict):
        repo = data["repository"].get("full_name")
    return Issue(
        title=str(issue.get("title") or ""),
        markdown="\n\n".join(p.replace("\r\n", "\n") for p in parts),
        number=issue.get("number") if isinstance(issue.get("number"), int) else None,
        repo=repo,
        action=data.get("action") if isinstance(data, dict) else None,
        pull_request=issue.get("pull_request") is not None,
        comment=event_comment.get("body") if event_comment is not None and isinstance(event_comment.get("body"), str) else None,
        comment_author=_login(event_comment) if event_comment is not None else None,
    )


def _login(obj: dict[str, Any]) -> str | None:
    user = obj.get("user")
    return str(user["login"]) if isinstance(user, dict) and isinstance(user.get("login"), str) else None


def _same_comment(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if a.get("id") is not None and b.get("id") is not None:
        return bool(a.get("id") == b.get("id"))
    return bool(a.get("body") == b.get("body"))


def comments_from_json(data: Any) -> list[dict[str, Any]]:
    """The comments of ``gh api .../comments --paginate`` (one array, or one array a page) or a thread export."""
    if isinstance(data, dict):
        data = data.get("comments") if isinstance(data.get("comments"), list) else None
    if not isinstance(data, list):
        raise ValueError("not a list of comments")
    out: list[dict[str, Any]] = []
    for item in data:
        if isinstance(item, list):
            out += [c for c in item if isinstance(c, dict)]
        elif isinstance(item, dict):
            out.append(item)
    return out


def load_json_stream(text: str) -> Any:
    """JSON, or several JSON values one after another (gh --paginate without --slurp writes one array a page)."""
    decoder = json.JSONDecoder()
    values: list[Any] = []
    pos, end = 0, len(text)
    while True:
        while pos < end and text[pos].isspace():
            pos += 1
        if pos >= end:
            break
        value, pos = decoder.raw_decode(text, pos)
        values.append(value)
    if len(values) == 1:
        return values[0]
    return [x for v in values for x in (v if isinstance(v, list) else [v])]


def ignored(issue: Issue, bot_login: str | None = None) -> str:
    """Why this event is not triaged at all, or ''."""
    if issue.pull_request:
        return "a pull request, not an issue"
    if issue.comment is not None and (is_reply(issue.comment) or (bot_login and issue.comment_author == bot_login)):
        return "the new comment is oomdoctor's own"
    return ""


def evidence_key(issue: Issue) -> str:
    """A fingerprint of what the thread gives as evidence: its log lines and the facts stated in prose.

    Prose without them ("Any update?", "Thanks, fixed it") leaves it unchanged, wherever in the thread.
    """
    import hashlib

    from oomdoctor.input.issue_body import read

    ev = read(issue_text(issue))
    h = hashlib.sha256()
    for line in ev.log:
        if line.strip():
            h.update(line.strip().encode("utf-8", "replace") + b"\n")
    for r in sorted({(r.name, str(r.value)) for r in ev.reported}):
        h.update(f"{r[0]}={r[1]}\n".encode("utf-8", "replace"))
    return h.hexdigest()[:16]


def comment_has_evidence(text: str) -> bool:
    """A comment carries evidence: pasted machine output, or a flag, GPU, version or model stated in it."""
    from oomdoctor.input.issue_body import read

    ev = read(text)
    return any(line.strip() for line in ev.log) or bool(ev.reported)


def issue_text(issue: Issue) -> str:
    """The markdown diagnose reads: an error quoted in the title is kept as a one-line fragment."""
    title = issue.title.strip()
    head = f"```text\n{title}\n```\n\n" if title and _TITLE_ERROR_RE.search(title) else ""
    return head + issue.markdown


# --- deciding and writing the reply ----------------------------------------------------------------
# A `none` at or above this is positive evidence of no OOM (a named other error, a clean end, the
# engine's own retraction lines): the report's "out of memory" words do not earn a request then.
POSITIVE_NONE = 0.85
MAX_ASKS = 3


def decide(
    view: dict[str, Any],
    threshold: float = DEFAULT_THRESHOLD,
    label_prefix: str = DEFAULT_LABEL_PREFIX,
    claims_oom: bool = False,
    log_text: str = "",
    evidence: str = "",
) -> Reply:
    """The reply a diagnosis view supports (view: oomdoctor.report.view.build_view, redacted).

    ``claims_oom``: the reporter says it ran out of memory (title or prose); with no OOM in the pasted
    evidence and nothing that rules one out, the reply asks for the log instead of staying silent.
    ``log_text``: the pasted output (prose blanked); an engine error that names its own fix is answered
    with that fix. ``evidence``: the thread's evidence fingerprint, recorded in the reply's marker.
    """
    reply = _decide(view, threshold, label_prefix, claims_oom, log_text)
    reply.evidence = evidence
    if reply.kind != "silent":
        reply.body = marker_line(reply) + "\n" + reply.body
    return reply


def _decide(view: dict[str, Any], threshold: float, label_prefix: str, claims_oom: bool, log_text: str) -> Reply:
    v = view["verdict"]
    klass, conf = v["class"], float(v["confidence"])
    evidence = v.get("evidence", "complete")
    inconclusive = bool(v.get("inconclusive"))
    missing = _missing(view)
    hint = engine_hint(log_text) if log_text else None
    # A class the evidence decides at the threshold is answered even when a later record was cut.
    decided = klass not in ("none", "unknown_oom") and not inconclusive and conf >= threshold
    if decided:
        reply = Reply("answer", klass=klass, confidence=conf, labels=[f"{label_prefix}{klass}"], missing=missing)
        reply.body = _answer_body(view, hint)
        return reply
    if hint is not None and (klass in ("none", "unknown_oom", hint[0].klass) or conf < HINT_CONFIDENCE):
        conf_hint = max(HINT_CONFIDENCE, conf if klass == hint[0].klass else 0.0)
        if conf_hint >= threshold:
            reply = Reply("answer", klass=hint[0].klass, confidence=conf_hint, labels=[f"{label_prefix}{hint[0].klass}"])
            reply.body = _hint_body(view, hint, conf_hint)
            return reply
    if klass == "none":
        if claims_oom and conf < POSITIVE_NONE:
            reply = Reply("ask", klass=klass, confidence=conf, labels=[f"{label_prefix}needs-log"], missing=[_ASK_LOG])
            reply.body = _ask_body(view, [_ASK_LOG], claimed=True)
            return reply
        return Reply("silent", klass=klass, confidence=conf)
    # An OOM no rule decides (unknown_oom, or the differential's lead named as a hypothesis: rule null) asks for
    # what would decide it, as a cut record does.
    if inconclusive or evidence == "incomplete" or klass == "unknown_oom" or v.get("rule") is None:
        reply = Reply("ask", klass=klass, confidence=conf, missing=missing)
        reply.labels = [f"{label_prefix}needs-log"] + ([f"{label_prefix}{klass}"] if klass not in ("none", "unknown_oom") else [])
        reply.body = _ask_body(view, missing)
        return reply
    return Reply("silent", klass=klass, confidence=conf)


# What a reporter is asked for is what they can run where the server ran: not this tool.
_OOMDOCTOR_ALT_RE = re.compile(r"\s*\((?:or:?\s*)?[^()]*\boomdoctor\b[^()]*\)|,?\s*or\s+`oomdoctor[^`]*`(?:\s*/\s*`oomdoctor[^`]*`)*")
_TOPICS = (
    ("processes", re.compile(r"(?i)process|nvidia-smi")),
    ("allocator", re.compile(r"(?i)allocator|Tried to allocate")),
    ("startup", re.compile(r"(?i)startup|server_args|non-default args|Load weight|from its start")),
    ("record", re.compile(r"(?i)failure record|traceback|end of the error")),
)


def _for_reporter(item: str) -> str | None:
    """``item`` without the alternatives that need oomdoctor installed; None when nothing else is left."""
    out = _OOMDOCTOR_ALT_RE.sub("", item)
    return None if re.search(r"(?i)\boomdoctor\b", out) else out


def _topic(item: str) -> str:
    return next((name for name, pattern in _TOPICS if pattern.search(item)), item)


def _missing(view: dict[str, Any]) -> list[str]:
    """At most MAX_ASKS requests, one per kind of evidence, each something a reporter can run."""
    raw: list[str] = []
    v = view["verdict"]
    if v.get("evidence") == "incomplete" and v.get("evidence_reason"):
        raw.append(f"the rest of the failure record ({v['evidence_reason']})")
    for f in view.get("findings", [])[:1]:
        raw += list(f.get("would_decide", []) or [])
    raw += [f"{item['what']}: `{item['command']}`" for item in view.get("report", {}).get("unchecked", [])[:3]]
    chosen: dict[str, str] = {}
    for item in raw:
        text = _for_reporter(item)
        if not text:
            continue
        topic = _topic(text)
        # Of two requests for the same evidence, the one naming a command to run.
        if topic not in chosen or ("`" in text and "`" not in chosen[topic]):
            chosen[topic] = text
    return list(chosen.values())[:MAX_ASKS]


def _fold(title: str, body: str) -> str:
    return f"<details><summary>{title}</summary>\n\n{body}\n\n</details>"


_FLAG_VALUE_RE = re.compile(r"(--[a-z][a-z0-9-]*)[ =]([^\s`]+)")


def _computed_values(view: dict[str, Any]) -> dict[str, str]:
    """The flag values the diagnosis computed (its paste-ready set and alternatives)."""
    report = view.get("report", {})
    texts = [str(report.get("flags") or "")] + [str(a.get("paste") or "") for a in report.get("alternatives", [])]
    out: dict[str, str] = {}
    for text in texts:
        for m in _FLAG_VALUE_RE.finditer(text):
            out.setdefault(m.group(1), m.group(2))
    return out


@dataclass(frozen=True)
class _Change:
    flag: str
    value: str | None  # None: the engine names the direction only, and the diagnosis has no number
    direction: str
    why: str = ""

    def text(self) -> str:
        from oomdoctor.report.mdsafe import code_span

        if self.value is not None:
            return code_span(f"{self.flag} {self.value}")
        return f"{'a lower' if self.direction == 'lower' else 'a higher'} {code_span(self.flag)} than the value you run with"


def _hint_changes(view: dict[str, Any], hint: tuple[EngineHint, re.Match[str]]) -> list[_Change]:
    """The engine-named changes, with a value where the diagnosis (or the message itself) gives one."""
    h, m = hint
    computed = _computed_values(view)
    groups = m.groupdict()
    out: list[_Change] = []
    for flag, direction in h.flags:
        if flag in computed:
            out.append(_Change(flag, computed[flag], direction, "computed from the memory numbers in the log"))
        elif flag == "--max-num-seqs" and groups.get("reqs"):
            n = int(groups["reqs"])
            out.append(_Change(flag, str(max(n // 2, 1)), direction, f"half the {n} sequences the warm-up ran: its memory grows with `max_num_seqs`"))
        elif flag == "--max-model-len" and (groups.get("estimate") or groups.get("tokens")):
            value = groups.get("estimate") or groups["tokens"]
            why = "the engine's own estimate of the longest context that fits" if groups.get("estimate") else "the tokens the KV cache holds"
            out.append(_Change(flag, value, direction, why))
        else:
            out.append(_Change(flag, None, direction))
    return out


def _hint_body(view: dict[str, Any], hint: tuple[EngineHint, re.Match[str]], conf: float) -> str:
    from oomdoctor.report.mdsafe import code_fence, code_span, escape_markdown_prose

    h, m = hint
    changes = _hint_changes(view, hint)
    lines = [
        f"**oomdoctor**: this looks like **`{h.klass}`** (confidence {conf:.2f}): {h.engine}'s own error names the fix.",
        "",
        f"> {code_span(m.group(0))}",
        "",
    ]
    first, rest = changes[0], changes[1:]
    if first.value is not None:
        lines += ["Change:", "", code_fence(f"{first.flag} {first.value}", "bash"), ""]
    else:
        lines += [f"Change: {first.text()}.", ""]
    lines += [f"- or: {c.text()}" for c in rest]
    if rest:
        lines.append("")
    why = [f"- {code_span(f'{c.flag} {c.value}')}: {c.why}" for c in changes if c.value is not None and c.why]
    if why:
        lines += [_fold("Where the values come from", "\n".join(why)), ""]
    v = view["verdict"]
    if v["class"] not in ("none", "unknown_oom", h.klass):
        lines += [f"The rest of the log points to `{v['class']}` (confidence {v['confidence']:.2f}): {escape_markdown_prose(v['summary'])}", ""]
    lines.append(_footer(view))
    return _cap("\n".join(lines))


def _answer_body(view: dict[str, Any], hint: tuple[EngineHint, re.Match[str]] | None = None) -> str:
    from oomdoctor.report.mdsafe import code_fence, code_span, escape_markdown_prose
    from oomdoctor.report.render.text import step_line

    v = view["verdict"]
    report = view.get("report", {})
    lines = [f"**oomdoctor**: this looks like **`{v['class']}`** (confidence {v['confidence']:.2f}).", "", escape_markdown_prose(v["summary"]), ""]
    if report.get("flags"):
        lines += ["Change (one consistent set):", "", code_fence(report["flags"], "bash"), ""]
    for alt in report.get("alternatives", [])[:3]:
        cost = f" ({escape_markdown_prose(alt['cost'])})" if alt.get("cost") else ""
        lines.append(f"- or: {code_span(alt['paste'])}{cost}")
    if report.get("alternatives"):
        lines.append("")
    if hint is not None:
        extra = [c for c in _hint_changes(view, hint) if c.flag not in _computed_values(view)]
        lines += [f"{hint[0].engine}'s own error says: {code_span(hint[1].group(0))}", ""]
        lines += [f"- or, as it suggests: {c.text()}" + (f" ({c.why})" if c.value is not None and c.why else "") for c in extra]
        if extra:
            lines.append("")
    recs = view["findings"][0]["recommendations"] if view.get("findings") else []
    steps = [s for r in recs[:1] for s in r.get("derivation", [])]
    if steps:
        work = "\n".join(f"- {escape_markdown_prose(step_line(s, '→'))}" for s in steps[:20])
        lines += [_fold("How the value was computed", work), ""]
    lines.append(_footer(view))
    return _cap("\n".join(lines))


def _ask_body(view: dict[str, Any], missing: list[str], claimed: bool = False) -> str:
    from oomdoctor.report.mdsafe import escape_markdown_prose

    v = view["verdict"]
    if claimed:
        head = "**oomdoctor**: the report says it ran out of memory, but no out-of-memory error is in the pasted output, so its class cannot be told yet."
    else:
        head = "**oomdoctor**: an out-of-memory failure is evident or likely here, but the pasted evidence does not decide its class."
    lines = [head]
    diff = v.get("differential") or []
    if v["class"] not in ("none", "unknown_oom"):
        # A differential's lead: the ranked line below says why; a phase's hypothesis: its summary does.
        why = "." if diff else f": {escape_markdown_prose(v['summary'])}"
        lines.append(f"What is there points to **`{v['class']}`** (a hypothesis, confidence {v['confidence']:.2f}){why}")
    if len(diff) >= 2:
        # The differential: the two likeliest classes and the one check that tells them apart.
        first, second = diff[0], diff[1]
        if first["likelihood"] == second["likelihood"]:
            tied = [f"**`{c['class']}`**" for c in diff if c["likelihood"] == first["likelihood"]]
            lines += ["", f"Equally likely on this evidence: {', '.join(tied[:-1])} or {tied[-1]} ({first['likelihood']:.2f} each); the first check: {_keep_code(first['check'])}."]
        else:
            lines += ["", f"Most likely **`{first['class']}`** ({first['likelihood']:.2f}), else **`{second['class']}`** ({second['likelihood']:.2f}); to tell them apart: {_keep_code(first['check'])}."]
    lines += ["", "What would decide it:", ""]
    wanted = (missing or [_ASK_LOG])[:MAX_ASKS]
    lines += [f"- {_keep_code(m)}" for m in wanted]
    if _ASK_LOG not in wanted:
        lines += ["", f"The quickest way: {_keep_code(_ASK_LOG)}."]
    lines += ["", _footer(view)]
    return _cap("\n".join(lines))


def _keep_code(text: str) -> str:
    """oomdoctor's own request text: its code spans kept, the prose between them escaped."""
    from oomdoctor.report.mdsafe import code_span, escape_markdown_prose

    parts = re.split(r"(?<!`)`([^`\n]+)`(?!`)", text)
    return "".join(code_span(p) if i % 2 else escape_markdown_prose(p) for i, p in enumerate(parts))


def _footer(view: dict[str, Any]) -> str:
    tool = view.get("tool", {})
    return f"<sub>oomdoctor {tool.get('version', '')}: this reply is recomputed from the whole thread when new evidence arrives, and replaced only by one at least as sure; secrets are redacted.</sub>"


def _cap(text: str) -> str:
    if len(text) <= REPLY_LIMIT:
        return text
    return text[: REPLY_LIMIT - 200] + "\n\n… (cut to stay under GitHub's comment limit)"


# --- a maintainer's view over many reports ------------------------------------------------------------
def summarize(replies: list[Reply]) -> str:
    """Classes, how many were answerable, and which evidence was most often missing."""
    kinds = Counter(r.kind for r in replies)
    classes = Counter(r.klass for r in replies if r.kind != "silent")
    missing = Counter(_missing_key(m) for r in replies if r.kind == "ask" for m in r.missing)
    out = [f"issues: {len(replies)}", f"answerable now: {kinds['answer']}", f"need more evidence: {kinds['ask']}", f"no OOM evidence or below the threshold: {kinds['silent']}"]
    if classes:
        out += ["classes:"] + [f"  {k}: {n}" for k, n in classes.most_common()]
    if missing:
        out += ["most often missing:"] + [f"  {n} x {k}" for k, n in missing.most_common(8)]
    return "\n".join(out) + "\n"


def _missing_key(text: str) -> str:
    return text.split(" (")[0].split(":")[0][:100]


def reply_json(reply: Reply) -> str:
    return json.dumps(reply.to_json(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"

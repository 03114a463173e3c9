"""Triage an OOM bug report: from an issue (body, comments, title) to a first reply, or to silence.

The reply is one of three kinds:
- ``answer``: an OOM class is evident and whole, at or above the confidence threshold: the class, the
  launch flags to paste and the arithmetic behind them.
- ``ask``: an OOM is evident or likely but the pasted evidence is cut or does not decide the class:
  a short, specific request for exactly the lines that would decide it.
- ``silent``: no OOM evidence, or a class below the threshold: no reply at all.
The reply carries a hidden marker so that a later edit of the issue updates it instead of adding a
second one. Pure apart from the diagnosis it is given.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

MARKER = "<!-- oomdoctor-triage -->"
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
    markdown: str  # body and comments, oldest first
    number: int | None = None
    repo: str | None = None
    action: str | None = None  # the webhook event's action: opened, edited, created


@dataclass
class Reply:
    kind: str  # answer | ask | silent
    body: str = ""
    labels: list[str] = field(default_factory=list)
    klass: str = "none"
    confidence: float = 0.0
    missing: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "reply": self.body,
            "labels": self.labels,
            "class": self.klass,
            "confidence": self.confidence,
            "missing": self.missing,
            "marker": MARKER,
        }


# --- reading an issue ------------------------------------------------------------------------------
_TITLE_ERROR_RE = re.compile(
    r"(?i)out of memory|OutOfMemory|Not enough memory|No available memory|KV cache (?:is needed|memory)|"
    r"less than desired|Try to allocate|Retract|insufficient GPU memory"
)


def issue_from_json(data: Any) -> Issue:
    """An Issue from a GitHub webhook payload (issues / issue_comment) or a REST issue export."""
    from oomdoctor.input.issue_body import thread_markdown

    issue = data.get("issue") if isinstance(data, dict) and isinstance(data.get("issue"), dict) else data
    if not isinstance(issue, dict):
        raise ValueError("not a GitHub issue: expected an object with a body, or an event payload with an issue")
    markdown = thread_markdown(data)
    if markdown is None:
        raise ValueError("not a GitHub issue: no body")
    repo = None
    if isinstance(data, dict) and isinstance(data.get("repository"), dict):
        repo = data["repository"].get("full_name")
    return Issue(
        title=str(issue.get("title") or ""),
        markdown=markdown,
        number=issue.get("number") if isinstance(issue.get("number"), int) else None,
        repo=repo,
        action=data.get("action") if isinstance(data, dict) else None,
    )


def issue_text(issue: Issue) -> str:
    """The markdown diagnose reads: an error quoted in the title is kept as a one-line fragment."""
    title = issue.title.strip()
    head = f"```text\n{title}\n```\n\n" if title and _TITLE_ERROR_RE.search(title) else ""
    return head + issue.markdown


# --- deciding and writing the reply ----------------------------------------------------------------
# A `none` at or above this is positive evidence of no OOM (a named other error, a clean end, the
# engine's own retraction lines): the report's "out of memory" words do not earn a request then.
POSITIVE_NONE = 0.85


def decide(view: dict[str, Any], threshold: float = DEFAULT_THRESHOLD, label_prefix: str = DEFAULT_LABEL_PREFIX, claims_oom: bool = False) -> Reply:
    """The reply a diagnosis view supports (view: oomdoctor.report.view.build_view, redacted).

    ``claims_oom``: the reporter says it ran out of memory (title or prose); with no OOM in the pasted
    evidence and nothing that rules one out, the reply asks for the log instead of staying silent.
    """
    v = view["verdict"]
    klass, conf = v["class"], float(v["confidence"])
    evidence = v.get("evidence", "complete")
    inconclusive = bool(v.get("inconclusive"))
    missing = _missing(view)
    if klass == "none":
        if claims_oom and conf < POSITIVE_NONE:
            reply = Reply("ask", klass=klass, confidence=conf, labels=[f"{label_prefix}needs-log"], missing=[_ASK_LOG])
            reply.body = _ask_body(view, [_ASK_LOG], claimed=True)
            return reply
        return Reply("silent", klass=klass, confidence=conf)
    # A class the evidence decides at the threshold is answered even when a later record was cut.
    decided = klass != "unknown_oom" and not inconclusive and conf >= threshold
    if not decided and (inconclusive or evidence == "incomplete" or klass == "unknown_oom"):
        reply = Reply("ask", klass=klass, confidence=conf, missing=missing)
        reply.labels = [f"{label_prefix}needs-log"] + ([f"{label_prefix}{klass}"] if klass not in ("none", "unknown_oom") else [])
        reply.body = _ask_body(view, missing)
        return reply
    if conf < threshold:
        return Reply("silent", klass=klass, confidence=conf)
    reply = Reply("answer", klass=klass, confidence=conf, labels=[f"{label_prefix}{klass}"], missing=missing)
    reply.body = _answer_body(view)
    return reply


def _missing(view: dict[str, Any]) -> list[str]:
    out: list[str] = []
    v = view["verdict"]
    if v.get("evidence") == "incomplete" and v.get("evidence_reason"):
        out.append(f"the rest of the failure record ({v['evidence_reason']})")
    for f in view.get("findings", [])[:1]:
        for item in f.get("would_decide", []) or []:
            if item not in out:
                out.append(item)
    for item in view.get("report", {}).get("unchecked", [])[:3]:
        text = f"{item['what']}: `{item['command']}`"
        if text not in out:
            out.append(text)
    return out[:5]


def _fold(title: str, body: str) -> str:
    return f"<details><summary>{title}</summary>\n\n{body}\n\n</details>"


def _answer_body(view: dict[str, Any]) -> str:
    from oomdoctor.report.mdsafe import escape_markdown_html
    from oomdoctor.report.render.text import step_line

    v = view["verdict"]
    report = view.get("report", {})
    lines = [MARKER, f"**oomdoctor**: this looks like **`{v['class']}`** (confidence {v['confidence']:.2f}).", "", escape_markdown_html(v["summary"]), ""]
    if report.get("flags"):
        lines += ["Change (one consistent set):", "", "```bash", report["flags"], "```", ""]
    for alt in report.get("alternatives", [])[:3]:
        cost = f" ({escape_markdown_html(alt['cost'])})" if alt.get("cost") else ""
        lines.append(f"- or: `{alt['paste']}`{cost}")
    if report.get("alternatives"):
        lines.append("")
    recs = view["findings"][0]["recommendations"] if view.get("findings") else []
    steps = [s for r in recs[:1] for s in r.get("derivation", [])]
    if steps:
        work = "\n".join(
            f"- {escape_markdown_html(step_line(s, '→'))}" for s in steps[:20]
        )
        lines += [_fold("How the value was computed", work), ""]
    lines.append(_footer(view))
    return _cap("\n".join(lines))


def _ask_body(view: dict[str, Any], missing: list[str], claimed: bool = False) -> str:
    from oomdoctor.report.mdsafe import escape_markdown_html

    v = view["verdict"]
    if claimed:
        head = "**oomdoctor**: the report says it ran out of memory, but no out-of-memory error is in the pasted output, so its class cannot be told yet."
    else:
        head = "**oomdoctor**: an out-of-memory failure is evident or likely here, but the pasted evidence does not decide its class."
    lines = [MARKER, head]
    if v["class"] not in ("none", "unknown_oom"):
        lines.append(f"What is there points to **`{v['class']}`** (a hypothesis, confidence {v['confidence']:.2f}): {escape_markdown_html(v['summary'])}")
    lines += ["", "What would decide it:", ""]
    wanted = missing or [_ASK_LOG]
    lines += [f"- {escape_markdown_html(m)}" for m in wanted]
    if _ASK_LOG not in wanted:
        lines += ["", f"The quickest way: {_ASK_LOG}."]
    lines += ["", _footer(view)]
    return _cap("\n".join(lines))


def _footer(view: dict[str, Any]) -> str:
    tool = view.get("tool", {})
    return f"<sub>oomdoctor {tool.get('version', '')}: this reply is updated when the issue is edited; secrets are redacted.</sub>"


def _cap(text: str) -> str:
    if len(text) <= REPLY_LIMIT:
        return text
    return text[: REPLY_LIMIT - 200] + "\n\n… (cut: the full report is `oomdoctor diagnose --format markdown` on the log)"


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

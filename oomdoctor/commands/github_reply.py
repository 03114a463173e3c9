"""Post or update oomdoctor's triage reply on a GitHub issue with the `gh` CLI (used by action.yml).

One reply per issue, written by the bot alone. The reply is oomdoctor's comment that carries the
marker *and* was written by the bot's own login (anyone can paste the marker; such a comment is
never edited). It is edited only by a reply at least as sure, computed from changed evidence
(oomdoctor.commands.triage.supersedes): an "Any update?" changes nothing, and an ask never replaces an
answer. Right before an edit the reply is read again (another run may have edited it meanwhile); after
a new reply is posted the thread is read again, and of two replies that raced the older one is kept.
Labels follow the reply: the bot's stale ``oom:*`` labels are removed, missing labels are created or
skipped with a note. Pull requests are ignored. The reply's text travels in a file (``--body-file``,
``-F body=@file``), never on a command line, and nothing from the issue is ever run.

    python -m oomdoctor.commands.github_reply --event "$GITHUB_EVENT_PATH" --fetch-comments comments.json
    python -m oomdoctor.commands.github_reply --reply triage.json --event "$GITHUB_EVENT_PATH" [--bot-login L] [--dry-run] [--apply-labels]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from oomdoctor.commands.triage import MARKER, comments_from_json, is_reply, load_json_stream, reply_state, supersedes

if TYPE_CHECKING:
    from typing import Any

Runner = Callable[[Sequence[str]], str]
# The login of GITHUB_TOKEN's comments; `gh api user` cannot tell it (the token is not a user's).
ACTIONS_BOT = "github-actions[bot]"
LABEL_COLOR = "d93f0b"
_COMMENT_URL_RE = re.compile(r"#issuecomment-(\d+)")


def _gh(gh: str) -> Runner:
    def run(args: Sequence[str]) -> str:
        done = subprocess.run([gh, *args], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"gh {' '.join(args[:2])} failed ({done.returncode}): {done.stderr.strip()[:300]}")
        return done.stdout

    return run


@dataclass
class Outcome:
    """What a run did: the gh calls that write (made, or printed under --dry-run) and why."""

    calls: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# --- reading the thread ----------------------------------------------------------------------------
def bot_login(run: Runner, given: str | None = None) -> str:
    """The login the bot's comments carry: ``given``, else the token's user, else github-actions[bot]."""
    if given:
        return given
    try:
        login = run(["api", "user", "--jq", ".login"]).strip()
    except RuntimeError:
        return ACTIONS_BOT  # GITHUB_TOKEN (an installation token) has no user
    return login or ACTIONS_BOT


def list_comments(run: Runner, repo: str, number: int) -> list[dict[str, Any]]:
    """Every comment of the issue, oldest first (one JSON array a page from --paginate)."""
    out = run(["api", f"repos/{repo}/issues/{number}/comments", "--paginate"])
    return comments_from_json(load_json_stream(out)) if out.strip() else []


def get_comment(run: Runner, repo: str, comment_id: int) -> dict[str, Any] | None:
    """One comment as it is now; None when it is gone."""
    try:
        data = json.loads(run(["api", f"repos/{repo}/issues/comments/{comment_id}"]))
    except RuntimeError as exc:
        if "404" in str(exc) or "Not Found" in str(exc):
            return None
        raise
    return data if isinstance(data, dict) else None


def _login(comment: dict[str, Any]) -> str | None:
    user = comment.get("user")
    return user.get("login") if isinstance(user, dict) else None


def is_bot_reply(comment: dict[str, Any], login: str) -> bool:
    """oomdoctor's own reply: the marker, written by the bot's login (the marker alone is anyone's to paste)."""
    return _login(comment) == login and is_reply(comment.get("body"))


def bot_replies(comments: list[dict[str, Any]], login: str) -> list[dict[str, Any]]:
    return sorted((c for c in comments if is_bot_reply(c, login) and isinstance(c.get("id"), int)), key=lambda c: int(c["id"]))


def existing_reply(run: Runner, repo: str, number: int, login: str = ACTIONS_BOT) -> int | None:
    """The id of the bot's earlier reply on this issue, if any (its marker and its author)."""
    mine = bot_replies(list_comments(run, repo, number), login)
    return int(mine[0]["id"]) if mine else None


# --- posting ---------------------------------------------------------------------------------------
def _event_target(event: dict[str, Any]) -> tuple[str, int]:
    repo = (event.get("repository") or {}).get("full_name")
    number = (event.get("issue") or {}).get("number")
    if not isinstance(repo, str) or not isinstance(number, int):
        raise ValueError("the event has no repository.full_name or issue.number")
    return repo, number


def event_ignored(event: dict[str, Any], login: str) -> str:
    """Why the event gets no reply at all, or ''."""
    issue = event.get("issue") or {}
    if isinstance(issue, dict) and issue.get("pull_request") is not None:
        return "a pull request, not an issue"
    comment = event.get("comment")
    if isinstance(comment, dict) and (_login(comment) == login or is_reply(comment.get("body"))):
        return "the new comment is oomdoctor's own (or carries its marker)"
    return ""


def post(
    reply: dict[str, Any],
    repo: str,
    number: int,
    run: Runner,
    *,
    dry_run: bool = False,
    apply_labels: bool = False,
    login: str = ACTIONS_BOT,
    event: dict[str, Any] | None = None,
    create_labels: bool = True,
    label_prefix: str = "oom:",
) -> Outcome:
    """Create, edit or keep the bot's reply (and its labels); return the writing gh calls and the notes."""
    out = Outcome()
    why = event_ignored(event, login) if event is not None else ""
    if why or reply.get("ignored"):
        out.notes.append(f"ignored: {why or reply['ignored']}")
        return out
    if reply.get("kind") == "silent" or not reply.get("reply"):
        out.notes.append(f"no reply ({reply.get('kind')})")
        return out
    new_state = reply.get("state") or {"kind": reply.get("kind"), "confidence": reply.get("confidence", 0.0), "labels": reply.get("labels", [])}

    def write(call: list[str]) -> str:
        out.calls.append(call)
        if dry_run:
            return ""
        try:
            return run(call)
        except RuntimeError as exc:
            if call[:3] == ["api", "-X", "DELETE"] and ("404" in str(exc) or "Not Found" in str(exc)):
                return ""  # another run deleted it first
            raise

    with tempfile.NamedTemporaryFile("w", suffix=".md", delete=False, encoding="utf-8") as fh:
        fh.write(reply["reply"])
        body_file = fh.name
    try:
        mine = bot_replies(list_comments(run, repo, number), login)
        current = mine[0] if mine else None
        old_state = reply_state(current.get("body")) if current else None
        for extra in mine[1:]:  # left by an earlier race: one reply per issue
            write(["api", "-X", "DELETE", f"repos/{repo}/issues/comments/{extra['id']}"])
        if current is not None:
            if not _replaces(reply, new_state, current, out):
                return out
            fresh = get_comment(run, repo, int(current["id"]))  # right before the edit: another run may have been here
            if fresh is not None and is_bot_reply(fresh, login):
                if not _replaces(reply, new_state, fresh, out):
                    return out
                write(["api", "-X", "PATCH", f"repos/{repo}/issues/comments/{current['id']}", "-F", f"body=@{body_file}"])
                old_state = reply_state(fresh.get("body"))
            else:
                current = None  # deleted meanwhile: post it anew
        if current is None and reply.get("comment_evidence") is False and not mine:
            out.notes.append("no reply: the new comment brings no evidence (an issue's first reply comes with its evidence)")
            return out
        if current is None:
            created = write(["issue", "comment", str(number), "--repo", repo, "--body-file", body_file])
            if not dry_run:
                _settle_race(run, repo, number, login, created, new_state, body_file, write, out)
        if apply_labels:
            _sync_labels(reply, old_state, event, repo, number, run, write, out, create_labels, label_prefix)
    finally:
        os.unlink(body_file)
    return out


def _replaces(reply: dict[str, Any], new_state: dict[str, Any], comment: dict[str, Any], out: Outcome) -> bool:
    old = reply_state(comment.get("body")) or {}
    if old.get("evidence") and old.get("evidence") == new_state.get("evidence"):
        out.notes.append(f"kept: comment {comment.get('id')}: no new evidence in the thread")
        return False
    if comment.get("body") == reply.get("reply"):
        out.notes.append(f"kept: comment {comment.get('id')} already says this")
        return False
    if not old.get("evidence") and reply.get("comment_evidence") is False:
        out.notes.append(f"kept: comment {comment.get('id')}: the new comment brings no evidence")
        return False
    if not supersedes(new_state, old):
        out.notes.append(f"kept: comment {comment.get('id')} ({old.get('kind')}, {old.get('confidence')}) is at least as sure as this {new_state.get('kind')} ({new_state.get('confidence')})")
        return False
    return True


def _settle_race(
    run: Runner, repo: str, number: int, login: str, created: str, new_state: dict[str, Any], body_file: str, write: Callable[[list[str]], str], out: Outcome
) -> None:
    """After posting: when another run posted too, keep the older comment (with the surer reply) and delete ours."""
    m = _COMMENT_URL_RE.search(created or "")
    mine = bot_replies(list_comments(run, repo, number), login)
    if m is None or len(mine) < 2:
        return
    ours = int(m.group(1))
    keep = mine[0]
    if int(keep["id"]) == ours:
        return  # ours is the older one: the other run deletes its own
    if supersedes(new_state, reply_state(keep.get("body"))):
        write(["api", "-X", "PATCH", f"repos/{repo}/issues/comments/{keep['id']}", "-F", f"body=@{body_file}"])
    write(["api", "-X", "DELETE", f"repos/{repo}/issues/comments/{ours}"])
    out.notes.append(f"raced: another run posted comment {keep['id']} first; ours ({ours}) deleted")


def _bot_label_names(prefix: str) -> set[str]:
    from oomdoctor.inference.classes import load

    return {f"{prefix}needs-log"} | {f"{prefix}{name}" for name in load().classes}


def _sync_labels(
    reply: dict[str, Any],
    old_state: dict[str, Any] | None,
    event: dict[str, Any] | None,
    repo: str,
    number: int,
    run: Runner,
    write: Callable[[list[str]], str],
    out: Outcome,
    create_labels: bool,
    prefix: str,
) -> None:
    """The issue's labels follow the reply: the bot's stale ones off, the current ones on (created if missing)."""
    wanted = [str(x) for x in reply.get("labels") or []]
    issue = (event or {}).get("issue") or {}
    on_issue = {str(lb.get("name")) for lb in issue.get("labels") or [] if isinstance(lb, dict)}
    if old_state is None:
        ours: set[str] = set()  # no earlier reply: a maintainer's oom:* labels are theirs
    elif isinstance(old_state.get("labels"), list):
        ours = {str(x) for x in old_state["labels"]}
    else:
        ours = _bot_label_names(prefix)  # a reply from before the state: any of the bot's label names
    stale = sorted((ours & on_issue if event is not None else ours) - set(wanted))
    if stale:
        write(["issue", "edit", str(number), "--repo", repo, "--remove-label", ",".join(stale)])
    add = [lb for lb in wanted if lb not in on_issue]
    if not add:
        return
    exists = set(run(["api", f"repos/{repo}/labels", "--paginate", "--jq", ".[].name"]).splitlines())
    usable = []
    for label in add:
        if label in exists:
            usable.append(label)
            continue
        if not create_labels:
            out.notes.append(f"label {label!r} does not exist in {repo}: skipped (create it, or set create-labels)")
            continue
        try:
            write(["label", "create", label, "--repo", repo, "--color", LABEL_COLOR, "--description", "oomdoctor triage"])
            usable.append(label)
        except RuntimeError as exc:
            out.notes.append(f"label {label!r} could not be created: skipped ({exc})")
    if usable:
        write(["issue", "edit", str(number), "--repo", repo, "--add-label", ",".join(usable)])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m oomdoctor.commands.github_reply", description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--reply", help="the JSON that `oomdoctor triage --format json` wrote")
    ap.add_argument("--event", required=True, help="the GitHub event payload ($GITHUB_EVENT_PATH)")
    ap.add_argument("--fetch-comments", metavar="PATH", help="write the issue's comments (one JSON array) to PATH for `oomdoctor triage --comments`, and exit")
    ap.add_argument("--gh", default="gh", help="the gh executable")
    ap.add_argument("--bot-login", default="", help=f"the login of the bot's comments (default: the token's user from `gh api user`, else {ACTIONS_BOT})")
    ap.add_argument("--dry-run", action="store_true", help="print the writing gh calls instead of making them")
    ap.add_argument("--apply-labels", action="store_true", help="make the issue's labels follow the reply")
    ap.add_argument("--no-create-labels", action="store_true", help="skip (with a note) labels the repository lacks instead of creating them")
    ap.add_argument("--label-prefix", default="oom:", help="prefix of the bot's labels (for replies from before the marker's state)")
    args = ap.parse_args(argv)
    run = _gh(args.gh)
    try:
        with open(args.event, encoding="utf-8") as fh:
            event = json.load(fh)
        repo, number = _event_target(event)
        if args.fetch_comments:
            issue = event.get("issue") or {}
            comments = [] if issue.get("pull_request") is not None else list_comments(run, repo, number)
            with open(args.fetch_comments, "w", encoding="utf-8") as fh:
                json.dump(comments, fh)
            return 0
        if not args.reply:
            ap.error("--reply is required unless --fetch-comments is given")
        with open(args.reply, encoding="utf-8") as fh:
            reply = json.load(fh)
        quiet = reply.get("ignored") or reply.get("kind") == "silent" or (event.get("issue") or {}).get("pull_request") is not None
        login = (args.bot_login or ACTIONS_BOT) if quiet else bot_login(run, args.bot_login)  # nothing to post: no gh call at all
        done = post(
            reply,
            repo,
            number,
            run,
            dry_run=args.dry_run,
            apply_labels=args.apply_labels,
            login=login,
            event=event,
            create_labels=not args.no_create_labels,
            label_prefix=args.label_prefix,
        )
    except (OSError, ValueError, RuntimeError) as exc:
        print(f"oomdoctor: error: {exc}", file=sys.stderr)
        return 1
    for c in done.calls:
        # The calls name files and ids, never the reply's text.
        print(("would run: gh " if args.dry_run else "ran: gh ") + " ".join(c))
    for note in done.notes:
        print(f"oomdoctor: {note}")
    if not done.calls and not done.notes:
        print(f"oomdoctor: no reply ({reply.get('kind')})")
    return 0


__all__ = ["MARKER", "Outcome", "bot_login", "existing_reply", "list_comments", "main", "post"]


if __name__ == "__main__":
    sys.exit(main())

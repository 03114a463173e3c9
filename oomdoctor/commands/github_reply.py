"""Post or update oomdoctor's triage reply on a GitHub issue with the `gh` CLI (used by action.yml).

One reply per issue: the reply carries a hidden marker, and a later run (the issue edited, a comment
added) edits that comment instead of adding a second one. The reply's text travels in a file
(`--body-file`, `-F body=@file`), never on a command line, and nothing from the issue is ever run.

    python -m oomdoctor.commands.github_reply --reply triage.json --event "$GITHUB_EVENT_PATH" [--dry-run] [--apply-labels]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from oomdoctor.commands.triage import MARKER

if TYPE_CHECKING:
    from typing import Any

Runner = Callable[[Sequence[str]], str]


def _gh(gh: str) -> Runner:
    def run(args: Sequence[str]) -> str:
        done = subprocess.run([gh, *args], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"gh {' '.join(args[:2])} failed ({done.returncode}): {done.stderr.strip()[:300]}")
        return done.stdout

    return run


def existing_reply(run: Runner, repo: str, number: int) -> int | None:
    """The id of oomdoctor's earlier reply on this issue, if any (found by its marker)."""
    out = run(["api", f"repos/{repo}/issues/{number}/comments", "--paginate", "--jq", f'.[] | select(.body | contains("{MARKER}")) | .id'])
    ids = [int(x) for x in out.split() if x.strip().isdigit()]
    return ids[0] if ids else None


def post(reply: dict[str, Any], repo: str, number: int, run: Runner, *, dry_run: bool = False, apply_labels: bool = False) -> list[list[str]]:
    """Create or edit the reply (and optionally add the suggested labels); return the gh calls made."""
    calls: list[list[str]] = []
    if reply.get("kind") == "silent" or not reply.get("reply"):
        return calls
    with tempfile.NamedTemporaryFile("w", suffix=".md", delete=False, encoding="utf-8") as fh:
        fh.write(reply["reply"])
        body_file = fh.name
    try:
        comment = existing_reply(run, repo, number)
        if comment is not None:
            call = ["api", "-X", "PATCH", f"repos/{repo}/issues/comments/{comment}", "-F", f"body=@{body_file}"]
        else:
            call = ["issue", "comment", str(number), "--repo", repo, "--body-file", body_file]
        calls.append(call)
        labels = [str(x) for x in reply.get("labels") or []]
        if apply_labels and labels:
            calls.append(["issue", "edit", str(number), "--repo", repo, "--add-label", ",".join(labels)])
        if not dry_run:
            for c in calls:
                run(c)
    finally:
        os.unlink(body_file)
    return calls


def _target(event: dict[str, Any]) -> tuple[str, int]:
    repo = (event.get("repository") or {}).get("full_name")
    number = (event.get("issue") or {}).get("number")
    if not isinstance(repo, str) or not isinstance(number, int):
        raise ValueError("the event has no repository.full_name or issue.number")
    return repo, number


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m oomdoctor.commands.github_reply", description=__doc__.splitlines()[0])
    ap.add_argument("--reply", required=True, help="the JSON that `oomdoctor triage --format json` wrote")
    ap.add_argument("--event", required=True, help="the GitHub event payload ($GITHUB_EVENT_PATH)")
    ap.add_argument("--gh", default="gh", help="the gh executable")
    ap.add_argument("--dry-run", action="store_true", help="print the gh calls instead of making them")
    ap.add_argument("--apply-labels", action="store_true", help="also add the suggested labels")
    args = ap.parse_args(argv)
    try:
        with open(args.reply, encoding="utf-8") as fh:
            reply = json.load(fh)
        with open(args.event, encoding="utf-8") as fh:
            repo, number = _target(json.load(fh))
        calls = post(reply, repo, number, _gh(args.gh), dry_run=args.dry_run, apply_labels=args.apply_labels)
    except (OSError, ValueError, RuntimeError) as exc:
        print(f"oomdoctor: error: {exc}", file=sys.stderr)
        return 1
    kind = reply.get("kind")
    for c in calls:
        # The calls name files and ids, never the reply's text.
        print(("would run: gh " if args.dry_run else "ran: gh ") + " ".join(c))
    if not calls:
        print(f"oomdoctor: no reply ({kind})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

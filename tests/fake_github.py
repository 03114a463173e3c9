"""A fake `gh` for the triage bot: one issue's comments and labels, answering the calls github_reply makes.

Used in-process as a github_reply Runner (``FakeGitHub(...)(args)``), and as a `gh` executable for the
Action's scripts (``python3 fake_github.py ARGS``, state in $FAKE_GH_STATE, one JSON line a call in
$FAKE_GH_LOG with the body file's text).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ACTIONS_BOT = "github-actions[bot]"
WRITES = (("api", "-X"), ("issue", "comment"), ("issue", "edit"), ("label", "create"))


class FakeGitHub:
    def __init__(
        self,
        comments: list[dict[str, Any]] | None = None,
        user: str | None = None,
        repo_labels: Sequence[str] = (),
        issue_labels: Sequence[str] = (),
        can_create_labels: bool = True,
        next_id: int = 9000,
        page_size: int = 2,
    ):
        self.comments = [dict(c) for c in comments or []]
        self.user = user  # None: GITHUB_TOKEN, which has no user; its comments are github-actions[bot]'s
        self.repo_labels = list(repo_labels)
        self.issue_labels = list(issue_labels)
        self.can_create_labels = can_create_labels
        self.next_id = next_id
        self.page_size = page_size
        self.calls: list[list[str]] = []
        self.bodies: dict[int, str] = {}  # call index -> the body file's text
        self.on_list: Callable[[FakeGitHub], object] | None = None  # once, right after a read of the thread: another run

    @property
    def actor(self) -> str:
        return self.user or ACTIONS_BOT

    def writes(self) -> list[list[str]]:
        return [c for c in self.calls if tuple(c[:2]) in WRITES]

    def add_comment(self, body: str, login: str) -> int:
        cid = self.next_id
        self.next_id += 1
        self.comments.append({"id": cid, "body": body, "user": {"login": login}, "html_url": f"https://github.com/octo/engine/issues/7#issuecomment-{cid}"})
        return cid

    def _comment(self, cid: int) -> dict[str, Any] | None:
        return next((c for c in self.comments if c["id"] == cid), None)

    def __call__(self, args: Sequence[str]) -> str:
        args = list(args)
        self.calls.append(args)
        body = None
        for i, a in enumerate(args):
            if a == "--body-file":
                body = Path(args[i + 1]).read_text(encoding="utf-8")
            elif a.startswith("body=@"):
                body = Path(a[6:]).read_text(encoding="utf-8")
        if body is not None:
            self.bodies[len(self.calls) - 1] = body
        if args[:2] == ["api", "user"]:
            if self.user is None:
                raise RuntimeError("gh api user failed (1): HTTP 403: Resource not accessible by integration")
            return self.user + "\n"
        if args[0] == "api" and args[1] != "-X" and args[1].endswith("/comments"):
            pages = [self.comments[i : i + self.page_size] for i in range(0, len(self.comments), self.page_size)] or [[]]
            listed = "".join(json.dumps(p) for p in pages) + "\n"  # gh --paginate: one array a page
            if self.on_list is not None:  # something happens right after this read
                hook, self.on_list = self.on_list, None
                hook(self)
            return listed
        if args[0] == "api" and "/issues/comments/" in args[1]:
            c = self._comment(int(args[1].rsplit("/", 1)[1]))
            if c is None:
                raise RuntimeError("gh api repos failed (1): gh: Not Found (HTTP 404)")
            return json.dumps(c)
        if args[:2] == ["api", "-X"]:
            method, path = args[2], args[3]
            cid = int(path.rsplit("/", 1)[1])
            c = self._comment(cid)
            if c is None:
                raise RuntimeError(f"gh api -X failed (1): gh: Not Found (HTTP 404) {path}")
            if method == "PATCH":
                c["body"] = body
            elif method == "DELETE":
                self.comments.remove(c)
            return "{}"
        if args[0] == "api" and args[1].endswith("/labels"):
            return "".join(f"{name}\n" for name in self.repo_labels)
        if args[:2] == ["issue", "comment"]:
            assert body is not None
            cid = self.add_comment(body, self.actor)
            return f"https://github.com/octo/engine/issues/{args[2]}#issuecomment-{cid}\n"
        if args[:2] == ["label", "create"]:
            if not self.can_create_labels:
                raise RuntimeError("gh label create failed (1): HTTP 403: Resource not accessible by integration")
            self.repo_labels.append(args[2])
            return ""
        if args[:2] == ["issue", "edit"]:
            self._edit_labels(args)
            return ""
        raise RuntimeError(f"fake gh: unexpected call {args}")

    def _edit_labels(self, args: list[str]) -> None:
        for i, a in enumerate(args):
            if a == "--add-label":
                for name in args[i + 1].split(","):
                    if name not in self.repo_labels:
                        raise RuntimeError(f"gh issue edit failed (1): '{name}' not found")
                    if name not in self.issue_labels:
                        self.issue_labels.append(name)
            if a == "--remove-label":
                self.issue_labels = [x for x in self.issue_labels if x not in args[i + 1].split(",")]

    # --- the executable's state -------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {
            "comments": self.comments,
            "user": self.user,
            "repo_labels": self.repo_labels,
            "issue_labels": self.issue_labels,
            "can_create_labels": self.can_create_labels,
            "next_id": self.next_id,
        }


def main(argv: list[str]) -> int:
    path = os.environ["FAKE_GH_STATE"]
    with open(path, encoding="utf-8") as fh:
        gh = FakeGitHub(**json.load(fh))
    try:
        out = gh(argv)
        code = 0
    except RuntimeError as exc:
        out, code = "", 1
        print(str(exc), file=sys.stderr)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(gh.state(), fh)
    with open(os.environ["FAKE_GH_LOG"], "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"args": argv, **({"body": gh.bodies[0]} if 0 in gh.bodies else {}), "rc": code}) + "\n")
    sys.stdout.write(out)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The triage bot (oomdoctor.commands.github_reply with `oomdoctor triage`) on recorded event payloads
(tests/fixtures/triage-events/) against a fake GitHub: the gh calls it makes, the reply, the labels."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from fake_github import ACTIONS_BOT, FakeGitHub

from oomdoctor.commands import github_reply, triage

from conftest import FIXTURES

EVENTS = FIXTURES / "triage-events"
BOT = "oomdoctor-bot"


def event(name: str) -> dict[str, Any]:
    return json.loads((EVENTS / name).read_text())


def opened_8() -> dict[str, Any]:
    """Issue 8 as opened: the body says it ran out of memory; the log comes later, in a comment."""
    ev = event("issue-comment-evidence.json")
    del ev["comment"]
    ev["action"], ev["issue"]["comments"] = "opened", 0
    return ev


def thread(gh: FakeGitHub, ev: dict[str, Any]) -> None:
    """What GitHub has when the event fires: the event's new comment is already in the thread."""
    c = ev.get("comment")
    if c and not any(x["id"] == c["id"] for x in gh.comments):
        gh.comments.append(copy.deepcopy(c))


def triage_reply(run_cli, tmp_path: Path, ev: dict[str, Any], comments: list[dict[str, Any]] | None) -> dict[str, Any]:
    path = tmp_path / "event.json"
    path.write_text(json.dumps(ev))
    args = ["triage", "--event", str(path), "--format", "json"]
    if comments is not None:
        cpath = tmp_path / "comments.json"
        cpath.write_text(json.dumps(comments))
        args += ["--comments", str(cpath)]
    res = run_cli(*args)
    assert res.code == 0, res.err
    return res.json


def act(run_cli, tmp_path: Path, gh: FakeGitHub, ev: dict[str, Any], login: str | None = BOT, **kw: Any) -> tuple[dict[str, Any], github_reply.Outcome]:
    """One run of the Action: read the thread, triage it, post. Returns the reply JSON and what was done."""
    thread(gh, ev)
    ev = copy.deepcopy(ev)
    ev["issue"]["labels"] = [{"name": n} for n in gh.issue_labels]  # GitHub sends the labels as they are now
    repo, number = ev["repository"]["full_name"], ev["issue"]["number"]
    comments = [] if ev["issue"].get("pull_request") else github_reply.list_comments(gh, repo, number)
    reply = triage_reply(run_cli, tmp_path, ev, comments)
    done = github_reply.post(reply, repo, number, gh, login=github_reply.bot_login(gh, login), event=ev, apply_labels=True, **kw)
    return reply, done


def bot_comments(gh: FakeGitHub, login: str = BOT) -> list[dict[str, Any]]:
    return [c for c in gh.comments if c["user"]["login"] == login and triage.is_reply(c["body"])]


def new_gh(**kw: Any) -> FakeGitHub:
    return FakeGitHub(user=BOT, **kw)


# --- 1. the whole thread, and replies replaced only by surer ones ------------------------------------
def test_the_log_in_a_comment_turns_the_ask_into_an_answer_on_the_same_comment(run_cli, tmp_path: Path) -> None:
    gh = new_gh()
    reply, _ = act(run_cli, tmp_path, gh, opened_8())
    assert reply["kind"] == "ask" and reply["labels"] == ["oom:needs-log"]
    (ask,) = bot_comments(gh)
    reply, done = act(run_cli, tmp_path, gh, event("issue-comment-evidence.json"))
    assert reply["kind"] == "answer" and reply["class"] == "startup_kv"
    (answer,) = bot_comments(gh)
    assert answer["id"] == ask["id"] and "--mem-fraction-static 0.85" in answer["body"]
    assert ["api", "-X", "PATCH", f"repos/octo/engine/issues/comments/{ask['id']}"] == done.calls[0][:4]
    assert triage.reply_state(answer["body"])["kind"] == "answer"


@pytest.mark.parametrize("later", ["issue-comment-no-evidence.json", "issue-comment-thanks.json"])
def test_a_comment_without_evidence_changes_nothing(run_cli, tmp_path: Path, later: str) -> None:
    gh = new_gh()
    act(run_cli, tmp_path, gh, opened_8())
    act(run_cli, tmp_path, gh, event("issue-comment-evidence.json"))
    before = copy.deepcopy(gh.comments), list(gh.issue_labels)
    n = len(gh.writes())
    reply, done = act(run_cli, tmp_path, gh, event(later))
    # The whole thread still holds the log: the reply computed is the same answer, and nothing is written.
    assert reply["kind"] == "answer" and reply["comment_evidence"] is False
    assert done.calls == [] and len(gh.writes()) == n
    assert [c for c in gh.comments if c["id"] != event(later)["comment"]["id"]] == before[0] and gh.issue_labels == before[1]
    assert any("no new evidence" in note for note in done.notes)


def test_a_comment_without_evidence_posts_no_first_reply(run_cli, tmp_path: Path) -> None:
    gh = new_gh(comments=json.loads((EVENTS / "issue-8.comments.json").read_text()))  # the bot was not installed yet
    reply, done = act(run_cli, tmp_path, gh, event("issue-comment-thanks.json"))
    assert reply["kind"] == "answer" and done.calls == [] and bot_comments(gh) == []


def test_the_event_alone_would_have_asked_for_the_log_already_posted(run_cli, tmp_path: Path) -> None:
    """Why the thread is read: the issue_comment payload carries only the body and "Any update?"."""
    alone = triage_reply(run_cli, tmp_path, event("issue-comment-no-evidence.json"), None)
    assert alone["kind"] == "ask"
    whole = triage_reply(run_cli, tmp_path, event("issue-comment-no-evidence.json"), json.loads((EVENTS / "issue-8.comments.json").read_text()))
    assert whole["kind"] == "answer" and whole["class"] == "startup_kv"


def test_an_edit_that_changes_only_prose_changes_nothing_and_new_evidence_edits_in_place(run_cli, tmp_path: Path) -> None:
    gh = new_gh()
    act(run_cli, tmp_path, gh, event("issues-opened.json"))
    (first,) = bot_comments(gh)
    _, done = act(run_cli, tmp_path, gh, event("issues-edited.json"))
    assert done.calls == []
    ev = event("issues-edited.json")
    ev["issue"]["body"] = ev["issue"]["body"].replace("avail mem=47.61 GB, mem usage=30.71 GB", "avail mem=47.60 GB, mem usage=30.72 GB")
    _, done = act(run_cli, tmp_path, gh, ev)
    (now,) = bot_comments(gh)
    assert now["id"] == first["id"] and [c[:3] for c in done.calls] == [["api", "-X", "PATCH"]]
    assert not [c for c in gh.writes() if c[:2] == ["issue", "comment"]][1:]


def _state_reply(kind: str, confidence: float, klass: str, evidence: str, labels: list[str]) -> dict[str, Any]:
    r = triage.Reply(kind, body="**oomdoctor**: test", klass=klass, confidence=confidence, labels=labels, evidence=evidence)
    r.body = triage.marker_line(r) + "\n" + r.body
    return r.to_json()


def test_an_answer_is_replaced_only_by_one_at_least_as_sure(tmp_path: Path) -> None:
    answer = _state_reply("answer", 0.9, "startup_kv", "aaa", ["oom:startup_kv"])
    gh = new_gh(comments=[{"id": 1, "body": answer["reply"], "user": {"login": BOT}}])
    ev = event("issues-edited.json")
    for weaker in (_state_reply("ask", 0.95, "startup_kv", "bbb", ["oom:needs-log"]), _state_reply("answer", 0.8, "cuda_graph", "bbb", ["oom:cuda_graph"])):
        done = github_reply.post(weaker, "octo/engine", 7, gh, login=BOT, event=ev, apply_labels=True)
        assert done.calls == [] and gh.comments[0]["body"] == answer["reply"]
        assert "at least as sure" in done.notes[0]
    surer = _state_reply("answer", 0.95, "cuda_graph", "bbb", ["oom:cuda_graph"])
    done = github_reply.post(surer, "octo/engine", 7, gh, login=BOT, event=ev)
    assert [c[:4] for c in done.calls] == [["api", "-X", "PATCH", "repos/octo/engine/issues/comments/1"]]
    assert gh.comments[0]["body"] == surer["reply"]


def test_supersedes() -> None:
    answer = {"kind": "answer", "confidence": 0.9, "evidence": "a"}
    assert not triage.supersedes({"kind": "ask", "confidence": 0.99, "evidence": "b"}, answer)
    assert not triage.supersedes({"kind": "answer", "confidence": 0.95, "evidence": "a"}, answer)  # same evidence
    assert triage.supersedes({"kind": "answer", "confidence": 0.9, "evidence": "b"}, answer)
    assert triage.supersedes({"kind": "answer", "confidence": 0.7, "evidence": "b"}, {"kind": "ask", "confidence": 0.8, "evidence": "a"})
    assert triage.supersedes({"kind": "ask", "confidence": 0.3}, {})  # a reply from before the state
    assert not triage.supersedes({"kind": "silent"}, None)


# --- 2. the marker alone is not the bot --------------------------------------------------------------
def test_a_marker_posted_by_someone_else_is_never_edited_nor_read(run_cli, tmp_path: Path) -> None:
    gh = new_gh()
    ev = event("issue-comment-marker-by-other.json")
    reply, done = act(run_cli, tmp_path, gh, ev)
    assert reply["kind"] == "silent" and reply["ignored"] and done.calls == []  # mallory's comment triggers nothing
    # The next real event: the bot posts its own reply and leaves mallory's comment alone.
    reply, done = act(run_cli, tmp_path, gh, event("issues-edited.json"))
    assert reply["kind"] == "answer" and reply["class"] == "startup_kv"  # her "class none" marker is no evidence
    mallory = next(c for c in gh.comments if c["user"]["login"] == "mallory")
    assert mallory["body"] == ev["comment"]["body"]
    assert not [c for c in gh.writes() if str(mallory["id"]) in " ".join(c)]
    assert done.calls[0][:2] == ["issue", "comment"] and len(bot_comments(gh)) == 1


def test_the_bot_login_defaults(tmp_path: Path) -> None:
    assert github_reply.bot_login(FakeGitHub(user=None)) == ACTIONS_BOT  # GITHUB_TOKEN: gh api user fails
    assert github_reply.bot_login(FakeGitHub(user="my-bot")) == "my-bot"
    gh = FakeGitHub(user="my-bot")
    assert github_reply.bot_login(gh, "app[bot]") == "app[bot]" and gh.calls == []


def test_with_github_token_the_replies_of_github_actions_bot_are_the_bots(run_cli, tmp_path: Path) -> None:
    gh = FakeGitHub(user=None)
    act(run_cli, tmp_path, gh, opened_8(), login=None)
    act(run_cli, tmp_path, gh, event("issue-comment-evidence.json"), login=None)
    (reply,) = bot_comments(gh, ACTIONS_BOT)
    assert "startup_kv" in reply["body"]


def test_the_bots_own_comment_triggers_nothing(run_cli, tmp_path: Path) -> None:
    gh = new_gh()
    act(run_cli, tmp_path, gh, event("issues-opened.json"))
    (mine,) = bot_comments(gh)
    ev = event("issue-comment-thanks.json")
    ev["issue"]["number"], ev["comment"] = 7, {**mine}
    _, done = act(run_cli, tmp_path, gh, ev)
    assert done.calls == [] and "oomdoctor's own" in done.notes[0]


# --- 3. labels follow the reply ------------------------------------------------------------------------
def test_labels_follow_the_reply_and_missing_ones_are_created(run_cli, tmp_path: Path) -> None:
    gh = new_gh(repo_labels=["bug", "oom:needs-log"], issue_labels=["bug"])
    act(run_cli, tmp_path, gh, opened_8())
    assert gh.issue_labels == ["bug", "oom:needs-log"]
    _, done = act(run_cli, tmp_path, gh, event("issue-comment-evidence.json"))
    assert gh.issue_labels == ["bug", "oom:startup_kv"]  # the stale needs-log off, the maintainer's "bug" kept
    assert ["issue", "edit", "8", "--repo", "octo/engine", "--remove-label", "oom:needs-log"] in done.calls
    assert next(c for c in done.calls if c[0] == "label")[:3] == ["label", "create", "oom:startup_kv"]


def test_a_first_reply_leaves_a_maintainers_labels_and_an_older_reply_loses_its_stale_ones(tmp_path: Path) -> None:
    answer = _state_reply("answer", 0.9, "startup_kv", "b", ["oom:startup_kv"])
    gh = new_gh(repo_labels=["oom:needs-log", "oom:startup_kv"], issue_labels=["oom:needs-log"])
    ev = event("issues-opened.json")
    ev["issue"]["labels"] = [{"name": "oom:needs-log"}]
    github_reply.post(answer, "octo/engine", 7, gh, login=BOT, event=ev, apply_labels=True)
    assert gh.issue_labels == ["oom:needs-log", "oom:startup_kv"]  # set by a maintainer, not by the bot
    legacy = "<!-- oomdoctor-triage -->\n**oomdoctor**: an older reply"
    gh = new_gh(comments=[{"id": 1, "body": legacy, "user": {"login": BOT}}], repo_labels=["oom:needs-log", "oom:startup_kv"], issue_labels=["oom:needs-log", "bug"])
    ev["issue"]["labels"] = [{"name": "oom:needs-log"}, {"name": "bug"}]
    github_reply.post(answer, "octo/engine", 7, gh, login=BOT, event=ev, apply_labels=True)
    assert gh.issue_labels == ["bug", "oom:startup_kv"] and gh.comments[0]["body"] == answer["reply"]


def test_a_label_that_cannot_be_created_is_skipped_with_a_note(run_cli, tmp_path: Path) -> None:
    gh = new_gh(can_create_labels=False)
    _, done = act(run_cli, tmp_path, gh, event("issues-opened.json"))
    assert len(bot_comments(gh)) == 1 and gh.issue_labels == []
    assert not [c for c in done.calls if c[:2] == ["issue", "edit"]]
    assert any("oom:startup_kv" in n and "skipped" in n for n in done.notes)
    gh = new_gh()
    _, done = act(run_cli, tmp_path, gh, event("issues-opened.json"), create_labels=False)
    assert not [c for c in done.calls if c[0] == "label"] and any("skipped" in n for n in done.notes)


# --- 4. pull requests, races -----------------------------------------------------------------------------
def test_a_pull_request_comment_is_ignored(run_cli, tmp_path: Path) -> None:
    gh = new_gh()
    reply, done = act(run_cli, tmp_path, gh, event("pull-request-comment.json"))
    assert reply["kind"] == "silent" and "pull request" in reply["ignored"]
    assert done.calls == [] and gh.writes() == [] and [c for c in gh.calls if "comments" in " ".join(c)] == []


def test_two_events_at_once_leave_one_reply(run_cli, tmp_path: Path) -> None:
    gh = new_gh()
    ev_a, ev_b = event("race-issues-edited.json"), event("race-issue-comment.json")
    thread(gh, ev_b)
    reply_a = triage_reply(run_cli, tmp_path, ev_a, github_reply.list_comments(gh, "octo/engine", 10))
    reply_b = triage_reply(run_cli, tmp_path, ev_b, github_reply.list_comments(gh, "octo/engine", 10))
    # Run B posts its reply between run A's read of the thread and A's own post.
    gh.on_list = lambda g: github_reply.post(reply_b, "octo/engine", 10, g, login=BOT, event=ev_b)
    done_a = github_reply.post(reply_a, "octo/engine", 10, gh, login=BOT, event=ev_a)
    (kept,) = bot_comments(gh)
    assert kept["body"] in (reply_a["reply"], reply_b["reply"])
    assert any(c[:3] == ["api", "-X", "DELETE"] for c in done_a.calls) and any("raced" in n for n in done_a.notes)
    # A run that leaves duplicates behind (an older version, a crash) has them cleaned up by the next.
    gh.add_comment(kept["body"], BOT)
    github_reply.post(reply_a, "octo/engine", 10, gh, login=BOT, event=ev_a)
    assert [c["id"] for c in bot_comments(gh)] == [kept["id"]]


def test_a_duplicate_another_run_deleted_first_is_no_error(tmp_path: Path) -> None:
    answer = _state_reply("answer", 0.9, "startup_kv", "a", [])
    gh = new_gh(comments=[{"id": 1, "body": answer["reply"], "user": {"login": BOT}}, {"id": 2, "body": answer["reply"], "user": {"login": BOT}}])
    gh.on_list = lambda g: g.comments.pop()  # the other run removes the duplicate right after our read
    done = github_reply.post(answer, "octo/engine", 7, gh, login=BOT, event=event("issues-edited.json"))
    assert ["api", "-X", "DELETE", "repos/octo/engine/issues/comments/2"] in done.calls and [c["id"] for c in gh.comments] == [1]


def test_the_reply_is_read_again_right_before_an_edit(tmp_path: Path) -> None:
    old = _state_reply("ask", 0.3, "unknown_oom", "aaa", ["oom:needs-log"])
    gh = new_gh(comments=[{"id": 1, "body": old["reply"], "user": {"login": BOT}}])
    ours = _state_reply("answer", 0.8, "startup_kv", "bbb", ["oom:startup_kv"])
    surer = _state_reply("answer", 0.95, "startup_kv", "ccc", ["oom:startup_kv"])

    def other_run(g: FakeGitHub) -> None:
        g.comments[0]["body"] = surer["reply"]  # another run edits it after our read of the thread

    gh.on_list = other_run
    done = github_reply.post(ours, "octo/engine", 7, gh, login=BOT, event=event("issues-edited.json"))
    # Our read saw the ask (ours would replace it); the re-read sees the surer answer: no edit.
    assert gh.comments[0]["body"] == surer["reply"] and done.calls == []
    assert ["api", "repos/octo/engine/issues/comments/1"] in gh.calls


def test_a_reply_deleted_meanwhile_is_posted_anew_once(tmp_path: Path) -> None:
    old = _state_reply("ask", 0.3, "unknown_oom", "aaa", [])
    gh = new_gh(comments=[{"id": 1, "body": old["reply"], "user": {"login": BOT}}])
    gh.on_list = lambda g: g.comments.clear()
    ours = _state_reply("answer", 0.8, "startup_kv", "bbb", [])
    done = github_reply.post(ours, "octo/engine", 7, gh, login=BOT, event=event("issues-edited.json"))
    assert [c[:2] for c in done.calls] == [["issue", "comment"]] and len(bot_comments(gh)) == 1


def test_main_dry_run_and_fetch_comments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    gh = new_gh(comments=[{"id": 5, "body": "hello", "user": {"login": "bob"}}, {"id": 6, "body": "more", "user": {"login": "bob"}}, {"id": 7, "body": "x", "user": {"login": "bob"}}])
    monkeypatch.setattr(github_reply, "_gh", lambda _exe: gh)
    out = tmp_path / "comments.json"
    assert github_reply.main(["--event", str(EVENTS / "issues-opened.json"), "--fetch-comments", str(out)]) == 0
    assert [c["id"] for c in json.loads(out.read_text())] == [5, 6, 7]  # two pages joined
    pr = tmp_path / "pr.json"
    assert github_reply.main(["--event", str(EVENTS / "pull-request-comment.json"), "--fetch-comments", str(pr)]) == 0
    assert json.loads(pr.read_text()) == []
    reply = tmp_path / "reply.json"
    reply.write_text(json.dumps(_state_reply("answer", 0.9, "startup_kv", "a", ["oom:startup_kv"])))
    assert github_reply.main(["--reply", str(reply), "--event", str(EVENTS / "issues-opened.json"), "--dry-run", "--apply-labels"]) == 0
    printed = capsys.readouterr().out
    assert "would run: gh issue comment 7 --repo octo/engine --body-file" in printed and "would run: gh label create oom:startup_kv" in printed
    assert gh.writes() == [] and len(gh.comments) == 3

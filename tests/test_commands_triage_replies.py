"""oomdoctor triage and the GitHub Action, offline: recorded event payloads and a fake `gh` on PATH."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from oomdoctor.base.toml_data import tomllib
from oomdoctor.commands import triage

from conftest import FIXTURES, REPO

ISSUES = FIXTURES / "issues"
BODY = FIXTURES / "issue-body" / "startup_kv_details_flags_in_prose.md"
SECRET = "hf_" + "Zq9" * 12  # a Hugging Face token form the redaction knows
UPDATE = os.environ.get("OOMDOCTOR_UPDATE_SNAPSHOTS") == "1"

FAKE_GH = Path(__file__).resolve().parent / "fake_github.py"  # a stateful fake GitHub behind `gh`


def _event(action: str, body: str, title: str = "OOM at startup", kind: str = "issues") -> dict:
    issue = {"number": 7, "title": title, "body": body, "user": {"login": "someone"}}
    event = {"action": action, "issue": issue, "repository": {"full_name": "octo/engine"}}
    if kind == "issue_comment":
        event["comment"] = {"body": body, "id": 99}
        issue["body"] = "It crashes, log in the next comment."
    return event


def _action_steps() -> list[str]:
    """The `run:` scripts of action.yml, in order (the install step is skipped: the package is installed)."""
    text = (REPO / "action.yml").read_text()
    blocks = re.findall(r"\n      run: \|\n((?:        .*\n|\n)+)", text)
    return [textwrap.dedent(b) for b in blocks]


def _run_action(tmp_path: Path, event: dict, dry_run: bool = False, user: str | None = "oomdoctor-bot") -> list[dict]:
    """Run action.yml's scripts against the fake GitHub; its state (comments, labels) lasts for the test."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    gh = bindir / "gh"
    gh.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_GH}" "$@"\n')
    gh.chmod(0o755)
    (bindir / "python3").symlink_to(sys.executable) if not (bindir / "python3").exists() else None
    state = tmp_path / "gh-state.json"
    if not state.exists():
        state.write_text(json.dumps({"user": user}))
    log = tmp_path / "gh.log"
    log.write_text("")
    event_path = tmp_path / "event.json"
    event = json.loads(json.dumps(event))
    event["issue"]["labels"] = [{"name": n} for n in json.loads(state.read_text()).get("issue_labels", [])]
    event_path.write_text(json.dumps(event))
    out = tmp_path / "github_output"
    out.write_text("")
    env = {
        **os.environ,
        "PATH": f"{bindir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
        "GITHUB_EVENT_PATH": str(event_path),
        "RUNNER_TEMP": str(tmp_path),
        "GITHUB_OUTPUT": str(out),
        "THRESHOLD": "0.7",
        "LABEL_PREFIX": "oom:",
        "GH_TOKEN": "ghs_" + "x" * 36,
        "DRY_RUN": "true" if dry_run else "false",
        "APPLY_LABELS": "true",
        "CREATE_LABELS": "true",
        "BOT_LOGIN": "",
        "FAKE_GH_LOG": str(log),
        "FAKE_GH_STATE": str(state),
    }
    for script in _action_steps():
        subprocess.run(["bash", "-c", script], env=env, check=True, capture_output=True, text=True, timeout=120)
    assert out.read_text().startswith("kind=")
    return [json.loads(line) for line in log.read_text().splitlines()]


def _state(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "gh-state.json").read_text())


def _log_body(secret: str = "") -> str:
    text = BODY.read_text()
    return text.replace("Launch command:", f"Launch command (token {secret}):") if secret else text


def test_action_creates_one_reply_on_opened_and_edits_it_on_edited(tmp_path: Path) -> None:
    calls = _run_action(tmp_path, _event("opened", _log_body(SECRET)))
    created = [c for c in calls if c["args"][:2] == ["issue", "comment"]]
    assert len(created) == 1 and created[0]["args"][2:4] == ["7", "--repo"]
    assert triage.MARKER in created[0]["body"] and "startup_kv" in created[0]["body"]
    assert "--mem-fraction-static 0.85" in created[0]["body"]
    labels = [c for c in calls if c["args"][:2] == ["issue", "edit"]]
    assert labels and labels[0]["args"][-1] == "oom:startup_kv"
    assert ["api", "user", "--jq", ".login"] in [c["args"] for c in calls]
    # No secret from the body in any call or in the reply; the reply's text never on a command line.
    assert all(SECRET not in json.dumps(c) for c in calls)
    assert all("this looks like" not in " ".join(c["args"]) for c in calls)
    (reply,) = _state(tmp_path)["comments"]

    # An edit that changes only prose changes nothing; one that changes the log edits the same comment.
    same = _run_action(tmp_path, _event("edited", _log_body(SECRET) + "\nEdited: typo.\n"))
    assert not [c for c in same if c["args"][:2] == ["issue", "comment"] or c["args"][:2] == ["api", "-X"]]
    edited = _run_action(tmp_path, _event("edited", _log_body(SECRET).replace("mem usage=30.71 GB", "mem usage=30.70 GB")))
    patch = [c for c in edited if c["args"][:3] == ["api", "-X", "PATCH"]]
    assert len(patch) == 1 and patch[0]["args"][3] == f"repos/octo/engine/issues/comments/{reply['id']}"
    assert not [c for c in edited if c["args"][:2] == ["issue", "comment"]]
    assert [c["id"] for c in _state(tmp_path)["comments"]] == [reply["id"]]


def test_action_never_edits_a_marker_comment_by_someone_else(tmp_path: Path) -> None:
    (tmp_path / "gh-state.json").write_text(json.dumps({"user": None, "comments": [{"id": 55, "body": triage.MARKER + " -->\nnot a bug", "user": {"login": "mallory"}}]}))
    calls = _run_action(tmp_path, _event("opened", _log_body()))
    assert not [c for c in calls if c["args"][:2] == ["api", "-X"]]
    comments = _state(tmp_path)["comments"]
    assert comments[0]["body"].endswith("not a bug") and comments[1]["user"]["login"] == "github-actions[bot]"


def test_action_stays_silent_on_a_non_oom_issue(tmp_path: Path) -> None:
    body = "### Feature request\n\nCould `--mem-fraction-static` accept a value per GPU? Our cards differ.\n\n```bash\npython -m sglang.launch_server --model-path x --tp 2\n```\n"
    calls = _run_action(tmp_path, _event("opened", body, title="Per-GPU memory fraction"))
    assert not [c for c in calls if c["args"][:2] == ["issue", "comment"] or c["args"][:3] == ["api", "-X", "PATCH"]]


def test_a_comment_adds_the_log_to_the_thread(tmp_path: Path) -> None:
    calls = _run_action(tmp_path, _event("created", _log_body(), kind="issue_comment"))
    assert [c for c in calls if c["args"][:2] == ["issue", "comment"]]


def test_dry_run_makes_no_write_calls(tmp_path: Path) -> None:
    calls = _run_action(tmp_path, _event("opened", _log_body()), dry_run=True)
    assert calls and all(c["args"][0] == "api" and "-X" not in c["args"] for c in calls)
    assert _state(tmp_path).get("comments", []) == []


def test_action_ignores_a_pull_request_comment(tmp_path: Path) -> None:
    event = _event("created", _log_body(), kind="issue_comment")
    event["issue"]["pull_request"] = {"url": "https://api.github.com/repos/octo/engine/pulls/7"}
    calls = _run_action(tmp_path, event)
    assert calls == []


def _issue_json(stem: Path) -> str:
    meta = tomllib.loads(stem.with_suffix(".toml").read_text())
    return json.dumps({"number": 1, "title": meta["title"], "body": stem.with_suffix(".md").read_text()})


@pytest.mark.parametrize("stem", sorted(p.with_suffix("") for p in ISSUES.glob("*.md")), ids=lambda p: p.name)
def test_reply_snapshots_of_real_issue_bodies(run_cli, tmp_path: Path, stem: Path) -> None:
    path = tmp_path / "issue.json"
    path.write_text(_issue_json(stem))
    res = run_cli("triage", str(path), "--format", "json")
    assert res.code == 0
    got = res.json
    # The reply renders on GitHub's subset: no raw HTML outside <details>, <summary> and <sub>; short enough.
    assert len(got["reply"]) < 65_536
    assert not re.findall(r"<(?!/?(?:details|summary|sub)\b)[a-zA-Z/!]", got["reply"].partition("\n")[2])
    if got["reply"]:
        assert triage.reply_state(got["reply"].partition("\n")[0]) == got["state"]
    snap = stem.with_suffix(".reply.json")
    text = json.dumps({k: got[k] for k in ("kind", "class", "labels", "reply")}, indent=2, sort_keys=True) + "\n"
    text = text.replace(f"oomdoctor {got['reply'].split('oomdoctor ')[-1].split(':')[0]}:", "oomdoctor <version>:") if got["reply"] else text
    if UPDATE or not snap.exists():
        snap.write_text(text)
    assert snap.read_text() == text


def test_triage_never_answers_where_the_thread_says_silent() -> None:
    """The worst reply is a confident class on an issue that is not an OOM: none of the silent cases gets one."""
    for toml in ISSUES.glob("*.toml"):
        meta = tomllib.loads(toml.read_text())
        snap = toml.with_suffix(".reply.json")
        if meta["reply"] == "silent" and snap.exists():
            assert json.loads(snap.read_text())["kind"] != "answer", toml.name


def test_summary_over_many_issues(run_cli, tmp_path: Path) -> None:
    jsonl = tmp_path / "issues.jsonl"
    jsonl.write_text("".join(_issue_json(p.with_suffix("")) + "\n" for p in sorted(ISSUES.glob("*.md"))))
    res = run_cli("triage", "--summary", str(jsonl))
    assert res.code == 0
    assert res.out.startswith(f"issues: {len(list(ISSUES.glob('*.md')))}\nanswerable now: ")
    assert "most often missing:" in res.out


def test_usage_errors(run_cli, tmp_path: Path) -> None:
    assert run_cli("triage").code == 2
    assert run_cli("triage", str(BODY), "--event", str(BODY)).code == 2
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "an issue"}')
    assert run_cli("triage", str(bad)).code == 5


def test_the_readme_workflow_orders_runs_per_issue_skips_pull_requests_and_pins_a_release() -> None:
    readme = (REPO / "README.md").read_text()
    workflow = readme.split("# .github/workflows/oom-triage.yml", 1)[1].split("```", 1)[0]
    # One concurrency group per issue, queued not cancelled (a cancelled run could leave its reply half-done).
    assert re.search(r"^concurrency:\n  group: \S*\$\{\{ github\.event\.issue\.number \}\}\n  cancel-in-progress: false$", workflow, re.M)
    assert "if: ${{ !github.event.issue.pull_request }}" in workflow
    uses = re.findall(r"uses: (\S+/oomdoctor)@(\S+)", workflow)
    assert uses and all(ref not in ("main", "master", "HEAD") for _, ref in uses), uses

"""oomdoctor.commands.triage: the whole thread, the reply's state marker, engine-named fixes, short asks, inert log text."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from oomdoctor.commands import triage

from conftest import FIXTURES

EVENTS = FIXTURES / "triage-events"
SAMPLER = (
    "RuntimeError: CUDA out of memory occurred when warming up sampler with 256 dummy requests. "
    "Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine."
)
VLLM_STARTUP = """\
(EngineCore_0 pid=2201) INFO 08-20 10:00:01 [core.py:74] Initializing a V1 LLM engine (v0.10.1) with config: model='Qwen/Qwen2.5-7B-Instruct', dtype=torch.bfloat16, max_seq_len=32768, tensor_parallel_size=1, enforce_eager=False
(EngineCore_0 pid=2201) INFO 08-20 10:00:40 [gpu_model_runner.py:1953] Model loading took 14.2488 GiB and 30.1 seconds
(EngineCore_0 pid=2201) INFO 08-20 10:00:55 [gpu_worker.py:276] Available KV cache memory: 6.52 GiB
(EngineCore_0 pid=2201) INFO 08-20 10:00:55 [kv_cache_utils.py:849] GPU KV cache size: 122,080 tokens
(EngineCore_0 pid=2201) ERROR 08-20 10:01:10 [core.py:700] EngineCore failed to start.
(EngineCore_0 pid=2201) ERROR 08-20 10:01:10 [core.py:700] Traceback (most recent call last):
(EngineCore_0 pid=2201) ERROR 08-20 10:01:10 [core.py:700]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line 2460, in _dummy_sampler_run
(EngineCore_0 pid=2201) ERROR 08-20 10:01:10 [core.py:700]     sampler_output = self.sampler(logits=logits,
(EngineCore_0 pid=2201) ERROR 08-20 10:01:10 [core.py:700] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.16 GiB. GPU 0 has a total capacity of 23.55 GiB of which 812.00 MiB is free. Including non-PyTorch memory, this process has 22.74 GiB memory in use.
(EngineCore_0 pid=2201) ERROR 08-20 10:01:10 [core.py:700] The above exception was the direct cause of the following exception:
(EngineCore_0 pid=2201) ERROR 08-20 10:01:10 [core.py:700] RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.
"""


def _triage(run_cli, tmp_path: Path, body: str, *extra: str) -> dict:
    path = tmp_path / "issue.json"
    path.write_text(json.dumps({"number": 3, "title": "vLLM OOM at startup", "body": body}))
    res = run_cli("triage", str(path), "--format", "json", *extra)
    assert res.code == 0, res.err
    return res.json


def _prose(md: str) -> str:
    """The Markdown outside fenced blocks and code spans: what GitHub renders as live text."""
    md = re.sub(r"(?ms)^(`{3,})\w*\n.*?^\1$", "", md)
    return re.sub(r"(?<!`)(`+)(?!`).*?(?<!`)\1(?!`)", "", md)


# --- 5. engine-named fixes and short asks ------------------------------------------------------------
def test_the_vllm_sampler_warmup_message_is_answered_with_its_own_fix(run_cli, tmp_path: Path) -> None:
    body = f"### 🐛 Describe the bug\n\nvllm serve fails on startup with this error:\n\n```\n{SAMPLER}\n```\n\nAny idea how to fix it? I have 2x A10G.\n"
    got = _triage(run_cli, tmp_path, body)
    assert got["kind"] == "answer" and got["class"] == "runtime_activation" and got["labels"] == ["oom:runtime_activation"]
    reply = got["reply"]
    assert "```bash\n--max-num-seqs 128\n```" in reply  # half the 256 the warm-up ran
    assert "a lower `--gpu-memory-utilization` than the value you run with" in reply
    assert "needs-log" not in json.dumps(got["labels"]) and "What would decide it" not in reply


def test_with_the_whole_log_the_answer_keeps_the_computed_value_and_adds_the_engines_suggestion(run_cli, tmp_path: Path) -> None:
    body = f"The server dies at startup:\n\n```text\n{VLLM_STARTUP}```\n\nCommand: `vllm serve Qwen/Qwen2.5-7B-Instruct --max-num-seqs 1024 --gpu-memory-utilization 0.95`\n"
    got = _triage(run_cli, tmp_path, body)
    assert got["kind"] == "answer"
    assert "```bash\n--gpu-memory-utilization 0.88\n```" in got["reply"]  # the diagnosis's own number
    assert "- or, as it suggests: `--max-num-seqs 512`" in got["reply"]


@pytest.mark.parametrize(
    "message, klass, change",
    [
        ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.", "startup_kv", "a higher `--gpu-memory-utilization`"),
        (
            "ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GiB KV cache is needed, which is larger than the available KV cache memory (4.20 GiB). Based on the available memory, the estimated maximum model length is 34400. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
            "startup_kv",
            "--max-model-len 33792",  # the diagnosis's number (under vLLM's estimate of 34400)
        ),
    ],
)
def test_other_engine_named_fixes(run_cli, tmp_path: Path, message: str, klass: str, change: str) -> None:
    got = _triage(run_cli, tmp_path, f"Crashes at start:\n\n```\n{message}\n```\n")
    assert got["kind"] == "answer" and got["class"] == klass
    assert change in got["reply"]


def test_an_ask_has_at_most_three_distinct_requests_and_never_asks_to_install_oomdoctor(run_cli, tmp_path: Path) -> None:
    body = "### Describe the bug\n\nThe server crashed after a few hours:\n\n```\n[rank0]: RuntimeError: CUDA error: out of memory\n[rank0]: CUDA kernel errors might be asynchronously reported at some other API call.\n```\n"
    got = _triage(run_cli, tmp_path, body)
    assert got["kind"] == "ask"
    bullets = [line for line in got["reply"].splitlines() if line.startswith("- ")]
    assert 1 <= len(bullets) <= 3 and len(got["missing"]) <= 3
    assert len({triage._topic(m) for m in got["missing"]}) == len(got["missing"])
    body_text = got["reply"].rsplit("<sub>", 1)[0]  # the footer names the tool that wrote the reply
    assert "oomdoctor collect" not in body_text and "oomdoctor.capture" not in body_text and "oomdoctor run" not in body_text
    assert sum("nvidia-smi" in b for b in bullets) <= 1


def test_asks_over_the_recorded_issues_stay_short() -> None:
    for snap in (FIXTURES / "issues").glob("*.reply.json"):
        got = json.loads(snap.read_text())
        if got["kind"] == "ask":
            bullets = [line for line in got["reply"].splitlines() if line.startswith("- ")]
            assert len(bullets) <= 3, snap.name
            assert "install oomdoctor" not in got["reply"] and "oomdoctor collect" not in got["reply"], snap.name


# --- 1. the whole thread and the state marker ---------------------------------------------------------
def test_the_marker_carries_the_state_and_nothing_can_close_it() -> None:
    reply = triage.Reply("answer", body="x", klass="startup_kv", confidence=0.912345, labels=["oom:-->x<b>"], evidence="abc")
    line = triage.marker_line(reply)
    assert line.startswith(triage.MARKER + " {") and line.endswith(" -->") and line.count("-->") == 1 and "<b>" not in line
    assert triage.reply_state(line + "\nbody") == {"v": 1, "kind": "answer", "class": "startup_kv", "confidence": 0.9123, "labels": ["oom:-->x<b>"], "evidence": "abc"}
    assert triage.reply_state("<!-- oomdoctor-triage -->\nan older reply") == {}
    assert triage.reply_state("no marker") is None


def test_the_bots_replies_are_not_evidence_and_the_event_comment_is_not_counted_twice() -> None:
    ev = json.loads((EVENTS / "issue-comment-evidence.json").read_text())
    listed = json.loads((EVENTS / "issue-8.comments.json").read_text())
    bot = {"id": 8100, "user": {"login": "github-actions[bot]"}, "body": '<!-- oomdoctor-triage {"v":1} -->\n```bash\n--mem-fraction-static 0.99\n```'}
    issue = triage.issue_from_json(ev, [bot, *listed])
    assert "0.99" not in issue.markdown and issue.markdown.count("Load weight begin. avail mem=78.32 GB") == 2  # TP0 and TP1, once each
    assert triage.evidence_key(issue) == triage.evidence_key(triage.issue_from_json(ev, listed))
    alone = triage.issue_from_json(ev)
    assert triage.evidence_key(alone) == triage.evidence_key(issue)


def test_prose_does_not_change_the_evidence_fingerprint() -> None:
    ev = json.loads((EVENTS / "issue-comment-evidence.json").read_text())
    listed = json.loads((EVENTS / "issue-8.comments.json").read_text())
    before = triage.evidence_key(triage.issue_from_json(ev, listed))
    later = [*listed, {"id": 1, "body": "Any update?", "user": {"login": "bob"}}, {"id": 2, "body": "Thanks, fixed it.", "user": {"login": "alice"}}]
    assert triage.evidence_key(triage.issue_from_json(ev, later)) == before
    more = [*listed, {"id": 3, "body": "Same with `--chunked-prefill-size 4096`.", "user": {"login": "alice"}}]
    assert triage.evidence_key(triage.issue_from_json(ev, more)) != before
    assert not triage.comment_has_evidence("Any update?") and triage.comment_has_evidence(listed[0]["body"])


def test_gh_paginate_output_is_read_as_one_list() -> None:
    pages = '[{"id": 1, "body": "a"}, {"id": 2, "body": "b"}]\n[{"id": 3, "body": "c"}]\n'
    assert [c["id"] for c in triage.comments_from_json(triage.load_json_stream(pages))] == [1, 2, 3]
    assert triage.comments_from_json(triage.load_json_stream("[]")) == []


def test_triage_reads_a_comments_file_offline(run_cli) -> None:
    ev = EVENTS / "issue-comment-no-evidence.json"
    alone = run_cli("triage", "--event", str(ev), "--format", "json").json
    whole = run_cli("triage", "--event", str(ev), "--comments", str(EVENTS / "issue-8.comments.json"), "--format", "json").json
    assert alone["kind"] == "ask" and whole["kind"] == "answer" and whole["comment_evidence"] is False
    assert run_cli("triage", "--event", str(ev), "--comments", str(EVENTS / "README.md")).code == 5


def test_a_pull_request_is_not_triaged(run_cli) -> None:
    got = run_cli("triage", "--event", str(EVENTS / "pull-request-comment.json"), "--format", "json").json
    assert got["kind"] == "silent" and got["reply"] == "" and "pull request" in got["ignored"]
    assert run_cli("triage", "--event", str(EVENTS / "pull-request-comment.json")).out == ""


# --- 6. log text in the reply is inert -----------------------------------------------------------------
def test_log_text_in_a_reply_cannot_mention_link_or_embed(run_cli, tmp_path: Path) -> None:
    hostile = "@octocat #12 ![p](https://tracker.example/p.png) </details>"
    message = SAMPLER.replace("warming up sampler with", f"warming up pooler (task='{hostile}') with")
    got = _triage(run_cli, tmp_path, f"It fails:\n\n```\n{message}\n```\n")
    assert got["kind"] == "answer" and "octocat" in got["reply"]
    rest = _prose(got["reply"].partition("\n")[2])
    assert "@octocat" not in rest and "#12" not in rest and "https://" not in rest
    assert rest.count("</details>") == rest.count("<details>") == 1  # only the reply's own fold


def test_a_model_path_with_mentions_stays_inert_in_the_answer(run_cli, tmp_path: Path) -> None:
    log = VLLM_STARTUP.replace("model='Qwen/Qwen2.5-7B-Instruct'", "model='@octocat/x#12'")
    got = _triage(run_cli, tmp_path, f"Dies:\n\n````text\n{log}````\n\n`vllm serve @octocat/x#12 --gpu-memory-utilization 0.95`\n")
    rest = _prose(got["reply"].partition("\n")[2])
    assert "@octocat" not in rest and "#12" not in rest

"""Bug-report bodies as input: code blocks are evidence, prose is not, stated flags are 'reported'."""

from __future__ import annotations

import json

from oomdoctor.input import issue_body

from conftest import FIXTURES

BODY = FIXTURES / "issue-body" / "startup_kv_details_flags_in_prose.md"


def test_log_lines_keep_line_numbers_and_blank_prose() -> None:
    text = BODY.read_text()
    log = issue_body.log_lines(text)
    assert len(log) == len(text.splitlines())
    kept = [i + 1 for i, ln in enumerate(log) if ln.strip()]
    assert kept == [16, 17, 18, 19, 20, 21]  # the fenced log inside <details>, nothing else
    assert "prose, not evidence" not in "\n".join(log)


def test_reported_facts_from_prose_and_typed_commands() -> None:
    got = {r.name: (r.value, r.line) for r in issue_body.read(BODY.read_text()).reported}
    assert got["mem_fraction_static"] == (0.4, 10)
    assert got["tp_size"] == (2, 10)
    assert got["gpu_name"] == ("H100-80GB", 7) and got["gpu_count"] == (2, 7)
    assert got["sglang_version"][0] == "0.4.6.post1" and got["torch_version"][0] == "2.6.0"


def test_diagnosis_of_a_body_cites_log_lines_and_marks_reported_facts(run_cli) -> None:
    res = run_cli("diagnose", str(BODY), "--format", "json")
    d = res.json
    assert res.code == 3 and d["verdict"]["class"] == "startup_kv"
    assert all(16 <= e["line"] <= 21 for e in d["findings"][0]["evidence"])
    assert "Stated by the reporter, not read from a log: the GPU (H100-80GB) (line 7); --mem-fraction-static 0.4 (line 10)" in d["verdict"]["summary"]
    assert d["inputs"][0]["kind"] == "issue"


def test_prose_alone_is_not_evidence(run_cli, tmp_path) -> None:
    body = tmp_path / "issue.md"
    body.write_text(
        "### Describe the bug\n\nI get CUDA out of memory when I run the server with a long prompt, any idea why?\n"
        "The traceback says torch.OutOfMemoryError but I did not keep it.\n\n```bash\npython -m sglang.launch_server --model-path x --tp 4\n```\n"
    )
    d = run_cli("diagnose", str(body), "--format", "json").json
    assert d["verdict"]["class"] == "none"


def test_an_issue_export_with_comments_is_one_incident(run_cli, tmp_path) -> None:
    log = "\n".join(ln for ln in issue_body.log_lines(BODY.read_text()) if ln.strip())
    export = {
        "number": 1,
        "title": "OOM at startup",
        "body": "I launch with --mem-fraction-static 0.4 on an H100 and it fails.\n\nNo log yet, sorry, will add it.",
        "comments": [{"body": "Here it is:\n\n```\n" + log + "\n```\n"}],
    }
    path = tmp_path / "issue.json"
    path.write_text(json.dumps(export))
    res = run_cli("diagnose", str(path), "--format", "json")
    assert res.code == 3 and res.json["verdict"]["class"] == "startup_kv"
    assert issue_body.is_issue_json(json.dumps(export)) and not issue_body.is_issue_json('{"memory_stats": {}}')


def test_oomdoctors_own_triage_reply_in_an_export_is_not_evidence() -> None:
    from oomdoctor.commands import triage

    assert issue_body.TRIAGE_MARKER == triage.MARKER
    reply = triage.MARKER + ' {"v":1} -->\n**oomdoctor**: change\n\n```bash\n--mem-fraction-static 0.99 --tp 8\n```\n'
    export = {"number": 1, "title": "OOM", "body": "It fails.", "comments": [{"body": reply}, {"body": "Thanks"}]}
    text = issue_body.thread_markdown(export)
    assert text is not None and "0.99" not in text and "Thanks" in text


def test_a_plain_log_is_not_taken_for_an_issue() -> None:
    text = (FIXTURES / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log").read_text()
    assert not issue_body.looks_like_issue(text)


def test_the_cheap_bug_report_check_never_hides_a_report() -> None:
    """issue_input keeps issue_body off plain logs (JSON parsed once, markdown by a cheap check), but never says no where issue_body would say yes."""
    from oomdoctor.input.issue_input import _NOT_JSON, _may_be_markdown_issue, _parsed_json

    def may_be_issue(text: str, path: str) -> bool:
        return _parsed_json(text) is not _NOT_JSON or _may_be_markdown_issue(text, path)

    body = BODY.read_text()
    assert may_be_issue(body, "x.log") and issue_body.looks_like_issue(body)
    export = json.dumps({"number": 1, "title": "t", "body": body})
    assert _parsed_json(export) == json.loads(export) and issue_body.is_issue_json(export)
    assert _parsed_json("[2026-03-02 10:00:41 TP0] Decode batch") is _NOT_JSON
    for log in sorted(FIXTURES.glob("*/pos_*.log")):
        text = log.read_text(errors="replace")
        if not may_be_issue(text, str(log)):
            assert not issue_body.looks_like_issue(text) and not issue_body.is_issue_json(text), log.name


def test_only_an_object_or_a_list_of_objects_is_parsed_as_an_export() -> None:
    """Log texts that start with "[" never reach the JSON parser (a plain diagnose stays without json)."""
    from oomdoctor.input.issue_input import _NOT_JSON, _parsed_json

    assert _parsed_json('[\n\n   {"body": "x", "title": "t"}]') == [{"body": "x", "title": "t"}]
    assert _parsed_json('  {"body": "x", "title": "t"}') == {"body": "x", "title": "t"}
    for text in ('["a", "b"]', "[1, 2]", "[rank0]: Traceback (most recent call last):", "[]"):
        assert _parsed_json(text) is _NOT_JSON

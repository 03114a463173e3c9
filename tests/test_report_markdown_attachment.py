"""The Markdown attachment of a bug report (``--format markdown``, a bundle's summary.md) on real fixtures.

Versions at the top, the cited log lines in the open, every table header named, and no local path
(inputs by base name, home directories as ``~``).
"""

from __future__ import annotations

import json
import re
import shutil
import zipfile
from pathlib import Path

import pytest

from oomdoctor.report.localpaths import display_names, without_home

from conftest import FIXTURES

CHECK_ENV = FIXTURES / "prior-weights-exceed-card" / "pos_sglang_check_env_pasted.log"
BUNDLE = FIXTURES / "collected-foreign-process" / "pos_bundle_two_processes"
HOME_TRACEBACK = FIXTURES / "field" / "sgl-sgl-project-sglang-465.log"
CASES = [
    CHECK_ENV,
    BUNDLE,
    HOME_TRACEBACK,
    FIXTURES / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log",
    FIXTURES / "oom-foreign-process" / "pos_self_in_middle_2025.log",
    FIXTURES / "runtime-activation-oom" / "pos_prefill_oom_2026.log",
    FIXTURES / "field" / "vllm-vllm-project-vllm-17462.log",
]


def _rows(md: str) -> dict[str, str]:
    """The first table's rows as {first cell: second cell}."""
    out = {}
    for line in md.splitlines():
        m = re.fullmatch(r"\| (.+?) \| (.*) \|", line)
        if m and not line.startswith("|---"):
            out.setdefault(m.group(1), m.group(2))
    return out


def test_the_versions_come_first_with_the_engine_torch_cuda_gpu_and_driver(run_cli) -> None:
    md = run_cli("diagnose", str(CHECK_ENV), "--format", "markdown").out
    lines = md.splitlines()
    assert lines[0] == "## oomdoctor: `weights_dont_fit` (confidence 0.55)"
    assert lines[2] == "| component | version or value |"
    table_end = lines.index("", 2)
    rows = _rows("\n".join(lines[2:table_end]))
    assert rows["engine"] == "SGLang 0.4.3.post2"
    assert rows["PyTorch"] == "2.5.1+cu124"
    assert rows["CUDA"] == "12.4"
    assert rows["GPU"] == "1 x NVIDIA H20, 95.10 GiB"
    assert rows["NVIDIA driver"] == "550.127.08"
    # Before the verdict's prose and the flags.
    assert table_end < lines.index("### Change (one consistent set)")


def test_a_bundle_s_driver_and_gpu_are_at_the_top_and_an_unknown_engine_version_is_said(run_cli) -> None:
    md = run_cli("diagnose", str(BUNDLE), "--format", "markdown").out
    head = md.split("\n\n", 2)[1]
    rows = _rows(head)
    assert rows["NVIDIA driver"] == "550.54.15"
    assert rows["GPU"].startswith("NVIDIA H100 80GB HBM3")
    assert rows["engine"].endswith("(version not in the inputs)")


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.name)
def test_every_cited_line_is_in_the_open_and_every_header_is_named(path: Path, run_cli) -> None:
    md = run_cli("diagnose", str(path), "--format", "markdown").out
    data = json.loads(run_cli("diagnose", str(path), "--format", "json").out)
    folded = "".join(re.findall(r"<details>.*?</details>", md, re.S))
    open_text = re.sub(r"<details>.*?</details>", "", md, flags=re.S)
    cited = [e for f in data["findings"] for e in f["evidence"]]
    assert cited
    for e in cited:
        text = without_home(e["text"])
        assert f"{Path(e['path']).name}:{e['line']}" in open_text
        assert text in open_text and text not in folded
    lines = md.splitlines()
    headers = [lines[i - 1] for i, line in enumerate(lines) if re.fullmatch(r"\|(?:-+\|)+", line)]
    assert headers
    for header in headers:
        cells = header.strip("|").split("|")
        assert all(c.strip() for c in cells), header


def test_no_local_path_in_the_report_or_the_bundle_summary(run_cli, tmp_path: Path) -> None:
    home = tmp_path / "home" / "alice" / "incidents" / "2026-03"
    home.mkdir(parents=True)
    log = home / CHECK_ENV.name
    shutil.copy(CHECK_ENV, log)
    bundle = tmp_path / "b.zip"
    res = run_cli("diagnose", str(log), "--format", "markdown", "--bundle", str(bundle))
    with zipfile.ZipFile(bundle) as zf:
        summary = zf.read("summary.md").decode()
    for md in (res.out, summary):
        assert str(tmp_path) not in md and "alice" not in md
        assert f"`{CHECK_ENV.name}` (" in md  # the footer's input, by its base name
        assert f"\n{CHECK_ENV.name}:20: " in md  # a cited line, by its base name


def test_home_directories_in_log_lines_become_tilde(run_cli) -> None:
    md = run_cli("diagnose", str(HOME_TRACEBACK), "--format", "markdown").out
    assert "/home/ubuntu" not in md
    assert 'File "~/miniconda3/envs/sglang/lib/python3.10/site-packages/sglang/srt/models/llama2.py"' in md


def test_without_home_and_display_names() -> None:
    assert without_home("/home/alice/.cache/x /Users/bob/y /root/z C:\\Users\\eve\\w") == "~/.cache/x ~/y ~/z ~\\w"
    # Not a home directory: inside a URL, a longer path, a dot-directory under /home, /root alone.
    kept = "https://h.example/home/alice/x /data/home/alice/y /home/.cache/hf /rootfs/a"
    assert without_home(kept) == kept
    names = display_names(["/srv/a/node0/server.log", "/srv/a/node1/server.log", "/tmp/x/other.log"])
    assert names == {"/srv/a/node0/server.log": "node0/server.log", "/srv/a/node1/server.log": "node1/server.log", "/tmp/x/other.log": "other.log"}


def test_a_path_quoted_in_prose_is_its_base_name_too(run_cli, tmp_path: Path) -> None:
    # The multi-node verdict names the first failure's file in a sentence, where Markdown escapes the
    # underscores: the local path must go there as well as in the code blocks.
    src = FIXTURES / "multi-node" / "pos_sglang_tp16_two_nodes"
    local = tmp_path / "home" / "alice" / "pos_two_nodes_run"
    shutil.copytree(src, local)
    md = run_cli("diagnose", str(local), "--format", "markdown").out
    assert "First to fail: node node1 (worker), rank TP9 at 2025-03-07 14:02:13 (node1.log:16)." in md
    assert str(tmp_path) not in md and "alice" not in md and "pos\\_two\\_nodes\\_run" not in md


def test_a_host_oom_does_not_ask_for_the_record_it_quotes(run_cli, tmp_path: Path) -> None:
    """The kernel's 'Out of memory: Killed process' line is in the paste: dmesg and journalctl are not asked for it
    again (before, "Not checked" listed both); whether a cgroup limit did it is still asked, and a pasted
    memory.events with oom_kill > 0 answers that too."""
    res = run_cli("diagnose", str(FIXTURES / "host-oom" / "pos_kernel_killer.log"), "--format", "json")
    assert res.json["verdict"]["class"] == "host_oom"
    md = run_cli("diagnose", str(FIXTURES / "host-oom" / "pos_kernel_killer.log"), "--format", "markdown").out
    unchecked = md.split("### Not checked", 1)[1]
    assert "dmesg -T" not in unchecked and "journalctl -k" not in unchecked
    assert "cat /sys/fs/cgroup/memory.events" in unchecked
    log = tmp_path / "cgroup.log"
    log.write_text((FIXTURES / "host-oom" / "pos_kernel_killer.log").read_text() + "oom_kill 1\n")
    md = run_cli("diagnose", str(log), "--format", "markdown").out
    assert "### Not checked" not in md  # both records are in the paste: nothing host-side is left to ask

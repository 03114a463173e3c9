"""Advice closes its own gap (issue 26): every primary set states the margin it leaves by the arithmetic
that produced it, and a set that leaves none is not primary."""

from __future__ import annotations

from pathlib import Path

import pytest

from oomdoctor.api import diagnose
from oomdoctor.base.units import GIB

from conftest import FIXTURES

# SGLang on a 24 GB card (CUDA's 23.65 GiB): y 0.88 of pre 21.76 GiB, 14.19 GiB of weights, chunk 4096;
# a prefill asks 5.50 GiB with 1.20 GiB free. The window of y is 0.733 to 0.867.
LOG = """\
[2026-03-02 10:00:01] server_args=ServerArgs(model_path='Qwen/Qwen2.5-7B-Instruct', tokenizer_path='Qwen/Qwen2.5-7B-Instruct', mem_fraction_static=0.88, max_running_requests=None, chunked_prefill_size=4096, max_prefill_tokens=16384, tp_size=1, pp_size=1, dp_size=1, cuda_graph_max_bs=48)
[2026-03-02 10:00:06 TP0] Load weight begin. avail mem=21.76 GB
[2026-03-02 10:00:21 TP0] Load weight end. elapsed=14.90 s, type=Qwen2ForCausalLM, avail mem=7.57 GB, mem usage=14.19 GB.
[2026-03-02 10:00:21 TP0] KV Cache is allocated. #tokens: 92874, K size: 2.48 GB, V size: 2.48 GB
[2026-03-02 10:00:21 TP0] Memory pool end. avail mem=2.61 GB
[2026-03-02 10:00:22 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=2.41 GB
[2026-03-02 10:00:31 TP0] Capture cuda graph end. Time elapsed: 9.12 s. mem usage=0.35 GB. avail mem=2.06 GB.
[2026-03-02 10:00:32 TP0] max_total_num_tokens=92874, chunked_prefill_size=4096, max_prefill_tokens=16384, max_running_requests=2048, context_len=32768, available_gpu_mem=2.06 GB
[2026-03-02 10:00:34] The server is fired up and ready to roll!
[2026-03-02 10:41:05 TP0] Prefill batch. #new-seq: 2, #new-token: 4096, #cached-token: 0, token usage: 0.42, #running-req: 18, #queue-req: 3
[2026-03-02 10:41:06 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1021, in event_loop_overlap
    batch_result = self.run_batch(batch)
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 2210, in forward_extend
    return self.model.forward(
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {asked} GiB. GPU 0 has a total capacity of 23.65 GiB of which 1.20 GiB is free. \
Including non-PyTorch memory, this process has 22.45 GiB memory in use. Of the allocated memory 21.62 GiB is allocated by PyTorch, with 0.35 GiB \
allocated in private pools (e.g., CUDA Graphs), and 300.00 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large \
try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  \
(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)

[2026-03-02 10:41:06] Received sigquit from a child process. It usually means the child failed.
"""


def _recs(run_cli, tmp_path: Path, asked: str) -> tuple[dict, list[dict]]:
    log = tmp_path / "server.log"
    log.write_text(LOG.replace("{asked}", asked))
    data = run_cli("diagnose", str(log), "--format", "json").json
    assert data["verdict"]["class"] == "runtime_activation"
    return data, data["findings"][0]["recommendations"]


def _set(r: dict) -> list[str]:
    return [r["paste"], *(c["paste"] for c in r["with"])]


def test_halving_the_chunk_with_y_086_is_not_primary_when_it_leaves_the_gap_open(run_cli, tmp_path: Path) -> None:
    _, recs = _recs(run_cli, tmp_path, "5.50")
    [chunk] = [r for r in recs if r["flag"] == "--chunked-prefill-size"]
    assert _set(chunk) == ["--chunked-prefill-size 2048", "--mem-fraction-static 0.86"]
    # By the tool's own model: 2.75 GiB asked of 1.20 + 0.02 * 21.76 = 1.64 GiB free.
    assert chunk["role"] == "not_workable"
    assert chunk["margin"]["allocation_bytes"] / GIB == pytest.approx(2.75, abs=0.005)
    assert chunk["margin"]["free_bytes"] / GIB == pytest.approx(1.635, abs=0.005)
    assert chunk["margin"]["bytes"] < 0 and "does not close the gap" in chunk["why"]
    [primary] = [r for r in recs if r["role"] == "primary"]
    assert primary["margin"]["bytes"] > 0


def test_a_set_that_leaves_the_gap_open_gets_the_fraction_that_closes_it(run_cli, tmp_path: Path) -> None:
    _, recs = _recs(run_cli, tmp_path, "4.00")
    [primary] = [r for r in recs if r["role"] == "primary"]
    # 2 GiB asked at chunk 2048; y 0.86 (the window's top) would leave 1.64 GiB; 0.75 leaves room for 2 GiB more.
    assert _set(primary) == ["--chunked-prefill-size 2048", "--mem-fraction-static 0.75"]
    assert primary["margin"]["bytes"] >= 2 * GIB and primary["feasible"] is True
    assert any("0.7325 <= 0.75 <= 0.8667" in s["formula"] for s in primary["derivation"])
    assert not any("<= 0.86 <=" in s["formula"] for s in primary["derivation"])


def test_every_report_states_the_primary_set_s_margin(run_cli, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(LOG.replace("{asked}", "4.00"))
    text = run_cli("diagnose", str(log)).out
    assert "    margin: 2.03 GiB: 4.03 GiB free after the changes against the failed allocation's 2.00 GiB" in text
    md = run_cli("diagnose", str(log), "--format", "markdown").out
    assert "Margin this set leaves: 2.03 GiB" in md
    page = tmp_path / "r.html"
    run_cli("diagnose", str(log), "--format", "html", "-o", str(page))
    assert '<p class="muted" id="flags-margin">Margin this set leaves: 2.03 GiB' in page.read_text()


def test_a_profile_run_oom_is_not_fixed_by_lowering_u(run_cli) -> None:
    # vLLM's profile run happens before the KV cache exists: u frees nothing of it; the batched tokens size it.
    data = run_cli("diagnose", str(FIXTURES / "vllm-runtime-activation" / "pos_v0_profile_run.log"), "--format", "json").json
    recs = {r["flag"]: r for r in data["findings"][0]["recommendations"]}
    u, tokens = recs["--gpu-memory-utilization"], recs["--max-num-batched-tokens"]
    assert u["role"] == "not_workable" and u["margin"]["bytes"] < 0
    assert tokens["role"] == "primary"
    # 4.64 GiB asked at 32768 tokens; 2.32 GiB at 16384 against 3.05 GiB free.
    assert tokens["margin"]["bytes"] / GIB == pytest.approx(3.05 - 4.64 / 2, abs=0.01)


CASES = sorted(p for p in FIXTURES.glob("*/*.expect.toml") if p.parent.name != "field")


def _input(expect: Path) -> Path | None:
    stem = expect.name.removesuffix(".expect.toml")
    found = [p for p in (expect.parent / f"{stem}.log", expect.parent / f"{stem}.log.gz", expect.parent / stem) if p.exists()]
    return found[0] if len(found) == 1 else None


def test_no_fixture_s_primary_set_leaves_no_margin() -> None:
    checked = 0
    for expect in CASES:
        path = _input(expect)
        if path is None:
            continue
        d = diagnose([str(path)])
        for finding in d.findings:
            for r in finding.recommendations:
                if r.role != "primary" or r.direction == "run":
                    continue
                assert r.margin is not None, f"{path}: {r.flag} states no margin"
                assert r.margin.leaves_some is not False, f"{path}: primary {r.paste_set} leaves {r.margin.bytes}"
                checked += 1
    assert checked > 50


def test_when_no_set_leaves_a_margin_none_is_pasted_and_the_report_says_why(run_cli) -> None:
    # A notebook's 2.53 GiB with 1.81 GiB free: expandable segments add 150 MiB of fragments, not enough.
    path = str(FIXTURES / "torch-activation-oom" / "pos_jupyter_short_name.log")
    data = run_cli("diagnose", path, "--format", "json").json
    [env] = [r for r in data["findings"][0]["recommendations"] if r["flag"] == "PYTORCH_CUDA_ALLOC_CONF"]
    assert env["role"] == "not_workable" and env["margin"]["bytes"] < 0
    assert not any(r["role"] == "primary" for r in data["findings"][0]["recommendations"])
    text = run_cli("diagnose", path).out
    assert "No set with a value leaves room for the failed allocation by the log's own numbers" in text
    assert "change the launch flags" not in text

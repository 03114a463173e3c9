"""Incidents across nodes (DESIGN §2.2): node identity, the cross-node timeline, cause and consequences."""

from __future__ import annotations

import pytest

from oomdoctor.base.evidence import LineRef
from oomdoctor.inference import nodes
from oomdoctor.input.prefixes import split_prefix

from conftest import FIXTURES

MN = FIXTURES / "multi-node"


@pytest.mark.parametrize(
    ("case", "node", "role", "consequence_node", "kinds"),
    [
        ("pos_sglang_tp16_two_nodes", "node1", "worker", "node0", {"nccl_timeout", "rank_exited"}),
        ("pos_kubectl_lws_prefix.log", "sglang-0-1", "worker", "sglang-0", {"nccl_timeout", "rank_exited"}),
        ("pos_slurm_per_task", "task1", "worker", "task0", {"nccl_error", "connection_reset", "rank_exited"}),
        ("pos_slurm_srun_labels.log", "task1", "worker", "task0", {"nccl_timeout", "rank_exited"}),
        ("pos_vllm_ray_session", "10.0.0.2", None, "10.0.0.1", {"nccl_timeout", "rank_exited"}),
        ("pos_prefill_decode_pair", "decode-0", "decode", "prefill-0", {"kv_transfer_failed", "connection_reset"}),
    ],
)
def test_first_failing_node_is_the_cause_and_the_rest_are_consequences(run_cli, case, node, role, consequence_node, kinds) -> None:
    res = run_cli("diagnose", str(MN / case), "--format", "json")
    assert res.code == 3, res.err
    data = res.json
    verdict = data["verdict"]
    assert verdict["node"] == node and verdict["node_role"] == role
    assert verdict["class"] in ("runtime_activation",)  # the OOM, never the timeout
    assert f"First to fail: node {node}" in verdict["summary"]
    assert "consequence, not a cause" in verdict["summary"]
    by_node = {n["node"]: n for n in data["nodes"]}
    assert by_node[node]["is_cause"] and by_node[node]["class"] == verdict["class"]
    assert by_node[consequence_node]["class"] == "consequence" and not by_node[consequence_node]["is_cause"]
    assert {c["kind"] for c in data["consequences"] if c["node"] == consequence_node} == kinds
    assert all(c["node"] != node for c in data["consequences"])
    timed = [c for c in data["consequences"] if c["seconds_after_cause"] is not None]
    assert timed and all(c["seconds_after_cause"] >= 0 for c in timed)
    # The text report names the node too.
    assert f"node {node}" in run_cli("diagnose", str(MN / case)).out


def test_kubectl_prefix_on_stdin_is_split_per_pod(run_cli) -> None:
    text = (MN / "pos_kubectl_lws_prefix.log").read_bytes()
    data = run_cli("diagnose", "-", "--format", "json", input=text).json
    assert data["verdict"]["node"] == "sglang-0-1" and data["verdict"]["class"] == "runtime_activation"
    assert {n["node"]: n["source"] for n in data["nodes"]} == {"sglang-0": "kubectl --prefix", "sglang-0-1": "kubectl --prefix"}
    assert data["inputs"][0]["path"] == "<stdin>"
    assert len(data["incidents"]) == 1  # the two pods' server_args lines are one job, not two runs


def test_different_servers_in_one_folder_are_separate_incidents(run_cli) -> None:
    data = run_cli("diagnose", str(MN / "pos_two_servers_one_folder"), "--format", "json").json
    servers = {i["server"]: i["class"] for i in data["incidents"]}
    assert len(servers) == 2
    assert any("Llama-3.1-70B" in s and c == "runtime_activation" for s, c in servers.items())
    assert any("Qwen3-Omni" in s and c == "startup_kv" for s, c in servers.items())
    rec = data["findings"][0]["recommendations"][0]
    assert rec["flag"] == "--mem-fraction-static" and rec["current"] == 0.7 and rec["value"] == 0.85
    assert "2 different servers, diagnosed separately" in data["verdict"]["summary"]
    assert "nodes" not in data  # unrelated servers: no cross-node cause


def test_prefill_and_decode_have_their_own_budgets(run_cli) -> None:
    data = run_cli("diagnose", str(MN / "pos_prefill_decode_pair"), "--format", "json").json
    assert data["budget"]["mem_fraction_static"] == 0.88  # the decode server's, not the prefill's 0.84
    assert [i["server"].split(" ")[0] for i in data["incidents"]] == ["decode"]


def test_timeouts_alone_are_never_a_verdict(run_cli) -> None:
    res = run_cli("diagnose", str(MN / "neg_two_nodes_timeout_only"), "--format", "json")
    assert res.code == 0 and res.json["verdict"]["class"] == "none"


def test_single_node_logs_carry_no_node_keys(run_cli) -> None:
    data = run_cli("diagnose", str(FIXTURES / "runtime-activation-oom" / "pos_decode_oom_2025_tp2.log"), "--format", "json").json
    assert "nodes" not in data and "node" not in data["verdict"]


@pytest.mark.parametrize(
    ("line", "node", "source", "rank", "msg"),
    [
        ("[pod/sglang-0-1/sglang-worker] [2026-02-10 11:30:05 TP8] x", "sglang-0-1", "kubectl --prefix", "sglang-0-1/TP8", "x"),
        ("[pod/sglang-0-1/sglang-worker]   File \"a.py\", line 1, in f", "sglang-0-1", "kubectl --prefix", None, '  File "a.py", line 1, in f'),
        ("1: [2025-11-03 12:20:01 TP8] x", "task1", "srun -l", "task1/TP8", "x"),
        ("12:   File \"a.py\", line 1, in f", "task12", "srun -l", None, '  File "a.py", line 1, in f'),
        ("(pid=31577, ip=10.0.0.2) hello", "10.0.0.2", "ray prefix", "pid31577", "hello"),
        ("(raylet, ip=10.0.0.2) hello", "10.0.0.2", "ray prefix", None, "hello"),
        ("(RayWorkerWrapper pid=1699, ip=10.0.0.1) INFO 05-12 10:00:30 [a.py:1] x", "10.0.0.1", "ray prefix", "pid1699", "x"),
        ("(EngineCore_DP0 pid=88) INFO 05-12 10:00:30 [a.py:1] x", None, None, "DP0", "x"),
        ("10:00:41 plain", None, None, None, "10:00:41 plain"),
    ],
)
def test_node_prefixes(line, node, source, rank, msg) -> None:
    s = split_prefix(line)
    assert (s.node, s.node_source, s.rank, s.msg) == (node, source, rank, msg)


@pytest.mark.parametrize(
    ("path", "node", "source"),
    [
        ("logs/slurm-81234_3.out", "task3", "slurm file name"),
        ("run/node1.log", "node1", "file name"),
        ("dump/sglang-0-1.log", "sglang-0-1", "file name"),
        ("ray/10.0.0.2/session_latest/logs/worker-7a1f0c2e9b-01000000-31577.err", "10.0.0.2", "directory"),
        ("gpu-node-7/server.log", "gpu-node-7", "directory"),
    ],
)
def test_node_of_path(path, node, source) -> None:
    assert nodes.node_of_path(path)[:2] == (node, source)


def _obs(node: str, kind: str, ts: str, order: int) -> nodes.Observation:
    return nodes.Observation(node, kind, LineRef("x.log", order + 1), ts, None, order)


def test_clock_skew_tolerance_and_mixed_precision() -> None:
    infos = {n: nodes.NodeInfo(n, "file name") for n in ("a", "b", "c")}
    obs = [
        _obs("b", "oom", "2026-01-01 10:00:01", 0),
        _obs("a", "oom", "2026-01-01 10:00:00", 1),
        _obs("c", "nccl_timeout", "01-01 09:59:59.5", 2),  # glog time, month-day only
    ]
    tl = nodes.timeline(infos, obs)
    assert tl.cause is not None and tl.cause.node == "a"
    assert [o.node for o in tl.simultaneous] == ["b"]  # 1 s apart: within the tolerance, named as such
    assert [o.node for o in tl.consequences] == ["c"]  # listed, never the cause, even when earlier
    assert "within the clock-skew tolerance" in nodes.summary(tl)
    assert nodes.ts_key("2026-01-01T10:00:00.123456789Z") == nodes.ts_key("2026-01-01 10:00:00.123456")


def test_the_html_marks_the_bar_of_the_rank_that_failed_first(run_cli) -> None:
    html = run_cli("diagnose", str(MN / "pos_sglang_tp16_two_nodes"), "--format", "html").out
    assert "node1 TP9: failed first" in html
    single = run_cli("diagnose", str(FIXTURES / "runtime-activation-oom" / "pos_prefill_oom_2026.log"), "--format", "html").out
    assert "failed first" not in single


"""One launch is one server: engine titles, the log's PIDs, PyTorch's own figures and consecutive PIDs."""

from __future__ import annotations

from oomdoctor.base.evidence import Event, LineRef, ProcessUsage
from oomdoctor.base.units import GIB, MIB
from oomdoctor.evidence import family as fam

P = fam.GpuProcess


def test_engine_titles_come_from_the_engines_setproctitle_calls() -> None:
    for name in ("sglang::scheduler_TP0", "sglang::scheduler_DP0_TP0_EP0", "sglang::detokenizer", "VLLM::Worker_TP1", "VLLM::EngineCore_DP0", "VLLM::APIServer_0"):
        assert fam.engine_title(name), name
    for name in ("python3", "/opt/conda/bin/python3", "[Not Found]", None, "vllm", "sglang"):
        assert not fam.engine_title(name), name


def test_titles_seed_the_family_and_consecutive_pids_join_it() -> None:
    procs = [P(402050, "python3", 518 * MIB, 0), P(402113, "sglang::scheduler_TP0", 66 * GIB, 0), P(402114, "sglang::scheduler_TP1", 66 * GIB, 1), P(917220, "/home/ana/venv/bin/python", 12 * GIB, 0)]
    found = fam.family(procs)
    assert (sorted(found.pids), found.how) == ([402050, 402113, 402114], "named")


def test_a_chain_of_close_pids_is_one_launch_and_the_log_names_pids() -> None:
    # vLLM V0: the driver worker (main process) and its TP worker about a hundred PIDs later.
    procs = [P(21807, "python3", 71 * GIB, 0), P(21904, "python", 570 * MIB, 0), P(21904, "python", 71 * GIB, 1), P(30000, "python", 5 * GIB, 0)]
    assert sorted(fam.family(procs, known_pids=[21904]).pids) == [21807, 21904]


def test_pids_between_two_the_log_names_are_of_the_launch() -> None:
    # vLLM-Omni (vllm-omni#6426's PIDs): the API server, then each stage's engine after the one before it loaded, hundreds
    # of PIDs apart; a tenant started before the server or after its last stage is not of the launch.
    procs = [P(14071, None, round(43.66 * GIB), 0), P(14929, None, round(3.57 * GIB), 0), P(9000, None, 20 * GIB, 0), P(40000, None, 5 * GIB, 0)]
    assert sorted(fam.family(procs, known_pids=[13654, 15742]).pids) == [14071, 14929]
    assert fam.launch_members([13654, 15742], [14071, 14929, 9000, 40000, 15742]) == {14071, 14929, 15742}


def test_one_pid_the_log_names_opens_no_window() -> None:
    assert fam.launch_members([15742], [14071, 14929, 15742]) == {15742}
    found = fam.family([P(14071, None, 40 * GIB, 0), P(17500, None, 4 * GIB, 0)], known_pids=[15742])
    assert (sorted(found.pids), found.how) == ([14071], "assumed")


def test_without_a_name_the_largest_on_the_failing_gpu_is_assumed() -> None:
    procs = [P(100, "python", 60 * GIB, 0), P(5000, "python", 10 * GIB, 0), P(7000, "python", 70 * GIB, 1)]
    found = fam.family(procs, failing_gpu=0)
    assert (sorted(found.pids), found.how) == ([100], "assumed")
    assert fam.family([]).how == "none"


def test_the_entry_covering_pytorchs_figures_is_the_failing_process() -> None:
    listed = [ProcessUsage(860120, round(122.29 * GIB), False), ProcessUsage(861544, round(16.30 * GIB), False)]
    assert fam.failing_pid_of(listed, round(118.10 * GIB), round(1.04 * GIB)) == 860120
    # Two entries both large enough (two servers on one card): undecided.
    both = [ProcessUsage(1, round(70.29 * GIB), False), ProcessUsage(2, round(68.30 * GIB), False)]
    assert fam.failing_pid_of(both, round(66.10 * GIB), round(1.04 * GIB)) is None
    # Both large enough, but one holds PyTorch's reserved plus a context's worth and the other another model's worth
    # (infinity#483: 5.95 GiB beside 5.45 reserved, and 37.55 GiB): the first is the failing process.
    shared = [ProcessUsage(247326, round(5.95 * GIB), False), ProcessUsage(248104, round(37.55 * GIB), False)]
    assert fam.failing_pid_of(shared, round(5.44 * GIB), round(6.72 * MIB)) == 247326
    # With "this process" in the message it is known already; a cut message gives no figures.
    assert fam.failing_pid_of([ProcessUsage(None, 70 * GIB, True), *listed], 60 * GIB, 0) is None
    assert fam.failing_pid_of(listed, None, None) is None


def test_pids_of_the_logs_own_process_tags() -> None:
    def ev(text: str) -> Event:
        return Event("x", (LineRef("l", 1, text=text),), {})

    lines = ["(EngineCore_DP0 pid=2211) ERROR 03-14 13:40:02 [core.py:710] Traceback", "(VllmWorker TP0 pid=3402) INFO 03-14 [gpu_worker.py:1] x", "(RayWorkerWrapper pid=1699, ip=10.0.0.1) INFO x", "INFO pid=77 x"]
    assert fam.log_pids(ev(t) for t in lines) == {2211, 3402, 1699}

"""Evidence recorded on a real GPU (an H200, torch 2.11; benchmarks/gpu_record.py) read back by the tool.

The logs are PyTorch's own output for OOMs provoked on purpose, the bundles what the capture hook and
`oomdoctor collect` / `oomdoctor run` wrote there (tests/fixtures/README.md, "Recorded on a GPU").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import FIXTURES

GPU = FIXTURES / "gpu-recorded"
GIB = 1 << 30


def _json(run_cli, *paths: Path) -> dict:
    r = run_cli("diagnose", "--format", "json", *map(str, paths))
    assert r.code in (0, 3, 4), r.err
    return r.json


@pytest.mark.parametrize(
    ("case", "klass", "rule"),
    [
        ("oom_foreign.log", "foreign_process", "oom-foreign-process"),
        ("capture-foreign", "foreign_process", "oom-foreign-process"),
        ("oom_fragmentation.log", "fragmentation", "allocator-fragmentation"),
        ("oom_too_big.log", "unknown_oom", "request-larger-than-card"),
        ("oom_too_big_expandable.log", "unknown_oom", "request-larger-than-card"),
        ("capture-too-big", "unknown_oom", "request-larger-than-card"),
        ("run-forked-server", "unknown_oom", "request-larger-than-card"),
        # The worker's exception went back to its parent: only the capture hook's observer saw the OOM.
        ("capture-forked-worker", "unknown_oom", "request-larger-than-card"),
    ],
)
def test_recorded_ooms_get_their_class(run_cli, case: str, klass: str, rule: str) -> None:
    v = _json(run_cli, GPU / case)["verdict"]
    assert (v["class"], v["rule"]) == (klass, rule)


def test_the_capture_bundle_of_a_fragmented_allocator_is_fragmentation_with_its_figures(run_cli) -> None:
    view = _json(run_cli, GPU / "capture-fragmentation")
    assert (view["verdict"]["class"], view["verdict"]["rule"]) == ("fragmentation", "allocator-stats-fragmentation")
    msg = view["findings"][0]["message"]
    # memory_stats' split segments and the snapshot's largest free block: 50 holes of 1 GiB, a 3 GiB request.
    assert "50.00 GiB in split segments" in msg and "the largest 1.00 GiB" in msg and "3.00 GiB was requested" in msg


def test_the_foreign_process_is_named_with_its_size(run_cli) -> None:
    r = run_cli("diagnose", str(GPU / "oom_foreign.log"))
    assert r.code == 3
    assert "PID 542" in r.out and "109.79 GiB" in r.out and "8.00 GiB the failed allocation lacked" in r.out


def test_collect_while_the_other_process_held_the_card_agrees(run_cli) -> None:
    view = _json(run_cli, GPU / "oom_foreign.log", GPU / "collect-foreign" / "manifest.json")
    assert view["verdict"]["class"] == "foreign_process"
    manifest = json.loads((GPU / "collect-foreign" / "manifest.json").read_text())
    (gpu,) = manifest["gpus"]
    assert gpu["name"] == "NVIDIA H200" and gpu["total_bytes"] == 150754820096
    assert [p["pid"] for p in gpu["processes"]] == [542] and gpu["processes"][0]["used_bytes"] > 100 * GIB


def test_an_observer_record_alone_is_an_oom_said_to_be_a_fragment(run_cli) -> None:
    view = _json(run_cli, GPU / "capture-forked-worker")
    assert view["verdict"]["evidence"] == "fragment" and "capture hook's record" in view["verdict"]["evidence_reason"]
    cited = view["findings"][0]["evidence"][0]
    assert cited["path"].endswith("capture-forked-worker/memory_stats.json")
    assert view["budget"]["capacity_bytes"] == 150109880320


def test_a_full_card_cublas_failure_stays_low_and_only_a_hypothesis() -> None:
    """cuBLAS could not get its workspace on a full card: no rule decides it; the differential's lead (a
    forward pass's matrix product, a step ahead) is named as a hypothesis under 0.5, with no advice."""
    from oomdoctor.api import diagnose

    d = diagnose([str(GPU / "oom_cublas.log")])
    assert d.oom and d.verdict_class == "runtime_activation" and d.verdict_rule is None and d.verdict_confidence < 0.5
    assert d.findings[0].extra["hypothesis"] is True and d.findings[0].recommendations == []


def test_the_fork_matrix_that_motivated_the_lazy_observer() -> None:
    """Recorded: an observer attached at import broke CUDA in forked workers; the hook as shipped did not."""
    m = json.loads((GPU / "fork_matrix.json").read_text())
    assert m["eager_attach"]["init_error"] and m["eager_attach"]["workers_with_cuda"] == 0
    assert m["hook"]["workers_with_cuda"] == 2 and not m["hook"]["init_error"]
    assert m["no_hook"]["workers_with_cuda"] == 2


def test_a_process_memory_cap_is_named_as_the_limit(run_cli) -> None:
    """torch.cuda.set_per_process_memory_fraction(0.25) on the H200: 50 GiB asked, 34.95 GiB allowed, 139.19 GiB free."""
    r = run_cli("diagnose", str(FIXTURES / "process-memory-cap" / "pos_h200_fraction_quarter.log"))
    assert r.code == 3 and "rule process-memory-cap" in r.out
    assert "capped at 34.95 GiB" in r.out and "asked for 50.00 GiB" in r.out and "139.19 GiB free" in r.out


def test_batch_advice_never_says_zero_percent_fits(run_cli) -> None:
    """Recorded: 69.90 GiB asked with 55.24 GiB free and 83.88 GiB held; the old text said 'at most about 0% ... fits'."""
    view = _json(run_cli, GPU / "oom_graph_private_pool.log")
    (batch,) = [r for r in view["findings"][0]["recommendations"] if r["flag"] == "batch_size"]
    assert "0%" not in batch["why"] and "request itself must shrink" in batch["why"] and "84.56 GiB" in batch["why"]


def test_a_driver_oom_at_context_creation_stays_unknown_and_says_what_would_decide(run_cli) -> None:
    view = _json(run_cli, GPU / "driver_oom_new_context.log")
    assert view["verdict"]["class"] == "unknown_oom" and view["verdict"]["confidence"] < 0.5
    assert "processes on the GPU" in view["verdict"]["summary"]


def test_an_observer_record_under_a_cap_names_the_cap(run_cli, tmp_path: Path) -> None:
    """The observer's 'device limit' is the process's cap under set_per_process_memory_fraction: more free than that limit
    can only be a cap, so the record is not read as a request larger than the card."""
    import shutil

    bundle = tmp_path / "capped"
    shutil.copytree(GPU / "capture-forked-worker", bundle)
    stats = json.loads((bundle / "memory_stats.json").read_text())
    stats["observer"].update(alloc=40 * GIB, device_alloc=35 * GIB, device_free=139 * GIB)
    (bundle / "memory_stats.json").write_text(json.dumps(stats))
    r = run_cli("diagnose", str(bundle))
    assert r.code == 3 and "rule process-memory-cap" in r.out and "capped at 35.00 GiB" in r.out
    assert "the capture hook's record of the OOM alone" in r.out and "quoted message" not in r.out
    # The recorded (uncapped) record still reads its limit as the card.
    assert _json(run_cli, GPU / "capture-forked-worker")["budget"]["capacity_bytes"] == 150109880320

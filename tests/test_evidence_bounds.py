"""Hostile evidence files are bounded (issue 24, item 2): a size cap per input kind checked before reading,
at most ~500 MB of RSS for any single input, linear parsing of DCGM scrapes, and shape-checked manifests.

RSS is measured in a wrapper process that runs oomdoctor as its only child
(resource.getrusage(RUSAGE_CHILDREN).ru_maxrss); no test asserts a wall time (timeouts are hang guards).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import FIXTURES, measured, one_error

SEED = FIXTURES / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log"
RSS_LIMIT_MB = 500

# --- snapshot pickles ---------------------------------------------------------------------------


def test_pickle_bomb_under_the_size_cap_is_refused_within_the_memory_limit(tmp_path: Path) -> None:
    """120 MB of EMPTY_DICT opcodes: each byte is a 64-byte dict once unpickled (2.9 GB before the limit)."""
    bomb = tmp_path / "bomb.pickle"
    with open(bomb, "wb") as fh:
        fh.write(b"\x80\x04(")
        for _ in range(120):
            fh.write(b"}" * (1 << 20))
        fh.write(b"l.")
    code, err, rss = measured("diagnose", str(bomb))
    assert code == 5 and "MiB of memory" in one_error(err)
    assert rss < RSS_LIMIT_MB


def test_pickle_over_the_size_cap_is_refused_before_it_is_read(tmp_path: Path) -> None:
    from oomdoctor.evidence.allocator import MAX_PICKLE_BYTES

    big = tmp_path / "big.pickle"
    with open(big, "wb") as fh:  # sparse: no disk used, and nothing in it is read
        fh.truncate(MAX_PICKLE_BYTES + 1)
    code, err, rss = measured("diagnose", str(big))
    assert code == 5 and "MiB cap for a memory snapshot pickle" in one_error(err)
    assert rss < 100


def test_a_real_sized_snapshot_still_reads(tmp_path: Path) -> None:
    import pickle

    frames = [{"filename": "/srv/app/model.py", "line": 7, "name": "forward"}]
    segs = [{"total_size": 2 << 20, "segment_pool_id": (0, 0), "blocks": [{"size": 1 << 20, "state": "active_allocated", "frames": list(frames)}, {"size": 1 << 20, "state": "inactive"}]} for _ in range(20_000)]
    snap = tmp_path / "snapshot.pickle"
    snap.write_bytes(pickle.dumps({"segments": segs}))
    code, err, rss = measured("diagnose", str(SEED), str(snap), "--format", "json")
    assert code == 3 and "snapshot.pickle" not in err, err
    assert rss < RSS_LIMIT_MB


# --- evidence JSON --------------------------------------------------------------------------------


def _json_bomb(path: Path, mb: int) -> Path:
    """A memory_stats dump with ``mb`` MB of empty objects in one list: ~25x its size once parsed."""
    with open(path, "w") as fh:
        fh.write('{"allocated_bytes.all.current": 1, "reserved_bytes.all.current": 1, "pad": [{}')
        for _ in range(mb):
            fh.write(",{}" * ((1 << 20) // 3))
        fh.write("]}")
    return path


def test_memory_stats_json_over_the_cap_is_refused_before_it_is_read(tmp_path: Path) -> None:
    code, err, rss = measured("diagnose", str(_json_bomb(tmp_path / "memory_stats.json", 100)))
    assert code == 5 and "MiB cap for evidence JSON" in one_error(err)
    assert rss < RSS_LIMIT_MB


def test_memory_stats_json_bomb_under_the_cap_stays_within_the_memory_limit(tmp_path: Path) -> None:
    code, err, rss = measured("diagnose", str(_json_bomb(tmp_path / "memory_stats.json", 60)))
    assert code == 5 and "MiB of memory" in one_error(err)
    assert rss < RSS_LIMIT_MB


@pytest.mark.parametrize(
    "name, cap",
    [("nvidia-smi.csv", "MiB cap for nvidia-smi output"), ("nvidia-smi.xml", "MiB cap for nvidia-smi output"), ("dcgm.prom", "MiB cap for a monitoring scrape"), ("samples.json", "MiB cap for evidence JSON")],
)
def test_each_evidence_kind_has_a_size_cap_checked_before_reading(tmp_path: Path, name: str, cap: str) -> None:
    path = tmp_path / name
    with open(path, "wb") as fh:  # sparse: 2 GB that take no disk and are never read
        fh.truncate(2 << 30)
    code, err, rss = measured("diagnose", str(path))
    assert code == 5 and cap in one_error(err)
    assert rss < 100


# --- DCGM scrapes: linear -----------------------------------------------------------------------


def _scrape_line(gpu: int, pod: str, value: int = 100) -> str:
    return f'DCGM_FI_DEV_FB_USED{{gpu="{gpu}",UUID="GPU-{gpu}",Hostname="node",pod="{pod}",namespace="ns",container="c"}} {value}\n'


def test_scrape_with_a_huge_escaped_label_is_read_in_linear_time(tmp_path: Path) -> None:
    """The client's parser rescans the label from its start at every escaped quote: quadratic (200k: 9.5 s, 1M: minutes)."""
    scrape = tmp_path / "dcgm.prom"
    scrape.write_text('DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-0",pod="' + 'a\\"' * (1 << 20) + '"} 100\n' + _scrape_line(0, "server"))
    code, err, rss = measured("diagnose", str(SEED), str(scrape), "--format", "json", timeout=60)
    assert code == 3 and "dcgm.prom" not in err, err
    assert rss < RSS_LIMIT_MB


def test_scrape_with_tens_of_thousands_of_pods_on_one_gpu_is_refused_with_the_cap(tmp_path: Path) -> None:
    """Every pod was compared with every earlier one (29 MB: 83 s); a GPU has never held 256 pods."""
    scrape = tmp_path / "dcgm.prom"
    scrape.write_text("".join(_scrape_line(0, f"pod-{i}") for i in range(60_000)))
    code, err, rss = measured("diagnose", str(scrape), timeout=60)
    assert code == 5 and "more than 256 pods on one GPU" in one_error(err)
    assert rss < RSS_LIMIT_MB


def test_a_large_real_shaped_scrape_reads_within_the_memory_limit(tmp_path: Path) -> None:
    scrape = tmp_path / "dcgm.prom"
    with open(scrape, "w") as fh:
        fh.write("# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).\n# TYPE DCGM_FI_DEV_FB_USED gauge\n")
        for gpu in range(400):
            fh.write("".join(_scrape_line(gpu, f"pod-{i}") for i in range(50)))
    code, err, rss = measured("diagnose", str(SEED), str(scrape), "--format", "json", timeout=300)
    assert code == 3 and "dcgm.prom" not in err, err
    assert rss < RSS_LIMIT_MB


def test_query_range_with_infinite_and_nan_values_skips_them(run_cli, tmp_path: Path) -> None:
    export = tmp_path / "fb.json"
    result = {"metric": {"__name__": "DCGM_FI_DEV_FB_USED", "gpu": "0", "UUID": "GPU-0", "pod": "x"}, "values": [[1, "+Inf"], [2, "NaN"], [3, "100"], ["NaN", "5"]]}
    export.write_text(json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [result, {"metric": "bad"}, 7]}}))
    res = run_cli("diagnose", str(SEED), str(export), "--format", "json")
    assert res.code == 3 and "internal error" not in res.err, res.err
    (gpu,) = res.json["monitoring"]["gpus"]
    assert gpu["used_bytes"] == 100 << 20 and [p["t"] for p in gpu["used_over_time"]] == [3.0]


# --- manifests and samples: shape and finite numbers ---------------------------------------------

BAD_MANIFESTS = {
    "gpus-string": ({"gpus": "abc"}, "gpus is 'abc' (str), not a list"),
    "gpu-not-object": ({"gpus": [5]}, "gpus[0] is 5 (int), not an object"),
    "index-string": ({"gpus": [{"index": "0", "total_bytes": 1}]}, "gpus[0].index is '0' (str), not an integer"),
    "bytes-string": ({"gpus": [{"index": 0, "total_bytes": "80"}]}, "gpus[0].total_bytes is '80' (str), not a byte count"),
    "bytes-list": ({"gpus": [{"index": 0, "used_bytes": [1]}]}, "gpus[0].used_bytes is [1] (list), not a byte count"),
    "processes-string": ({"gpus": [{"index": 0, "processes": "x"}]}, "gpus[0].processes is 'x' (str), not a list of processes"),
    "pid-string": ({"gpus": [{"index": 0, "processes": [{"pid": "1", "used_bytes": 5}]}]}, "gpus[0].processes[0].pid is '1' (str), not an integer"),
    "process-bytes-string": ({"gpus": [{"index": 0, "processes": [{"pid": 1, "used_bytes": "5"}]}]}, "processes[0].used_bytes is '5' (str), not a byte count"),
    "gpu-evidence-string": ({"gpu_evidence": "x", "gpus": []}, "gpu_evidence is 'x' (str), not an object"),
    "nan-total": ('{"gpus": [{"index": 0, "total_bytes": NaN}]}', "gpus[0].total_bytes is nan, not a byte count"),
    "inf-used": ('{"gpus": [{"index": 0, "used_bytes": Infinity}]}', "gpus[0].used_bytes is inf, not a byte count"),
    "huge-float": ('{"gpus": [{"index": 0, "free_bytes": 1e400}]}', "gpus[0].free_bytes is inf, not a byte count"),
}


def _manifest_text(body: dict | str) -> str:
    head = '{"kind": "oomdoctor-bundle", "bundle_version": 1, '
    return head + (json.dumps(body)[1:] if isinstance(body, dict) else body[1:])


@pytest.mark.parametrize("case", sorted(BAD_MANIFESTS))
def test_a_bundle_with_a_malformed_manifest_is_diagnosed_from_its_logs_with_a_warning(run_cli, tmp_path: Path, case: str) -> None:
    body, reason = BAD_MANIFESTS[case]
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "manifest.json").write_text(_manifest_text(body))
    (bundle / "server.log").write_text(SEED.read_text())
    res = run_cli("diagnose", str(bundle), "--format", "json")
    assert res.code == 3 and "internal error" not in res.err, res.err
    warnings = [line for line in res.err.splitlines() if "manifest.json" in line]
    assert len(warnings) == 1 and warnings[0].startswith("oomdoctor: warning:") and reason in warnings[0], res.err
    assert res.json["verdict"]["class"] == "startup_kv"


@pytest.mark.parametrize("case", sorted(BAD_MANIFESTS))
def test_a_malformed_manifest_alone_gets_exit_5_and_one_error_line(run_cli, tmp_path: Path, case: str) -> None:
    body, reason = BAD_MANIFESTS[case]
    manifest = tmp_path / "manifest.json"
    manifest.write_text(_manifest_text(body))
    res = run_cli("diagnose", str(manifest))
    assert res.code == 5 and reason in one_error(res.err)


@pytest.mark.parametrize(
    "samples, reason",
    [
        ('[{"t": NaN, "gpus": [], "processes": []}]', "samples[0].t is nan"),
        ('[{"t": "x", "gpus": [], "processes": []}]', "samples[0].t is 'x' (str), not a time"),
        ('[{"t": 1, "gpus": "x", "processes": []}]', "samples[0].gpus is 'x' (str), not a list"),
        ('[{"t": 1, "gpus": [{"index": 0, "used_bytes": "9"}], "processes": []}]', "used_bytes is '9' (str), not a byte count"),
        ('[{"t": 1, "gpus": [], "processes": [{"pid": null}]}]', "processes[0] has no pid"),
        ('"abc"', "samples is 'abc' (str), not a list"),
    ],
)
def test_malformed_samples_get_exit_5_and_one_error_line(run_cli, tmp_path: Path, samples: str, reason: str) -> None:
    path = tmp_path / "samples.json"
    path.write_text('{"kind": "oomdoctor-samples", "samples": ' + samples + "}")
    res = run_cli("diagnose", str(path))
    assert res.code == 5 and reason in one_error(res.err)

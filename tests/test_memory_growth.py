"""Memory that grows until it fails: the fit over run's samples and a DCGM query_range, the finding, the gauges.

The samples are shaped as the recorder writes them: the GPU's UUID, index and total from a recording on an
H200 (tests/fixtures/gpu-recorded/run-forked-server), NVML's readings whole MiB, one sample per interval.
"""

from __future__ import annotations

import io
import json
import random
import shutil
import sys
import threading
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from oomdoctor.commands import run as flight
from oomdoctor.commands.run import GrowthExport
from oomdoctor.memory import growth

import fakes
from conftest import FIXTURES

RECORDED = FIXTURES / "gpu-recorded" / "run-forked-server"
REC = json.loads((RECORDED / "samples.json").read_text())
GPU = REC["samples"][0]["gpus"][0]  # index 0, an H200's 150754820096 bytes
MIB = 1 << 20
GIB = 1 << 30
T0 = REC["samples"][0]["t"]
PID = 570
OTHER = 660602880  # what the other process held in the recording's snapshot


def _series(shape, minutes: float = 40, interval_s: float = 30, seed: int = 7) -> list[tuple[float, int]]:
    rnd = random.Random(seed)
    n = int(minutes * 60 / interval_s) + 1
    # NVML reports whole MiB; a server's own memory jitters a few MiB between reads.
    return [(round(T0 + i * interval_s, 3), (int(shape(i * interval_s)) + rnd.randint(-8, 8) * MIB) // MIB * MIB) for i in range(n)]


def growing(t: float) -> float:
    return 60 * GIB + t * (1.5 * GIB / 3600)  # a leak of 1.5 GiB/h on top of a 60 GiB server


def flat(t: float) -> float:
    return 60 * GIB


def sawtooth(t: float) -> float:
    return 60 * GIB + (t % 600) / 600 * 3 * GIB  # a cache that fills 3 GiB over 10 min and frees


def step(t: float) -> float:
    return 10 * GIB if t < 600 else 70 * GIB  # the weights loading, then steady


def _samples(series: list[tuple[float, int]], with_processes: bool = True) -> list[dict]:
    out = []
    for t, used in series:
        gpus = [{**GPU, "used_bytes": used + OTHER}]
        procs = [{"gpu": GPU["uuid"], "pid": PID, "used_bytes": used}, {"gpu": GPU["uuid"], "pid": 571, "used_bytes": OTHER}] if with_processes else []
        out.append({"t": t, "gpus": gpus, "processes": procs})
    return out


def test_a_leak_is_found_with_its_rate_and_the_time_to_a_full_card() -> None:
    (g,) = growth.growth(_samples(_series(growing)))
    assert g["gpu"] == 0 and g["pid"] == PID
    assert g["gib_per_hour"] == pytest.approx(1.5, rel=0.03)
    assert g["bytes_per_second"] == pytest.approx(1.5 * GIB / 3600, rel=0.03)
    assert g["span_s"] == 2400 and g["points"] == 81 and g["r2"] > 0.99
    # The card: 150754820096 bytes; at the last sample the server held ~61 GiB and the other 0.62 GiB.
    used_last = _samples(_series(growing))[-1]["gpus"][0]["used_bytes"]
    assert g["card_total_bytes"] == GPU["total_bytes"] == 150754820096
    assert g["seconds_to_full"] == pytest.approx((GPU["total_bytes"] - used_last) / g["bytes_per_second"], rel=1e-3)
    # By hand: (150754820096 - (61 GiB + 660602880)) / (1.5 GiB / 3600 s) = 84595965952 / 447392.4 = 189085 s, 52.5 h.
    assert g["seconds_to_full"] == pytest.approx(189085, rel=0.01)


@pytest.mark.parametrize("shape", [flat, sawtooth, step], ids=lambda f: f.__name__)
def test_flat_a_cache_that_frees_and_a_step_are_no_growth(shape) -> None:
    assert growth.growth(_samples(_series(shape))) == []


def test_noise_alone_is_no_growth() -> None:
    rnd = random.Random(3)
    noisy = [(T0 + i * 30.0, 60 * GIB + rnd.randint(-512, 512) * MIB) for i in range(81)]
    assert growth.growth(_samples(noisy)) == []


def test_the_stated_minimum_span_and_points() -> None:
    short = _series(growing, minutes=growth.MIN_SPAN_S / 60 - 1, interval_s=10)
    assert growth.fit(short) is None
    few = _series(growing, minutes=40, interval_s=2400 / (growth.MIN_POINTS - 2))
    assert len(few) < growth.MIN_POINTS and growth.fit(few) is None
    def fast(t: float) -> float:
        return 60 * GIB + t * (6 * GIB / 3600)

    assert growth.fit(_series(fast, minutes=growth.MIN_SPAN_S / 60 - 1, interval_s=10)) is None
    assert growth.fit(_series(fast, minutes=growth.MIN_SPAN_S / 60 + 1, interval_s=10)) is not None


def test_without_process_readings_the_gpu_total_is_fitted() -> None:
    (g,) = growth.growth(_samples(_series(growing), with_processes=False))
    assert g["pid"] is None and g["gpu"] == 0 and g["gib_per_hour"] == pytest.approx(1.5, rel=0.03)


def _bundle(tmp_path: Path, shape) -> Path:
    out = tmp_path / "run"
    shutil.copytree(RECORDED, out)
    data = {**REC, "interval_s": 30.0, "samples": _samples(_series(shape))}
    (out / "samples.json").write_text(json.dumps(data, sort_keys=True) + "\n")
    return out


def test_a_run_bundle_reports_the_growth_in_every_format(run_cli, tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, growing)
    data = json.loads(run_cli("diagnose", str(bundle), "--format", "json").out)
    (g,) = data["memory_growth"]
    assert g["pid"] == PID and g["gib_per_hour"] == pytest.approx(1.5, rel=0.03)
    text = run_cli("diagnose", str(bundle)).out
    assert "memory that grows until it fails" in text and f"process {PID} on GPU 0 grows 1." in text and "the card is full in" in text
    md = run_cli("diagnose", str(bundle), "--format", "markdown").out
    assert "### Memory that grows until it fails" in md
    prom = run_cli("diagnose", str(bundle), "--format", "prometheus").out
    s = {x.name: x for f in text_string_to_metric_families(prom) for x in f.samples}
    rate = s["oomdoctor_memory_growth_bytes_per_second"]
    assert rate.labels == {"server": "run", "gpu": "0", "pid": str(PID)} and rate.value == g["bytes_per_second"]
    assert s["oomdoctor_projected_full_seconds"].value == g["seconds_to_full"]


def test_a_flat_run_bundle_has_no_growth_key_nor_gauge(run_cli, tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, sawtooth)
    data = json.loads(run_cli("diagnose", str(bundle), "--format", "json").out)
    assert "memory_growth" not in data
    assert "oomdoctor_memory_growth" not in run_cli("diagnose", str(bundle), "--format", "prometheus").out


def test_a_dcgm_query_range_per_gpu(run_cli, tmp_path: Path) -> None:
    """Prometheus's query_range of DCGM_FI_DEV_FB_USED (MiB), with FB_FREE for the card's total."""
    series = _series(growing, interval_s=15)
    labels = {"gpu": "0", "UUID": GPU["uuid"], "Hostname": "gpu-node-7", "modelName": "NVIDIA H200", "pod": "vllm-0", "namespace": "serving", "container": "vllm"}
    used = [[t, str(v // MIB)] for t, v in series]
    free = [[t, str((GPU["total_bytes"] - v) // MIB)] for t, v in series]
    export = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "DCGM_FI_DEV_FB_USED", **labels}, "values": used},
        {"metric": {"__name__": "DCGM_FI_DEV_FB_FREE", **labels}, "values": free},
    ]}}
    path = tmp_path / "fb.json"
    path.write_text(json.dumps(export))
    data = json.loads(run_cli("diagnose", str(FIXTURES / "none" / "vllm_healthy_block_size_2025.log"), str(path), "--format", "json").out)
    (g,) = data["memory_growth"]
    assert g["pid"] is None and str(g["gpu"]) == "0" and g["gib_per_hour"] == pytest.approx(1.5, rel=0.03)
    assert g["seconds_to_full"] is not None and g["seconds_to_full"] > 0


class _Ring:
    """What GrowthExport reads of the sampler: its ring buffer and lock."""

    def __init__(self, samples: list[dict]) -> None:
        self.samples, self.lock = samples, threading.Lock()


def test_run_s_live_file_carries_the_growth_before_any_oom(tmp_path: Path) -> None:
    path = tmp_path / "tf" / "oomdoctor-port-8000.prom"
    live = GrowthExport(_Ring(_samples(_series(growing))), path, "port-8000", None)  # type: ignore[arg-type]
    live.export()
    s = {x.name: x for f in text_string_to_metric_families(path.read_text()) for x in f.samples}
    assert s["oomdoctor_memory_growth_bytes_per_second"].labels == {"server": "port-8000", "gpu": "0", "pid": str(PID)}
    assert s["oomdoctor_projected_full_seconds"].value == pytest.approx(189085, rel=0.01)
    assert "oomdoctor_incident_info" not in s  # nothing has failed yet
    # A flat ring: the families, no sample (no growth), never a stale one.
    GrowthExport(_Ring(_samples(_series(flat))), path, "port-8000", None).export()  # type: ignore[arg-type]
    text = path.read_text()
    assert "# TYPE oomdoctor_projected_full_seconds gauge" in text and not [x for f in text_string_to_metric_families(text) for x in f.samples]
    live.finish(keep=False)
    assert not path.exists()


def test_run_textfile_is_live_then_removed_on_a_clean_exit(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(flight, "GROWTH_EXPORT_S", 0.05)
    textfile = tmp_path / "tf"
    child = "import time, pathlib, sys\ntime.sleep(0.5)\nprint('up', pathlib.Path(sys.argv[1]).exists(), flush=True)\n"
    script = tmp_path / "server.py"
    script.write_text(child)
    out, err = io.BytesIO(), io.BytesIO()
    live_path = textfile / "oomdoctor-port-8123.prom"
    code = flight.run(
        [sys.executable, str(script), str(live_path), "--port", "8123"], str(tmp_path / "rec"), interval_ms=20,
        psutil_module=None, nvml_module=fakes.FakeNvml(fakes.load("idle_reserved")), stdout=out, stderr=err, textfile_dir=str(textfile),
    )
    assert code == 0
    assert b"up True" in out.getvalue()  # the live file was there while the server ran
    assert not live_path.exists()  # and is gone with it

"""Fleet signals: the incident's own time (vLLM's year-less stamps dated from a reference), one meaning per
label, one textfile per server, the healthy server's budget, names by Prometheus's conventions, and the
README's alert on the names written (checked with promtool where it is installed)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_memory_growth import _bundle, growing

from oomdoctor.base import timestamps
from oomdoctor.commands.run import server_identity
from oomdoctor.input import dating

from conftest import FIXTURES, REPO

VLLM = FIXTURES / "vllm-cuda-graph-oom" / "pos_v1_capture_frames.log"  # OOM at "09-30 18:01:20", no year anywhere
HEALTHY = FIXTURES / "none" / "healthy_2026.log"
TWO_NODES = FIXTURES / "multi-node" / "pos_sglang_tp16_two_nodes"
UNDATED = FIXTURES / "sglang-cuda-graph-oom" / "pos_capture_2024_driver.log"  # no stamp on any line
BUNDLE = FIXTURES / "collected-foreign-process" / "pos_bundle_two_processes"


def _utc(*args: int) -> float:
    return datetime(*args, tzinfo=timezone.utc).timestamp()


def _samples(text: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append(s)
    return out


def _prom(run_cli, *args: str) -> dict[str, list]:
    return _samples(run_cli("diagnose", *args, "--format", "prometheus").out)


def _copy(src: Path, dest: Path, mtime: float) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, dest)
    os.utime(dest, (mtime, mtime))
    return dest


def test_a_yearless_vllm_stamp_takes_its_year_from_the_file_s_mtime(run_cli, tmp_path: Path) -> None:
    # Written in January 2026: the 30 September before it is 2025's.
    log = _copy(VLLM, tmp_path / "a" / "vllm.log", _utc(2026, 1, 15, 8, 0, 0))
    s = _prom(run_cli, str(log))
    (stamp,) = s["oomdoctor_incident_timestamp_seconds"]
    assert stamp.value == _utc(2025, 9, 30, 18, 1, 20)
    (info,) = s["oomdoctor_incident_info"]
    assert info.labels["time_source"] == "log+mtime"
    # Written the same evening: that year's.
    log2 = _copy(VLLM, tmp_path / "b" / "vllm.log", _utc(2025, 9, 30, 18, 5, 0))
    (stamp2,) = _prom(run_cli, str(log2))["oomdoctor_incident_timestamp_seconds"]
    assert stamp2.value == _utc(2025, 9, 30, 18, 1, 20)


def test_a_dated_line_of_the_same_input_beats_the_mtime(run_cli, tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    # A launcher's own line (`date -u +%FT%TZ` in the pod's entrypoint) before vLLM's year-less ones.
    log.write_text("2024-09-30T17:58:02Z entrypoint: exec vllm serve\n" + VLLM.read_text())
    os.utime(log, (_utc(2027, 3, 1), _utc(2027, 3, 1)))  # copied years later
    s = _prom(run_cli, str(log))
    (stamp,) = s["oomdoctor_incident_timestamp_seconds"]
    assert stamp.value == _utc(2024, 9, 30, 18, 1, 20)
    assert s["oomdoctor_incident_info"][0].labels["time_source"] == "log+log"


def test_a_bundle_manifest_dates_the_logs_inside_it(tmp_path: Path) -> None:
    bundle = tmp_path / "run-1"
    log = _copy(VLLM, bundle / "server.log", _utc(2030, 1, 1))
    (bundle / "manifest.json").write_text(json.dumps({"kind": "oomdoctor-bundle", "source": "run", "ended_unix": _utc(2023, 10, 1, 2, 0, 0)}))
    ref = dating.reference(str(log))
    assert ref == dating.Reference(_utc(2023, 10, 1, 2, 0, 0), "manifest")
    assert timestamps.with_year("09-30 18:01:20", ref.unix, ref.not_after) == _utc(2023, 9, 30, 18, 1, 20)
    # Nearest, not "before": a stamp of 31 December beside a recording of 2 January is the year before.
    assert timestamps.with_year("12-31 23:59:00", _utc(2024, 1, 2), False) == _utc(2023, 12, 31, 23, 59, 0)
    assert timestamps.with_year("02-29 10:00:00", _utc(2025, 6, 1), True) == _utc(2024, 2, 29, 10, 0, 0)


def test_no_known_time_is_said_and_never_the_time_of_diagnosis(run_cli) -> None:
    s = _prom(run_cli, str(UNDATED))
    (info,) = s["oomdoctor_incident_info"]
    assert info.labels["time_source"] == "unknown" and info.labels["class"] == "cuda_graph"
    assert "oomdoctor_incident_timestamp_seconds" not in s


def test_stdin_has_no_mtime_so_a_yearless_incident_is_undated(run_cli) -> None:
    res = run_cli("diagnose", "-", "--format", "prometheus", input=VLLM.read_bytes())
    s = _samples(res.out)
    assert s["oomdoctor_incident_info"][0].labels["time_source"] == "unknown"
    assert "oomdoctor_incident_timestamp_seconds" not in s


def test_labels_have_one_meaning_each(run_cli) -> None:
    s = _prom(run_cli, str(TWO_NODES))
    (info,) = s["oomdoctor_incident_info"]
    assert info.labels["gpu"] == "1"  # PyTorch's "GPU 1 has a total capacity": an index
    assert info.labels["gpu_model"] == "80 GB class (H100 / A100 80GB / H800)"
    for samples in s.values():
        for sample in samples:
            gpu = sample.labels.get("gpu")
            assert gpu is None or re.fullmatch(r"|\d+|GPU-[0-9a-f-]+", gpu), sample
    dcgm = _prom(run_cli, str(FIXTURES / "multi-node" / "pos_dcgm_foreign_pod"))
    assert all(re.fullmatch(r"|\d+|GPU-[0-9a-f-]+", x.labels["gpu"]) for x in dcgm["oomdoctor_incident_info"])


def test_two_servers_on_one_node_keep_two_files_and_two_series(run_cli, tmp_path: Path) -> None:
    textfile = tmp_path / "textfile_collector"
    a = _copy(VLLM, tmp_path / "logs" / "vllm-8000.log", _utc(2026, 1, 1))
    b = _copy(FIXTURES / "runtime-activation-oom" / "pos_prefill_oom_2026.log", tmp_path / "logs" / "sglang-30000.log", _utc(2026, 3, 3))
    assert run_cli("diagnose", str(a), "--textfile", str(textfile)).code == 3
    assert run_cli("diagnose", str(b), "--textfile", str(textfile)).code == 3
    assert sorted(p.name for p in textfile.iterdir()) == ["oomdoctor-sglang-30000.prom", "oomdoctor-vllm-8000.prom"]
    both = (textfile / "oomdoctor-vllm-8000.prom").read_text() + (textfile / "oomdoctor-sglang-30000.prom").read_text()
    stamps = _samples(both)["oomdoctor_incident_timestamp_seconds"]
    assert sorted(x.labels["server"] for x in stamps) == ["sglang-30000", "vllm-8000"]
    # node_exporter refuses a series collected twice: the files never repeat one.
    keys = [(x.name, tuple(sorted(x.labels.items()))) for xs in _samples(both).values() for x in xs]
    assert len(keys) == len(set(keys))
    # --server names it explicitly; `run` takes the command's --port.
    assert run_cli("diagnose", str(a), "--textfile", str(textfile), "--server", "node7/vllm:8001").code == 3
    assert (textfile / "oomdoctor-node7-vllm-8001.prom").is_file()
    assert server_identity(["vllm", "serve", "m", "--port", "8001"], Path("rec")) == "port-8001"
    assert server_identity(["python", "-m", "sglang.launch_server", "--port=30001"], Path("rec")) == "port-30001"
    assert server_identity(["python", "-m", "sglang.launch_server"], tmp_path / "rec-a") == "rec-a"


def test_a_healthy_server_exports_its_budget_per_gpu(run_cli) -> None:
    res = run_cli("diagnose", str(HEALTHY), "--format", "prometheus")
    s = _samples(res.out)
    assert res.code == 0 and "oomdoctor_incident_info" not in s
    data = json.loads(run_cli("diagnose", str(HEALTHY), "--format", "json").out)["budget"]
    assert s["oomdoctor_budget_weights_bytes"][0].value == data["weights_bytes"] == 32974611415
    assert s["oomdoctor_budget_kv_pool_bytes"][0].value == data["kv_pool_bytes"] == 37666863186
    assert s["oomdoctor_budget_activation_reserve_bytes"][0].value == data["dynamic_region_bytes"] == 13656514238
    assert s["oomdoctor_budget_weights_bytes"][0].labels == {"server": "healthy_2026", "system": "sglang", "gpu": "", "gpu_model": ""}


_UNIT = re.compile(r"_(seconds|bytes|ratio|info|total|value|bytes_per_second)$")


def _all_outputs(run_cli, tmp_path: Path) -> str:
    cases = [VLLM, HEALTHY, TWO_NODES, BUNDLE, UNDATED, FIXTURES / "multi-node" / "pos_dcgm_foreign_pod", _bundle(tmp_path, growing)]
    return "".join(run_cli("diagnose", str(c), "--format", "prometheus").out for c in cases)


def test_names_follow_prometheus_conventions(run_cli, tmp_path: Path) -> None:
    families = list(text_string_to_metric_families(_all_outputs(run_cli, tmp_path)))
    assert families
    for fam in families:
        assert fam.name.startswith("oomdoctor_") and fam.type == "gauge" and fam.documentation
        for sample in fam.samples:
            assert _UNIT.search(sample.name), sample.name


def _readme_alerts() -> list[str]:
    text = (REPO / "README.md").read_text()
    return re.findall(r"`((?:time\(\) - )?oomdoctor_[^`]*)`", text)


def test_the_readme_alert_names_metrics_that_are_written(run_cli, tmp_path: Path) -> None:
    written = {s.name for fam in text_string_to_metric_families(_all_outputs(run_cli, tmp_path)) for s in fam.samples}
    alerts = [a for a in _readme_alerts() if re.search(r"[<>=]", a)]
    assert alerts, "the README shows an alert expression"
    for expr in alerts:
        for name in re.findall(r"oomdoctor_[a-z_]+", expr):
            assert name in written, f"README alert {expr!r} names {name}, which is not written"


def test_each_output_passes_the_exposition_parser(run_cli, tmp_path: Path) -> None:
    """The format check that runs everywhere: prometheus-client's own parser, every line HELP, TYPE or sample."""
    text = _all_outputs(run_cli, tmp_path)
    for line in text.splitlines():
        assert re.fullmatch(r"# (HELP|TYPE) oomdoctor_\w+ .+|oomdoctor_\w+\{[^{}]*\} \S+", line), line
    assert sum(len(f.samples) for f in text_string_to_metric_families(text)) == sum(1 for line in text.splitlines() if not line.startswith("#"))


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (Debian: apt-get install prometheus)")
def test_promtool_checks_the_textfile_and_the_readme_alert(run_cli, tmp_path: Path) -> None:
    textfile = tmp_path / "tf"
    for case in (VLLM, HEALTHY, TWO_NODES, BUNDLE, _bundle(tmp_path, growing)):
        run_cli("diagnose", str(case), "--textfile", str(textfile))
    assert len(list(textfile.iterdir())) == 5
    for prom in sorted(textfile.iterdir()):
        res = subprocess.run(["promtool", "check", "metrics"], input=prom.read_bytes(), capture_output=True, timeout=60)
        assert res.returncode == 0 and not res.stdout.strip() and not res.stderr.strip(), (prom.name, res.stdout, res.stderr)
    rules = tmp_path / "rules.yml"
    alerts = [a for a in _readme_alerts() if re.search(r"[<>=]", a)]
    rules.write_text("groups:\n- name: oomdoctor\n  rules:\n" + "".join(f"  - alert: OomdoctorReadme{i}\n    expr: '{a}'\n" for i, a in enumerate(alerts)))
    res = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_traceback_without_stamps_is_dated_by_the_last_stamped_line_before_it(run_cli) -> None:
    log = FIXTURES / "runtime-activation-oom" / "pos_prefill_oom_2026.log"
    data = json.loads(run_cli("diagnose", str(log), "--format", "json").out)
    (incident,) = data["incidents"]
    assert incident["time"] is None  # the OOM's lines carry no stamp
    lines = log.read_text().splitlines()[: incident["first_line"]]
    last = [m.group(1) for line in lines for m in [re.match(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", line)] if m][-1]
    s = _prom(run_cli, str(log))
    assert s["oomdoctor_incident_timestamp_seconds"][0].value == timestamps.epoch_seconds(last)
    assert s["oomdoctor_incident_info"][0].labels["time_source"] == "preceding"

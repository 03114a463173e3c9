"""GPU evidence from the monitoring stack (DCGM exporter scrape, Prometheus query_range) and --format prometheus."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from oomdoctor.base.errors import InputError
from oomdoctor.evidence import monitoring

from conftest import FIXTURES

MN = FIXTURES / "multi-node"


@pytest.mark.parametrize("case", ["pos_dcgm_foreign_pod", "pos_query_range_foreign_pod"])
def test_the_foreign_process_finding_names_the_other_pod(run_cli, case) -> None:
    data = run_cli("diagnose", str(MN / case), "--format", "json").json
    finding = next(f for f in data["findings"] if f["class"] == "foreign_process")
    assert [(p["namespace"], p["pod"], p["gpu"]) for p in finding["pods"]] == [("research", "jupyter-alice-0", 0)]
    # The GPU's used memory (80486 MiB) minus the server's own ("this process has 60.12 GiB").
    assert finding["pods"][0]["other_bytes"] == pytest.approx(80486 * 2**20 - 60.12 * 2**30, abs=2)
    assert data["monitoring"]["foreign_pods"] == ["research/jupyter-alice-0"]
    assert "pod jupyter-alice-0 in namespace research" in data["verdict"]["summary"]


def test_query_range_gives_memory_over_time_per_gpu(run_cli) -> None:
    data = run_cli("diagnose", str(MN / "pos_query_range_foreign_pod"), "--format", "json").json
    gpu = data["monitoring"]["gpus"][0]
    assert gpu["uuid"].startswith("GPU-5e1c") and len(gpu["used_over_time"]) == 9
    assert max(p["used_bytes"] for p in gpu["used_over_time"]) == 80486 * 2**20
    assert gpu["free_bytes"] == (81000 - 80486) * 2**20  # the least free in the window


def test_scrape_given_by_path_whatever_its_name(run_cli, tmp_path) -> None:
    scrape = tmp_path / "metrics.txt"
    scrape.write_text((MN / "pos_dcgm_foreign_pod" / "dcgm-exporter.prom").read_text())
    data = run_cli("diagnose", str(MN / "pos_dcgm_foreign_pod" / "sglang-0.log"), str(scrape), "--format", "json").json
    assert [i["kind"] for i in data["inputs"]] == ["log", "dcgm"]
    assert data["monitoring"]["foreign_pods"] == ["research/jupyter-alice-0"]


def test_scrape_reads_what_the_official_parser_reads() -> None:
    # oomdoctor reads the framebuffer lines itself, in linear time (the client's parser is quadratic on
    # backslash runs, tests/test_evidence_bounds.py); on a real scrape both read the same samples.
    text = (MN / "pos_dcgm_foreign_pod" / "dcgm-exporter.prom").read_text()
    item = monitoring.parse_scrape(text, "x.prom")
    official = {
        (s.name, s.labels["gpu"], s.labels.get("pod")): int(s.value) * 2**20
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name.startswith("DCGM_FI_DEV_FB_")
    }
    ours = {
        (name, str(g["gpu"]), p["pod"]): g[field]
        for g in item["gpus"]
        for p in g["pods"]
        for name, field in monitoring._FB.items()
        if field in g and (name, str(g["gpu"]), p["pod"]) in official
    }
    assert ours and ours == {k: v for k, v in official.items() if k in ours}
    assert {(k[1], k[2]) for k in official} == {(str(g["gpu"]), p["pod"]) for g in item["gpus"] for p in g["pods"]}
    gpu0 = item["gpus"][0]
    assert gpu0["used_bytes"] == 80486 * 2**20 and gpu0["total_bytes"] == (80486 + 512 + 499) * 2**20
    assert {p["pod"] for p in gpu0["pods"]} == {"sglang-0", "jupyter-alice-0"}


def test_a_scrape_without_framebuffer_metrics_is_refused() -> None:
    with pytest.raises(InputError, match="DCGM_FI_DEV_FB_USED"):
        monitoring.parse_scrape("# TYPE up gauge\nup 1\n", "x.prom")


def _families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_prometheus_textfile_round_trips(run_cli) -> None:
    res = run_cli("diagnose", str(MN / "pos_sglang_tp16_two_nodes"), "--format", "prometheus")
    assert res.code == 3
    fams = _families(res.out)
    (incident,) = fams["oomdoctor_incident_timestamp_seconds"].samples
    labels = {"server": "pos_sglang_tp16_two_nodes", "class": "runtime_activation", "system": "sglang", "node": "node1", "gpu": "1", "gpu_model": "80 GB class (H100 / A100 80GB / H800)"}
    assert incident.labels == labels
    assert incident.value == 1741356133.0  # 2025-03-07 14:02:13 UTC, node1's OOM
    (info,) = fams["oomdoctor_incident_info"].samples
    assert info.name == "oomdoctor_incident_info" and info.labels == {**labels, "time_source": "log"} and info.value == 1
    recs = {s.labels["flag"]: s.value for s in fams["oomdoctor_recommended_value"].samples}
    assert recs["--max-running-requests"] == 128.0 and "--mem-fraction-static" in recs
    (conf,) = fams["oomdoctor_confidence_ratio"].samples
    assert conf.labels == {"server": "pos_sglang_tp16_two_nodes", "class": "runtime_activation"} and 0 < conf.value <= 1


def test_prometheus_for_no_oom_has_no_incident_sample(run_cli) -> None:
    res = run_cli("diagnose", str(MN / "neg_two_nodes_timeout_only"), "--format", "prometheus")
    fams = _families(res.out)
    assert res.code == 0 and "oomdoctor_incident_info" not in fams and "oomdoctor_incident_timestamp_seconds" not in fams
    assert fams["oomdoctor_confidence_ratio"].samples[0].labels == {"server": "neg_two_nodes_timeout_only", "class": "none"}


def test_prometheus_textfile_written_atomically(tmp_path) -> None:
    from oomdoctor.report.render import prometheus

    view = {"verdict": {"class": "foreign_process", "confidence": 0.9, "node": "sglang-0"}, "budget": {"system": "vllm"}, "findings": [], "incidents": [{"time": "2026-03-02 10:42:09"}]}
    out = tmp_path / "oomdoctor.prom"
    prometheus.write_textfile(view, str(out))
    (sample,) = _families(out.read_text())["oomdoctor_incident_timestamp_seconds"].samples
    assert sample.value == 1772448129.0 and sample.labels["node"] == "sglang-0"



# A malformed scrape line (issue 24): the error quotes the line, and must not quote its secrets. The token
# straddles character 80, where the quote was cut: a cut before redaction left its first characters.
BAD_LINES = {
    "malformed labels": 'DCGM_FI_DEV_FB_USED{gpu="0",pod="p",api_key="sk-proj-abcdefghijklmnop1234" 123\n',
    "unterminated label value": 'DCGM_FI_DEV_FB_USED{gpu="0",Hostname="gpu-node-7",note="see token hf_abcdefghijklmnopqrstuvwxyz0123\n',
    "no value in": 'DCGM_FI_DEV_FB_USED{gpu="0",modelName="NVIDIA H100 80GB HBM3",url="https://bob:hunter2pass@dcgm.internal"}\n',
}
BAD_SECRETS = ["sk-proj-abcdefghijklmnop1234", "hf_abcdefghijklmnopqrst", "hunter2pass"]


def _no_secret(text: str) -> None:
    for secret in BAD_SECRETS:
        for piece in (secret, secret[:7]):
            assert piece not in text, (piece, text)


@pytest.mark.parametrize("reason", list(BAD_LINES))
def test_a_bad_scrape_line_is_quoted_without_its_secrets(run_cli, tmp_path, reason: str) -> None:
    scrape = tmp_path / "dcgm.prom"
    scrape.write_text("# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).\n" + BAD_LINES[reason])
    res = run_cli("diagnose", str(scrape))
    assert res.code == 5
    assert res.err.count("oomdoctor: error:") == 1 and f"dcgm.prom:2: not a Prometheus text exposition ({reason}" in res.err
    assert 'DCGM_FI_DEV_FB_USED{gpu=\\"0\\"' in res.err or 'DCGM_FI_DEV_FB_USED{gpu="0"' in res.err  # the line is still quoted
    _no_secret(res.err)


def test_a_bad_scrape_line_in_the_summary_is_listed_without_its_secrets(run_cli, tmp_path) -> None:
    for i, line in enumerate(BAD_LINES.values()):
        (tmp_path / f"node{i}.prom").write_text(line)
    text = run_cli("diagnose", "--summary", str(tmp_path))
    assert text.code == 0 and text.out.count("not a Prometheus text exposition") == 3
    js = run_cli("diagnose", "--summary", str(tmp_path), "--format", "json")
    assert len(js.json["failed"]) == 3
    _no_secret(text.out + text.err + js.out + js.err)

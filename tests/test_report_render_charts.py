"""Issue 26's charts, measured in headless Chromium: every bar adds up to the card or says which input is
inconsistent, and no segment is labelled as something it is not.

The segments are read from the laid-out page (each rect's title and rendered width); sizes are checked
against the log's own figures, so a chart that draws the budget where the failure was (or the reverse)
fails here.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from test_report_html import chart_defects, probe, proxy  # noqa: F401  (proxy: the fixture the probe needs)

from conftest import FIXTURES

GIB_RE = re.compile(r"^(?P<label>.*): (?P<n>[\d.]+) (?P<unit>GiB|MiB)$")


def _page(run_cli, tmp_path: Path, fixture: str, proxy) -> dict:  # noqa: F811
    report = tmp_path / "r.html"
    run_cli("diagnose", str(FIXTURES / fixture), "--format", "html", "-o", str(report))
    measured = probe(report, proxy, tmp_path)
    assert chart_defects(measured) == []
    measured["html"] = report.read_text(encoding="utf-8")
    return measured


def _chart(measured: dict, chart_id: str) -> dict:
    [chart] = [c for c in measured["charts"] if c["id"] == chart_id]
    return chart


def _bars(chart: dict) -> list[list[dict]]:
    """The segments of each bar, in drawing order, split where a new row starts."""
    bars: list[list[dict]] = []
    top = None
    for s in chart["segs"]:
        if top is None or abs(s["box"]["top"] - top) > 1:
            bars.append([])
            top = s["box"]["top"]
        m = GIB_RE.match(s["title"])
        assert m, s["title"]
        size = float(m["n"]) / (1024 if m["unit"] == "MiB" else 1)
        bars[-1].append({"kind": s["cls"].split("seg-")[1], "label": m["label"], "gib": size, "width": s["box"]["right"] - s["box"]["left"]})
    return bars


def _by_label(bar: list[dict]) -> dict[str, float]:
    return {s["label"]: s["gib"] for s in bar}


def test_vllm_runtime_bar_draws_the_budget_s_parts_and_the_failure_s_free(run_cli, tmp_path: Path, proxy) -> None:  # noqa: F811
    measured = _page(run_cli, tmp_path, "vllm-runtime-activation/pos_v0_serving_with_profile.log", proxy)
    [bar, _recommended] = _bars(_chart(measured, "budget-chart")) + _bars(_chart(measured, "budget-chart-recommended"))
    sizes = _by_label(bar)
    # vLLM's profile: weights 32.89, activation peak 4.35, non-torch 1.12 GiB; KV = 0.9 * 79.19 - 38.36 = 32.91 GiB.
    assert sizes["weights"] == pytest.approx(32.89, abs=0.01)
    assert sizes["activation peak (vLLM's profile)"] == pytest.approx(4.35, abs=0.01)
    assert sizes["non-PyTorch memory (vLLM's profile)"] == pytest.approx(1.12, abs=0.01)
    assert sizes["KV cache pool"] == pytest.approx(32.91, abs=0.01)
    assert sizes["CUDA graphs"] == pytest.approx(0.82, abs=0.01)
    # Free from the failure (798 MiB), not what the budget leaves outside u*total (7.92 GiB).
    assert sizes["free at the failure (the OOM message)"] == pytest.approx(798 / 1024, abs=0.01)
    assert sizes["in use past the budget at the failure"] == pytest.approx(79.19 - 71.27 - 0.82 - 798 / 1024, abs=0.02)
    assert sum(sizes.values()) == pytest.approx(79.19, abs=0.03)
    assert not any(s["kind"] == "outside" for s in bar)
    # Drawn widths follow the sizes: the KV pool is as wide as its 32.91 GiB, not the whole u*total.
    px_per_gib = sum(s["width"] for s in bar) / 79.19
    kv = next(s for s in bar if s["kind"] == "kv")
    assert kv["width"] == pytest.approx(32.91 * px_per_gib, abs=1.5)
    assert "overcommit" not in " ".join(_chart(measured, "budget-chart")["marks"])
    # At the recommended u = 0.82 the failure's own peak past the budget (6.32 GiB) is in use again, not free: the free
    # part past u*total is the 7.11 GiB the margin counts (13.43 GiB past the line in all; before, all drawn free).
    projected = _by_label(_recommended)
    assert projected["in use past the budget at the failure"] == pytest.approx(6.32, abs=0.02)
    assert projected["free but outside u*total (vLLM leaves it unused)"] == pytest.approx(7.11, abs=0.02)
    assert sum(projected.values()) == pytest.approx(79.19, abs=0.03)


def test_vllm_runtime_bar_without_a_profile_does_not_call_u_total_the_kv_pool(run_cli, tmp_path: Path, proxy) -> None:  # noqa: F811
    measured = _page(run_cli, tmp_path, "vllm-runtime-activation/pos_v1_execute_model.log", proxy)
    bars = _bars(_chart(measured, "budget-chart")) + _bars(_chart(measured, "budget-chart-recommended"))
    assert not any(s["kind"] == "kv" for bar in bars for s in bar), "the log has no memory profile: no segment is the KV pool"
    sizes = _by_label(bars[0])
    # The OOM message: 74.90 GiB allocated of which 1.20 in graph pools, 410 MiB unallocated, 77.77 in use, 1.41 free.
    assert sizes["allocated by PyTorch: weights, KV pool and activations, not split (the log has no memory profile)"] == pytest.approx(73.70, abs=0.01)
    assert sizes["CUDA graphs"] == pytest.approx(1.20, abs=0.01)
    assert sizes["free at the failure (the OOM message)"] == pytest.approx(1.41, abs=0.01)
    assert sum(sizes.values()) == pytest.approx(79.19, abs=0.03)


def test_two_nodes_bars_add_up_to_the_card_and_name_the_inconsistent_lines(run_cli, tmp_path: Path, proxy) -> None:  # noqa: F811
    measured = _page(run_cli, tmp_path, "multi-node/pos_sglang_tp16_two_nodes", proxy)
    chart = _chart(measured, "budget-chart")
    bars = _bars(chart)
    assert len(bars) == 4
    for bar in bars:
        assert sum(s["gib"] for s in bar) == pytest.approx(79.19, abs=0.03)
        assert sum(s["width"] for s in bar) == pytest.approx(sum(s["width"] for s in bars[0]), abs=1.0)
    assert "overcommit" not in " ".join(chart["marks"]) and "over by" not in measured["html"]
    # The log's KV pool (36.26 GiB) is 2.35 GiB over y*pre - W = 33.91 GiB: said once, for the ranks it is about.
    notes = [html.unescape(n) for n in re.findall(r'<p class="chart-note">(.*?)</p>', measured["html"], re.S)]
    said = [n for n in notes if "is 2.35 GiB more than y*pre - W" in n]
    assert said and "'KV Cache is allocated' line" in said[0] and len(said) == 2


def test_ranks_without_a_reading_are_not_joined_and_the_nodes_share_one_time_axis(run_cli, tmp_path: Path, proxy) -> None:  # noqa: F811
    measured = _page(run_cli, tmp_path, "multi-node/pos_sglang_tp16_two_nodes", proxy)
    groups = {g["name"]: g for g in _chart(measured, "timeline-chart")["groups"]}
    # TP9 has load begin, load end and the OOM, but no reading at "KV pool built" or "serving": two lines' worth of points, one line.
    assert groups["TP9"]["points"] == 3 and groups["TP9"]["lines"] == 1
    lanes = _chart(measured, "node-lanes-chart")
    marks = [p for p in lanes["points"] if "mark" in p["cls"] and "swatch" not in p["cls"]]
    cause = [m for m in marks if "cause" in m["cls"]]
    later = [m for m in marks if "consequence" in m["cls"]]
    assert len(cause) == 1 and "node1 (worker): TP9 out of memory" in cause[0]["title"]
    assert {("a rank or worker exited" in m["title"] or "NCCL collective timeout" in m["title"]) for m in later} == {True} and len(later) == 2
    # One lane per node, below each other; the consequences 601 s later sit right of the cause on the shared axis.
    assert later[0]["box"]["top"] < cause[0]["box"]["top"] - 10
    center = lambda m: (m["box"]["left"] + m["box"]["right"]) / 2  # noqa: E731
    width = lanes["box"]["right"] - lanes["box"]["left"]
    assert all(center(m) - center(cause[0]) > 0.6 * width for m in later)


def test_dcgm_draws_the_other_tenant_as_such_and_its_time_chart_says_where_it_is_from(run_cli, tmp_path: Path, proxy) -> None:  # noqa: F811
    measured = _page(run_cli, tmp_path, "multi-node/pos_query_range_foreign_pod", proxy)
    [bar] = _bars(_chart(measured, "budget-chart"))
    sizes = _by_label(bar)
    tenant = "another tenant on this GPU: pod research/jupyter-alice-0 (DCGM)"
    # 79.19 - 59.80 (pre) - 0.59 (a CUDA context) = 18.80 GiB held before the server started.
    assert sizes[tenant] == pytest.approx(18.80, abs=0.01)
    assert sizes["CUDA context / NCCL / before start"] < 1.0
    assert sum(sizes.values()) == pytest.approx(79.19, abs=0.03)
    assert "flight recorder" not in measured["html"] and "GPU memory over time (DCGM_FI_DEV_FB_USED from Prometheus)" in measured["html"]
    legend = [e["text"] for e in _chart(measured, "samples-chart")["legend"]]
    assert legend == ["GPU 0 on gpu-node-7 used: llm-serving/sglang-0 (the server) + research/jupyter-alice-0 (another tenant)"]
    assert "another tenant, pod research/jupyter-alice-0, held the other 18.48 GiB" in measured["html"]

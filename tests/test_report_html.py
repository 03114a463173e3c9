"""The HTML report opened in headless Chromium: verdict, flag, budget chart, no network, no script.

Chromium is Debian's package; .ci/run installs it when missing. Every network request the page
might make is sent through a local counting proxy, so "no request" is measured, not assumed.
"""

from __future__ import annotations

import html as html_lib
import re
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from conftest import FIXTURES, REPO

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")

CLASS_FIXTURES = {
    "startup_kv": ("sglang-startup-kv/pos_h100_qwen3_omni_g2.log", "--mem-fraction-static 0.85"),
    "weights_dont_fit": ("sglang-weights-dont-fit/pos_70b_single_h100.log", "--tp-size 2"),
    "cuda_graph": ("sglang-cuda-graph-oom/pos_capture_failed_2025.log", "--cuda-graph-max-bs 80"),
    "runtime_activation": ("runtime-activation-oom/pos_prefill_oom_2026.log", "--mem-fraction-static 0.81"),
    "encoder_starvation": ("encoder-oom/pos_omni_compute_fn.log", "--encoder-mem-reserve 0.19"),
    "foreign_process": ("oom-foreign-process/pos_two_processes_2024.log", None),
    "fragmentation": ("allocator-fragmentation/pos_fragmented_decode.log", "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
    "kv_exhaustion": ("sglang-kv-exhaustion/pos_prefill_alloc_2025.log", "--max-running-requests 1024"),
    "host_oom": ("host-oom/pos_kernel_killer.log", None),
    "unknown_oom": ("unknown-oom/sglang_driver_oom_no_context.log", None),
    "vllm_startup_kv": ("vllm-startup-kv/pos_v1_32k_does_not_fit.log", "--gpu-memory-utilization 0.91"),
    "none": ("none/healthy_2026.log", None),
}


# Chromium's own background services (time sync, component updates, sign-in) also go through the
# proxy; they are the browser's, not the page's, and are told apart by host.
_BROWSER_SERVICES = re.compile(r"(?:^|[/.@ ])(?:[\w-]+\.)*(?:google\.com|googleapis\.com|gvt1\.com|gstatic\.com)(?::\d+)?(?:/|$)")


def page_requests(hits: list[str]) -> list[str]:
    return [h for h in hits if not _BROWSER_SERVICES.search(h.split(" ", 1)[1])]


class _Counter(BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def _count(self) -> None:
        type(self).hits.append(f"{self.command} {self.path}")
        self.send_response(404)
        self.end_headers()

    do_GET = do_POST = do_CONNECT = do_HEAD = _count

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def proxy():
    if CHROMIUM is None:
        pytest.fail("headless Chromium is required: apt-get install chromium (.ci/run installs it)")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Counter)
    th = threading.Thread(target=server.serve_forever, daemon=True)
    th.start()
    yield server
    server.shutdown()


def render_dom(path: Path, proxy) -> str:
    port = proxy.server_address[1]
    out = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-default-apps",
            "--disable-sync",
            f"--proxy-server=http://127.0.0.1:{port}",
            "--proxy-bypass-list=<-loopback>",
            "--virtual-time-budget=3000",
            "--dump-dom",
            path.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def text_of(dom: str) -> str:
    return html_lib.unescape(re.sub(r"<[^>]+>", " ", dom))


@pytest.mark.parametrize("klass", sorted(CLASS_FIXTURES))
def test_report_renders_in_chromium(klass: str, run_cli, tmp_path: Path, proxy) -> None:
    fixture, flag = CLASS_FIXTURES[klass]
    report = tmp_path / "report.html"
    res = run_cli("diagnose", str(FIXTURES / fixture), "--format", "html", "-o", str(report))
    assert res.code == (0 if klass == "none" else 3)
    before = len(_Counter.hits)
    dom = render_dom(report, proxy)
    assert page_requests(_Counter.hits[before:]) == [], f"network requests: {_Counter.hits[before:]}"
    verdict = re.search(r'<p id="verdict-text">(.*?)</p>', dom, re.S)
    assert verdict and len(html_lib.unescape(verdict.group(1)).strip()) > 20
    expected_class = klass.replace("vllm_", "")
    assert f'<span class="cls">{expected_class}</span>' in dom
    if flag:
        flags = re.search(r'<pre class="flags" id="flags">(.*?)</pre>', dom, re.S)
        assert flags and flag in html_lib.unescape(flags.group(1))
    if klass not in ("host_oom", "unknown_oom"):
        assert '<svg id="budget-chart"' in dom
    assert "<script" not in dom
    assert "Content-Security-Policy" in report.read_text()


def test_hostile_log_line_is_text_and_nothing_runs(run_cli, tmp_path: Path, proxy) -> None:
    port = proxy.server_address[1]
    hostile = f"</script><img src=x onerror=alert(1)><img src=http://127.0.0.1:{port}/leak> {{{{7*7}}}} <script>fetch('http://127.0.0.1:{port}/js')</script>"
    log = tmp_path / "hostile.log"
    log.write_text(
        f"[2026-01-01 00:00:00 TP0] Scheduler hit an exception: {hostile} torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
        "GPU 0 has a total capacity of 79.19 GiB of which 1.31 GiB is free. Including non-PyTorch memory, this process has 77.86 GiB memory in use. "
        "Of the allocated memory 71.52 GiB is allocated by PyTorch, and 3.20 GiB is reserved by PyTorch but unallocated. See documentation for Memory Management\n"
    )
    report = tmp_path / "report.html"
    assert run_cli("diagnose", str(log), "--format", "html", "-o", str(report)).code == 3
    raw = report.read_text()
    assert "<img src=x" not in raw and "<script>fetch" not in raw
    before = len(_Counter.hits)
    dom = render_dom(report, proxy)
    assert page_requests(_Counter.hits[before:]) == []
    visible = text_of(dom)
    assert "</script><img src=x onerror=alert(1)>" in visible
    assert "{{7*7}}" in visible and "49" not in visible.split("{{7*7}}")[0][-5:]
    assert "<img" not in dom.split("<body")[1]


def test_report_is_self_contained_and_small(run_cli, tmp_path: Path) -> None:
    report = tmp_path / "r.html"
    run_cli("diagnose", str(FIXTURES / "runtime-activation-oom/pos_decode_oom_2025_tp2.log"), "--format", "html", "-o", str(report))
    text = report.read_text()
    assert len(text) < 200_000
    for needle in ("<script", "http://", "<link", "@import", "url(", "src="):
        assert needle not in text.replace('xmlns="http://www.w3.org/2000/svg"', ""), needle
    order = [text.index(marker) for marker in ('id="verdict"', 'id="budget-chart"', 'id="timeline-chart"', 'id="what-if"', 'id="finding-1"', "Not checked", "<h2>Inputs")]
    assert order == sorted(order)


def test_what_if_marks_the_feasible_window(run_cli, tmp_path: Path) -> None:
    report = tmp_path / "r.html"
    run_cli("diagnose", str(FIXTURES / "sglang-startup-kv/pos_h100_qwen3_omni_g2.log"), "--format", "html", "-o", str(report))
    text = report.read_text()
    rec = re.search(r'<tr class="feasible rec">\s*<td>0\.85 \(recommended\)</td>\s*<td>6\.30</td>', text)
    assert rec, "0.85 is recommended, feasible, with 6.30 GiB of KV"
    assert re.search(r'<tr class=" cur">\s*<td>0\.7 \(now\)</td>\s*<td>-5\.40</td>', text)


def test_gallery_is_current() -> None:
    import sys

    sys.path.insert(0, str(REPO / "reports"))
    try:
        import build
    finally:
        sys.path.pop(0)
    stale = []
    for name, fixture in build.GALLERY.items():
        for fmt, suffix in (("html", ".html"), ("markdown", ".md")):
            committed = REPO / "reports" / f"{name}{suffix}"
            if not committed.exists() or committed.read_text(encoding="utf-8") != build.render(fixture, fmt):
                stale.append(committed.name)
    assert not stale, f"reports/ is stale ({', '.join(stale)}); run: python reports/build.py"


def test_the_proxy_would_see_a_page_request(tmp_path: Path, proxy) -> None:
    # The control: a page that does load a remote image is caught by the same measurement.
    page = tmp_path / "leaky.html"
    port = proxy.server_address[1]
    page.write_text(f'<html><body><img src="http://example.invalid:{port}/pixel.png"></body></html>')
    before = len(_Counter.hits)
    render_dom(page, proxy)
    assert any("pixel.png" in h for h in page_requests(_Counter.hits[before:]))


# --- chart geometry, legends and contrast, measured in Chromium ------------------------------------------
#
# The report forbids scripts (its CSP); the probe is a copy of the page without the CSP and with one
# script that measures the laid-out page and writes its findings into the DOM that --dump-dom returns.

_PROBE = r"""<script>
(function () {
  function own(t) { return Array.from(t.childNodes).filter(function (n) { return n.nodeType === 3; }).map(function (n) { return n.data; }).join(""); }
  function box(r) { return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; }
  function pageBackground(el) {
    for (var e = el; e && e.nodeType === 1; e = e.parentElement) {
      var c = getComputedStyle(e).backgroundColor;
      if (c && c !== "transparent" && c !== "rgba(0, 0, 0, 0)") return c;
    }
    return "rgb(255, 255, 255)";
  }
  var out = {charts: [], legends: []};
  document.querySelectorAll("svg.chart").forEach(function (svg) {
    var rects = Array.from(svg.querySelectorAll("rect"));
    var texts = [];
    svg.querySelectorAll("text").forEach(function (t) {
      var r = t.getBoundingClientRect();
      var cx = (r.left + r.right) / 2, cy = (r.top + r.bottom) / 2;
      var bg = pageBackground(svg);
      rects.forEach(function (rc) {
        if (!(rc.compareDocumentPosition(t) & Node.DOCUMENT_POSITION_FOLLOWING)) return;
        var q = rc.getBoundingClientRect();
        var fill = getComputedStyle(rc).fill;
        if (fill && fill !== "none" && cx >= q.left && cx <= q.right && cy >= q.top && cy <= q.bottom) bg = fill;
      });
      texts.push({text: own(t), box: box(r), fill: getComputedStyle(t).fill, bg: bg});
    });
    var entries = Array.from(svg.querySelectorAll(".legend-entry")).map(function (e) {
      var sw = e.querySelector(".swatch");
      return {text: own(e.querySelector("text") || e), swatch: sw ? getComputedStyle(sw).fill : null};
    });
    var segs = Array.from(svg.querySelectorAll("rect.seg")).map(function (r) {
      var t = r.querySelector("title");
      return {cls: r.getAttribute("class"), title: t ? t.textContent : "", box: box(r.getBoundingClientRect())};
    });
    var points = Array.from(svg.querySelectorAll("circle, path.mark")).map(function (m) {
      var t = m.querySelector("title");
      return {cls: m.getAttribute("class") || "", title: t ? t.textContent : "", box: box(m.getBoundingClientRect())};
    });
    var groups = Array.from(svg.querySelectorAll("g.series")).map(function (g) {
      return {name: g.getAttribute("data-series"), lines: g.querySelectorAll("polyline").length, points: g.querySelectorAll("circle").length};
    });
    out.charts.push({id: svg.id, box: box(svg.getBoundingClientRect()), texts: texts, legend: entries, segs: segs, points: points, groups: groups,
      series: svg.querySelectorAll("g.series").length || svg.querySelectorAll("polyline").length,
      marks: Array.from(svg.querySelectorAll("line.limit, rect.request, rect.free-at-failure, rect.seg")).map(function (m) { return m.getAttribute("class"); })});
  });
  document.querySelectorAll(".legend").forEach(function (legend) {
    out.legends.push(Array.from(legend.querySelectorAll(".legend-entry")).map(function (e) {
      var sw = e.querySelector(".swatch");
      var st = sw ? getComputedStyle(sw) : null;
      return {cls: e.getAttribute("class"), text: e.textContent.trim(), swatch: st ? {bg: st.backgroundColor, border: st.borderTopColor, borderWidth: st.borderTopWidth, width: sw.getBoundingClientRect().width} : null};
    }));
  });
  var pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


def probe(page: Path, proxy, tmp_path: Path) -> dict:
    """The page's charts as laid out by Chromium: every text's box and colours, each legend entry's swatch."""
    import json

    text = page.read_text(encoding="utf-8")
    text = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", text)
    assert "</body>" in text
    probed = tmp_path / f"probe-{page.stem}.html"
    probed.write_text(text.replace("</body>", _PROBE + "</body>"), encoding="utf-8")
    dom = render_dom(probed, proxy)
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert found, "the probe script did not run"
    return json.loads(html_lib.unescape(found.group(1)))


def _rgb(css: str) -> tuple[int, int, int]:
    nums = [int(float(n)) for n in re.findall(r"[\d.]+", css)[:3]]
    assert len(nums) == 3, css
    return nums[0], nums[1], nums[2]


def contrast_ratio(a: str, b: str) -> float:
    def lum(rgb: tuple[int, int, int]) -> float:
        lin = [c / 255 / 12.92 if c / 255 <= 0.03928 else ((c / 255 + 0.055) / 1.055) ** 2.4 for c in rgb]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    hi, lo = sorted((lum(_rgb(a)), lum(_rgb(b))), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def chart_defects(measured: dict) -> list[str]:
    """Texts outside their SVG, labels under 4.5:1 against what they sit on, legend entries without a swatch,
    and lines or marks the legend does not name."""
    bad: list[str] = []
    tol = 0.5
    for chart in measured["charts"]:
        svg = chart["box"]
        for t in chart["texts"]:
            b = t["box"]
            if b["right"] - b["left"] <= 0:
                continue
            if b["left"] < svg["left"] - tol or b["right"] > svg["right"] + tol or b["top"] < svg["top"] - tol or b["bottom"] > svg["bottom"] + tol:
                bad.append(f"{chart['id']}: {t['text']!r} overflows the SVG ({b} outside {svg})")
            ratio = contrast_ratio(t["fill"], t["bg"])
            if ratio < 4.5:
                bad.append(f"{chart['id']}: {t['text']!r} is {t['fill']} on {t['bg']}: contrast {ratio:.2f} < 4.5")
        for e in chart["legend"]:
            if not e["swatch"] or e["swatch"] == "none":
                bad.append(f"{chart['id']}: legend entry {e['text']!r} has no swatch")
        if chart["series"] and len(chart["legend"]) != chart["series"]:
            bad.append(f"{chart['id']}: {chart['series']} lines but {len(chart['legend'])} legend entries")
    legend_classes = " ".join(e["cls"] for legend in measured["legends"] for e in legend)
    for legend in measured["legends"]:
        for e in legend:
            sw = e["swatch"]
            painted = sw and (_rgb(sw["bg"]) != (0, 0, 0) or "rgba(0, 0, 0, 0)" not in sw["bg"]) and not sw["bg"].startswith("rgba(0, 0, 0, 0")
            stroked = sw and float(sw["borderWidth"].rstrip("px") or 0) > 0
            if not sw or sw["width"] <= 0 or not (painted or stroked):
                bad.append(f"legend entry {e['text']!r} has no swatch")
    budget_marks = " ".join(m for chart in measured["charts"] if chart["id"].endswith("budget-chart") or "budget-chart" in chart["id"] for m in chart["marks"])
    for mark, key in (("overcommit", "mark-overcommit"), ("budget-limit", "mark-budget-limit"), ("request", "mark-request"), ("free-at-failure", "mark-free-at-failure")):
        if re.search(rf"\b{mark}\b", budget_marks) and key not in legend_classes:
            bad.append(f"the budget chart draws {mark} but the legend has no entry for it")
    for kind in set(re.findall(r"\bseg-([a-z_]+)\b", budget_marks)):
        if f"key-{kind}" not in legend_classes:
            bad.append(f"the budget chart draws segment {kind} but the legend has no entry for it")
    return bad


# The gallery's classes, plus the pages where the old charts went wrong: vLLM over its u*total with free
# memory beside it, an empty window, a budget far over a busy card, SGLang over the card with two ranks.
CHART_PAGES = {
    **{k: v[0] for k, v in CLASS_FIXTURES.items()},
    "vllm_over_budget": "vllm-startup-kv/pos_v0_no_cache_blocks.log",
    "vllm_weights_dont_fit": "vllm-weights-dont-fit/pos_v0_l4_13b.log",
    "vllm_busy_card": "vllm-free-memory-at-start/pos_v1_cuda0_b200.log",
    "sglang_two_ranks_over": "sglang-startup-kv/pos_g3_2026_tp2.log",
    "sglang_weights_h200": "sglang-weights-dont-fit/pos_h200_g3_2026.log",
    "runtime_tp2": "runtime-activation-oom/pos_decode_oom_2025_tp2.log",
    # Issue 26's four charts: vLLM at a runtime OOM (with and without a profile), SGLang on two nodes, DCGM.
    "vllm_runtime_profile": "vllm-runtime-activation/pos_v0_serving_with_profile.log",
    "vllm_runtime_no_profile": "vllm-runtime-activation/pos_v1_execute_model.log",
    "sglang_two_nodes": "multi-node/pos_sglang_tp16_two_nodes",
    "dcgm_query_range": "multi-node/pos_query_range_foreign_pod",
}


@pytest.mark.parametrize("name", sorted(CHART_PAGES))
def test_charts_fit_have_keys_and_readable_labels(name: str, run_cli, tmp_path: Path, proxy) -> None:
    report = tmp_path / f"{name}.html"
    run_cli("diagnose", str(FIXTURES / CHART_PAGES[name]), "--format", "html", "-o", str(report))
    measured = probe(report, proxy, tmp_path)
    assert measured["charts"] or name in ("host_oom", "unknown_oom"), "no chart measured"
    assert chart_defects(measured) == []


@pytest.mark.parametrize(
    "args",
    [
        ("--model", str(FIXTURES / "plan/qwen3-omni-30b-a3b"), "--gpu", "H100-80GB", "--context-len", "32768", "--at", "0.7"),
        ("--model", str(FIXTURES / "plan/llama-3.1-8b"), "--gpu", "A10", "--context-len", "131072", "--system", "vllm"),
    ],
    ids=["sglang", "vllm"],
)
def test_plan_page_has_the_budget_bar(args: tuple[str, ...], run_cli, tmp_path: Path, proxy) -> None:
    page = tmp_path / "plan.html"
    page.write_text(run_cli("plan", *args, "--format", "html").out, encoding="utf-8")
    assert '<svg id="plan-budget-chart"' in page.read_text() and "<script" not in page.read_text()
    measured = probe(page, proxy, tmp_path)
    assert [c["id"] for c in measured["charts"]] == ["plan-budget-chart"]
    assert chart_defects(measured) == []
    md = run_cli("plan", *args, "--format", "markdown").out
    assert "### GPU memory" in md and "| GPU | total |" in md


def test_stress_page_long_names_many_series(tmp_path: Path, proxy) -> None:
    """Labels far longer than the fixtures': the margins follow them, nothing leaves the viewBox."""
    from markupsafe import Markup

    from oomdoctor.base.units import GIB
    from oomdoctor.report.render import bars as bar_data
    from oomdoctor.report.render import svg

    bars = [
        {**bar_data.sglang_bar("DP3 TP7 on node-with-a-long-hostname-42 at the recommended value", 80 * GIB, 79 * GIB, 75 * GIB, 0.9), "total_assumed": True},
        bar_data.vllm_bar("GPU 0", 80 * GIB, 0.5, 60 * GIB, 62 * GIB, graphs=GIB, other=3 * GIB),
        {
            "name": "KV token pool",
            "unit": "tokens",
            "total_bytes": 1_234_567,
            "segments": [{"kind": "kv", "label": "held", "bytes": 1_200_000}, {"kind": "free", "label": "available", "bytes": 34_567}],
            "request": {"requested_bytes": 1_234_000, "free_bytes": 34_567},
        },
    ]
    timeline = {f"rank-with-a-long-name-{i}": [{"label": label, "bytes": (8 - i) * GIB * (3 - j), "line": j} for j, label in enumerate(("load begin of a very long milestone name", "KV pool built", "OOM"))] for i in range(8)}
    samples = {f"pid {1000 + i} python -m sglang.launch_server --model-path /models/x": [{"t": t, "bytes": (i + 1) * t * GIB} for t in range(5)] for i in range(6)}
    legend = svg.budget_legend([{"kind": s["kind"], "label": s["label"]} for b in bars for s in b["segments"]], bars)
    body = Markup("").join([legend, svg.budget_bars(bars), svg.timeline(timeline), svg.samples_chart(samples)])
    page = tmp_path / "stress.html"
    page.write_text(f"<!DOCTYPE html><html><head><style>{svg.CHART_CSS}</style></head><body style='max-width:1000px'>{body}</body></html>", encoding="utf-8")
    measured = probe(page, proxy, tmp_path)
    assert {c["id"] for c in measured["charts"]} == {"budget-chart", "timeline-chart", "samples-chart"}
    assert chart_defects(measured) == []


def test_the_probe_catches_clipping_low_contrast_and_bare_legends(tmp_path: Path, proxy) -> None:
    # The control: the old charts' defects, drawn on purpose, are each reported.
    page = tmp_path / "bad.html"
    page.write_text(
        '<!DOCTYPE html><html><body><div class="legend"><span class="legend-entry">no swatch</span></div>'
        '<svg id="budget-chart" class="chart" viewBox="0 0 200 40" width="400" xmlns="http://www.w3.org/2000/svg">'
        '<rect class="seg seg-free" x="0" y="0" width="120" height="30" fill="#e6e6e6"/><text x="60" y="20" text-anchor="middle" fill="#ffffff">7.9</text>'
        '<line class="limit overcommit" x1="100" y1="0" x2="100" y2="30" stroke="red"/><text x="190" y="20">79.65 GiB (assumed card)</text></svg>'
        '<svg id="timeline-chart" class="chart" viewBox="0 0 200 40" width="400" xmlns="http://www.w3.org/2000/svg"><polyline points="0,0 10,10" stroke="blue"/>'
        '<g class="legend-entry"><text x="5" y="30">TP0</text></g></svg></body></html>',
        encoding="utf-8",
    )
    bad = "\n".join(chart_defects(probe(page, proxy, tmp_path)))
    for needle in ("'79.65 GiB (assumed card)' overflows", "'7.9' is", "legend entry 'no swatch' has no swatch", "legend entry 'TP0' has no swatch", "draws overcommit", "draws segment free"):
        assert needle in bad, (needle, bad)


def test_window_not_checked_and_host_steps(run_cli, tmp_path: Path) -> None:
    report = tmp_path / "r.html"
    run_cli("diagnose", str(FIXTURES / "sglang-weights-dont-fit/pos_70b_single_h100.log"), "--format", "html", "-o", str(report))
    text = html_lib.unescape(report.read_text())
    assert "No workable value: the lowest needed 0.930 is above the highest allowed 0.873." in text
    assert "0.930 to 0.873" not in text
    for fixture in ("host-oom/pos_kernel_killer.log", "oom-foreign-process/pos_two_processes_2024.log", "unknown-oom/sglang_driver_oom_no_context.log", "sglang-startup-kv/pos_h100_qwen3_omni_g2.log"):
        view = run_cli("diagnose", str(FIXTURES / fixture), "--format", "json").json
        res = run_cli("diagnose", str(FIXTURES / fixture), "--format", "html", "-o", str(report))
        assert res.code == 3
        items = re.findall(r"<li>(.*?): <code>(.*?)</code></li>", report.read_text().split("<h2>Not checked</h2>")[1].split("<h2>")[0], re.S)
        commands = [html_lib.unescape(c).split(" (or")[0] for _, c in items]
        assert len(commands) == len(set(commands)), f"{fixture}: a command is listed twice: {commands}"
        if "host-oom" in fixture:
            assert view["verdict"]["class"] == "host_oom"
            joined = " ".join(commands)
            # The kernel's record is the evidence line: only whether a cgroup limit did it is left to ask.
            assert "dmesg -T" not in joined and "journalctl -k" not in joined and "memory.events" in joined
            assert "nvidia-smi" not in joined


def test_vllm_bar_draws_u_total_and_says_why(run_cli, tmp_path: Path) -> None:
    report = tmp_path / "r.html"
    run_cli("diagnose", str(FIXTURES / "vllm-startup-kv/pos_v0_no_cache_blocks.log"), "--format", "html", "-o", str(report))
    text = html_lib.unescape(report.read_text())
    assert 'class="limit budget-limit"' in text and "mark-budget-limit" in text
    assert "over u*total by 4.01 GiB" in text and re.search(r"over by [\d.]+ GiB", text) is None
    assert "vLLM may use u*total = 0.5 * 44.35 GiB = 22.17 GiB" in text and "raise u to use it" in text


def test_bar_arithmetic_agrees_with_budget() -> None:
    # render/ imports nothing above units, so the bars repeat two of budget.py's formulas: they must agree.
    from oomdoctor.base.units import GIB
    from oomdoctor.memory import budget
    from oomdoctor.report.render import bars

    for pre, weights, y in ((78 * GIB, 60 * GIB, 0.7), (79 * GIB + 123, 33 * GIB + 7, 0.88), (20 * GIB, 21 * GIB, 0.9)):
        bar = bars.sglang_bar("GPU", 80 * GIB, pre, weights, y)
        assert bar["kv_budget_bytes"] == budget.sglang_kv_budget_bytes(pre, pre - weights, y)
        dynamic = sum(s["bytes"] for s in bar["segments"] if s["kind"] in ("dynamic", "graphs"))
        assert dynamic == budget.sglang_dynamic_region_bytes(pre, y)
    for total, u, non_kv in ((int(79.19 * GIB), 0.9, int(63.3 * GIB)), (int(44.35 * GIB), 0.5, int(26.18 * GIB))):
        bar = bars.vllm_bar("GPU", total, u, non_kv - 2 * GIB, non_kv)
        assert bar["kv_budget_bytes"] == budget.vllm_kv_budget_bytes(total, u, non_kv)
        assert bar["limit_bytes"] == round(total * u)
        assert sum(s["bytes"] for s in bar["segments"]) == total  # the bar fills the card, never overruns it


def test_a_derivation_step_prints_its_result_once(run_cli) -> None:
    """'0.7 * 78.00 GiB - 60.00 GiB = -5.40 GiB -> -5.40 GiB' printed the result twice (trust issue)."""
    seed = REPO / "tests" / "fixtures" / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log"
    for fmt in ("text", "markdown"):
        out = run_cli("diagnose", str(seed), "--format", fmt).out
        assert "= -5.40 GiB" in out and "-5.40 GiB -> -5.40 GiB" not in out


def test_a_request_larger_than_the_scale_is_drawn_to_the_edge(run_cli, tmp_path: Path) -> None:
    # A shape bug asking 127 TiB of a 23.56 GiB card: the request box ends where the chart does.
    log = tmp_path / "huge.log"
    log.write_text(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 130206.04 GiB. GPU 0 has a total capacity of 23.56 GiB of which 16.57 GiB is free. "
        "Including non-PyTorch memory, this process has 6.98 GiB memory in use. Of the allocated memory 5.41 GiB is allocated by PyTorch, and 476.00 MiB is "
        "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n"
    )
    report = tmp_path / "r.html"
    run_cli("diagnose", str(log), "--format", "html", "-o", str(report))
    text = report.read_text()
    [svg_width] = {float(w) for w in re.findall(r'<svg[^>]*\bwidth="([\d.]+)"', text)} or {760.0}
    widths = [float(w) for w in re.findall(r'width="([\d.]+)"[^>]*class="request"', text)]
    assert widths and max(widths) <= svg_width

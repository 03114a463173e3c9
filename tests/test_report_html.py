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

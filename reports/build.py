"""Build the example-report gallery: one HTML report and one Markdown summary per class.

    python reports/build.py                # rewrite reports/*.html and reports/*.md
    python reports/build.py --screenshots  # also reports/screenshots/*.png (needs chromium)

Run from anywhere; paths in the reports are relative to the repository so that the output does not
depend on the machine. tests/test_report_gallery.py fails when the committed gallery is stale.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "reports"

GALLERY = {
    "startup_kv": "sglang-startup-kv/pos_h100_qwen3_omni_g2.log",
    "startup_kv_vllm": "vllm-startup-kv/pos_v1_32k_does_not_fit.log",
    "weights_dont_fit": "sglang-weights-dont-fit/pos_70b_single_h100.log",
    "cuda_graph": "sglang-cuda-graph-oom/pos_capture_failed_2025.log",
    "runtime_activation": "runtime-activation-oom/pos_decode_oom_2025_tp2.log",
    "runtime_activation_vllm": "vllm-runtime-activation/pos_v0_serving_with_profile.log",
    "multi_node": "multi-node/pos_sglang_tp16_two_nodes",
    "encoder_starvation": "encoder-oom/pos_omni_compute_fn.log",
    "foreign_process": "oom-foreign-process/pos_self_in_middle_2025.log",
    "foreign_process_dcgm": "multi-node/pos_query_range_foreign_pod",
    "fragmentation": "allocator-fragmentation/pos_fragmented_decode.log",
    "kv_exhaustion": "sglang-kv-exhaustion/pos_prefill_alloc_2025.log",
    "host_oom": "host-oom/pos_kernel_killer.log",
    "unknown_oom": "unknown-oom/sglang_driver_oom_no_context.log",
    "none": "none/healthy_2026.log",
}


def render(fixture: str, fmt: str) -> str:
    """One report, rendered in-process with paths relative to the repository."""
    from oomdoctor.api import diagnose, load_rules
    from oomdoctor.report.render import html, markdown
    from oomdoctor.report.view import build_view

    rules = load_rules()
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        view = build_view(diagnose([f"tests/fixtures/{fixture}"], rules=rules))
    finally:
        os.chdir(cwd)
    if fmt == "html":
        return html.render(view, {r.id: r.docs for r in rules})
    return markdown.render(view)


def build(out: Path = OUT) -> list[Path]:
    written = []
    for name, fixture in GALLERY.items():
        for fmt, suffix in (("html", ".html"), ("markdown", ".md")):
            path = out / f"{name}{suffix}"
            path.write_text(render(fixture, fmt), encoding="utf-8")
            written.append(path)
    return written


def screenshots(out: Path = OUT) -> None:
    chrome = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not chrome:
        raise SystemExit("chromium is needed for screenshots (apt-get install chromium)")
    shots = out / "screenshots"
    shots.mkdir(exist_ok=True)
    for name in GALLERY:
        subprocess.run(
            [chrome, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1100,1500", f"--screenshot={shots / (name + '.png')}", (out / f"{name}.html").as_uri()],
            check=True,
            capture_output=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--screenshots", action="store_true")
    args = ap.parse_args()
    for p in build():
        print(p.relative_to(REPO))
    if args.screenshots:
        screenshots()


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()

"""`oomdoctor diagnose --summary` (many independent incidents, a process pool) and `oomdoctor run --textfile`."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from test_commands_run_and_plan import CHILD

from oomdoctor.commands import fleet
from oomdoctor.commands import run as flight

import fakes
from conftest import FIXTURES, REPO


def _fleet(tmp_path: Path) -> Path:
    root = tmp_path / "fleet"
    root.mkdir()
    for name in ("sglang-startup-kv/pos_h100_qwen3_omni_g2.log", "vllm-startup-kv", "torch-activation-oom"):
        src = FIXTURES / name
        for log in [src] if src.is_file() else sorted(src.glob("pos_*.log"))[:2]:
            shutil.copy(log, root / f"{src.parent.name if src.is_file() else name}-{log.name}")
    shutil.copytree(FIXTURES / "multi-node" / "pos_sglang_tp16_two_nodes", root / "two-nodes")  # a subdirectory is one incident
    (root / "empty").mkdir()  # no log in it: listed, not fatal
    (root / "binary.log").write_bytes(b"\x00\x01\x02\xff" * 100)  # not a log: listed with its reason
    (root / "quiet.log").write_text("[2026-03-02 10:00:01] The server is fired up and ready to roll!\n")
    return root


def test_summary_counts_classes_and_fixes_and_lists_bad_inputs(tmp_path: Path, run_cli) -> None:
    root = _fleet(tmp_path)
    res = run_cli("diagnose", "--summary", str(root), str(tmp_path / "missing.log"), "--format", "json")
    assert res.code == 0, res.err
    doc = res.json
    assert doc["kind"] == fleet.SUMMARY_KIND
    rows = {Path(r["path"]).name: r for r in doc["incidents"]}
    assert rows["sglang-startup-kv-pos_h100_qwen3_omni_g2.log"]["class"] == "startup_kv"
    assert rows["sglang-startup-kv-pos_h100_qwen3_omni_g2.log"]["fix"] == "raise --mem-fraction-static"
    assert rows["sglang-startup-kv-pos_h100_qwen3_omni_g2.log"]["system"] == "sglang"
    assert set(rows["two-nodes"]) == {"path", "class", "system", "confidence", "evidence", "fix"}
    failed = {Path(r["path"]).name: r["error"] for r in doc["failed"]}
    assert rows["quiet.log"]["class"] == "none" and rows["quiet.log"]["fix"] is None
    assert set(failed) == {"empty", "missing.log", "binary.log"}
    assert all("\n" not in reason and reason for reason in failed.values())
    agg = doc["aggregate"]
    assert agg["incidents"] == len(rows) + 3 and agg["failed"] == 3 and agg["diagnosed"] == len(rows)
    assert sum(e["count"] for e in agg["by_class_system"]) == len(rows)
    assert any(e["class"] == "startup_kv" and e["system"] == "sglang" for e in agg["by_class_system"])
    assert any(e["fix"] == "raise --mem-fraction-static" for e in agg["fixes"])


def test_summary_text_table_and_no_progress_off_a_terminal(tmp_path: Path, run_cli) -> None:
    res = run_cli("diagnose", "--summary", str(_fleet(tmp_path)))
    assert res.code == 0
    assert "class" in res.out and "startup_kv" in res.out and "most common fixes:" in res.out
    assert "could not be diagnosed:" in res.out and "empty:" in res.out
    assert "incidents" not in res.err  # progress goes to a terminal only


def test_summary_pool_matches_inline(tmp_path: Path) -> None:
    """The process pool (the CLI's own worker, pickled) gives the rows the inline path gives, in input order."""
    from oomdoctor.commands.cli import _summary_row

    root = _fleet(tmp_path)
    opts = fleet.Options()
    seen: list[tuple[int, int]] = []
    pooled = fleet.run([str(root)], _summary_row, opts, workers=3, progress=lambda d, t: seen.append((d, t)))
    inline = fleet.run([str(root)], _summary_row, opts, workers=1)
    assert pooled == inline and len(pooled) == len(fleet.incidents([str(root)]))
    assert seen[-1] == (len(pooled), len(pooled))


def test_summary_refuses_other_formats_and_bundles(tmp_path: Path, run_cli) -> None:
    log = str(FIXTURES / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log")
    assert run_cli("diagnose", "--summary", log, "--format", "html").code == 2
    assert run_cli("diagnose", "--summary", log, "--bundle", str(tmp_path / "b.zip")).code == 2


def test_summary_bundle_directory_is_one_incident() -> None:
    from oomdoctor.input.kinds import is_bundle_dir

    bundle = FIXTURES / "collected-foreign-process" / "pos_bundle_two_processes"
    assert is_bundle_dir(str(bundle))
    assert fleet.incidents([str(bundle)]) == [str(bundle)]
    assert str(bundle) in fleet.incidents([str(bundle.parent)])


def test_run_textfile_written_on_oom(tmp_path: Path) -> None:
    script = tmp_path / "server.py"
    script.write_text(CHILD)
    out, err = io.BytesIO(), io.BytesIO()
    scenario = fakes.load("accounted")
    textfile = tmp_path / "textfile_collector"
    code = flight.run(
        [sys.executable, str(script)],
        str(tmp_path / "rec"),
        interval_ms=20,
        nvml_module=fakes.FakeNvml(scenario),
        psutil_module=fakes.FakePsutil(scenario),
        stdout=out,
        stderr=err,
        textfile_dir=str(textfile),
    )
    assert code == 1
    prom = textfile / "oomdoctor-rec.prom"  # no --port in the command: the --out directory's name
    assert prom.is_file() and f"fleet samples at {prom}".encode() in err.getvalue()
    assert sorted(p.name for p in textfile.iterdir()) == [prom.name]  # atomic: no temporary left
    families = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    (incident,) = families["oomdoctor_incident_timestamp_seconds"].samples
    assert incident.labels["class"] == "runtime_activation" and incident.labels["system"] == "sglang" and incident.labels["server"] == "rec"
    assert incident.value > 1.7e9  # the log's own timestamp, unix seconds
    recommended = {s.labels["flag"]: s.value for s in families["oomdoctor_recommended_value"].samples}
    assert 0 < recommended["--mem-fraction-static"] < 0.838


def test_run_clean_exit_writes_no_textfile(tmp_path: Path) -> None:
    out, err = io.BytesIO(), io.BytesIO()
    textfile = tmp_path / "tf"
    code = flight.run([sys.executable, "-c", "print('ok')"], str(tmp_path / "rec"), psutil_module=None, nvml_module=fakes.FakeNvml(fakes.load("idle_reserved")), stdout=out, stderr=err, textfile_dir=str(textfile))
    assert code == 0 and not textfile.exists()


def test_run_textfile_unwritable_is_said_not_fatal(tmp_path: Path) -> None:
    script = tmp_path / "server.py"
    script.write_text(CHILD)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the directory should be")
    out, err = io.BytesIO(), io.BytesIO()
    code = flight.run([sys.executable, str(script)], str(tmp_path / "rec"), psutil_module=None, nvml_module=fakes.FakeNvml(fakes.load("idle_reserved")), stdout=out, stderr=err, textfile_dir=str(blocker))
    assert code == 1
    assert b"cannot write" in err.getvalue() and (tmp_path / "rec" / "latest" / "diagnosis.json").is_file()


def test_run_cli_has_textfile_option() -> None:
    res = subprocess.run([sys.executable, "-m", "oomdoctor", "run", "--help"], capture_output=True, text=True, cwd=REPO)
    assert "--textfile" in res.stdout

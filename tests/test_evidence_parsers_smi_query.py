"""nvidia-smi -q text and gpustat --json beside a log: the framebuffer figures, the processes, their verdict.

Each form pasted alone, beside a log, inside an issue body's code block, and given as a file; a
positive (a tenant on the server's GPU) and a near miss (accounting mode's finished processes, a
gpustat list of the server's own family) built in the real programs' layouts (tests/fixtures/README.md).
"""

from __future__ import annotations

import json
from pathlib import Path

from oomdoctor.advice.registry import known_advice
from oomdoctor.base.units import MIB
from oomdoctor.evidence.parsers import gpustat, smi_query
from oomdoctor.evidence.parsers import nvidia_smi as smi
from oomdoctor.inference.rule_engine import load_rules
from oomdoctor.pipeline.diagnosis import diagnose

from conftest import FIXTURES

RULES = load_rules(known_advice=known_advice())
PASTED = FIXTURES / "pasted"
QUERY = PASTED / "smi_query_535_sglang_tp2_tenant.txt"
GPUSTAT = PASTED / "gpustat_json_sglang_tp2_tenant.json"
SMI = FIXTURES / "smi-foreign-process"
# The SGLang TP=2 prefill OOM of smi-foreign-process/pos_sglang_table_after_cut_oom, without its table.
LOG_LINES = 15


def _log(tmp_path: Path) -> Path:
    log = tmp_path / "server.log"
    log.write_text("\n".join((SMI / "pos_sglang_table_after_cut_oom.log").read_text().splitlines()[:LOG_LINES]) + "\n")
    return log


def test_query_gives_each_gpus_framebuffer_and_processes() -> None:
    events = smi_query.read_text(QUERY.read_text(), "q.txt")
    gpus = [e for e in events if e.kind == smi.KIND_SMI_GPU]
    assert [(g.get("index"), g.get("bus_id"), g.get("name")) for g in gpus] == [(0, "00000000:18:00.0", "NVIDIA H100 80GB HBM3"), (1, "00000000:2A:00.0", "NVIDIA H100 80GB HBM3")]
    # The framebuffer's figures, not BAR1's (131072 MiB) or the protected memory's (0 MiB) below them.
    assert [(g.get("total_bytes"), g.get("reserved_bytes"), g.get("used_bytes"), g.get("free_bytes")) for g in gpus] == [
        (81559 * MIB, 553 * MIB, 80512 * MIB, 494 * MIB),
        (81559 * MIB, 553 * MIB, 67928 * MIB, 13078 * MIB),
    ]
    procs = sorted((e.get("gpu"), e.get("pid"), e.get("name"), e.get("used_bytes")) for e in events if e.kind == smi.KIND_SMI_PROCESS)
    assert procs == [(0, 402113, "sglang::scheduler_TP0", 67912 * MIB), (0, 917220, "/home/ana/venv/bin/python", 12584 * MIB), (1, 402114, "sglang::scheduler_TP1", 67912 * MIB)]
    driver = [e for e in events if e.kind == smi.KIND_SMI_DRIVER]
    assert [(e.get("driver_version"), e.get("cuda_version")) for e in driver] == [("535.54.03", "12.2")]
    assert {e.get("source") for e in gpus} == {"query"} and {e.get("snapshot") for e in events} == {"q1"}


def test_query_near_misses_accounted_processes_none_and_wddm() -> None:
    text = (SMI / "neg_sglang_query_accounted_only.log").read_text()
    events = smi_query.read_text(text, "neg.log")
    # Accounting mode's finished processes (a past peak) are not processes holding memory now.
    assert [e for e in events if e.kind == smi.KIND_SMI_PROCESS] == []
    assert [e.get("used_bytes") for e in events if e.kind == smi.KIND_SMI_GPU] == [80512 * MIB, 67928 * MIB]
    none = "GPU 00000000:01:00.0\n    Product Name                          : NVIDIA L4\n    Processes                             : None\n"
    assert [e.kind for e in smi_query.read_text(none, "n")] == [smi.KIND_SMI_NO_PROCESSES, smi.KIND_SMI_GPU]
    wddm = "GPU 00000000:02:00.0\n    Processes\n        Process ID                        : 1152\n            Type                          : C+G\n            Name                          : C:\\Windows\\System32\\dwm.exe\n            Used GPU Memory               : Not available in WDDM driver model\n"
    (proc,) = [e for e in smi_query.read_text(wddm, "w") if e.kind == smi.KIND_SMI_PROCESS]
    assert (proc.get("pid"), proc.get("type"), proc.get("used_bytes")) == (1152, "C+G", None)


def test_gpustat_json_gives_gpus_and_processes_whatever_its_layout() -> None:
    events = gpustat.read_text(GPUSTAT.read_text(), "g.json")
    gpus = [(e.get("index"), e.get("name"), e.get("used_bytes"), e.get("total_bytes")) for e in events if e.kind == smi.KIND_SMI_GPU]
    assert gpus == [(0, "NVIDIA H100 80GB HBM3", 80512 * MIB, 81559 * MIB), (1, "NVIDIA H100 80GB HBM3", 67928 * MIB, 81559 * MIB)]
    procs = sorted((e.get("gpu"), e.get("pid"), e.get("name"), e.get("used_bytes")) for e in events if e.kind == smi.KIND_SMI_PROCESS)
    assert procs == [(0, 402113, "sglang::scheduler_TP0", 67912 * MIB), (0, 917220, "python", 12584 * MIB), (1, 402114, "sglang::scheduler_TP1", 67912 * MIB)]
    # An empty list is "no process"; null (gpustat could not read them) is no evidence either way.
    doc = json.loads(GPUSTAT.read_text())
    doc["gpus"] = doc["gpus"][:1]
    doc["gpus"][0]["processes"] = []
    assert smi.KIND_SMI_NO_PROCESSES in {e.kind for e in gpustat.read_text(json.dumps(doc, indent=4), "e")}
    doc["gpus"][0]["processes"] = None
    assert {e.kind for e in gpustat.read_text(json.dumps(doc, indent=4), "n")} == {smi.KIND_SMI_GPU, smi.KIND_SMI_DRIVER}
    assert gpustat.looks_like_gpustat(json.loads(GPUSTAT.read_text())) and not gpustat.looks_like_gpustat({"gpus": [{"memory.used": 1}]})


def _verdict(paths: list[Path]) -> tuple[str, float, str | None]:
    d = diagnose([str(p) for p in paths], RULES)
    return d.verdict_class, d.verdict_confidence, d.verdict_rule


def test_a_tenant_in_the_query_or_gpustat_is_the_verdict_beside_the_log_in_a_body_or_as_a_file(tmp_path: Path) -> None:
    log = _log(tmp_path)
    alone = _verdict([log])
    # The log alone: the free memory before the weights points at something else, at 0.7.
    assert alone == ("foreign_process", 0.7, "sglang-startup-foreign-memory")
    table = _verdict([SMI / "pos_sglang_table_after_cut_oom.log"])
    assert table == ("foreign_process", 0.8, "smi-foreign-process")
    # The same tenant read from each form is the same finding as from the table.
    assert _verdict([SMI / "pos_sglang_query_after_cut_oom.log"]) == table
    assert _verdict([SMI / "pos_sglang_gpustat_after_cut_oom.log"]) == table
    assert _verdict([FIXTURES / "issue-body" / "foreign_process_smi_query_block.md"]) == table
    assert _verdict([FIXTURES / "issue-body" / "foreign_process_gpustat_json_block.md"]) == table
    (tmp_path / "smi-q.txt").write_text(QUERY.read_text())
    (tmp_path / "gpustat.json").write_text(GPUSTAT.read_text())
    assert _verdict([log, tmp_path / "smi-q.txt"]) == table
    assert _verdict([log, tmp_path / "gpustat.json"]) == table


def test_the_near_misses_leave_the_logs_own_verdict(tmp_path: Path) -> None:
    alone = _verdict([_log(tmp_path)])
    assert _verdict([SMI / "neg_sglang_query_accounted_only.log"]) == alone
    assert _verdict([SMI / "neg_sglang_gpustat_family_only.log"]) == alone


def test_a_query_pasted_alone_names_the_card_and_the_tenant(tmp_path: Path) -> None:
    d = diagnose([str(QUERY)], RULES)
    assert d.verdict_class == "none" and d.facts is not None
    assert d.facts.get("gpu_names") == ("NVIDIA H100 80GB HBM3",) and d.facts.get("driver_version") == "535.54.03"
    assert d.facts.get("capacity_bytes") == 81559 * MIB and d.facts.get("cuda_version") == "12.2"


def test_gpustat_pasted_alone_names_the_card_and_given_alone_is_read_as_gpustat(tmp_path: Path) -> None:
    pasted = tmp_path / "gpustat.txt"
    pasted.write_text("$ gpustat --json\n" + GPUSTAT.read_text())
    d = diagnose([str(pasted)], RULES)
    assert d.verdict_class == "none" and d.facts is not None
    assert d.facts.get("gpu_names") == ("NVIDIA H100 80GB HBM3",) and d.facts.get("capacity_bytes") == 81559 * MIB
    # No OOM to measure the tenant against: it is named, and no finding is made of it.
    assert d.facts.get("smi_foreign_pids") == (917220,)
    alone = diagnose([str(GPUSTAT)], RULES)
    assert alone.verdict_class == "none" and [(i.path, i.kind) for i in alone.inputs] == [(str(GPUSTAT), "gpustat")]

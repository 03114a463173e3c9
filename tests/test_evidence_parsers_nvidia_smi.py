"""nvidia-smi output pasted beside a log: the default table (three driver eras), the CSV queries, and their damage."""

from __future__ import annotations

from pathlib import Path

from oomdoctor.base.units import MIB
from oomdoctor.evidence.parsers import nvidia_smi as smi
from oomdoctor.input.files import InputStats
from oomdoctor.pipeline.events import read_events

from conftest import FIXTURES

PASTED = FIXTURES / "pasted"
RECORDED = FIXTURES / "gpu-recorded"


def _events(path: Path, kinds: frozenset[str] = smi.KINDS) -> tuple[list, InputStats]:
    stats = InputStats(path=str(path))
    return [e for e in read_events(str(path), stats) if e.kind in kinds], stats


def _of(events: list, kind: str) -> list:
    return [e for e in events if e.kind == kind]


def test_recorded_580_table_with_a_figure_wider_than_its_column() -> None:
    events, stats = _events(RECORDED / "nvidia-smi-foreign.txt")
    (driver,) = _of(events, smi.KIND_SMI_DRIVER)
    assert (driver.get("driver_version"), driver.get("cuda_version")) == ("580.159.04", "13.0")
    (gpu,) = _of(events, smi.KIND_SMI_GPU)
    assert (gpu.get("index"), gpu.get("name"), gpu.get("bus_id")) == (0, "NVIDIA H200", "00000000:00:06.0")
    assert (gpu.get("used_bytes"), gpu.get("total_bytes")) == (112437 * MIB, 143771 * MIB)
    assert [r.line for r in gpu.refs] == [9, 10]  # the GPU line and its memory line
    (proc,) = _of(events, smi.KIND_SMI_PROCESS)
    assert (proc.get("gpu"), proc.get("pid"), proc.get("name")) == (0, 542, "/opt/torch/.venv/bin/python3")
    # "11242... |": five digits shown, at least one more hidden.
    assert proc.get("used_bytes") is None and proc.get("used_at_least_bytes") == 112420 * MIB
    assert stats.unparsed_lines == 0


def test_535_table_two_gpus_engine_titles_and_a_tenant() -> None:
    events, stats = _events(PASTED / "smi_535_sglang_tp2_tenant.txt")
    gpus = _of(events, smi.KIND_SMI_GPU)
    assert [(g.get("index"), g.get("used_bytes") // MIB, g.get("total_bytes") // MIB) for g in gpus] == [(0, 80512, 81559), (1, 67928, 81559)]
    procs = [(p.get("gpu"), p.get("pid"), p.get("type"), p.get("name"), p.get("used_bytes") // MIB) for p in _of(events, smi.KIND_SMI_PROCESS)]
    assert procs == [
        (0, 402113, "C", "sglang::scheduler_TP0", 67912),
        (0, 917220, "C", "/home/ana/venv/bin/python", 12584),
        (1, 402114, "C", "sglang::scheduler_TP1", 67912),
    ]
    assert stats.unparsed_lines == 0


def test_470_table_truncated_names_and_one_pid_on_two_gpus() -> None:
    events, _ = _events(PASTED / "smi_470_vllm_v0_tp2.txt")
    assert {g.get("name") for g in _of(events, smi.KIND_SMI_GPU)} == {"NVIDIA A100-SXM..."}
    procs = [(p.get("gpu"), p.get("pid"), p.get("name"), p.get("used_bytes") // MIB) for p in _of(events, smi.KIND_SMI_PROCESS)]
    assert procs == [(0, 21807, "python3", 72874), (0, 21904, "...onda3/envs/vllm/bin/python", 570), (1, 21904, "...onda3/envs/vllm/bin/python", 72874)]


def test_418_table_without_gi_ci_cut_inside_the_process_table() -> None:
    events, _ = _events(PASTED / "smi_418_old_cut.txt")
    assert _of(events, smi.KIND_SMI_DRIVER)[0].get("cuda_version") == "10.1"
    assert [(g.get("index"), g.get("used_bytes") // MIB) for g in _of(events, smi.KIND_SMI_GPU)] == [(0, 31550), (1, 11)]
    # The last row stops after its PID's first digits: it is not a process of PID 30.
    assert [(p.get("pid"), p.get("used_bytes") // MIB) for p in _of(events, smi.KIND_SMI_PROCESS)] == [(30311, 31539)]


def test_compute_apps_csv_with_header_and_an_unresolved_name() -> None:
    events, stats = _events(PASTED / "smi_apps_vllm_v1.txt")
    procs = [(p.get("pid"), p.get("name"), p.get("used_bytes") // MIB, p.get("gpu")) for p in _of(events, smi.KIND_SMI_PROCESS)]
    # "[Not Found]": nvidia-smi could not resolve the PID (another PID namespace): no name, not a title.
    assert procs == [(3318, "VLLM::EngineCore", 588, None), (3402, "VLLM::Worker_TP0", 70914, None), (3403, "VLLM::Worker_TP1", 70914, None), (1187, None, 9120, None)]
    assert all(p.refs[1].line == 1 for p in _of(events, smi.KIND_SMI_PROCESS))  # each row cites the header
    assert stats.unparsed_lines == 0


def _lines(*texts: str) -> list[smi.Event]:
    return smi.read_text("\n".join(texts), "x")


def test_compute_apps_csv_with_gpu_bus_id_and_without_header() -> None:
    rows = _lines("pid, process_name, gpu_bus_id, used_gpu_memory [MiB]", "2290, VLLM::Worker_TP0, 00000000:18:00.0, 70210 MiB", "9913, /opt/conda/bin/python3, 00000000:18:00.0, [N/A]")
    assert [(e.get("pid"), e.get("gpu_bus_id"), e.get("used_bytes")) for e in rows] == [(2290, "00000000:18:00.0", 70210 * MIB), (9913, "00000000:18:00.0", None)]
    (bare,) = _lines("12345, python3, 75620 MiB")
    assert (bare.get("pid"), bare.get("name"), bare.get("used_bytes")) == (12345, "python3", 75620 * MIB)
    # A header and no row: no process held a compute context when it was taken.
    (empty,) = _lines("pid, process_name, used_gpu_memory [MiB]")
    assert empty.kind == smi.KIND_SMI_NO_PROCESSES


def test_query_gpu_csv_recorded() -> None:
    (gpu,) = smi.read_text((RECORDED / "nvidia-smi-query.csv").read_text(), "q.csv")
    assert (gpu.get("name"), gpu.get("total_bytes"), gpu.get("used_bytes"), gpu.get("driver_version")) == ("NVIDIA H200", 143771 * MIB, 0, "580.159.04")


def test_near_misses_are_not_nvidia_smi() -> None:
    # MIG device rows have no power cell; llama.cpp's sizes end in MiB; a CSV that is not a query.
    assert _lines("|  1    3   0   0  |  14366MiB / 19968MiB | 28      0 |  2   0    1    0    0 |") == []
    assert _lines("load_hparams: model size:         2198.75 MiB") == []
    assert _lines("step, loss, lr", "10, 2.31, 0.0001") == []
    # A GPU line a later, unrelated line does not complete: the memory line must be the next line.
    gpu, memory = _lines("|   0  NVIDIA H200                    On  |   00000000:00:06.0 Off |                    0 |", "[2025-03-04 09:10:44 TP0] Prefill batch.", "| N/A   38C    P0             81W /  700W |  112437MiB / 143771MiB |")
    assert gpu.get("name") == "NVIDIA H200" and gpu.get("used_bytes") is None
    assert memory.get("name") is None and memory.get("used_bytes") == 112437 * MIB


def _rewrite(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _procs(path: Path) -> list[tuple]:
    events, _ = _events(path)
    return [(p.get("pid"), p.get("used_bytes")) for p in _of(events, smi.KIND_SMI_PROCESS)]


EXPECTED = [(402113, 67912 * MIB), (917220, 12584 * MIB), (402114, 67912 * MIB)]


def test_damage_a_markdown_quote_in_a_bug_report(tmp_path: Path) -> None:
    table = (PASTED / "smi_535_sglang_tp2_tenant.txt").read_text().splitlines()
    body = "The server died, nvidia-smi right after it:\n\n" + "\n".join("> " + line for line in table) + "\n\nAny idea what holds the memory on GPU 0?\n"
    path = _rewrite(tmp_path, "report.md", body)
    assert _procs(path) == EXPECTED
    events, _ = _events(path)
    assert [g.get("used_bytes") // MIB for g in _of(events, smi.KIND_SMI_GPU)] == [80512, 67928]


def test_damage_bare_in_an_issue_body_beside_a_fenced_log(tmp_path: Path) -> None:
    table = (PASTED / "smi_535_sglang_tp2_tenant.txt").read_text()
    body = "### Describe the bug\n\nThe server crashes under load with the error below.\n\n```\nRuntimeError: CUDA error: out of memory\n```\n\nHere is what the GPUs held when I checked:\n\n" + table + "\nThanks for any help with this one.\n"
    assert _procs(_rewrite(tmp_path, "issue.md", body)) == EXPECTED


def test_damage_a_terminal_80_columns_wide(tmp_path: Path) -> None:
    # The 89-column table hard-wrapped at 80: every long row's last 9 columns on a line of their own.
    wrapped = []
    for line in (PASTED / "smi_535_sglang_tp2_tenant.txt").read_text().splitlines():
        while len(line) > 80:
            wrapped.append(line[:80])
            line = line[80:]
        wrapped.append(line)
    path = _rewrite(tmp_path, "wrapped.txt", "\n".join(wrapped) + "\n")
    events, _ = _events(path)
    assert [(g.get("index"), g.get("used_bytes") // MIB) for g in _of(events, smi.KIND_SMI_GPU)] == [(0, 80512), (1, 67928)]
    assert _procs(path) == EXPECTED


def test_damage_docker_compose_prefix(tmp_path: Path) -> None:
    table = (PASTED / "smi_535_sglang_tp2_tenant.txt").read_text().splitlines()
    assert _procs(_rewrite(tmp_path, "compose.log", "\n".join("sglang-1  | " + line for line in table) + "\n")) == EXPECTED


def test_a_log_without_pasted_machine_state_imports_neither_parser() -> None:
    import subprocess
    import sys

    log = FIXTURES / "runtime-activation-oom" / "pos_decode_oom_2025_tp2.log"
    code = (
        "import sys\n"
        "from oomdoctor.pipeline.events import read_events\n"
        "from oomdoctor.input.files import InputStats\n"
        f"read_events({str(log)!r}, InputStats(path='x'))\n"
        "names = ('oomdoctor.evidence.parsers.nvidia_smi', 'oomdoctor.evidence.parsers.environment', 'oomdoctor.evidence.parsers.host', 'oomdoctor.inference.facts.pasted')\n"
        "print(','.join(m for m in names if m in sys.modules) or 'none')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "none"

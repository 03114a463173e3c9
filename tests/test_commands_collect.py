"""`oomdoctor collect` driven by recorded NVML/psutil scenarios at its one seam, nvidia-smi parsing,
the restricted snapshot unpickler, and diagnose on what collect writes."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from oomdoctor.base.errors import InputError
from oomdoctor.base.outcomes import GpuEvidence
from oomdoctor.commands.cli import _exit_code
from oomdoctor.commands.collect import collect
from oomdoctor.evidence import allocator
from oomdoctor.live import procinfo, smi

import fakes
from conftest import FIXTURES

GIB = 1 << 30


def run(name: str, tmp_path: Path, logs: list[str] = ()):
    s = fakes.load(name)
    manifest, evidence = collect(
        str(tmp_path / "b"),
        list(logs),
        nvml_module=fakes.FakeNvml(s),
        psutil_module=fakes.FakePsutil(s),
        proc_root=str(tmp_path / "noproc"),
        env={"CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
        smi=lambda: (None, "nvidia-smi is not on PATH"),
        now=1764401000.0,
        containerized=s["containerized"],
    )
    # collect returns what it found, not an exit code; the CLI's one table maps it.
    assert evidence is (GpuEvidence.AVAILABLE if manifest["gpu_evidence"]["unavailable"] is None else GpuEvidence.UNAVAILABLE)
    assert int(_exit_code(evidence)) == s["expected_exit"]
    on_disk = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert on_disk == manifest
    return manifest


def test_idle_gpu_with_reserved_memory(tmp_path: Path) -> None:
    m = run("idle_reserved", tmp_path)
    (g,) = m["gpus"]
    assert (g["uuid"], g["pci_bus_id"], g["name"]) == ("GPU-8a1c3f0e-5f41-4b8e-9d4c-1e2f3a4b5c6d", "00000000:19:00.0", "NVIDIA H100 80GB HBM3")
    assert (g["total_bytes"], g["used_bytes"], g["reserved_bytes"]) == (81559 << 20, 547 << 20, 531 << 20)
    assert g["processes"] == [] and m["gpu_evidence"] == {"source": "nvml", "unavailable": None, "errors": [], "driver_version": "550.54.15"}


def test_two_processes_on_one_gpu(tmp_path: Path) -> None:
    m = run("two_processes", tmp_path)
    procs = {p["pid"]: p for p in m["gpus"][0]["processes"]}
    assert procs[4242]["is_server"] and not procs[5555]["is_server"]
    assert procs[4242]["used_bytes"] == 66560 << 20 and procs[5555]["username"] == "alice"
    assert "sk-secretsecretsecret0123" not in json.dumps(m) and "--api-key <redacted>" in procs[4242]["cmdline"]
    assert procs[4242]["environ"] == {"CUDA_VISIBLE_DEVICES": "0", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert m["gpus"][1]["processes"] == []
    assert m["host"]["visible_devices"]["mapping"] == "exact"
    assert m["host"]["visible_devices"]["cuda_ordinals"] == [
        {"cuda_ordinal": 0, "entry": "0", "uuid": "GPU-1f2e3d4c-0000-4a4a-9b9b-111122223333", "pci_bus_id": "00000000:3B:00.0", "certain": True}
    ]


def test_mig_per_process_memory_is_not_available(tmp_path: Path) -> None:
    m = run("mig", tmp_path)
    (g,) = m["gpus"]
    assert g["mig_mode"] is True
    assert g["processes"][0]["used_bytes"] is None and g["processes"][0]["is_server"]


def test_not_supported_is_a_value(tmp_path: Path) -> None:
    m = run("not_supported", tmp_path)
    (g,) = m["gpus"]
    assert g["reserved_bytes"] is None and g["total_bytes"] == 15360 << 20
    assert "NotSupported" in g["processes"]["unavailable"]
    assert any("nvmlDeviceGetComputeRunningProcesses" in e for e in m["gpu_evidence"]["errors"])


def test_container_pid_namespace_is_said(tmp_path: Path) -> None:
    m = run("container_pidns", tmp_path)
    procs = m["gpus"][0]["processes"]
    assert [p["status"] for p in procs] == ["other_pid_namespace", "other_pid_namespace"]
    assert "--pid=host" in procs[0]["reason"] and m["host"]["containerized"] is True


def test_vanished_pid(tmp_path: Path) -> None:
    m = run("vanished_pid", tmp_path)
    procs = {p["pid"]: p for p in m["gpus"][0]["processes"]}
    assert procs[4242]["status"] == "ok" and procs[9999]["status"] == "vanished"


def test_no_driver(tmp_path: Path) -> None:
    m = run("no_driver", tmp_path)
    assert m["gpus"] == [] and m["gpu_evidence"]["source"] is None
    assert "NVML could not start" in m["gpu_evidence"]["unavailable"] and "nvidia-smi is not on PATH" in m["gpu_evidence"]["unavailable"]


def test_cli_collect_on_this_machine_and_diagnose_the_bundle(tmp_path: Path) -> None:
    # The CI machine has no GPU: collect must say why and still bundle the logs, which diagnose reads.
    log = FIXTURES / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log"
    out = tmp_path / "b"
    r = subprocess.run([sys.executable, "-m", "oomdoctor", "collect", "-o", str(out), "--log", str(log)], capture_output=True, text=True, cwd="/")
    manifest = json.loads((out / "manifest.json").read_text())
    if manifest["gpu_evidence"]["unavailable"]:
        assert r.returncode == 5 and "GPU evidence unavailable" in r.stderr
    else:
        assert r.returncode == 0
    assert manifest["logs"] == ["logs/pos_h100_qwen3_omni_g2.log"]
    d = subprocess.run([sys.executable, "-m", "oomdoctor", "diagnose", str(out), "--format", "json"], capture_output=True, text=True, cwd="/")
    assert d.returncode == 3
    data = json.loads(d.stdout)
    assert data["verdict"]["class"] == "startup_kv"
    assert {i["kind"] for i in data["inputs"]} == {"log", "gpus"}


def test_collect_imports_no_torch(tmp_path: Path) -> None:
    code = (
        "import sys\nfrom oomdoctor.commands.collect import collect\n"
        f"collect({str(tmp_path / 'b')!r}, smi=None)\n"
        "print(' '.join(m for m in ('torch',) if m in sys.modules) or 'none')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert r.stdout.strip().endswith("none"), r.stderr


def test_visible_devices_mapping() -> None:
    assert procinfo.visible_devices({})["mapping"] == "all GPUs visible"
    assert procinfo.visible_devices({"CUDA_VISIBLE_DEVICES": "1,0"})["mapping"].startswith("uncertain")
    assert procinfo.visible_devices({"CUDA_VISIBLE_DEVICES": "GPU-1f2e,MIG-aa"})["mapping"] == "exact"


def test_nspid_map(tmp_path: Path) -> None:
    root = tmp_path / "proc"
    (root / "4242").mkdir(parents=True)
    (root / "4242" / "status").write_text("Name:\tpython3\nNSpid:\t4242\t17\n")
    (root / "1").mkdir()
    (root / "1" / "status").write_text("Name:\tinit\nNSpid:\t1\n")
    (root / "self").mkdir()
    assert procinfo.nspid_map(str(root)) == {4242: 17}


SMI_CSV = """index, uuid, pci.bus_id, name, memory.total [MiB], memory.used [MiB], memory.free [MiB], memory.reserved [MiB]
0, GPU-1f2e3d4c-0000-4a4a-9b9b-111122223333, 00000000:3B:00.0, NVIDIA H100 80GB HBM3, 81559 MiB, 81200 MiB, 359 MiB, 531 MiB
1, GPU-1f2e3d4c-0000-4a4a-9b9b-444455556666, 00000000:5D:00.0, NVIDIA H100 80GB HBM3, 81559 MiB, [N/A], [N/A], [N/A]
"""
SMI_APPS = """GPU-1f2e3d4c-0000-4a4a-9b9b-111122223333, 00000000:3B:00.0, 4242, python3, 66560
GPU-1f2e3d4c-0000-4a4a-9b9b-111122223333, 00000000:3B:00.0, 5555, python3, [N/A]
"""
SMI_XML = """<?xml version="1.0" ?><nvidia_smi_log><driver_version>550.54.15</driver_version>
<gpu id="00000000:3B:00.0"><product_name>NVIDIA H100 80GB HBM3</product_name><uuid>GPU-1f2e</uuid><minor_number>0</minor_number>
<mig_mode><current_mig>Disabled</current_mig></mig_mode>
<fb_memory_usage><total>81559 MiB</total><reserved>531 MiB</reserved><used>81200 MiB</used><free>359 MiB</free></fb_memory_usage>
<processes><process_info><pid>4242</pid><type>C</type><process_name>python3</process_name><used_memory>66560 MiB</used_memory></process_info>
<process_info><pid>5555</pid><type>C</type><process_name>python3</process_name><used_memory>N/A</used_memory></process_info></processes></gpu></nvidia_smi_log>"""


def test_nvidia_smi_csv_and_xml() -> None:
    gpus = smi.parse_gpu_csv(SMI_CSV)
    assert [(g.index, g.total_bytes, g.used_bytes) for g in gpus] == [(0, 81559 << 20, 81200 << 20), (1, 81559 << 20, None)]
    smi.attach_apps(gpus, smi.parse_apps_csv(SMI_APPS))
    assert [(p.pid, p.used_bytes) for p in gpus[0].processes] == [(4242, 66560 << 20), (5555, None)]
    (x,) = smi.parse_smi_xml(SMI_XML)
    assert (x.pci_bus_id, x.reserved_bytes, x.mig_mode, [p.pid for p in x.processes]) == ("00000000:3B:00.0", 531 << 20, False, [4242, 5555])
    with pytest.raises(ValueError):
        smi.parse_smi_xml("<html/>")


class _Boom:
    def __reduce__(self):
        return (os.system, ("touch /tmp/oomdoctor-pwned",))


def test_hostile_pickle_is_rejected_and_nothing_runs(tmp_path: Path, run_cli) -> None:
    marker = Path("/tmp/oomdoctor-pwned")
    marker.unlink(missing_ok=True)
    p = tmp_path / "snapshot.pickle"
    p.write_bytes(pickle.dumps({"segments": [], "x": _Boom()}))
    with pytest.raises(InputError, match=r"rejected pickle: it refers to (posix|os)\.system"):
        allocator.load_snapshot(str(p))
    res = run_cli("diagnose", str(p))
    assert res.code == 5 and "rejected pickle" in res.err and "Traceback" not in res.err
    assert not marker.exists()


def _snapshot() -> dict:
    mib = 1 << 20
    return {
        "segments": [
            {"device": 0, "address": 0, "total_size": 60 * mib, "segment_pool_id": (0, 0), "blocks": [
                {"size": 20 * mib, "state": "active_allocated", "frames": [{"filename": "/x/torch/nn/f.py", "line": 1, "name": "linear"}, {"filename": "model.py", "line": 42, "name": "forward"}]},
                {"size": 30 * mib, "state": "inactive"},
                {"size": 10 * mib, "state": "active_pending_free"}]},
            {"device": 0, "address": 1, "total_size": 40 * mib, "segment_pool_id": (0, 1), "blocks": [
                {"size": 25 * mib, "state": "inactive"}, {"size": 15 * mib, "state": "active_allocated", "frames": []}]},
        ],
        "device_traces": [[{"action": "alloc", "size": 1}, {"action": "oom", "size": 48 * mib, "device_free": 2 * mib}]],
    }


def test_snapshot_facts() -> None:
    f = allocator.snapshot_facts(_snapshot())
    mib = 1 << 20
    assert f["largest_free_block_bytes"] == 30 * mib
    assert f["snapshot_inactive_split_bytes"] == 55 * mib and f["snapshot_inactive_bytes"] == 55 * mib
    assert f["snapshot_private_pool_bytes"] == 40 * mib
    assert f["top_allocation_sites"] == [{"site": "model.py:42 forward", "bytes": 20 * mib}]
    assert f["snapshot_ooms"] == [{"size": 48 * mib, "device_free": 2 * mib}]


def test_snapshot_pickle_drives_fragmentation(tmp_path: Path, run_cli) -> None:
    p = tmp_path / "snapshot.pickle"
    p.write_bytes(pickle.dumps(_snapshot()))
    log = tmp_path / "oom.log"
    log.write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 48.00 MiB. GPU 0 has a total capacity of 79.19 GiB of which 2.00 MiB is free. Including non-PyTorch memory, this process has 79.10 GiB memory in use. Of the allocated memory 78.00 GiB is allocated by PyTorch, and 40.00 MiB is reserved by PyTorch but unallocated. See documentation for Memory Management\n")
    d = run_cli("diagnose", str(log), str(p), "--format", "json").json
    assert d["verdict"]["rule"] == "allocator-stats-fragmentation"
    assert d["verdict"]["class"] == "fragmentation"


def test_saved_nvidia_smi_output_given_to_diagnose(tmp_path: Path, run_cli) -> None:
    gpus_csv = tmp_path / "gpus.csv"
    gpus_csv.write_text(SMI_CSV)
    xml = tmp_path / "smi.xml"
    xml.write_text(SMI_XML)
    log = FIXTURES / "runtime-activation-oom" / "pos_prefill_oom_2026.log"
    d = run_cli("diagnose", str(log), str(gpus_csv), str(xml), "--format", "json").json
    kinds = [i["kind"] for i in d["inputs"]]
    assert kinds.count("gpus") == 2 and "log" in kinds
    md = run_cli("diagnose", str(log), str(xml), "--format", "markdown").out
    assert "| NVIDIA driver | 550.54.15 |" in md and "| GPU | NVIDIA H100 80GB HBM3, 79.19 GiB |" in md
    bad = tmp_path / "bad.xml"
    bad.write_text("<html></html>")
    res = run_cli("diagnose", str(log), str(bad))
    assert res.code == 3 and "not nvidia-smi XML" in res.err

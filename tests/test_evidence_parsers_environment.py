"""Environment reports (collect_env in both of its formats, sglang.check_env, nvidia-smi -L) to facts-to-be."""

from __future__ import annotations

from pathlib import Path

from oomdoctor.evidence.parsers import environment as env
from oomdoctor.input.files import InputStats
from oomdoctor.pipeline.events import read_events

from conftest import FIXTURES

PASTED = FIXTURES / "pasted"


def _read(path: Path) -> tuple[dict[str, str], list[tuple[tuple[int, ...], str]], InputStats]:
    stats = InputStats(path=str(path))
    events = read_events(str(path), stats)
    facts: dict[str, str] = {}
    for e in events:
        if e.kind == env.KIND_ENV:
            facts.setdefault(e.get("name"), e.get("value"))
    gpus = [(e.get("indices"), e.get("name")) for e in events if e.kind == env.KIND_ENV_GPU]
    return facts, gpus, stats


def test_collect_env_up_to_vllm_0_8() -> None:
    facts, gpus, stats = _read(PASTED / "collect_env_vllm_0_7.txt")
    assert facts == {
        "torch_version": "2.5.1+cu124",
        "cuda_build_version": "12.4",
        "cuda_version": "12.4.131",
        "driver_version": "550.90.07",
        "vllm_version": "0.7.2",
        "nvidia_visible_devices": "all",
        "cuda_visible_devices": "2,3",
    }
    assert gpus == [((i,), "NVIDIA A100-SXM4-40GB") for i in range(4)]
    assert stats.unparsed_lines <= 1


def test_collect_env_padded_format_one_gpu_on_the_header_line() -> None:
    facts, gpus, stats = _read(PASTED / "collect_env_vllm_0_9.txt")
    assert (facts["torch_version"], facts["cuda_version"], facts["driver_version"], facts["vllm_version"]) == ("2.7.0+cu126", "12.6.85", "570.133.20", "0.9.1")
    assert gpus == [((0,), "NVIDIA H200")]
    assert stats.unparsed_lines == 0


def test_sglang_check_env() -> None:
    facts, gpus, stats = _read(PASTED / "check_env_sglang.txt")
    assert gpus == [((0, 1, 2, 3, 4, 5, 6, 7), "NVIDIA H20")]  # grouped by name, compute capability not a GPU
    assert (facts["sglang_version"], facts["torch_version"], facts["driver_version"], facts["cuda_build_version"], facts["vllm_version"]) == ("0.4.3.post2", "2.5.1+cu124", "550.127.08", "12.4", "0.7.2")
    assert stats.unparsed_lines == 0


def _line(text: str) -> list:
    from oomdoctor.base.evidence import Line, LineRef

    return env.EnvironmentParser().feed(Line(LineRef("x", 1, text=text), text))


def test_nvidia_smi_list_and_near_misses() -> None:
    (gpu,) = _line("GPU 3: NVIDIA H100 80GB HBM3 (UUID: GPU-6f1e0c1e-2b3a-4a6b-9c1d-0d7b7b0f3a11)")
    assert (gpu.get("indices"), gpu.get("name")) == ((3,), "NVIDIA H100 80GB HBM3")
    # "Module Not Found" and "Could not collect" are absence; a torch OOM naming its GPU is not a GPU line.
    assert _line("anthropic: Module Not Found") == []
    for absent in ("vllm: Module Not Found", "Nvidia driver version: Could not collect"):
        (e,) = _line(absent)  # read (the line is cited), but no version
        assert (e.get("name"), e.get("value")) == ("absent", None)
    assert _line("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB") == []

"""Traceback frames placed by the engines' generated phase map (data/knowledge/frame_phases.tsv), read by
oomdoctor/evidence/phase_map.py for the phase step's frames (oomdoctor/evidence/phase.py)."""

from __future__ import annotations

import json

import pytest

from oomdoctor.api import diagnose
from oomdoctor.evidence import phase, phase_map

from conftest import FIXTURES, REPO

SITE = "/usr/local/lib/python3.12/dist-packages/"


@pytest.fixture(scope="module")
def generated() -> dict[str, dict]:
    rows = json.loads((REPO / "oomdoctor/data/knowledge/phases.json").read_text(encoding="utf-8"))
    return {row["module"]: row for row in rows}


def _listed(row: dict, qualname: str) -> set[tuple[str, str]]:
    return {(p, how) for p, how, _releases, functions in row["groups"] if qualname in functions}


def _no_entry_names(func: str, path: str = "") -> bool:
    """No [[frames]] entry of phases.toml matches the frame: what decides is the map."""
    return not any(
        (r.func is not None and r.func.search(func) and (r.within is None or r.within.search(path))) or (r.path is not None and r.path.search(path))
        for r in phase.tables().frames
    )


@pytest.mark.parametrize(
    ("path", "module"),
    [
        (SITE + "sglang/srt/model_executor/model_runner.py", "sglang.srt.model_executor.model_runner"),
        ("/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", "sglang.srt.managers.scheduler"),
        ("/home/me/vllm/vllm/v1/worker/gpu_model_runner.py", "vllm.v1.worker.gpu_model_runner"),
        ("C:\\venv\\Lib\\site-packages\\vllm\\worker\\worker.py", "vllm.worker.worker"),
        (SITE + "vllm/model_executor/__init__.py", "vllm.model_executor"),
        ("/vllm-workspace/vllm-ascend/vllm_ascend/worker/model_runner_v1.py", "vllm_ascend.worker.model_runner_v1"),
    ],
)
def test_a_frames_file_is_its_engine_module(path: str, module: str) -> None:
    assert phase_map.module_of(path) == module


@pytest.mark.parametrize("path", [SITE + "torch/nn/modules/module.py", "/home/me/train.py", "<source>", SITE + "transformers/modeling_utils.py"])
def test_a_file_outside_the_engines_packages_is_no_module_of_the_map(path: str) -> None:
    assert phase_map.module_of(path) is None


@pytest.mark.parametrize(
    ("path", "func", "module", "qualname", "expected"),
    [
        # SGLang 0.5.2x renamed init_memory_pool: the declared root, no [[frames]] entry.
        (SITE + "sglang/srt/model_executor/model_runner.py", "alloc_memory_pool", "sglang.srt.model_executor.model_runner", "ModelRunner.alloc_memory_pool", "kv_pool"),
        # vLLM V0's worker sizing its cache engine.
        (SITE + "vllm/worker/worker.py", "initialize_cache", "vllm.worker.worker", "Worker.initialize_cache", "kv_pool"),
        # MiniCPM-V's vision tower, placed by its name in the model file.
        (SITE + "vllm/model_executor/models/minicpmv.py", "get_vision_hidden_states", "vllm.model_executor.models.minicpmv", "MiniCPMV2_6.get_vision_hidden_states", "encoder"),
        # SGLang's attention backend's graph buffers (init_cuda_graph_state), allocated for capture.
        (SITE + "sglang/srt/layers/attention/triton_backend.py", "init_cuda_graph_state", "sglang.srt.layers.attention.triton_backend", "TritonAttnBackend.init_cuda_graph_state", "graph_capture"),
    ],
)
def test_a_function_the_map_names_has_its_phase(generated: dict, path: str, func: str, module: str, qualname: str, expected: str) -> None:
    listed = _listed(generated[module], qualname)
    assert listed and all(p == expected for p, _ in listed), listed
    assert _no_entry_names(func, path)
    assert phase.classify_frames([(path, func)]) == expected


def test_a_function_the_map_does_not_list_falls_back_to_its_modules_phase(generated: dict) -> None:
    vision = SITE + "vllm/model_executor/models/idefics2_vision_model.py"
    assert generated["vllm.model_executor.models.idefics2_vision_model"]["phase"] == "encoder" and _no_entry_names("embed_patches", vision)
    assert phase.classify_frames([(vision, "embed_patches")]) == "encoder"
    # A model file's forward code runs in profiling, capture and serving alike: its module names no phase.
    llama = SITE + "vllm/model_executor/models/llama.py"
    assert generated["vllm.model_executor.models.llama"]["phase"] == "prefill_decode"
    assert phase.classify_frames([(llama, "rotate_half")]) is None


def test_a_near_miss_module_falls_back_to_the_tables() -> None:
    # A file no release in the map has (a fork's, a newer release's): the map says nothing of it.
    renamed = SITE + "sglang/srt/model_executor/model_runner_v9.py"
    assert phase_map.module_of(renamed) == "sglang.srt.model_executor.model_runner_v9" and phase_map.frame(renamed, "alloc_memory_pool") is None
    assert phase.classify_frames([(renamed, "alloc_memory_pool")]) is None
    # ... while a [[frames]] name still places it.
    assert phase.classify_frames([(renamed, "init_memory_pool")]) == "kv_pool"


def test_a_name_with_several_phases_names_none(generated: dict) -> None:
    # SGLang's ModelRunner.__init__ is reached from the capture and the loading roots in different releases.
    row = generated["sglang.srt.model_executor.model_runner"]
    assert len({p for p, _ in _listed(row, "ModelRunner.__init__")}) > 1
    assert phase.classify_frames([(SITE + "sglang/srt/model_executor/model_runner.py", "__init__")]) is None


def test_precedence_and_finer_phases_hold_with_the_map() -> None:
    runner = SITE + "sglang/srt/model_executor/model_runner.py"
    # A forward inside graph capture is a capture failure.
    assert phase.classify_frames([(runner, "init_cuda_graphs"), (runner, "forward"), (runner, "forward_decode")]) == "graph_capture"
    # The map's weight_loading for a layer's create_weights is the finer parameter creation.
    assert phase.classify_frames([(SITE + "vllm/model_executor/layers/linear.py", "create_weights")]) == "weight_creation"
    # The map's prefill_decode forward_extend is a prefill.
    assert phase.classify_frames([(runner, "forward"), (runner, "forward_extend")]) == "prefill"


def test_real_pastes_get_the_maps_phase() -> None:
    """sglang#1498 (the triton backend's init_cuda_graph_state allocating under CudaGraphRunner) and vllm#4087
    (MiniCPM-V's vision tower): no [[frames]] entry names their frames; the map places them."""
    d = diagnose([str(FIXTURES / "field/sgl-sgl-project-sglang-1498.log")])
    assert (d.phase.name, d.phase.source, d.verdict_class) == ("graph_capture", "frames", "cuda_graph")
    d = diagnose([str(FIXTURES / "field/vllm-vllm-project-vllm-4087.log")])
    assert (d.phase.name, d.phase.source, d.verdict_class) == ("encoder", "frames", "encoder_starvation")


def test_the_map_is_read_only_for_a_traceback_with_engine_frames() -> None:
    phase_map._lines.cache_clear()
    phase_map.module.cache_clear()
    torch_only = [(SITE + "torch/nn/modules/module.py", "_call_impl"), ("/home/me/train.py", "main"), ("<source>", "model")]
    assert phase.classify_frames(torch_only) == "script_forward"
    assert phase_map._lines.cache_info().currsize == 0
    phase.classify_frames([(SITE + "vllm/worker/worker.py", "initialize_cache")])
    assert phase_map._lines.cache_info().currsize == 1


def test_every_module_line_is_found_and_no_other() -> None:
    """Every module the file holds is found (its lines sorted, as the generator writes them), and no other."""
    with open(phase_map.PATH, "rb") as fh:
        lines = fh.read().split(b"\n")[1:-1]
    assert lines == sorted(lines)
    for line in lines:
        name = line.split(b"\t", 1)[0].decode()
        found = phase_map.module(name)
        assert found is not None and found.phase == line.split(b"\t")[1].decode(), name
    for absent in ("a", "sglang.srt.model_executor.model_runner_v9", "vllm.v1.worker.gpu_model_runne", "zzz"):
        assert phase_map.module(absent) is None, absent


def test_a_torch_layer_constructor_is_weight_creation_and_its_forward_is_not() -> None:
    """torch/nn/modules/<layer>.py __init__ allocates the layer's parameters (a model built on the GPU by a script
    whose model file no table names); the same layer's forward, or an __init__ elsewhere, says nothing of the kind."""
    script = "/home/u/pyllama/llama/model_single.py"
    linear = SITE + "torch/nn/modules/linear.py"
    building = [(script, "__init__"), (script, "__init__"), (linear, "__init__")]
    assert phase.classify_frames(building) == "weight_creation"
    assert phase.classify_frames([(script, "__init__"), (SITE + "torch/nn/modules/sparse.py", "reset_parameters")]) == "weight_creation"
    # Near misses: the layer's forward while serving, and a constructor outside torch's modules.
    runner = SITE + "sglang/srt/model_executor/model_runner.py"
    assert phase.classify_frames([(runner, "forward"), (runner, "forward_decode"), (linear, "forward")]) != "weight_creation"
    assert phase.classify_frames([(SITE + "torch/utils/data/dataloader.py", "__init__")]) != "weight_creation"


def test_the_post_load_hook_of_a_quantization_method_is_loading_and_its_forward_is_not() -> None:
    """process_weights_after_loading (both engines: repacking weights for a kernel once after they are read) sits in
    quantization modules that are otherwise a forward pass's (tools/knowledge/classify.py's name rule)."""
    fp8 = SITE + "vllm/model_executor/layers/quantization/fp8.py"
    assert phase.classify_frames([(fp8, "process_weights_after_loading")]) == "weight_loading"
    assert phase.classify_frames([(SITE + "sglang/srt/layers/quantization/fp8.py", "process_weights_after_loading")]) == "weight_loading"
    # The same module's apply runs in the forward pass: under the runner's execute_model it is serving, and alone it
    # names no phase (a quantization module's phase is too broad to decide one).
    runner = SITE + "vllm/v1/worker/gpu_model_runner.py"
    assert phase.classify_frames([(runner, "execute_model"), (fp8, "apply")]) == "serving"
    assert phase.classify_frames([(fp8, "apply")]) is None

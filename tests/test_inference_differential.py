"""The differential of an OOM no rule decides: candidates by phase, evidence as odds, the check, the words."""

from __future__ import annotations

from pathlib import Path

from oomdoctor.advice.registry import known_advice
from oomdoctor.base.units import GIB, MIB
from oomdoctor.inference import differential as df
from oomdoctor.inference.rule_engine import load_rules
from oomdoctor.pipeline.diagnosis import diagnose

from conftest import FIXTURES

RULES = load_rules(known_advice=known_advice())


def _classes(facts: dict) -> list[str]:
    return [c.klass for c in df.differential(facts)]


def test_uniform_over_the_phase_and_one_unnamed_cause() -> None:
    # Graph capture read from frames: cuda_graph and another tenant only; each 1 / (2 + 1 unnamed).
    got = df.differential({"phase": "graph_capture", "phase_source": "frames"})
    assert [(c.klass, c.likelihood) for c in got] == [("cuda_graph", 0.33), ("foreign_process", 0.33)]
    # A phase read from the lines around the failure only: the other classes stay, one step down.
    weak = df.differential({"phase": "graph_capture", "phase_source": "context"})
    assert [c.klass for c in weak[:2]] == ["cuda_graph", "foreign_process"] and len(weak) == df.SHOWN
    assert all(c.evidence_against == ("the lines before the failure point to the graph capture phase",) for c in weak[2:])


def test_the_class_contract_excludes_fragmentation_and_host_oom_needs_a_kill() -> None:
    facts = {"phase": "decode", "phase_source": "frames", "requested_bytes": 2 * GIB, "reclaimable_bytes": GIB}
    assert "fragmentation" not in _classes(facts)
    assert "fragmentation" in _classes({**facts, "reclaimable_bytes": 3 * GIB})
    assert "host_oom" not in _classes(facts) and "host_oom" in _classes({**facts, "host_kill_signal": True})


def test_each_step_of_evidence_is_a_factor_of_four_in_the_odds() -> None:
    base = {"phase": "kv_pool", "phase_source": "frames"}
    even = {c.klass: c.likelihood for c in df.differential(base)}
    assert even["weights_dont_fit"] == even["startup_kv"]
    # Weights above the card by the model's name: two steps for (16 to 1 odds against the others' 1).
    shifted = df.differential({**base, "expected_weights_low_share": 1.4, "expected_weights_share": 1.6, "expected_weights_low_bytes": 112 * GIB})
    first = shifted[0]
    assert (first.klass, first.likelihood) == ("weights_dont_fit", round(16 / (16 + 1 + 1 + 1), 2))
    assert first.evidence_for == ("the model's weights, by its name, are at least 112.00 GiB a GPU: more than the card",)


def test_no_confident_answer_from_one_weak_signal() -> None:
    # PyTorch holding 99% of the card with nothing freed: one step for two classes, never 0.7.
    facts = {"phase": "unknown", "phase_source": "none", "allocated_share": 0.99, "unallocated_share": 0.0003, "capacity_bytes": 80 * GIB}
    assert all(c.likelihood < 0.7 for c in df.differential(facts))


def test_the_summary_names_two_and_the_check_and_says_when_they_tie() -> None:
    facts = {"phase": "decode", "phase_source": "frames", "server_ready": True, "requested_bytes": 2 * GIB, "reclaimable_bytes": 512 * MIB}
    got = df.differential({**facts, "unallocated_share": 0.02, "reserved_unallocated_bytes": 300 * MIB})
    text = df.summary(got)
    assert text.startswith("Most likely runtime_activation (0.")
    assert ", else " in text and "to tell them apart: the traceback above the OOM" in text
    tied = df.summary(df.differential({"phase": "unknown", "phase_source": "none"}))
    assert tied.startswith("Equally likely on this evidence: ")


def test_unknown_oom_fixtures_all_carry_a_differential_in_the_json(run_cli) -> None:
    for log in sorted((FIXTURES / "unknown-oom").glob("*.log")):
        data = run_cli("diagnose", str(log), "--format", "json").json
        if data["verdict"]["class"] != "unknown_oom" and data["verdict"]["rule"] is not None and not data["findings"][0].get("hypothesis"):
            assert "differential" not in data["verdict"]  # a decided verdict carries none (an undecided rule's lead does)
            continue
        diff = data["verdict"]["differential"]
        assert diff and data["findings"][0]["differential"] == diff, log.name
        assert all(set(c) == {"class", "likelihood", "for", "against", "check"} for c in diff)
        assert data["verdict"]["summary"].startswith(("Most likely", "Equally likely")), log.name
        if data["verdict"]["class"] != "unknown_oom":
            # The differential's first candidate a step ahead: named, as a hypothesis under the cap, with its check.
            assert data["verdict"]["class"] == diff[0]["class"] and data["verdict"]["confidence"] <= 0.45, log.name
            assert data["findings"][0]["hypothesis"] is True and data["findings"][0]["would_decide"][0] == diff[0]["check"]


def test_a_paste_naming_a_small_model_ranks_weights_last(tmp_path: Path) -> None:
    log = FIXTURES / "prior-weights-exceed-card" / "neg_vllm_8b_on_one_card.log"
    d = diagnose([str(log)], RULES)
    diff = d.findings[0].extra["differential"]
    # A PyTorch allocator OOM in a vLLM server is not its KV budget check: startup_kv is ruled out, and with
    # the weights small for the card nothing leads by a step.
    assert d.verdict_class == "unknown_oom" and "startup_kv" not in [c["class"] for c in diff]
    weights = next(c for c in diff if c["class"] == "weights_dont_fit")
    assert weights["against"] == ["the model's weights, by its name, are at most 16.39 GiB a GPU: less than half the card"]


def test_a_server_that_was_up_is_no_step_between_the_classes_of_serving() -> None:
    # Up and serving rules out the classes of startup; it does not tell activations from an encoder.
    facts = {"phase": "unknown", "phase_source": "none", "server_ready": True, "model_named_multimodal": True}
    odds = {c.klass: c.likelihood for c in df.differential(facts)}
    assert "weights_dont_fit" not in odds and odds["runtime_activation"] <= odds["encoder_starvation"]


def test_private_pools_rule_out_the_steps_before_graph_capture_not_the_ones_after() -> None:
    base = {"phase": "startup", "phase_source": "frames", "oom_message_complete": True}
    even = {c.klass: c.likelihood for c in df.differential(base)}
    assert even["weights_dont_fit"] == even["startup_kv"] == even["foreign_process"]
    got = {c.klass: c for c in df.differential({**base, "private_pool_bytes": 100 * MIB})}
    # Two steps (16 to 1) against each class of the steps before capture; capture itself gains nothing
    # over the classes after it (every later OOM finds the pools there too).
    assert got["weights_dont_fit"].likelihood < got["cuda_graph"].likelihood / 10
    assert got["startup_kv"].likelihood < got["cuda_graph"].likelihood / 10
    assert got["cuda_graph"].likelihood == got["foreign_process"].likelihood and got["cuda_graph"].evidence_for == ()


def test_an_engines_own_cudamalloc_excludes_fragmentation_and_an_async_one_is_a_runtime_buffer() -> None:
    facts = {"phase": "unknown", "phase_source": "none", "driver_oom_source": "cuda_check"}
    assert "fragmentation" not in _classes(facts)
    assert "fragmentation" in _classes({**facts, "driver_oom_source": "cuda_runtime"})  # PyTorch's own check
    got = df.differential({**facts, "driver_oom_call": "cudaMallocAsync"})
    assert got[0].klass == "runtime_activation" and got[0].likelihood < 0.7
    assert got[0].evidence_for[0].startswith("the failed allocation was a stream-ordered cudaMallocAsync")


def test_kernel_warmup_frames_are_after_the_kv_pool() -> None:
    from oomdoctor.evidence.phase import classify_frames

    frames = (("/usr/lib/python3.12/dist-packages/vllm/model_executor/warmup/deep_gemm_warmup.py", "_warmup"),)
    assert classify_frames(frames) == "warmup"
    classes = _classes({"phase": "warmup", "phase_source": "frames"})
    assert classes[0] == "runtime_activation" and not {"weights_dont_fit", "startup_kv", "cuda_graph"} & set(classes)


def _facts_of(log: Path) -> dict:
    return diagnose([str(log)], RULES).facts.values


def _facts_of_text(tmp_path: Path, name: str, text: str) -> dict:
    log = tmp_path / name
    log.write_text(text + "\n")
    return _facts_of(log)


def test_slack_counts_for_fragmentation_only_where_the_contract_calls_it_material() -> None:
    # Material: 4.20 GiB reserved-but-unallocated on an 80 GB card (the contract's test: 2% of it, 1.58 GiB).
    material = {c.klass: c for c in df.differential(_facts_of(FIXTURES / "allocator-fragmentation" / "pos_fragmented_decode.log"))}
    assert material["fragmentation"].evidence_for == ("free and reserved-but-unallocated memory together would have served the request, and the reserved-but-unallocated part is material",)
    assert not material["fragmentation"].evidence_against
    # Near miss: 611.60 MiB of slack covers the 138 MiB request (2.19 MiB free) but is below the test:
    # the allocator's normal slack, one step against, and the forward pass's activations come first.
    facts = _facts_of(FIXTURES / "allocator-fragmentation" / "neg_unallocated_not_material.log")
    assert facts["reclaimable_bytes"] >= facts["requested_bytes"] > facts["free_bytes"]
    slack = {c.klass: c for c in df.differential(facts)}
    assert slack["fragmentation"].evidence_for == ()
    assert slack["fragmentation"].evidence_against == ("the request needed the reserved-but-unallocated memory, and its 611.60 MiB is below what counts as fragmentation on this card (1.58 GiB): the allocator's normal slack",)
    assert slack["fragmentation"].likelihood < slack["runtime_activation"].likelihood
    # Free memory alone covered the request: the slack was not what was missing, and the test says nothing,
    # neither for fragmentation nor against it (what failed such a request the figures do not show).
    covered = {**facts, "free_bytes": facts["requested_bytes"], "free_to_process_bytes": facts["requested_bytes"]}
    fragmentation = {c.klass: c for c in df.differential(covered)}["fragmentation"]
    assert (fragmentation.evidence_for, fragmentation.evidence_against) == ((), ())


_CAPTURE_OOM = (FIXTURES / "field" / "sgl-sgl-project-sglang-14476.log").read_text(encoding="utf-8")
_BAR, _, _TRACEBACK = _CAPTURE_OOM.partition("Traceback (most recent call last):")


def test_a_forward_frame_inside_a_graph_capture_is_the_captures(tmp_path: Path) -> None:
    # The real paste: SGLang's piecewise capture bar, then a traceback of module forward frames only
    # (the phase step reads a forward pass, and a server up).
    facts = _facts_of(FIXTURES / "field" / "sgl-sgl-project-sglang-14476.log")
    assert (facts["phase"], facts["phase_source"], facts["timeline_stage"], facts["server_ready"]) == ("serving", "frames", "cuda_graph", True)
    got = df.differential(facts)
    assert [c.klass for c in got] == ["cuda_graph", "foreign_process"]
    assert got[0].evidence_for[0].startswith("the traceback shows a forward pass and the startup lines before it a CUDA graph capture under way")
    assert "cuda_graph" in df.possible(facts)
    # The bar on a line of its own: the same.
    own_line = tmp_path / "own_line.log"
    own_line.write_text(f"{_BAR.rstrip()}\nTraceback (most recent call last):{_TRACEBACK}", encoding="utf-8")
    assert df.differential(_facts_of(own_line))[0].klass == "cuda_graph"
    # Near miss: the server's ready line after the capture (SGLang's "The server is fired up and ready to
    # roll!"): the capture had finished, the forward was a serving one, and graph capture is no candidate.
    ready = tmp_path / "ready.log"
    ready.write_text(f"{_BAR.rstrip()}\nThe server is fired up and ready to roll!\nTraceback (most recent call last):{_TRACEBACK}", encoding="utf-8")
    served = _facts_of(ready)
    assert served["phase"] == "serving" and served.get("timeline_stage") != "cuda_graph"
    classes = [c.klass for c in df.differential(served)]
    assert "cuda_graph" not in classes and classes[0] == "runtime_activation"


def test_ggmls_allocator_says_whether_the_failed_buffer_was_activations_or_tensors() -> None:
    # ggml_gallocr_reserve_n reserves a compute graph's buffer (ollama/ollama#4225's lines): activations,
    # after the weights and the KV cache were placed.
    compute = _facts_of(FIXTURES / "unknown-oom" / "ggml_compute_buffer.log")
    assert (compute["driver_oom_source"], compute["ggml_buffer_usage"]) == ("ggml_cuda_malloc", "compute")
    # The allocator's line is the failure's own, not log around it: three lines are still a quoted fragment.
    assert compute["evidence_status"] == "fragment"
    got = df.differential(compute)
    assert {got[0].klass, got[1].klass} == {"runtime_activation", "encoder_starvation"} and got[0].likelihood == got[1].likelihood
    assert got[2].likelihood < got[1].likelihood / 3
    odds = {c.klass: c for c in got}
    assert "weights_dont_fit" not in odds or odds["weights_dont_fit"].evidence_against
    # Near miss: the same backend failure under alloc_tensor_range (ggml-org/llama.cpp#20431's lines):
    # a context's own tensors, the weights or the KV cache; the activation classes go down.
    tensors = _facts_of(FIXTURES / "unknown-oom" / "ggml_tensor_buffer.log")
    assert tensors["ggml_buffer_usage"] == "tensors"
    got = df.differential(tensors)
    assert {got[0].klass, got[1].klass} == {"weights_dont_fit", "startup_kv"}
    assert all(c.klass not in ("runtime_activation", "encoder_starvation") or c.evidence_against for c in got)
    # Without the allocator's line (the backend's alone): no step, the activation classes lower.
    bare = {k: v for k, v in compute.items() if k != "ggml_buffer_usage"}
    assert df.differential(bare)[0].likelihood < df.differential(compute)[0].likelihood


def test_a_ggml_allocator_line_far_from_the_failure_is_another_failures(tmp_path: Path) -> None:
    lines = (FIXTURES / "unknown-oom" / "ggml_compute_buffer.log").read_text(encoding="utf-8").splitlines()
    log = tmp_path / "apart.log"
    log.write_text("\n".join([lines[0], *["srv  update_slots: all slots are idle"] * 5, lines[1]]) + "\n", encoding="utf-8")
    assert "ggml_buffer_usage" not in _facts_of(log)


def _torch_oom(requested: str, capacity: str, free: str, allocated: str, unallocated: str) -> str:
    # PyTorch 2.x's message (log_formats.md §4, era 2), as c10/cuda/CUDACachingAllocator.cpp prints it.
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {requested}. GPU 0 has a total capacity of {capacity} of which "
        f"{free} is free. Including non-PyTorch memory, this process has 44.30 GiB memory in use. Of the allocated memory {allocated} "
        f"is allocated by PyTorch, and {unallocated} is reserved by PyTorch but unallocated. If reserved but unallocated memory is large "
        "try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n"
    )


def test_one_request_of_a_fifth_of_the_card_is_an_activation_not_a_weight_or_a_kv_layer(tmp_path: Path) -> None:
    """A bare PyTorch OOM asking 16 GiB of a 44.5 GiB card: no parameter or per-layer KV tensor is that large,
    so the activation classes gain a step and weights and the KV pool lose one (before: all four even)."""
    log = tmp_path / "big.log"
    log.write_text(_torch_oom("16.00 GiB", "44.52 GiB", "183.94 MiB", "43.67 GiB", "327.06 MiB"))
    d = diagnose([str(log)], RULES)
    assert d.facts.values["request_share"] == round(16 / 44.52, 4)
    diff = {c["class"]: c for c in d.findings[0].extra["differential"]}
    assert "startup_kv" not in diff or diff["runtime_activation"]["likelihood"] > 4 * diff["startup_kv"]["likelihood"]
    # Tied: the class a server meets in more of its life first (differential._breadth).
    assert [c["class"] for c in d.findings[0].extra["differential"][:2]] == ["runtime_activation", "encoder_starvation"]
    assert diff["runtime_activation"]["for"][0].startswith("the failed request alone was 16.00 GiB (36% of the card)")
    assert diff["weights_dont_fit"]["against"][0].endswith("no parameter of a model this card could hold is that large")


def test_a_request_of_a_few_percent_of_the_card_says_nothing_about_its_kind(tmp_path: Path) -> None:
    """Near miss: 1.95 GiB of 44.5 GiB (4%) could be an embedding, a layer's KV or an activation alike."""
    log = tmp_path / "small.log"
    log.write_text(_torch_oom("1.95 GiB", "44.52 GiB", "183.94 MiB", "43.67 GiB", "327.06 MiB"))
    d = diagnose([str(log)], RULES)
    assert d.facts.values["request_share"] == round(1.95 / 44.52, 4)
    for c in d.findings[0].extra["differential"]:
        assert not any("the failed request alone was" in s for s in c["for"] + c["against"]), c
    # And an engine's own cudaMalloc (a whole pool at once) gives no share at all.
    driver = tmp_path / "driver.log"
    driver.write_text("RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at some other API call.\n")
    assert "request_share" not in diagnose([str(driver)], RULES).facts.values


def test_a_lead_of_a_step_is_named_as_a_hypothesis_and_a_tie_or_a_wide_field_is_not() -> None:
    """The differential's first candidate becomes the verdict's class (a hypothesis, at most 0.45) only when it
    holds 0.4 or more and three times the second's likelihood: one step of evidence, not the field's width."""
    C = df.Candidate
    lead = [C("runtime_activation", 0.52, ("x",), (), "check"), C("encoder_starvation", 0.13, (), (), "c2")]
    assert df.leading(lead) is lead[0]
    assert df.leading([C("runtime_activation", 0.41, (), (), ""), C("encoder_starvation", 0.41, (), (), "")]) is None  # a tie
    assert df.leading([C("runtime_activation", 0.33, (), (), ""), C("encoder_starvation", 0.08, (), (), "")]) is None  # too little
    assert df.leading([C("runtime_activation", 0.45, (), (), ""), C("encoder_starvation", 0.16, (), (), "")]) is None  # under 3x
    # One step for a class among the seven of an unknown phase is not enough (4 / 11 = 0.36); the same step
    # with the classes it speaks against a step down is (a cudaMallocAsync: 0.42 against 0.11).
    one = df.differential({"phase": "unknown", "phase_source": "none", "metrics_kv_pressure": True})
    assert (one[0].klass, one[0].likelihood) == ("runtime_activation", 0.36) and df.leading(one) is None
    more = df.differential({"phase": "unknown", "phase_source": "none", "driver_oom_call": "cudaMallocAsync"})
    assert df.leading(more) is more[0] and more[0].likelihood == 0.42


def test_an_allocator_oom_in_an_engine_is_never_its_kv_budget_check() -> None:
    """startup_kv (raise the fraction) is the engine's own check; an allocator OOM while the pool is created in
    SGLang or vLLM is the opposite situation, and in the pool's frames the weights had loaded. A program
    without such a check (a static KV cache preallocated by a script) keeps startup_kv as a candidate."""
    base = {"phase": "kv_pool", "phase_source": "frames", "torch_oom": True}
    assert {"startup_kv", "weights_dont_fit"}.isdisjoint(_classes({**base, "system": "sglang"}))
    assert "startup_kv" in _classes({**base, "system": "torch"})
    assert "startup_kv" in _classes({"phase": "kv_pool", "phase_source": "frames", "system": "vllm", "torch_oom": False})


def test_a_request_of_16_gib_is_an_activation_whatever_the_card(tmp_path: Path) -> None:
    """A paste that cut the capacity off (sglang#37712: 73.65 GiB asked with 50.40 GiB free): no parameter or one
    layer's KV is 16 GiB, so the activation classes lead; 8 GiB without a capacity says nothing."""
    log = tmp_path / "big.log"
    log.write_text("tvm.error.InternalError: CUDA out of memory. Tried to allocate 73.65 GiB. GPU 1 ... 50.40 GiB is free.\n")
    diff = {c["class"]: c for c in diagnose([str(log)], RULES).findings[0].extra["differential"]}
    assert diff["runtime_activation"]["for"][0] == (
        "the failed request alone was 73.65 GiB: one tensor that large is an activation (logits or attention over a long prompt, a large batch), "
        "not a weight or one layer's KV cache"
    )
    small = tmp_path / "small.log"
    small.write_text("tvm.error.InternalError: CUDA out of memory. Tried to allocate 8.00 GiB. GPU 1 ... 50.40 GiB is free.\n")
    for c in diagnose([str(small)], RULES).findings[0].extra["differential"]:
        assert not any("the failed request alone was" in t for t in c["for"] + c["against"])


def test_ggmls_cuda_pool_is_a_compute_buffer(tmp_path: Path) -> None:
    """ggml's CUDA_CHECK names the function whose call failed; its pool (ggml_cuda_pool_malloc*) holds an op's
    temporary buffers while it computes: activations (xorbitsai/inference#1036, llama-cpp-python's vendored ggml)."""
    log = tmp_path / "pool.log"
    log.write_text(
        "CUDA error: out of memory\n"
        "  current device: 0, in function ggml_cuda_pool_malloc_vmm at /tmp/pip-install-6hyi80yc/llama-cpp-python/vendor/llama.cpp/ggml-cuda.cu:7812\n"
        "  cuMemCreate(&handle, reserve_size, &prop, 0)\n"
        'GGML_ASSERT: /tmp/pip-install-6hyi80yc/llama-cpp-python/vendor/llama.cpp/ggml-cuda.cu:241: !"CUDA error"\n'
    )
    d = diagnose([str(log)], RULES)
    assert d.facts.values["ggml_buffer_usage"] == "compute"
    assert [c["class"] for c in d.findings[0].extra["differential"][:2]] == ["runtime_activation", "encoder_starvation"]


def test_a_class_left_alone_or_without_evidence_for_it_is_not_named_and_a_nil_one_is_not_likely() -> None:
    """Review: elimination is not evidence. A lone candidate, or a first one nothing speaks for, stays undecided;
    a first candidate under 0.05 is not called likely."""
    C = df.Candidate
    assert df.leading([C("foreign_process", 0.5, (), (), "check")]) is None
    assert df.leading([C("foreign_process", 0.5, ("x",), (), "check")]) is None
    assert df.leading([C("foreign_process", 0.6, (), (), "c"), C("fragmentation", 0.1, (), (), "c")]) is None
    text = df.summary([C("foreign_process", 0.0, (), ("y",), "nvidia-smi"), C("host_oom", 0.0, (), (), "dmesg")])
    assert text.startswith("No class the table names is likely on this evidence (the likeliest, foreign_process, at 0.00)")


def test_one_oom_line_pasted_twice_is_still_a_fragment(tmp_path: Path) -> None:
    """Review: the count of a repeated failure line is no log around it."""
    log = tmp_path / "twice.log"
    line = _torch_oom("1.95 GiB", "44.52 GiB", "183.94 MiB", "43.67 GiB", "327.06 MiB")
    log.write_text(line + line)
    assert diagnose([str(log)], RULES).evidence.status == "fragment"


def test_a_multimodal_models_own_code_in_the_traceback_is_a_step_for_the_encoder(tmp_path: Path) -> None:
    # The same cut traceback (a request larger than the card, nothing else known) through a VL model's code
    # leads with the encoder; through a text model's code, or a helper in the same models/ folder, it stays a tie.
    multimodal = FIXTURES / "unknown-oom" / "vllm_oom_in_multimodal_model_code.log"
    d = diagnose([str(multimodal)], RULES)
    diff = d.findings[0].extra["differential"]
    assert d.verdict_class == "encoder_starvation" and d.findings[0].extra["hypothesis"] is True
    assert "the model is multimodal (the traceback runs qwen2_5_vl's model code)" in diff[0]["for"]
    text = diagnose([str(FIXTURES / "unknown-oom" / "vllm_oom_in_text_model_code.log")], RULES)
    assert text.verdict_class == "unknown_oom"
    ties = {c["class"]: c["likelihood"] for c in text.findings[0].extra["differential"][:2]}
    assert ties["encoder_starvation"] == ties["runtime_activation"]
    source = multimodal.read_text()
    for path, multimodal_code in [
        ("vllm/model_executor/models/utils.py", False),  # a helper beside the models: says nothing
        ("vllm/model_executor/models/vision.py", True),  # vLLM's helpers for vision towers: run only by them
        ("sglang/srt/models/mllama.py", True),
        ("transformers/models/qwen2_5_vl/modeling_qwen2_5_vl.py", True),
        ("vlmeval/vlm/llava/modeling_llava.py", True),
        ("vllm/model_executor/layers/vl_utils.py", False),  # not a model's own file
    ]:
        log = tmp_path / f"{multimodal_code}-{path.replace('/', '_')}"
        log.write_text(source.replace("vllm/model_executor/models/qwen2_5_vl.py", path))
        got = diagnose([str(log)], RULES)
        assert (got.verdict_class == "encoder_starvation") is multimodal_code, path


def test_equal_odds_list_the_class_possible_in_more_of_a_servers_life_first() -> None:
    """A bare OOM with nothing said about the phase: every candidate even. Another tenant can strike in any phase,
    a CUDA graph capture in one: the tie lists the first before the second (and its check comes first), not by name."""
    share, _ = df._breadth()
    assert share["foreign_process"] > share["runtime_activation"] > share["weights_dont_fit"] > share["cuda_graph"]
    got = [c.klass for c in df.differential({"torch_oom": True, "oom_evident": True})]
    assert got[:2] == ["foreign_process", "runtime_activation"] and "cuda_graph" not in got[:3]


def test_a_capture_bar_showing_almost_nothing_free_leads_to_the_capture() -> None:
    """SGLang's piecewise capture bar at 0.05 GB free, then the OOM (sglang#14476): the capture ran out of what it
    had; the same bar with 5 GiB free is no step (whatever failed, the capture still had room)."""
    base = {"phase": "graph_capture", "phase_source": "frames", "timeline_stage": "cuda_graph"}
    short = df.differential({**base, "capture_avail_bytes": 51 * MIB})
    assert [c.klass for c in short][:2] == ["cuda_graph", "foreign_process"]
    assert short[0].evidence_for == ("the CUDA graph capture's last step showed 51.00 MiB free just before the failure",)
    assert df.leading(short) is not None and df.leading(short).klass == "cuda_graph"
    roomy = df.differential({**base, "capture_avail_bytes": 5 * GIB})
    assert roomy[0].likelihood == roomy[1].likelihood and df.leading(roomy) is None
    # A capture that ended with little free, then the server came up and a forward failed: no step for the capture.
    later = {"phase": "serving", "phase_source": "frames", "timeline_stage": "serving", "server_ready": True, "capture_avail_bytes": 51 * MIB}
    assert all(c.evidence_for == () for c in df.differential(later) if c.klass == "cuda_graph")


def test_the_capture_bars_free_memory_is_read_from_sglangs_piecewise_and_decode_bars() -> None:
    log = FIXTURES / "field" / "sgl-sgl-project-sglang-14476.log"
    d = diagnose([str(log)], RULES)
    assert d.facts.get("capture_avail_bytes") == round(0.05 * GIB)
    assert d.verdict_class == "cuda_graph" and d.findings[0].rule is None


def test_a_buffer_above_the_devices_largest_is_an_activation_no_memory_serves(tmp_path: Path) -> None:
    """MLX's refusal of one buffer larger than the device allows (mlx-vlm#121's line): the request exceeds what the
    device gives in one piece, so the activation classes gain a step and weights and fragmentation are excluded.
    Near miss: the same refusal cut before its limit says nothing of the request's kind."""
    log = tmp_path / "mlx.log"
    log.write_text("libc++abi: terminating due to uncaught exception of type std::runtime_error: Attempting to allocate 135383101952 bytes which is greater than the maximum allowed buffer size of 77309411328 bytes.\n")
    d = diagnose([str(log)], RULES)
    assert d.facts.values["request_exceeds_card"] is True and d.facts.values["buffer_limit_bytes"] == 77309411328
    diff = {c["class"]: c for c in d.findings[0].extra["differential"]}
    assert "weights_dont_fit" not in diff and "fragmentation" not in diff
    assert {c["class"] for c in d.findings[0].extra["differential"][:2]} == {"runtime_activation", "encoder_starvation"}
    cut = tmp_path / "cut.log"
    cut.write_text("RuntimeError: [metal::malloc] Attempting to allocate 25353916928 bytes which is\n")
    assert "request_exceeds_card" not in diagnose([str(cut)], RULES).facts.values


def test_under_a_per_process_cap_the_cards_free_memory_is_not_the_processs(tmp_path: Path) -> None:
    """A PyTorch OOM under torch.cuda.set_per_process_memory_fraction ("23.77 GiB allowed", predibase/lorax#94's
    line): the card had 23.44 GiB free, but the process could take only what its cap left above what it had
    reserved (none), so free memory did not cover the 2 MiB request and the 92 MiB of slack below the
    materiality test is the allocator's own: one step against fragmentation, not one for it."""
    line = (
        "Server error: CUDA out of memory. Tried to allocate 2.00 MiB (GPU 0; 47.54 GiB total capacity; 23.68 GiB already allocated; "
        "23.44 GiB free; 23.77 GiB allowed; 23.77 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting "
        "max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"
    )
    facts = _facts_of_text(tmp_path, "capped.log", line)
    assert facts["free_bytes"] > facts["requested_bytes"] and facts["free_to_process_bytes"] == 0
    fragmentation = {c.klass: c for c in df.differential(facts)}["fragmentation"]
    assert fragmentation.evidence_for == () and fragmentation.evidence_against
    # Near miss: without the cap the same figures are the card's free memory, which covered the request: the slack
    # was not what was missing, and nothing is said for or against fragmentation.
    uncapped = _facts_of_text(tmp_path, "uncapped.log", line.replace(" 23.77 GiB allowed;", ""))
    assert uncapped["free_to_process_bytes"] == uncapped["free_bytes"]
    free_covered = {c.klass: c for c in df.differential(uncapped)}["fragmentation"]
    assert (free_covered.evidence_for, free_covered.evidence_against) == ((), ())

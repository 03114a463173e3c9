"""The phase step's tables (oomdoctor/data/phases.toml): compiled when first used, so checked here."""

from __future__ import annotations

import re

from oomdoctor.base.toml_data import tomllib
from oomdoctor.evidence import phase


def test_every_table_pattern_compiles() -> None:
    t = phase.tables()
    sources = [r.source for f in t.frames for r in (f.func, f.path, f.within) if r is not None] + [c.pattern.source for c in t.context]
    assert len(sources) >= 20
    for source in sources:
        re.compile(source)  # compiled lazily in use: a bad pattern must fail here, not in a user's diagnosis


def test_a_bad_pattern_fails_at_first_use_not_silently() -> None:
    text = '[phases.serving]\nstage = "serving"\n[[context]]\nphase = "serving"\npattern = "(unclosed"\nneedles = ["x"]\n'
    tables = phase.parse_tables(tomllib.loads(text))
    try:
        tables.context[0].pattern.search("x")
    except re.error:
        return
    raise AssertionError("an invalid table pattern did not raise")


def test_ray_dedup_copies_do_not_move_the_phase(tmp_path) -> None:
    """Ray prints "[repeated Nx across cluster]" copies up to 5 s late: they are not where the workers are now."""
    from oomdoctor.api import diagnose

    capture = "(RayWorkerWrapper pid=1861983) INFO 03-27 10:29:03 [model_runner.py:1442] Capturing cudagraphs for decoding. This may lead to unexpected consequences if the model is not static.\n"
    profile = "(RayWorkerWrapper pid=1463574, ip=192.168.10.60) INFO 03-27 10:29:01 [worker.py:267] Memory profiling takes 4.26 seconds"
    breakdown = (
        "(RayWorkerWrapper pid=1463574, ip=192.168.10.60) INFO 03-27 10:29:01 [worker.py:267] model weights take 20.64GiB; non_torch_memory takes 0.28GiB; "
        "PyTorch activation peak memory takes 1.52GiB; the rest of the memory reserved for KV Cache is 21.20GiB."
    )
    assert phase.late_copy(profile + " [repeated 30x across cluster]") and not phase.late_copy(profile)
    log = tmp_path / "ray.log"
    log.write_text(capture + f"{profile} [repeated 30x across cluster]\n{breakdown} [repeated 30x across cluster]\n")
    d = diagnose([str(log)])
    assert d.phase.name == "graph_capture" and d.verdict_class == "cuda_graph"
    # The same lines as first instances (no dedup suffix) are later news: the phase moves on.
    log.write_text(capture + f"{profile}\n{breakdown}\n")
    assert diagnose([str(log)]).phase.name != "graph_capture"


def test_a_steps_input_preparation_is_a_serving_frame_by_the_generated_map() -> None:
    """A paste cut above execute_model still shows a serving step: the map's call graph reaches the input
    preparation from execute_model (no [[frames]] entry names these functions)."""
    runner = "/vllm-workspace/vllm-ascend/vllm_ascend/worker/model_runner_v1.py"
    assert not any(r.func is not None and r.func.search("_process_reqs") for r in phase.tables().frames)
    assert phase.classify_frames(((runner, "_process_reqs"), (runner, "_make_attention_mask"))) == "serving"
    assert phase.classify_frames((("/x/vllm/v1/worker/gpu_model_runner.py", "_prepare_inputs"),)) == "serving"
    # The same name outside the engines' packages (a user's script) says nothing.
    assert phase.classify_frames((("/home/me/train.py", "_prepare_inputs"),)) is None
    # Profiling still wins over a step's preparation when both are on the stack: the profiling run's own
    # frame beats a phase the preparation borrows from its callers.
    assert phase.classify_frames(((runner, "profile_run"), (runner, "_process_reqs"))) == "profiling"


def test_a_quantized_layers_apply_and_a_500_after_the_failure_say_serving() -> None:
    """vllm#6689: an AWQ dequantize OOM whose message a reporter cut after 'GPU', then the 500 it caused.

    A quantization method's apply is forward code the map lists under no phase (it runs in the profiling
    pass and graph capture too), so the frames name none; the 500 answered after the failure says serving."""
    from oomdoctor.api import diagnose

    from conftest import FIXTURES

    d = diagnose([str(FIXTURES / "field/vllm-vllm-project-vllm-6689.log")])
    assert (d.phase.name, d.phase.source, d.verdict_class) == ("serving", "context", "runtime_activation")
    # The request cannot have been larger than any card (416 MiB), though the message lost the card's size.
    assert d.facts.get("request_exceeds_card") is False and d.facts.get("capacity_bytes") is None
    assert "n/a" not in d.summary
    assert phase.classify_frames((("/x/vllm/model_executor/layers/quantization/awq.py", "apply"),)) is None
    rule = phase.classify_context('INFO:     10.96.202.56:41576 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error')
    assert rule is not None and rule.after_failure and rule.phase == "serving"


def test_a_request_bigger_than_the_smallest_gpu_is_not_assumed_to_fit(tmp_path) -> None:
    from oomdoctor.api import diagnose

    log = tmp_path / "cut.log"
    log.write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB. GPU \n")
    assert "request_exceeds_card" not in diagnose([str(log)]).facts.values
    log.write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 416.00 MiB. GPU \n")
    assert diagnose([str(log)]).facts.get("request_exceeds_card") is False


def test_the_one_context_search_matches_exactly_where_some_rule_does() -> None:
    """classify_context skips a line on one combined search; it must match a line iff some rule does."""
    from conftest import FIXTURES

    tables = phase.tables()
    assert tables.any_context is not None and len(tables.context) >= 10
    lines = [rule.example for rule in tables.context if rule.example]
    lines += [rule.example.upper() for rule in tables.context if rule.example]  # the rules that are case-blind stay so
    for log in sorted(FIXTURES.glob("*/*.log"))[:200]:
        lines += log.read_text(errors="replace").splitlines()[:60]
    matched = 0
    for line in lines:
        some_rule = any(rule.pattern.search(line) for rule in tables.context)
        assert (tables.any_context.search(line) is not None) == some_rule, line
        matched += some_rule
    assert matched > 50
    assert phase._scoped("(?i)warm up") == "(?i:warm up)" and phase._scoped("a(?i:b)") == "a(?i:b)"


def _every_fixture_line() -> list[str]:
    from conftest import FIXTURES

    lines: list[str] = []
    for log in sorted(FIXTURES.rglob("*")):
        if log.is_file() and log.suffix in (".log", ".txt", ".md", ".out"):
            lines += log.read_text(errors="replace").splitlines()
    return lines


def test_every_context_rule_s_example_line_holds_one_of_its_needles_and_matches() -> None:
    """Each rule's example_line (a line as the engine prints it) is matched by its pattern, holds one of its
    needles, and is classified as that rule (or one before it)."""
    from oomdoctor.base import built_in

    entries = built_in.table("phases.toml")["context"]
    rules = phase.tables().context
    assert len(entries) == len(rules) >= 10
    for i, (entry, rule) in enumerate(zip(entries, rules, strict=True)):
        line = entry["example_line"]
        assert rule.pattern.search(line), (line, rule.pattern.source)
        assert any(n in line.lower() for n in rule.needles), (line, rule.needles)
        found = phase.classify_context(line)
        assert found is not None and rules.index(found) <= i, line


def test_a_line_a_context_pattern_matches_holds_one_of_its_needles() -> None:
    """The needles gate the patterns: on every fixture line (and its upper-case copy, for the (?i) rules), a
    match of a rule means one of the rule's needles is in the lower-cased line, and classify_context gives the
    first rule of the table that matches, as trying every rule in order does."""
    tables = phase.tables()
    lines = _every_fixture_line()
    lines += [line.upper() for line in lines[:5000]]
    matched = 0
    for line in lines:
        if not line.isascii():
            continue
        first = next((rule for rule in tables.context if rule.pattern.search(line)), None)
        for rule in tables.context:
            if rule.pattern.search(line):
                assert any(n in line.lower() for n in rule.needles), (line, rule.pattern.source, rule.needles)
        expected = None if first is None or phase.late_copy(line) else first
        assert phase.classify_context(line) == expected, line
        matched += first is not None
    assert matched > 500


def test_needles_are_required_and_lower_case() -> None:
    base = '[phases.serving]\nstage = "serving"\n[[context]]\nphase = "serving"\npattern = "Received request"\n'
    for bad in ("", 'needles = []\n', 'needles = ["Received"]\n'):
        try:
            phase.parse_tables(tomllib.loads(base + bad))
        except ValueError as e:
            assert "needles" in str(e)
            continue
        raise AssertionError(f"needles {bad!r} accepted")


def test_frame_paths_are_read_from_the_installed_package_on() -> None:
    # The directories above site-packages are the user's: a conda environment named "whisperx" is not
    # the whisper audio encoder (vLLM 0.11's engine start-up, as a public paste shows it).
    env = "/home/u/miniconda3/envs/whisperx/lib/python3.12/site-packages"
    start_up = [(f"{env}/vllm/v1/engine/core.py", "run_engine_core"), (f"{env}/vllm/v1/executor/multiproc_executor.py", "get_response")]
    assert phase.classify_frames(start_up) is None
    assert phase.package_path(f"{env}/vllm/v1/engine/core.py") == "/vllm/v1/engine/core.py"
    # The same path rule still sees an encoder inside the package, and a source checkout is read whole.
    assert phase.classify_frames([(f"{env}/whisper/model.py", "forward")]) == "encoder"
    assert phase.package_path("/workspace/sglang/python/sglang/srt/models/qwen2_vl.py") == "/workspace/sglang/python/sglang/srt/models/qwen2_vl.py"


def test_vllm_v0s_dead_background_loop_is_a_serving_step_and_other_callbacks_are_not() -> None:
    """AsyncLLMEngine's loop only steps for requests in flight: asyncio's report of its done-callback, or vLLM's
    "Engine background task failed", says the failure was in serving (vllm#13152, dify-official-plugins#599:
    unknown_oom before). Near miss: asyncio reporting another callback says nothing about the phase."""
    from oomdoctor.evidence.phase import classify_context

    for text in (
        "Exception in callback functools.partial(<function _log_task_completion at 0x7fa306a24220>, error_callback=<bound method AsyncLLMEngine._error_callback of <vllm.engine.async_llm_engine.AsyncLLMEngine object at 0x7fa2f0>>)",
        "ERROR 02-12 12:20:21 async_llm_engine.py:64] Engine background task failed",
    ):
        rule = classify_context(text)
        assert rule is not None and (rule.phase, rule.after_failure) == ("serving", True), text
    assert classify_context("Exception in callback BaseSelectorEventLoop._read_from_self()") is None


def test_lmdeploys_vision_engine_is_an_encoder_frame() -> None:
    """lmdeploy#1555: its vision encoder runs in lmdeploy/vl/engine.py's thread. Near miss: its LLM engine is not."""
    vl = (("/envs/lmdeploy/lib/python3.10/site-packages/lmdeploy/vl/engine.py", "_work_thread"),)
    llm = (("/envs/lmdeploy/lib/python3.10/site-packages/lmdeploy/pytorch/engine/engine.py", "_async_loop"),)
    assert phase.classify_frames(vl) == "encoder"
    assert phase.classify_frames(llm) != "encoder"


def test_another_ranks_line_just_after_a_failure_with_nothing_before_it_tells_the_phase(tmp_path) -> None:
    """Ray's driver relays its workers' lines late (QwenLM/Qwen#819's layout: the driver's CUDA OOM, then a worker's
    "Capturing the model for CUDA graphs"): the ranks step through start-up together, so that line places the
    failure, one step less sure than lines before it. Near misses: the failing process's own later line, one
    too far after it, and a line before the failure, which wins."""
    from oomdoctor.api import diagnose

    oom = "RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n"
    capture = (
        "(RayWorkerVllm pid=74362) INFO 12-18 21:44:36 model_runner.py:394] Capturing the model for CUDA graphs. This may lead to unexpected "
        "consequences if the model is not static. To run the model in eager mode, set 'enforce_eager=True' or use '--enforce-eager' in the CLI.\n"
    )
    log = tmp_path / "relayed.log"
    log.write_text(oom + capture)
    d = diagnose([str(log)])
    assert (d.phase.name, d.phase.source, d.facts.values["phase_from_other_ranks"]) == ("graph_capture", "context", True)
    assert d.verdict_class == "cuda_graph"
    assert any(f.factor.startswith("the phase comes from another rank's lines") and f.delta == -0.2 for f in d.confidence_factors)
    own = capture.replace("(RayWorkerVllm pid=74362) ", "")
    log.write_text(oom + own)
    assert diagnose([str(log)]).phase.name == "unknown"
    # Beyond the scanner's window around a failure line (BEFORE_LINES) the line is no longer "just after" it.
    from oomdoctor.input.scan import BEFORE_LINES

    log.write_text(oom + "x\n" * BEFORE_LINES + capture)
    assert diagnose([str(log)]).phase.name == "unknown"
    log.write_text(oom + "x\n" * (BEFORE_LINES - 2) + capture)
    assert diagnose([str(log)]).phase.name == "graph_capture"
    before = "INFO 12-18 21:44:30 worker.py:100] Loading model weights took 13.99 GB\n"
    log.write_text(before + oom + capture)
    assert diagnose([str(log)]).facts.values["phase_from_other_ranks"] is False

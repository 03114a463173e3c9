"""Which serving system a run's log came from: its engine lines, its prefixes, its frames, and its catalogue lines."""

from __future__ import annotations

from oomdoctor.api import diagnose


def test_a_catalogue_line_without_the_engines_prefix_names_the_engine(tmp_path) -> None:
    """vLLM's own sampler warm-up failure, pasted re-wrapped and without vLLM's logger prefix (llm-d#787): the line is
    vLLM's (its catalogue), so vLLM's rule for it applies instead of the plain-PyTorch fallback's unknown_oom."""
    log = tmp_path / "paste.log"
    log.write_text(
        "RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 \n"
        "dummy requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` \n"
        "when initializing the engine.\n"
    )
    d = diagnose([str(log)])
    assert (d.budget["system"], d.verdict_class, d.verdict_rule) == ("vllm", "runtime_activation", "engine-message-runtime-activation")


def test_a_plain_pytorch_oom_stays_pytorchs(tmp_path) -> None:
    """Near miss: PyTorch's own message names no engine."""
    log = tmp_path / "paste.log"
    log.write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 23.65 GiB of which 11.06 MiB is free.\n")
    assert diagnose([str(log)]).budget["system"] == "torch"

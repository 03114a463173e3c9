"""Pastes indented as a whole are read as the program printed them; a paste of frames alone is left as it is."""

from __future__ import annotations

from pathlib import Path

from oomdoctor.api import diagnose
from oomdoctor.input.indentation import common_indent, dedent

from conftest import FIXTURES

CASES = [
    "vllm-cuda-graph-oom/pos_v1_capture_frames.log",
    "runtime-activation-oom/pos_wrapped_markdown_2024.log",
    "incomplete/pos_hit_exception_nothing_after_2026.log",
    "torch-activation-oom/pos_jupyter_short_name.log",
]


def test_an_indented_paste_gets_the_diagnosis_of_the_original(tmp_path: Path) -> None:
    for rel in CASES:
        original = diagnose([str(FIXTURES / rel)])
        for indent in ("    ", "\t", "  "):
            pasted = tmp_path / "pasted.log"
            pasted.write_text("\n".join(indent + line if line else line for line in (FIXTURES / rel).read_text().split("\n")))
            d = diagnose([str(pasted)])
            assert (d.verdict_class, d.verdict_confidence, d.evidence.status) == (original.verdict_class, original.verdict_confidence, original.evidence.status), (rel, indent)
            assert [f.rule_id for f in d.findings] == [f.rule_id for f in original.findings]
            assert any("indented by the same" in w for s in d.inputs for w in s.warnings), rel


def test_frames_alone_are_not_dedented() -> None:
    frames = [
        b'  File "/usr/lib/python3/site-packages/vllm/worker/model_runner.py", line 1024, in capture_model',
        b"    graph_runner.capture(**capture_inputs)",
        b'  File "/usr/lib/python3/site-packages/torch/cuda/graphs.py", line 184, in __exit__',
        b"    self.cuda_graph.capture_end()",
    ]
    assert common_indent(frames) == b"  "
    notes: list[int] = []
    assert dedent(b"\n".join(frames) + b"\n", notes.append) == b"\n".join(frames) + b"\n" and notes == []
    # With the exception line at the margin there is no common indent at all.
    assert common_indent([*frames, b"torch.OutOfMemoryError: CUDA out of memory."]) == b""


def test_mixed_tabs_and_spaces_share_only_their_common_part() -> None:
    assert common_indent([b"\t  a", b"\t b", b"", b"   ", b"\tc"]) == b"\t"
    assert common_indent([b"  a", b"\tb"]) == b""
    assert common_indent([]) == b""


def test_a_large_input_streams_untouched() -> None:
    from oomdoctor.input import paste

    big = [b"    x" * 1000 + b"\n"] * ((paste.PASTE_MAX_BYTES // 5000) + 10)
    notes: list[object] = []
    out = list(paste.repaired(iter(big), lambda: notes.append("r"), notes.append, lambda w, p: notes.append(w)))
    assert b"".join(out) == b"".join(big) and notes == []

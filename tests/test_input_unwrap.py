"""A terminal's hard wrap is undone where it shows; tables, short logs and unwrapped logs are left alone."""

from __future__ import annotations

from pathlib import Path

from oomdoctor.api import diagnose
from oomdoctor.inference.completeness import lines_after
from oomdoctor.input.unwrap import quote_marker, unwrap, unwrap_lines, wrap_width

from conftest import FIXTURES

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 1 has a total capacity of 79.19 GiB of which 2.02 GiB is free. "
    "Including non-PyTorch memory, this process has 77.16 GiB memory in use. Of the allocated memory 73.38 GiB is allocated by PyTorch, and "
    "2.26 GiB is reserved by PyTorch but unallocated."
)


def _cut(line: str, width: int) -> list[str]:
    return [line[i : i + width] for i in range(0, len(line), width)]


def test_pieces_are_joined_and_line_numbers_kept() -> None:
    lines = ["[2026-03-02 10:00:41 TP0] Decode batch. #running-req: 12", *_cut(OOM, 90), "[2026-03-02 10:00:42] Exiting."]
    width = wrap_width(lines)
    assert width == 90
    out = unwrap_lines(lines, width)
    assert len(out) == len(lines)
    assert out[1] == OOM and all(line == "" for line in out[2 : 1 + len(_cut(OOM, 90))])
    assert out[-1] == lines[-1]


def test_a_log_line_after_a_full_width_line_is_not_joined() -> None:
    same = "[2026-03-02 10:00:41 TP0] Prefill batch. #new-seq: 1, #new-token: 8192, #cached-token: 0"
    lines = [same, same, same, "[2026-03-02 10:00:42 TP0] Decode batch. #running-req: 1"]
    assert wrap_width(lines) is None  # every line after a longest line starts a log line of its own


def test_nvidia_smi_tables_and_short_texts_are_left_alone() -> None:
    table = [
        "+-----------------------------------------------------------------------------------------+",
        "| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |",
        "|-----------------------------------------+------------------------+----------------------+",
        "|   0  NVIDIA H100 80GB HBM3          On  |   00000000:18:00.0 Off |                    0 |",
        "+-----------------------------------------+------------------------+----------------------+",
    ]
    assert wrap_width(table) is None
    assert wrap_width(["short", "lines", "only"]) is None and wrap_width([]) is None


def test_aligned_machine_output_is_not_read_as_cut() -> None:
    # gpustat --json: two GPUs' UUID lines are the longest, of one length; the line after each is a
    # JSON pair of its own, not the rest of it.
    gpustat = []
    for i in range(2):
        gpustat += [f'            "uuid": "GPU-9d3a0f7e-1c2b-4e8a-b7d1-{i}a5c3e9f0b2d",', '            "name": "NVIDIA H100 80GB HBM3",', '            "memory.total": 81559,']
    assert wrap_width(gpustat) is None
    # nvidia-smi -q: the "GPU UUID" lines are the longest; the "Minor Number" line after each is a key of its own.
    query = []
    for i in range(2):
        query += [f"    GPU UUID                              : GPU-9d3a0f7e-1c2b-4e8a-b7d1-{i}a5c3e9f0b2dd4e1f", "    Minor Number                          : 0", "    VBIOS Version                         : 96.00.74.00.0D"]
    assert wrap_width(query) is None
    # A real cut still is one: the piece after a full-width line holds no key of its own.
    cut = ["x" * 30 + " out of memory. Tried to allocate 1.25 GiB. GPU 0 has a total capacity of 79.19 ", "GiB of which 1.02 GiB is free.", "y" * 30 + " out of memory. Tried to allocate 1.25 GiB. GPU 1 has a total capacity of 79.19 ", "GiB of which 1.02 GiB is free."]
    assert wrap_width(cut) == len(cut[0])


def test_a_quoted_wrapped_paste_joins_without_the_quote_marks() -> None:
    lines = ["> " + piece for piece in _cut(OOM, 80)]
    assert quote_marker(lines) == "> "
    notes: list[tuple[int, tuple[int, ...]]] = []
    out = unwrap(("\n".join(lines) + "\n").encode(), lambda w, p: notes.append((w, p))).decode()
    assert out.split("\n")[0] == "> " + OOM
    assert notes == [(80, tuple(range(2, len(lines) + 1)))]


def test_a_real_hard_wrapped_paste_is_read_whole() -> None:
    """SergiioB/intel-arc-pro-b70-inference-cookbook#4: vLLM's V9 message cut at column 119."""
    d = diagnose([str(FIXTURES / "vllm-startup-kv/pos_real_arc_b70_wrapped.log")])
    assert d.verdict_class == "startup_kv"
    assert any("cut at column 119" in w for s in d.inputs for w in s.warnings)
    cited = d.findings[0].evidence[0]
    assert cited.line == 17 and "KV cache is needed" in cited.text


def test_pieces_do_not_count_as_log_after_a_record(tmp_path: Path) -> None:
    assert lines_after(10, 20, (12, 13, 14)) == 7 and lines_after(10, 20, (3, 4)) == 10
    # A one-message paste wrapped over three lines is still a fragment of one line.
    log = tmp_path / "wrapped.log"
    log.write_text("\n".join(_cut(OOM, 100)) + "\n")
    d = diagnose([str(log)])
    assert d.evidence.status == "fragment" and "of 1 line(s)" in d.evidence.reason


def test_a_quoted_blank_line_does_not_shorten_the_quote_marker() -> None:
    lines = ["> > " + piece for piece in _cut(OOM, 80)] + ["> >", "> > [2026-03-02 10:00:42] Exiting."]
    assert quote_marker(lines) == "> > "
    out = unwrap(("\n".join(lines) + "\n").encode(), lambda w, p: None).decode().split("\n")
    assert out[0] == "> > " + OOM and out[-3] == "> >"


def test_equal_length_complete_lines_are_not_a_wrap() -> None:
    """Every CUDA thread prints the same assertion: a run of full-width lines with no shorter tail."""
    flood = [f"../aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [{i % 10},0,0], thread: [{i % 10},0,0] Assertion failed." for i in range(2000)]
    assert len({len(line) for line in flood}) == 1
    assert wrap_width(flood) is None
    assert wrap_width([*flood, "RuntimeError: CUDA error: device-side assert triggered"]) is None


def test_console_padding_is_not_a_wrap_but_a_padded_wrap_is() -> None:
    padded = [line.ljust(240) for line in ["[2026-03-02 10:00:41 TP0] Decode batch. #running-req: 12", "short line", "another short line"]]
    assert wrap_width(padded) is None
    before = [f"[2026-03-02 10:00:4{k} TP0] Decode batch. #running-req: 12" for k in range(4)]
    console = [line.ljust(100) for line in [*before, *_cut(OOM, 100), "[2026-03-02 10:00:42] Exiting."]]
    assert wrap_width(console) == 100 and unwrap_lines(console, 100)[len(before)] == OOM


def test_a_newest_first_wrapped_paste_joins_its_pieces_in_reading_order() -> None:
    from oomdoctor.input.paste import repaired

    older = "2025-03-02T10:00:05Z INFO server ready on port 8000"
    pieces = _cut("2025-03-02T10:00:06Z ERROR " + OOM, 100)
    stamps = [f"2025-03-02T10:00:0{k}Z INFO step {k} done" for k in (4, 3, 2, 1, 0)]
    newest_first = [*pieces, older, *stamps]  # the console shows the newest line first, each line's pieces in order
    notes: dict[str, object] = {}
    data = b"".join(repaired([("\n".join(newest_first) + "\n").encode()], lambda: notes.setdefault("reversed", True), notes.setdefault, lambda w, p: notes.update(width=w, pieces=p)))
    lines = data.decode().split("\n")
    assert notes.get("reversed") and notes["width"] == 100
    joined = [line for line in lines if "OutOfMemoryError" in line]
    assert joined == ["2025-03-02T10:00:06Z ERROR " + OOM]
    # The pieces' numbers are the blank lines as the scan counts them (after the reversal).
    assert all(lines[n - 1] == "" for n in notes["pieces"]) and len(notes["pieces"]) == len(pieces) - 1


def test_a_window_narrower_than_one_hundredth_still_gets_a_value() -> None:
    from oomdoctor.memory.budget import Window, choose_in_window

    assert choose_in_window(Window(0.8705, 0.8718, ())) == 0.871
    assert choose_in_window(Window(0.87, 0.92, ())) == 0.9 and choose_in_window(Window(0.8712, 0.8711, ())) is None


def test_colour_codes_take_no_columns() -> None:
    green, reset = "\x1b[32m", "\x1b[0m"
    pieces = _cut(OOM, 90)
    coloured = [green + pieces[0], *pieces[1:-1], pieces[-1] + reset, "[2026-03-02 10:00:42] Exiting."]
    assert wrap_width(coloured) == 90
    assert unwrap_lines(coloured, 90)[0] == green + OOM + reset


def test_equal_lines_of_llama_cpps_stamped_log_are_not_a_hard_wrap() -> None:
    """llama.cpp's logger stamps each line with the time since start (gpustack/llama-box#25): four slot lines of one
    format came out 164 characters each, and joined as a wrap they hid the next line's "ret = 1" inside the first.
    Each stamped line starts a line of its own."""
    stamped = [
        f"10.05.40{i}.825 W slt              update_slots: rid 10668355152{i} | id 0{i} | task 4{i} | input truncated, n_ctx = 2048, n_keep = 0, n_left = 2048, n_prompt_tokens = 15{i}6"
        for i in range(4)
    ]
    assert len({len(line) for line in stamped}) == 1
    data = "\n".join([*stamped, "10.05.651.308 E llama_decode: failed to decode, ret = 1", "10.05.651.310 W srv"]).encode() + b"\n"
    assert unwrap(data, lambda *_: None) == data

"""A console handler's columns (rich's RichHandler) read back as the lines the program logged."""

from __future__ import annotations

from oomdoctor.input.columns import join_columns

LEAD = "ERROR    "
WHERE = "batch_handler.py:574"


def _wrap(logical: str, width: int) -> list[str]:
    """rich's word wrap: a word that does not fit starts the next line; a word longer than the column is folded
    into pieces of the column's width (overflow="fold"). A line's own indent is kept."""
    indent = logical[: len(logical) - len(logical.lstrip())]
    lines, line = [], indent
    for word in logical.split():
        if len(word) > width:
            if line.strip():
                lines.append(line)
            chunks = [word[i : i + width] for i in range(0, len(word), width)]
            lines.extend(chunks[:-1])
            line = chunks[-1]
        elif not line.strip():
            line = line + word
        elif len(line) + 1 + len(word) <= width:
            line = f"{line} {word}"
        else:
            lines.append(line)
            line = word
    return [*lines, line]


def rich_layout(message: str, width: int = 52) -> str:
    """A record as rich lays it out: the level column, the message wrapped in its column, the path column on the
    first line, every line padded to the console's width."""
    out = []
    for logical in message.split("\n"):
        for piece in _wrap(logical, width):
            lead = LEAD if not out else " " * len(LEAD)
            out.append(lead + piece.ljust(width) + (" " + WHERE if len(out) == 0 else " " * (len(WHERE) + 1)))
    return "\n".join(out) + "\n"


def _joined(text: str) -> list[str]:
    seen: list[tuple[int, tuple[int, ...]]] = []
    out = join_columns(text.encode(), lambda records, pieces: seen.append((records, pieces))).decode()
    return [line for line in out.split("\n") if line.strip()]


def test_a_wrapped_oom_message_and_a_folded_url_come_back_whole() -> None:
    """infinity#483: PyTorch's OOM message inside a rich record, its numbers spread over eleven lines."""
    message = (
        "CUDA out of memory. Tried to allocate 3.88 GiB. GPU 0 has a total capacity of 44.42 GiB of which 920.81 MiB "
        "is free. Process 247326 has 5.95 GiB memory in use. See (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )
    assert _joined(rich_layout(message)) == [message]


def test_a_traceback_inside_a_record_keeps_its_lines() -> None:
    message = 'boom\nTraceback (most recent call last):\n  File "/app/infinity_emb/inference/batch_handler.py", line 574, in _core_batch\nRuntimeError: boom'
    assert _joined(rich_layout(message)) == message.split("\n")


def test_line_numbers_stay_and_the_pieces_are_reported() -> None:
    text = rich_layout("CUDA out of memory. Tried to allocate 3.88 GiB. GPU 0 has a total capacity of 44.42 GiB of which 920.81 MiB is free.")
    seen: list[tuple[int, tuple[int, ...]]] = []
    out = join_columns(text.encode(), lambda records, pieces: seen.append((records, pieces))).decode().split("\n")
    n = text.count("\n")
    assert len(out) == len(text.split("\n")) and out[0].startswith("CUDA out of memory") and seen == [(1, tuple(range(2, n + 1)))]


def test_a_record_of_one_line_loses_its_columns() -> None:
    assert _joined("ERROR    CUDA out of memory. Tried to allocate 20.00 MiB.          batch_handler.py:574\nINFO     next\n") == [
        "CUDA out of memory. Tried to allocate 20.00 MiB.",
        "INFO     next",
    ]


def test_a_word_as_wide_as_the_column_keeps_its_blank() -> None:
    message = "support --disaggregation-decode-retraction-backup=host_pool: the backup builds the draft's host pool"
    assert _joined(rich_layout(message, width=52)) == [message]


def test_other_aligned_lines_are_left_as_they_are() -> None:
    """Near misses: Python logging's level column without a path column, a table."""
    for text in (
        "ERROR    CUDA out of memory. Tried to allocate 20.00 MiB.\n         Tried again, still out of memory.\n",
        "| GPU  Name        Persistence-M | Bus-Id        Disp.A |\n|   0  NVIDIA H100 80GB HBM3    On  | 00000000:18:00.0 Off |\n",
    ):
        assert join_columns(text.encode(), lambda *_: None) == text.encode()


def test_a_server_log_larger_than_a_paste_is_joined_when_its_head_shows_the_columns(tmp_path) -> None:
    """Over PASTE_HEAD_BYTES a file is repaired only when its head shows the damage (paste.py): rich's columns do."""
    from oomdoctor.input.files import InputStats
    from oomdoctor.pipeline.events import read_events

    serving = "".join(rich_layout(f"INFO request {i} served in 12 ms with 512 prompt tokens and 64 completion tokens").replace(LEAD, "INFO     ", 1) for i in range(900))
    oom = rich_layout(
        "CUDA out of memory. Tried to allocate 3.88 GiB. GPU 0 has a total capacity of 44.42 GiB of which 920.81 MiB is free. "
        "Process 247326 has 5.95 GiB memory in use. Process 248104 has 37.55 GiB memory in use."
    )
    log = tmp_path / "server.log"
    log.write_text(serving + oom)
    assert log.stat().st_size > 64 << 10
    events = read_events(str(log), InputStats(path=str(log)))
    (found,) = [e for e in events if e.kind == "torch_oom"]
    assert found.get("requested_bytes") == round(3.88 * (1 << 30)) and len(found.get("processes")) == 2

"""The paste repairs on inputs larger than PASTE_HEAD_BYTES: read whole only when the head shows damage."""

from __future__ import annotations

from oomdoctor.input import paste

_LINE = "[2026-03-02 10:00:{s:02d} TP0] Decode batch, #running-req: {n}, #token: 81316, token usage: 0.93, cuda graph: True, gen throughput (token/s): 2663.43\n"
_LONG = "[2026-03-02 10:00:00 TP0] server_args=ServerArgs(" + ", ".join(f"field_{i}={i}" for i in range(60)) + ")\n"


def _log(lines: int, *, newest_first: bool = False) -> list[str]:
    out = [_LINE.format(s=i % 60, n=i) for i in range(lines)]
    out.sort(key=lambda line: line[12:20], reverse=newest_first)
    return out


def _repair(text: str) -> tuple[bytes, list[object]]:
    notes: list[object] = []
    data = text.encode()
    out = b"".join(paste.repaired(iter([data]), lambda: notes.append("reversed"), lambda n: notes.append(("dedent", n)), lambda w, p: notes.append(("unwrap", w))))
    return out, notes


def test_a_larger_clean_log_is_read_as_it_is() -> None:
    text = _LONG + "".join(_log(2000))
    assert len(text) > paste.PASTE_HEAD_BYTES
    assert _repair(text) == (text.encode(), [])


def test_a_larger_input_is_repaired_when_its_head_shows_the_damage() -> None:
    lines = [_LONG, *_log(2000)]
    indented = "".join("    " + line for line in lines)
    assert _repair(indented) == ("".join(lines).encode(), [("dedent", 4)])
    newest = "".join(_log(2000, newest_first=True))
    out, notes = _repair(newest)
    assert notes == ["reversed"] and out.splitlines()[0] == newest.encode().splitlines()[-1]
    wrapped = "".join(piece + "\n" for line in lines for piece in [line.rstrip("\n")[i : i + 120] for i in range(0, len(line.rstrip("\n")), 120)])
    out, notes = _repair(wrapped)
    assert notes == [("unwrap", 120)] and out.splitlines()[0] == _LONG.rstrip("\n").encode()


def test_damage_only_past_the_head_of_a_larger_input_is_not_looked_for() -> None:
    """The documented limit: a hard wrap that starts after the head of a larger input is read as it is."""
    short = [f"[2026-03-02 10:00:{i % 60:02d} TP0] Decode batch, #running-req: {i}\n" for i in range(1600)]
    clean = "".join(short)
    long = _LONG.rstrip("\n")
    wrapped_tail = "".join(long[i : i + 120] + "\n" for i in range(0, len(long), 120)) * 3
    text = clean + wrapped_tail
    assert len(clean) > paste.PASTE_HEAD_BYTES
    assert _repair(text) == (text.encode(), [])
    # The same damage in a paste up to PASTE_HEAD_BYTES is repaired.
    small = "".join(short[:50]) + wrapped_tail
    assert _repair(small)[1] == [("unwrap", 120)]


def test_a_larger_clean_input_streams_as_its_chunks_came() -> None:
    """Not held whole nor copied into one buffer: the chunks pass through as they are, as a large log's do."""
    from oomdoctor.input.issue_input import issue_chunks

    lines = "".join(_log(9000)).encode()
    chunks = [lines[i : i + (256 << 10)] for i in range(0, len(lines), 256 << 10)]
    assert len(chunks) > 4 and sum(map(len, chunks)) < paste.PASTE_MAX_BYTES
    assert list(paste.repaired(iter(chunks), print, print, print)) == chunks
    assert list(issue_chunks(iter(chunks), "server.log", "server.log", print)) == chunks

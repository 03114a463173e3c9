"""The scanner's backends (oomdoctor/input/scan_backends.py) give the same diagnosis, byte for byte.

Every fixture log (tests/fixtures/*/*.log, the field corpus included) is diagnosed once per
installed backend, forced with OOMDOCTOR_SCANNER, and the JSON outputs are compared. The fixtures are
small (one chunk each), so a multi-chunk log made of all of them, repeated, checks what happens at
chunk edges (context lines carried into the next chunk, line numbers counted once per chunk).
"""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

import pytest

from oomdoctor.api import diagnose
from oomdoctor.base.evidence import Line
from oomdoctor.evidence.parsers import records as rc
from oomdoctor.input import scan, scan_backends
from oomdoctor.pipeline.events import ANCHORS
from oomdoctor.report.render import json_out
from oomdoctor.report.view import build_view

from conftest import FIXTURES

INSTALLED = [b for b in scan_backends.BACKENDS if b in ("re", "find") or importlib.util.find_spec(b) is not None]
# The two fast backends are compared on the whole JSON; the other two on the scanner's output (the
# lines, numbers and flags the parsers get, which decide everything after), which is quicker.
FAST = [b for b in ("hyperscan", "re2") if b in INSTALLED]
LOGS = sorted(FIXTURES.glob("*/*.log"))


def _json(path: Path, backend: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(scan_backends.ENV_SCANNER, backend)
    try:
        return json_out.render(build_view(diagnose([str(path)])))
    except Exception as exc:  # noqa: BLE001 - an error is an output too: it must be the same on every backend
        return f"{type(exc).__name__}: {exc}"


def test_both_fast_backends_are_tested_where_installed() -> None:
    assert "re2" in INSTALLED  # google-re2 is a hard dependency
    assert len(LOGS) > 200


def test_every_fixture_same_json_on_every_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    differ = []
    for log in LOGS:
        outputs = {b: _json(log, b, monkeypatch) for b in FAST}
        if len(set(outputs.values())) != 1:
            differ.append(f"{log.relative_to(FIXTURES)}: {sorted(outputs)}")
    assert not differ, "\n".join(differ)


def test_multi_chunk_log_same_json_on_every_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    body = b"".join(p.read_bytes().rstrip(b"\n") + b"\n" for p in LOGS)
    big = tmp_path / "all.log"
    big.write_bytes(body * (2 * (1 << 20) // len(body) + 1))  # over 2 MiB: three 1 MiB chunks (inputs.CHUNK_BYTES)
    outputs = {b: _json(big, b, monkeypatch) for b in FAST}
    assert len(set(outputs.values())) == 1, sorted(outputs)


def test_every_fixture_same_lines_on_every_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    for log in LOGS:
        chunks = [log.read_bytes().rstrip(b"\n") + b"\n"]
        scanned = {b: _lines(chunks, b, monkeypatch) for b in INSTALLED}
        assert all(v == scanned["re"] for v in scanned.values()), log


def _lines(chunks: list[bytes], backend: str, monkeypatch: pytest.MonkeyPatch) -> tuple[list[tuple[int, str, bool]], int]:
    monkeypatch.setenv(scan_backends.ENV_SCANNER, backend)
    counter = [0]
    got = [(ln.ref.line, ln.msg, ln.anchored) for ln in scan.scan_lines(iter(chunks), "x", ANCHORS, counter, rc.BEFORE_ANCHORS)]
    return got, counter[0]


@pytest.mark.parametrize("backend", INSTALLED)
def test_line_numbers_and_first_anchor_rules(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Line 3 holds two anchors: the leftmost one (server_args=) is not a failure anchor, so the lines
    # above it are not read; line 8 starts with a failure anchor and brings its lines above.
    chunk1 = b"a\nb\nserver_args=ServerArgs() out of memory\nc\nd\ne\nf\nScheduler hit an exception: x\n"
    chunk2 = b"g\nh\ni\nj\nk\n"
    got, total = _lines([chunk1, chunk2], backend, monkeypatch)
    want, want_total = _lines([chunk1, chunk2], "re", monkeypatch)
    assert (got, total) == (want, want_total)
    assert total == 13
    numbers = [n for n, _, _ in got]
    assert numbers == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]  # 8's context (9-11) runs into the second chunk
    assert [n for n, _, anchored in got if anchored] == [3, 8]


def test_unknown_backend_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(scan_backends.ENV_SCANNER, "grep")
    with pytest.raises(ValueError, match="OOMDOCTOR_SCANNER"):
        list(scan.scan_lines(iter([b"x\n"]), "x", ANCHORS, [0]))


def test_default_keeps_matchers_off_small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(scan_backends.ENV_SCANNER, raising=False)
    assert scan_backends.scanner_name(ANCHORS, 4096) == "find"
    assert scan_backends.scanner_name(ANCHORS, 1 << 20) in ("hyperscan", "re2", "re")


class _SideLines:
    """A side reader that keeps what it is fed (the node step's anchors)."""

    def __init__(self) -> None:
        from oomdoctor.inference import nodes

        self.anchors = nodes.ANCHORS
        self.got: list[tuple] = []

    def feed(self, line: Line) -> None:
        self.got.append(tuple(line))


@pytest.mark.parametrize("backend", INSTALLED)
def test_side_reader_gets_the_lines_a_scan_of_its_own_reads(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The node step read in the main pass (one search, one line count) is fed exactly the anchored lines of a
    scan with its own anchors, at chunk edges too; the main scan's lines are unchanged by it."""
    from oomdoctor.inference import nodes

    monkeypatch.setenv(scan_backends.ENV_SCANNER, backend)
    multi = sorted((FIXTURES / "multi-node").rglob("*.log"))
    body = b"".join(p.read_bytes().rstrip(b"\n") + b"\n" for p in multi)
    big = body * (2 * (1 << 20) // len(body) + 1)
    cut = [0, big.rfind(b"\n", 0, 1 << 20) + 1, big.rfind(b"\n", 0, 2 << 20) + 1, len(big)]
    cases = [[p.read_bytes().rstrip(b"\n") + b"\n"] for p in multi] + [[big[a:b] for a, b in itertools.pairwise(cut)]]
    fed = 0
    for chunks in cases:
        side, with_side, alone = _SideLines(), [0], [0]
        main = [tuple(ln) for ln in scan.scan_lines(iter(chunks), "x", ANCHORS, with_side, rc.BEFORE_ANCHORS, None, side)]
        assert main == [tuple(ln) for ln in scan.scan_lines(iter(chunks), "x", ANCHORS, alone, rc.BEFORE_ANCHORS)]
        assert with_side == alone
        own = [tuple(ln) for ln in scan.scan_lines(iter(chunks), "x", nodes.ANCHORS, [0]) if ln.anchored]
        assert side.got == own
        fed += len(own)
    assert fed > 100


@pytest.mark.skipif(importlib.util.find_spec("hyperscan") is None, reason="hyperscan is not installed here")
def test_hyperscan_compiles_fewer_literals_and_reports_every_anchor_find_does() -> None:
    """Hyperscan compiles only the anchors that hold no other one, the nvidia-smi -q ones without their runs of
    spaces; every anchor's every occurrence is still reported where find reports it, and a line that holds only
    the shorter or trimmed literal ("Driver Version: 535", "out of memory" without "CUDA") gives no more."""
    fast, find = scan_backends.backend(ANCHORS, "hyperscan"), scan_backends.backend(ANCHORS, "find")
    assert len(fast._lengths) < len(ANCHORS) - 50
    assert b"Driver Version    " in ANCHORS and b"Driver Version" not in ANCHORS
    lines = [b"x " + a + b" y" for a in ANCHORS] + [a[:-1] + b"#" for a in ANCHORS]
    lines += [b"Driver Version: 535.104.05   CUDA Version: 12.2", b"torch.OutOfMemoryError: CUDA out of memory. CUDA out of memory"]
    chunk = b"\n".join(lines) + b"\n"
    assert sorted(fast.hits(chunk)) == sorted(find.hits(chunk))
    assert fast.anchored_lines(chunk) == find.anchored_lines(chunk)

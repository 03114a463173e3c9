"""How often the pipeline opens and reads its inputs: once to tell a file's kind, once for its lines."""

from __future__ import annotations

from oomdoctor.inference import nodes

from conftest import FIXTURES

MN = FIXTURES / "multi-node"


def test_each_input_of_a_multi_node_incident_is_read_once(monkeypatch) -> None:
    """The node step reads its lines on the main pass: each file is opened for its lines once, not twice."""
    from collections import Counter

    from oomdoctor.api import diagnose
    from oomdoctor.input import files

    reads: Counter[str] = Counter()
    original = files.iter_line_chunks

    def counted(path, stats, *args, **kwargs):
        reads[str(path)] += 1
        return original(path, stats, *args, **kwargs)

    import oomdoctor.pipeline.events as events

    monkeypatch.setattr(events, "iter_line_chunks", counted)
    monkeypatch.setattr(nodes, "iter_line_chunks", counted)
    d = diagnose([str(MN / "pos_slurm_per_task")])
    assert d.verdict_class == "runtime_activation"
    assert len(reads) >= 2 and set(reads.values()) == {1}, reads


def test_a_log_is_opened_for_its_kind_once_and_read_once(monkeypatch, tmp_path) -> None:
    """A plain log: one sniff of its head (is it a DCGM scrape?) and one read, not two sniffs and a read."""
    import builtins
    from collections import Counter

    from oomdoctor.api import diagnose

    log = tmp_path / "server.log"
    log.write_text((FIXTURES / "sglang-startup-kv" / "pos_h100_qwen3_omni_g2.log").read_text(encoding="utf-8"), encoding="utf-8")
    opens: Counter[str] = Counter()
    original = builtins.open

    def counted(file, *args, **kwargs):
        if str(file) == str(log):
            opens[str(file)] += 1
        return original(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counted)
    assert diagnose([str(log)]).verdict_class == "startup_kv"
    assert opens[str(log)] == 2, opens

"""The generated engine knowledge (oomdoctor/data/knowledge/, built by tools/knowledge/extract.py) is well formed.

Offline: these read the committed files only. They check the shape the later recognizer step will rely
on, not what the engines print (that is the extractor's job, rerun by hand).
"""

from __future__ import annotations

import json
import re
import sys

import pytest

from oomdoctor.base.toml_data import tomllib

from conftest import REPO

DATA = REPO / "oomdoctor" / "data" / "knowledge"
PHASES = {"weight_loading", "kv_pool", "profiling", "graph_capture", "encoder", "prefill_decode", "sampling", "scheduler", "startup", "unknown"}
CLASSES = {"startup_kv", "weights_dont_fit", "cuda_graph", "runtime_activation", "encoder_starvation", "kv_exhaustion", "host_oom", "unknown_oom", "none"}
LEVELS = {"debug", "info", "warning", "error", "raise", "progress"}
# A C/C++ source of an sdist (vLLM's csrc/cumem_allocator.cpp, torch_memory_saver's csrc/utils.h): named by its path.
C_SOURCE = re.compile(r"^csrc/[\w./-]+\.(?:cpp|cc|cu|h|hpp)$")
HOWS = {"root", "calls", "name", "module"}
PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*):(int|float|str)\}")


def _load(name: str) -> object:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def sources() -> dict:
    data = _load("sources.json")
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def messages() -> list:
    data = _load("messages.json")
    assert isinstance(data, list)
    return data


@pytest.fixture(scope="module")
def phases() -> list:
    data = _load("phases.json")
    assert isinstance(data, list)
    return data


def _versions(sources: dict, engine: str) -> list[str]:
    return [r["version"] for r in sources["engines"][engine]["releases"]]


def _check_releases(runs: list[str], known: list[str]) -> None:
    """Each run names selected releases ("a" or "a..b" with a before b in sources.json)."""
    assert runs, "no source release"
    for run in runs:
        first, _, last = run.partition("..")
        assert first in known, run
        if last:
            assert last in known and known.index(first) < known.index(last), run


def test_files_are_small_enough_to_commit() -> None:
    # 5.1 MB of catalogue and map, and the map's run-time form (frame_phases.tsv, 0.9 MB), at vLLM 0.34.0: a new
    # minor release adds 0.1-0.2 MB; the cap catches a runaway (whole sources or every release kept), not growth.
    total = sum(p.stat().st_size for p in DATA.iterdir() if p.is_file())
    assert total < 6_500_000, f"{total} bytes"


def test_sources_name_engines_and_releases(sources: dict) -> None:
    assert {"sglang", "vllm"} <= set(sources["engines"])
    for engine, info in sources["engines"].items():
        assert info["package"] and info["releases"], engine
        versions = _versions(sources, engine)
        assert len(versions) == len(set(versions)), engine


def test_every_message_names_a_release_and_a_module(messages: list, sources: dict) -> None:
    assert messages
    for m in messages:
        known = _versions(sources, m["engine"])
        _check_releases(m["releases"], known)
        assert m["sites"]
        for site in m["sites"]:
            assert site["module"].split(".")[0] == sources["engines"][m["engine"]]["package"] or C_SOURCE.match(site["module"]), site
            assert site["function"] and site["level"] in LEVELS, site
            _check_releases(site.get("releases", m["releases"]), known)


def test_placeholders_are_well_formed(messages: list) -> None:
    for m in messages:
        text = m["template"].replace("{{", "").replace("}}", "")
        rest = PLACEHOLDER.sub("", text)
        assert "{" not in rest and "}" not in rest, m["template"]
        assert text.strip() == text and "  " not in text, m["template"]


def test_phases_and_classes_are_from_the_allowed_sets(messages: list, phases: list) -> None:
    for m in messages:
        assert m["phase"] in PHASES, m
        assert m["class"] in CLASSES, m
    for row in phases:
        assert row["phase"] in PHASES, row["module"]
        for phase, how, _runs, functions in row["groups"]:
            assert phase in PHASES and how in HOWS and functions, row["module"]


def test_templates_are_unique_per_engine(messages: list) -> None:
    keys = [(m["engine"], m["template"]) for m in messages]
    assert len(keys) == len(set(keys))
    assert keys == sorted(keys), "messages.json is sorted by (engine, template)"


def test_phase_map_rows_name_releases(phases: list, sources: dict) -> None:
    assert phases
    seen = set()
    for row in phases:
        key = (row["engine"], row["module"])
        assert key not in seen, key
        seen.add(key)
        assert row["module"].split(".")[0] == sources["engines"][row["engine"]]["package"]
        known = _versions(sources, row["engine"])
        _check_releases(row["releases"], known)
        for _phase, _how, runs, _functions in row["groups"]:
            _check_releases(runs, known)


def test_the_call_graph_reached_the_declared_roots(phases: list) -> None:
    """The main engines' roots were found (a renamed runner would silently leave its phase to the paths)."""
    for engine in ("sglang", "vllm"):
        reached = {g[0] for row in phases if row["engine"] == engine for g in row["groups"] if g[1] == "root"}
        assert {"kv_pool", "graph_capture", "weight_loading"} <= reached, (engine, reached)


def test_overrides_name_allowed_values() -> None:
    with (REPO / "tools" / "knowledge" / "overrides.toml").open("rb") as f:
        overrides = tomllib.load(f).get("message", [])
    for o in overrides:
        assert o["engine"] and o["reason"] and ("template" in o or "match" in o), o
        assert o.get("phase", "unknown") in PHASES and o.get("class", "none") in CLASSES, o


def test_the_scanner_turns_messages_into_typed_templates() -> None:
    """The extractor's own parse on a made-up module (no engine code): f-string, % and .format fields."""
    import sys

    sys.path.insert(0, str(REPO / "tools" / "knowledge"))
    try:
        import scan
    finally:
        sys.path.pop(0)
    source = b'''
class ModelRunner:
    def init_memory_pool(self, total_gpu_memory):
        logger.info(f"KV Cache is allocated. #tokens: {self.max_total_num_tokens}, K size: {k_size / GB:.2f} GB")
        logger.warning("avail mem=%.2f GB, %d blocks for %s", avail, num_blocks, name)
        msg = "Not enough memory. Please try to increase --mem-fraction-static. {}".format(detail)
        raise RuntimeError(msg)
'''
    module = scan.scan_source(source, "engine.model_runner")
    assert module is not None
    got = [(m.template, m.level, m.function, m.exception) for m in module.messages]
    assert got == [
        ("KV Cache is allocated. #tokens: {max_total_num_tokens:int}, K size: {k_size:float} GB", "info", "ModelRunner.init_memory_pool", ""),
        ("avail mem={avail:float} GB, {num_blocks:int} blocks for {name:str}", "warning", "ModelRunner.init_memory_pool", ""),
        ("Not enough memory. Please try to increase --mem-fraction-static. {detail:str}", "raise", "ModelRunner.init_memory_pool", "RuntimeError"),
    ]


def test_ids_of_requests_are_strings_and_the_block_managers_capacity_is_kv() -> None:
    """Placeholder types from a %s argument's name: a request id prints "chat-7e63..." (vLLM) or a uuid, a count or a
    device's id a number; the block manager's capacity is the KV pool's (vLLM's refusal of a prompt it cannot hold)."""
    sys.path.insert(0, str(REPO / "tools" / "knowledge"))
    try:
        import classify
        import scan
    finally:
        sys.path.pop(0)
    assert [scan._type_from_name(n) for n in ("request_id", "req_id", "rid", "session_id", "node_id")] == ["str"] * 5
    assert [scan._type_from_name(n) for n in ("gpu_id", "rank_id", "num_req", "block_id", "num_requests")] == ["int"] * 5
    text = "Input prompt ({num_prompt_tokens:int} tokens) is too long and exceeds the capacity of block_manager"
    assert classify.class_of(text, "scheduler", "vllm.core.scheduler") == "kv_exhaustion"
    # Near miss: a prompt longer than the context length is the model's limit, not the pool's.
    assert classify.class_of("Input prompt ({n:int} tokens) is too long and exceeds limit of {max_len:int}", "scheduler", "vllm.core.scheduler") == "none"


def test_reviewed_library_texts_name_their_source(sources: dict, messages: list) -> None:
    """Ray's and the driver's texts come from tools/knowledge/libraries.toml, each engine with where it was read."""
    with (REPO / "tools" / "knowledge" / "libraries.toml").open("rb") as f:
        table = tomllib.load(f)
    for engine in table["engine"]:
        assert sources["engines"][engine["name"]]["source"] == engine["source"]
    reviewed = {(m["engine"], m["template"]) for m in table["message"]}
    assert reviewed <= {(m["engine"], m["template"]) for m in messages}
    assert all(m.get("override") for m in messages if (m["engine"], m["template"]) in reviewed)


def _releases_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("knowledge_releases", REPO / "tools" / "knowledge" / "releases.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_a_long_minor_series_gets_its_middle_release_and_the_offline_run_reads_what_the_cache_holds() -> None:
    """SGLang's 0.5 ran to 0.5.23 and changed inside it: its middle release is read too; a short series only its
    ends. Offline, the cache's releases are read as they are (the middle one cannot be told from three files)."""
    rel = _releases_module()
    long_series = [f"0.5.{n}" for n in range(1, 24)] + ["0.5.3rc1"]
    short = ["0.4.0", "0.4.1", "0.4.2"]
    assert rel.select(long_series + short, (0, 1)) == ["0.4.0", "0.4.2", "0.5.1", "0.5.12", "0.5.23"]
    assert rel.select([f"0.6.{n}" for n in range(8)], None) == ["0.6.0", "0.6.7"]  # 8 finals: not long
    cached = ["0.4.0", "0.4.2", "0.5.1", "0.5.12", "0.5.23"]
    assert rel.every_final(cached, (0, 1)) == cached
    assert rel.every_final(cached, (0, 5)) == ["0.5.1", "0.5.12", "0.5.23"]


def test_the_run_time_phase_map_is_what_the_tool_writes_from_the_committed_map(phases: list) -> None:
    """frame_phases.tsv is generated from phases.json (tools/knowledge/frame_phases.py, run by extract.py)."""
    sys.path.insert(0, str(REPO / "tools" / "knowledge"))
    try:
        import frame_phases
    finally:
        sys.path.pop(0)
    committed = (DATA / "frame_phases.tsv").read_text(encoding="utf-8")
    assert committed == frame_phases.render(phases), "run `python tools/knowledge/frame_phases.py`"
    lines = committed.splitlines()
    assert lines[0].split("\t")[0] == "packages"
    modules = {row["module"]: row["phase"] for row in phases}
    for line in lines[1:]:
        module, phase, *named = line.split("\t")
        assert modules[module] == phase and phase in PHASES, line[:200]
        for field in named:
            kind, _, rest = field.partition(":")
            assert kind in ("own", "calls") and rest.split("=", 1)[0] in PHASES, field[:200]


def test_a_long_series_is_bisected_once_more_where_its_read_releases_disagree() -> None:
    """vLLM 0.6 has 12 finals; 0.6.0, 0.6.3.post1 and 0.6.6.post1 are read, and only 0.6.4 / 0.6.4.post1 printed
    'Memory profiling results: ... initial_memory_usage=...': halfway between two read releases whose memory
    messages differ, one more final is read; between two that agree, none; a short series never."""
    rel = _releases_module()
    series = ["0.6.0", "0.6.1", "0.6.1.post1", "0.6.1.post2", "0.6.2", "0.6.3", "0.6.3.post1", "0.6.4", "0.6.4.post1", "0.6.5", "0.6.6", "0.6.6.post1"]
    chosen = rel.select([*series, "0.7.0", "0.7.3"], None)
    assert chosen == ["0.6.0", "0.6.3.post1", "0.6.6.post1", "0.7.0", "0.7.3"]
    printed = {v: {"profile v1"} for v in series} | {"0.6.4": {"initial usage"}, "0.6.4.post1": {"initial usage"}, "0.6.5": {"profile v2"}, "0.6.6": {"profile v2"}, "0.6.6.post1": {"profile v2"}}
    assert rel.midpoints([*series, "0.7.0", "0.7.3"], chosen, lambda a, b: printed.get(a) != printed.get(b)) == ["0.6.4.post1"]
    assert rel.midpoints(series, chosen, lambda a, b: False) == []
    assert rel.midpoints(["0.4.0", "0.4.1", "0.4.2"], ["0.4.0", "0.4.2"], lambda a, b: True) == []

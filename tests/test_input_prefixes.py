"""The ordered prefix table: every wrapper people paste, with rank identity kept."""

from __future__ import annotations

import pytest

from oomdoctor.input.prefixes import split_prefix, strip_ansi


@pytest.mark.parametrize(
    "raw, msg, rank",
    [
        ("[2025-07-02 07:41:58 DP0 TP0] Load weight end.", "Load weight end.", "DP0 TP0"),
        ("[2025-11-04 05:27:13 DP0 TP0 EP0] x", "x", "DP0 TP0 EP0"),
        ("[2026-05-05 04:41:51 DP2 PP0 ATTN_CP1 MOE_DP0 TP2 EP2] x", "x", "DP2 PP0 ATTN_CP1 MOE_DP0 TP2 EP2"),
        ("[2025-10-30 08:58:23 PP3] x", "x", "PP3"),
        ("[10:12:03 TP0] x", "x", "TP0"),
        ("[2025-12-03 10:00:00.123 TP0] x", "x", "TP0"),  # SGLANG_LOG_MS=1 (0.5.6+)
        ("[gpu_id=1] Load weight begin. avail mem=70.00 GB", "Load weight begin. avail mem=70.00 GB", "gpu1"),  # 0.1.18-0.2.5
        ("[03-02 10:00:41] x", "x", None),
        ("[2026-05-15 09:09:21] INFO server_args.py:1217: Setting swa", "Setting swa", None),
        ("sglang-1  | [2026-02-11 07:12:40 TP1] x", "x", "sglang-1/TP1"),
        ("deepseek-v32-exp  | x", "x", None),
        ("[2026-01-28T23:59:42Z] [2026-01-28 23:59:42 TP0] x", "x", "TP0"),
        ("[2025-02-27T16:30:43.48675097Z] x", "x", None),
        ("[rank3]:   File \"a.py\", line 1, in f", "  File \"a.py\", line 1, in f", "rank3"),
        ("> [2025-07-02 07:41:58 TP0] x", "x", "TP0"),
        ("(EngineCore_DP0 pid=1531) INFO 08-19 07:51:03 [core.py:396] x", "x", "DP0"),
        ("(VllmWorker rank=3 pid=1090) ERROR 04-30 10:20:36 [v1/worker/gpu_worker.py:12] x", "x", "rank3"),
        ("(Worker_TP0_EP0 pid=641) INFO 01-01 00:00:00 [a.py:1] x", "x", "TP0 EP0"),
        ("(RayWorkerWrapper pid=1699, ip=192.168.223.79) INFO 01-01 00:00:00 a.py:1] x", "x", "pid1699"),
        ("(RayWorkerVllm pid=74362) INFO 12-18 21:44:36 model_runner.py:394] x", "x", "pid74362"),  # vLLM 0.2-0.3's Ray worker
        ("INFO 08-19 07:51:03 model_runner.py:732] x", "x", None),
        ("2026-03-29 22:51:55,108 [WARNING] sglang_omni.x: y", "sglang_omni.x: y", None),
        ("^[[0;36m[2025-07-02 07:41:58 TP0] x^[[0m", "x", "TP0"),
        ("\x1b[32m[2025-07-02 07:41:58 TP0] x\x1b[0m", "x", "TP0"),
        ("progress 10%\rprogress 50%\r[2025-07-02 07:41:58 TP0] x", "x", "TP0"),
        ("Load weight end. no prefix", "Load weight end. no prefix", None),
        # Pipe-joined fields: FastChat's logger around a child's stderr (lm-sys/FastChat#3177), loguru's default.
        ('2024-03-20 19:18:27 | ERROR | stderr |   File "/x/runpy.py", line 197, in _run_module_as_main', '  File "/x/runpy.py", line 197, in _run_module_as_main', None),
        ("2023-07-13 01:27:18.636 | ERROR    | detect:inference:85 - CUDA error: x", "CUDA error: x", None),
        ("2024-03-20 19:18:27 | ERROR | stderr", "2024-03-20 19:18:27 | ERROR | stderr", None),  # cut before its message
        ("a | b | c", "a | b | c", None),
        # llama.cpp's logger with timestamps (gpustack/llama-box#25); a version number is no such stamp.
        ("10.05.651.308 E llama_decode: failed to decode, ret = 1", "llama_decode: failed to decode, ret = 1", None),
        ("3.49.305.007 I srv oaicompat_embeddings_requ: rid 3524387156648", "srv oaicompat_embeddings_requ: rid 3524387156648", None),
        ("1.2.3 released", "1.2.3 released", None),
    ],
)
def test_split_prefix(raw: str, msg: str, rank: str | None) -> None:
    s = split_prefix(raw)
    assert s.msg == msg
    assert s.rank == rank


def test_table_row_is_not_a_docker_prefix() -> None:
    assert split_prefix("Completed | 4/4").msg == "Completed | 4/4"


def test_a_compose_container_name_without_an_index_is_a_docker_prefix() -> None:
    """A compose file's container_name ("vllm  | "): before, the prefix stayed on every line, so the frames of a
    traceback relayed by vLLM's serving_chat were not frames (vllm#13100). Near misses: one blank, a capital."""
    s = split_prefix('vllm  | ERROR 02-11 08:25:49 serving_chat.py:661]   File "/usr/x/vllm/model_executor/layers/activation.py", line 81, in forward_cuda')
    assert s.msg.startswith('  File "/usr/x/vllm/') and s.ts == "02-11 08:25:49"
    assert split_prefix("vllm | x").msg == "vllm | x" and split_prefix("Loading  | 3/4").msg == "Loading  | 3/4"


def test_strip_ansi_both_forms() -> None:
    assert strip_ansi("^[[0;31mERR^[[0m \x1b[1mB\x1b[0m") == "ERR B"


def test_collector_prefixes_are_not_the_programs() -> None:
    from oomdoctor.input.prefixes import split_prefix as split

    assert split("[2026-01-28T23:59:42Z] [2026-01-28 23:59:42 TP0] Scheduler hit an exception:").program
    assert split("INFO 08-19 07:51:03 [core.py:396] x").program and split("[rank1]: x").program
    for collector in ("[2026-01-28T23:59:42Z]   File \"/x.py\", line 1, in f", "[pod/p-0/sglang] x", "sglang-1  | x", "> x"):
        assert not split(collector).program, collector


def test_a_traceback_stamped_by_a_collector_stays_with_its_rank(tmp_path) -> None:
    """Buildkite / kubectl --timestamps stamp every physical line: the traceback under an SGLang
    "TP0 ... hit an exception:" line is still TP0's, so the record is whole (it was read as cut)."""
    from oomdoctor.api import diagnose

    from conftest import FIXTURES

    d = diagnose([str(FIXTURES / "allocator-fragmentation/pos_fragmented_decode.log")])
    assert d.evidence.status == "complete" and d.verdict_class == "fragmentation"
    plain = tmp_path / "plain.log"
    plain.write_text("".join(line.split("] ", 1)[1] + "\n" for line in (FIXTURES / "allocator-fragmentation/pos_fragmented_decode.log").read_text().splitlines()))
    assert diagnose([str(plain)]).evidence.status == "complete"


def test_djl_serving_relay_and_a_pasted_caret_m() -> None:
    """DJL Serving (AWS LMI containers) relays each engine line with its own prefix (vllm#2856)."""
    from oomdoctor.input.prefixes import split_prefix as split

    frame = split('WARN  PyProcess W-252-model-stderr:   File "/usr/local/lib/python3.10/dist-packages/vllm/worker/worker.py", line 125, in warm_up_model')
    assert frame.msg.startswith('  File "/usr/local') and not frame.program
    assert split("INFO  PyProcess W-1-llama-stdout: INFO 02-13 20:43:43 llm_engine.py:316] # GPU blocks: 0").msg.startswith("# GPU blocks")
    assert split("2025-06-18 13:43:34 ERROR x^M").msg == "x"


def test_buildkite_web_copy_gutter() -> None:
    from oomdoctor.input.prefixes import split_prefix as split

    got = split("  | [2025-03-10T15:07:20Z] ERROR 03-10 08:07:20 [core.py:302]   File \"/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py\", line 294, in run_engine_core")
    assert got.msg.startswith('  File "/usr/local') and got.ts is not None
    # A table row is not a gutter.
    assert split("| 0  NVIDIA H100 80GB HBM3 On |").msg.startswith("| 0")


def test_interleaved_pods_keep_their_own_ranks_on_traceback_lines() -> None:
    """kubectl logs --prefix --timestamps over two pods: a traceback line stamped only by the collector
    belongs to the last program line of its own pod, not to the other pod's line printed in between."""
    from oomdoctor.evidence.parsers import records as rc
    from oomdoctor.input.scan import scan_lines
    from oomdoctor.pipeline.events import ANCHORS

    text = (
        "[pod/sglang-0/sglang] 2026-03-02T10:00:41Z [2026-03-02 10:00:41 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        "[pod/sglang-1/sglang] 2026-03-02T10:00:41Z [2026-03-02 10:00:41 TP0] Decode batch. #running-req: 3\n"
        '[pod/sglang-0/sglang] 2026-03-02T10:00:41Z   File "/sgl/python/sglang/srt/managers/scheduler.py", line 10, in event_loop\n'
    )
    lines = list(scan_lines([text.encode()], "x.log", ANCHORS, [0], rc.BEFORE_ANCHORS))
    ranks = {line.ref.line: line.ref.rank for line in lines}
    assert ranks[1] == "sglang-0/TP0" and ranks[2] == "sglang-1/TP0" and ranks[3] == "sglang-0/TP0"


def test_timestamps_at_the_edge_of_the_calendar_do_not_raise() -> None:
    from oomdoctor.base import timestamps

    key = timestamps.parse("9999-12-31 23:59:59-1400")
    assert key is not None and timestamps.at_precision(key, timestamps.TIME_OF_DAY) >= 0


def test_an_entry_is_tried_only_on_text_its_first_character_can_start() -> None:
    """split_prefix tries an entry only where _FIRST_CHARS says it can start: every match of every entry,
    on every fixture line and on each line with its prefixes removed one by one, starts with such a character."""
    from oomdoctor.input import prefixes

    from conftest import FIXTURES

    texts = [line for p in sorted(FIXTURES.rglob("*")) if p.is_file() and p.suffix in (".log", ".txt", ".md") for line in p.read_text(errors="replace").splitlines()]
    texts += [" 0: x", "\u00a0| 2025-01-01T00:00:00", "\u0661\u0662\u0663\u0664-01-01 00:00:00 [INFO] x", "> x", "|", ""]
    matched = 0
    for text in texts:
        for _ in range(4):
            for name, pattern in prefixes._PREFIXES:
                m = pattern.match(text)
                if m and m.end():
                    matched += 1
                    assert prefixes._FIRST_CHARS[name].match(text[:1]), (name, text)
                    assert (name, pattern.compiled) in prefixes._entries(text)
            text = split_prefix(text).msg if split_prefix(text).msg != text else text[1:]
    assert matched > 1000


def test_a_bracketed_level_tag_before_the_programs_line_is_a_collector_prefix() -> None:
    """"[ERROR]   File ..." (a wrapper logging a child's stderr at its own level): the frame is read as a frame
    (InternVL#1174: a cut traceback in the vision tower read as no evidence). Near miss: a tag that is no level."""
    s = split_prefix('[ERROR]   File "/root/envs/vllm/model_executor/models/intern_vit.py", line 375, in forward')
    assert s.msg == '  File "/root/envs/vllm/model_executor/models/intern_vit.py", line 375, in forward' and not s.program
    assert split_prefix("[rank0]: x").rank == "rank0" and split_prefix("[NOTE] x").msg == "[NOTE] x"


@pytest.mark.parametrize(
    "raw, msg, rank, system",
    [
        # A log shipper's space-separated stamp around vLLM's own prefix (vllm#20726): the level belongs to vLLM.
        ("2025-07-10 08:59:40 ERROR 07-09 17:59:40 [core.py:586]     check_enough_kv_cache_memory(c)", "    check_enough_kv_cache_memory(c)", None, "vllm"),
        ("2025-07-10 08:59:40.512 [2025-07-10 08:59:40 TP3] Load weight end.", "Load weight end.", "TP3", "sglang"),
        ("2025-07-10 08:59:40 (EngineCore_DP0 pid=12) INFO 07-09 17:59:40 [core.py:1] x", "x", "DP0", "vllm"),
        # Near misses: Python logging's own level, bracketed or bare, is still its prefix, and the message stays whole.
        ("2025-07-10 08:59:40 ERROR 3 requests failed", "3 requests failed", None, None),
        ("2026-03-29 22:51:55,108 [WARNING] sglang_omni.x: y", "sglang_omni.x: y", None, None),
    ],
)
def test_a_shippers_stamp_before_the_engines_own_prefix(raw: str, msg: str, rank: str | None, system: str | None) -> None:
    s = split_prefix(raw)
    assert (s.msg, s.rank, s.system) == (msg, rank, system)


@pytest.mark.parametrize(
    "raw, rank",
    [
        ("2025-07-10 08:59:40 (VllmWorker rank=0 pid=3215) ERROR 07-09 17:59:40 [gpu_worker.py:1] x", "rank0"),
        ("2025-07-10 08:59:40 [rank3]: x", "rank3"),
        ("2025-07-10 08:59:40 (pid=12, ip=10.0.0.1) x", "pid12"),
    ],
)
def test_a_shippers_stamp_before_any_program_tag(raw: str, rank: str) -> None:
    """The program tags whose first attribute is not pid=, torch's rank tag and Ray's (review of 2026-12-03)."""
    s = split_prefix(raw)
    assert (s.msg, s.rank, s.ts) == ("x", rank, "2025-07-10 08:59:40")


def test_a_supervisors_stream_and_level_tag_after_its_clock_is_a_collector_prefix() -> None:
    """"[03:13:05] stderr/INFO  " (a supervisor relaying each child stream with a level, FreeToken#397): the
    message is what the child printed, a source line's indentation kept. Near misses: a path, a URL's word."""
    s = split_prefix("[03:13:05] stderr/INFO      assert total <= budget_bytes, (")
    assert s.msg == "    assert total <= budget_bytes, (" and s.ts == "03:13:05"
    assert split_prefix("[03:13:15] health/ERROR  AssertionError: cache budget too small").msg == "AssertionError: cache budget too small"
    assert split_prefix("stdout/ERROR  x").msg == "x"
    assert split_prefix("path/to/INFO  x").msg == "path/to/INFO  x"
    assert split_prefix("see stderr/INFO for details").msg == "see stderr/INFO for details"
    assert split_prefix("Stderr/INFO  x").msg == "Stderr/INFO  x"


def test_a_loggers_source_location_with_pid_and_rank_tags_after_its_clock() -> None:
    """"2025-06-18 13:43:34 ERROR 31423 [ TP6 PP0 scheduler.py:2547] " (a format with "%(process)d [tags file:line]",
    sgl-project/sglang#7434): every traceback line carries it, so the frames are read and keep the rank. Near
    misses: a bracketed word that is no source location, a number before text."""
    s = split_prefix('2025-06-18 13:43:34 ERROR 31423 [ TP6 PP0 scheduler.py:2547]   File "/x/scheduler.py", line 2528, in run_scheduler_process')
    assert (s.msg, s.rank, s.ts) == ('  File "/x/scheduler.py", line 2528, in run_scheduler_process', "TP6 PP0", "2025-06-18 13:43:34")
    assert split_prefix("2025-06-18 13:43:34 INFO 31423 [model_runner.py:12] Load weight end.").msg == "Load weight end."
    assert split_prefix("31423 [see notes] x").msg == "31423 [see notes] x"
    assert split_prefix("2025-06-18 13:43:34 INFO 3 workers started").msg == "3 workers started"

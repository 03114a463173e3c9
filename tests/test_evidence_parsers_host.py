"""Host and orchestrator records around a kill: Slurm, memory.events, kubectl's limit, restarts and exit code."""

from __future__ import annotations

from oomdoctor.base.evidence import Line, LineRef
from oomdoctor.base.units import GIB
from oomdoctor.evidence.parsers import host
from oomdoctor.evidence.parsers import torch_oom as tt
from oomdoctor.inference.facts import build
from oomdoctor.inference.facts import pasted as pasted_facts
from oomdoctor.inference.facts import torch as torch_facts


def _feed(parser, *texts: str) -> list:
    out = []
    for i, text in enumerate(texts, 1):
        out += parser.feed(Line(LineRef("x", i, text=text), text.strip()))
    return out


def test_the_spelled_out_names_agree() -> None:
    assert torch_facts.KIND_HOST_DETAIL == host.KIND_HOST_DETAIL
    assert build._PASTED_KINDS == pasted_facts.KINDS
    from oomdoctor.evidence import runs

    assert runs.MACHINE_STATE_KINDS == pasted_facts.KINDS


def test_kubectl_describe_limits_restarts_exit_code() -> None:
    events = _feed(host.HostParser(), "Last State:     Terminated", "Reason:       OOMKilled", "Exit Code:    137", "Restart Count:  6", "Limits:", "cpu:             32", "memory:          256Gi", "nvidia.com/gpu:  8", "Requests:", "memory:          64Gi")
    values = {k: v for e in events for k, v in e.values.items() if k != "limits_block"}
    assert values == {"exit_code": 137, "restart_count": 6, "memory_limit_bytes": 256 * GIB}  # not the request's 64Gi


def test_kubectl_json_limits_on_one_line_or_the_next() -> None:
    one = _feed(host.HostParser(), '"limits": {"cpu": "8", "memory": "65536Mi"},', '"restartCount": 3,', '"exitCode": 137,')
    assert [e.values for e in one] == [{"memory_limit_bytes": 64 * GIB}, {"restart_count": 3}, {"exit_code": 137}]
    split = _feed(host.HostParser(), '"limits": {', '"cpu": "8",', '"memory": "64G"', "},")
    assert split[-1].get("memory_limit_bytes") == 64 * 10**9  # G is 10**9, Gi 2**30


def kill(text: str) -> list:
    """The host-kill events the torch parser reads on one line."""
    return [e for e in tt.TorchParser().feed(Line(LineRef("x", 1, text=text), text)) if e.kind == tt.KIND_HOST_OOM]


def test_slurm_cgroup_and_kernel_records_are_host_kills() -> None:
    for text in (
        "slurmstepd: error: Detected 1 oom-kill event(s) in step 3495064.0 cgroup. Some of your processes may have been killed by the cgroup out-of-memory handler.",
        "slurmstepd: error: Detected 2 oom_kill events in StepId=4242.13. Some of the step tasks have been OOM Killed.",
        "srun: error: gpu-node-17: task 0: Out Of Memory",
        "oom_kill 2",
    ):
        (e,) = kill(text)
        assert e.get("strength") == "strong", text
    assert kill("oom_kill 0") == []
    (k,) = kill("Memory cgroup out of memory: Killed process 51234 (python3) total-vm:412345678kB, anon-rss:65432100kB, file-rss:1234kB, shmem-rss:0kB, UID:0 pgtables:130000kB oom_score_adj:0")
    assert (k.get("pid"), k.get("process_name"), k.get("rss_bytes")) == (51234, "python3", 65432100 * 1024)
    (zero,) = _feed(host.HostParser(), "oom_kill 0")
    assert zero.get("cgroup_oom_kills") == 0


def test_systemd_and_zsh_say_a_kill_in_their_own_words() -> None:
    """journalctl of a unit the OOM killer hit (systemd's unit.c and service.c texts) is a strong host kill;
    zsh's lower-case job report of a SIGKILL is a weak one, as bash's "Killed" is. Near misses: another
    result, another job state, the word in prose."""

    for text in (
        "Dec 02 10:00:01 gpu7 systemd[1]: llama-server.service: A process of this unit has been killed by the OOM killer.",
        "Dec 02 10:00:01 gpu7 systemd[1]: llama-server.service: Failed with result 'oom-kill'.",
    ):
        (e,) = kill(text)
        assert (e.get("source"), e.get("strength")) == ("systemd_oom_kill", "strong"), text
    for text in ("[1]    14875 killed     python main.py --low_vram", "[2]  + 9912 killed     python -m vllm.entrypoints.openai.api_server", "zsh: killed     python train.py"):
        (e,) = kill(text)
        assert (e.get("source"), e.get("strength")) == ("sigkill", "weak"), text
    for text in (
        "Dec 02 10:00:01 gpu7 systemd[1]: llama-server.service: Failed with result 'exit-code'.",
        "[1]  + 14875 done       python main.py",
        "the worker was killed by the scheduler after a timeout",
    ):
        assert kill(text) == [], text


def test_ggml_host_buffers_are_host_memory_and_its_device_buffers_are_not() -> None:
    """ggml's CPU backend failing its aligned malloc, and llama.cpp giving up on a CPU buffer, are host RAM; the
    same words for a CUDA buffer type are the device's (ggml's cudaMalloc line, not a host kill)."""

    for text in (
        "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 437944320",
        "llama_model_load: error loading model: unable to allocate CPU buffer",
    ):
        (e,) = kill(text)
        assert (e.get("source"), e.get("strength")) == ("ggml_host_buffer", "strong"), text
    assert kill("llama_model_load: error loading model: unable to allocate CUDA0 buffer") == []
    assert kill("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 372.08 MiB on device 0: cudaMalloc failed: out of memory") == []


def test_go_and_old_kernels_name_a_kill_and_a_server_killed_without_a_traceback_is_host_memory(tmp_path) -> None:
    """Go's os/exec ("signal: killed", ollama's runner) is a weak kill, the memory cgroup's pre-5.x report ("Task
    in /docker/<id> killed as a result of limit of ...") a strong one. A vLLM server whose log ends in the shell's
    "Killed" with no traceback was killed for host memory (a Jetson's unified memory: jetson-containers#795);
    one that killed its own tree after a child failed (SGLang's sigquit) or after a traceback was not."""
    from oomdoctor.api import diagnose

    (go,) = kill("Error: llama runner process has terminated: signal: killed")
    assert (go.get("source"), go.get("strength")) == ("sigkill", "weak")
    (memcg,) = kill("[Thu Mar 20 21:01:25 2025] Task in /docker/6b4502403e15 killed as a result of limit of host")
    assert (memcg.get("source"), memcg.get("strength")) == ("memcg_limit", "strong")
    assert kill("Error: llama runner process has terminated: exit status 2") == []
    server = tmp_path / "jetson.log"
    server.write_text(
        "INFO 01-23 07:34:26 gpu_executor.py:122] # GPU blocks: 11836, # CPU blocks: 4681\n"
        "INFO 01-23 07:34:26 gpu_executor.py:126] Maximum concurrency for 200 tokens per request: 946.88x\n"
        "Killed\n"
    )
    assert diagnose([str(server)]).verdict_class == "host_oom"
    after = tmp_path / "after_traceback.log"
    after.write_text(
        "INFO 01-23 07:34:26 gpu_executor.py:122] # GPU blocks: 11836, # CPU blocks: 4681\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3/dist-packages/vllm/engine/llm_engine.py", line 1, in step\n'
        "RuntimeError: NCCL error: unhandled system error\n"
        "Killed\n"
    )
    assert diagnose([str(after)]).verdict_class == "none"

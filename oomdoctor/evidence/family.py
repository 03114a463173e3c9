"""Which GPU processes are the server's own: the processes of one launch are one server.

An inference server is a family of processes: SGLang's scheduler per rank, its detokenizer and the
launching process; vLLM's API server, engine core and one worker per rank. All of them may hold GPU
memory (a CUDA context is 0.3-1 GiB; a rank's weights and KV are most of a card), and none of them is
"another tenant". What tells them apart from a real tenant, strongest first:

1. **the process the failure is in**: PyTorch's "this process has X" clause, or the one ``Process N``
   entry whose memory covers what PyTorch itself holds (allocated + reserved but unallocated): NVML's
   figure for a process includes its allocator's, so no other entry can be the failing process;
2. **the PIDs the log itself names** (vLLM's "(EngineCore_DP0 pid=1531)" and "(VllmWorker TP0
   pid=3402)" prefixes, Ray's "(pid=N)");
3. **the engines' own process titles** (``sglang::scheduler_TP0``, ``VLLM::Worker_TP0``: what they
   pass to setproctitle, read from their released code into data/knowledge/process_titles.json);
4. **consecutive PIDs**: one launch starts its processes within moments, so their PIDs lie close
   (the threads each starts take PIDs too: vLLM's workers come some 80 PIDs after its engine core).
   A process within ``FAMILY_PID_GAP`` of a family member is of the same launch.
5. **inside the launch**: a process whose PID lies between two PIDs the log names as the server's was started
   while the server was starting its own (a multi-stage server such as vLLM-Omni starts each stage's engine
   after the one before it has loaded, hundreds of PIDs apart, with its API server before them all).

Without 1-3 nothing shows which process is the server; ``family`` then takes the largest one on the
failing GPU and says the identity is assumed. Pure.
"""

from __future__ import annotations

import functools
import json
import os
from typing import TYPE_CHECKING, NamedTuple

from oomdoctor.base.built_in import DATA_DIR
from oomdoctor.base.units import GIB, MIB
from oomdoctor.input.patterns import LazyRegex

if TYPE_CHECKING:
    from collections.abc import Iterable

    from oomdoctor.base.evidence import Event, ProcessUsage

# PIDs of one launch: vLLM V1's workers start about 80-100 PIDs after its engine core (each process
# starts threads before it spawns the next); a tenant started by someone else minutes apart is
# thousands of PIDs away on a busy host. 256 keeps a launch together with room for its threads.
FAMILY_PID_GAP = 256
# The allocator's figures are printed to two decimals of GiB; NVML's per-process figure includes them.
ROUNDING_BYTES = 64 * MIB
# What a process holds on the GPU beyond PyTorch's reserved memory: its CUDA context (0.3-0.6 GiB), NCCL's buffers
# and the libraries' workspaces. Of two processes that could both hold what PyTorch reserved, the one within this
# of it is the failing one (infinity#483: 5.95 GiB beside 5.45 reserved, not the other process's 37.55 GiB).
NON_TORCH_OVERHEAD_BYTES = 2 * GIB
# The process tags a log's own lines carry: vLLM's "(EngineCore_DP0 pid=1531) ", "(VllmWorker TP0 pid=3402) ",
# Ray's "(RayWorkerWrapper pid=1699, ip=10.0.0.1) " (input/prefixes.py strips them; the line's text keeps them).
_LOG_PID_RE = LazyRegex(None, r"^\([A-Za-z_][^()]{0,80}?\bpid=(\d+)\b[^()]{0,80}\) ")


class GpuProcess(NamedTuple):
    """One process on one GPU, as a pasted table, a CSV query or an OOM message lists it."""

    pid: int | None
    name: str | None
    used_bytes: int | None
    gpu: int | str | None = None  # an index (nvidia-smi's table) or a bus id / UUID (a CSV query)


@functools.cache
def _title_prefixes() -> tuple[str, ...]:
    """The literal start of every title the engines set (the part before the first placeholder)."""
    with open(os.path.join(DATA_DIR, "knowledge", "process_titles.json"), encoding="utf-8") as fh:
        entries = json.load(fh)
    prefixes = {e["title"].split("{", 1)[0] for e in entries}
    # "{prefix}::{name}" is vLLM's helper itself: no literal to recognise.
    return tuple(sorted(p for p in prefixes if "::" in p))


def engine_title(name: str | None) -> bool:
    """Whether a process name is a title an engine gives its own processes."""
    if not name:
        return False
    base = name.strip().rsplit("/", 1)[-1]
    return base.startswith(_title_prefixes())


def log_pids(events: Iterable[Event]) -> set[int]:
    """PIDs the log's own process tags name (its lines' prefixes): the server's processes."""
    out = set()
    for e in events:
        for r in e.refs:
            m = _LOG_PID_RE.search(r.text.lstrip())
            if m:
                out.add(int(m.group(1)))
    return out


def failing_pid_of(processes: Iterable[ProcessUsage], allocated_bytes: int | None, unallocated_bytes: int | None) -> int | None:
    """The failing process's PID in an OOM message's list, when its figures show it (none has "this process")."""
    listed = list(processes)
    if not listed or allocated_bytes is None or any(p.is_self for p in listed):
        return None
    return failing_pid((GpuProcess(p.pid, None, p.used_bytes) for p in listed), allocated_bytes + (unallocated_bytes or 0))


def failing_pid(entries: Iterable[GpuProcess], reserved_bytes: int | None) -> int | None:
    """The one entry of an OOM message's process list whose memory covers what PyTorch holds, if only one does."""
    if not reserved_bytes:
        return None
    covering = [p for p in entries if p.pid is not None and p.used_bytes is not None and p.used_bytes + ROUNDING_BYTES >= reserved_bytes]
    if len(covering) == 1:
        return covering[0].pid
    close = [p for p in covering if p.used_bytes is not None and p.used_bytes - reserved_bytes <= NON_TORCH_OVERHEAD_BYTES]
    # Only when the others hold far more than any overhead (another model's worth): two servers of one size stay undecided.
    rest = [p for p in covering if p not in close]
    if len(close) == 1 and all(p.used_bytes is not None and p.used_bytes - reserved_bytes > 4 * NON_TORCH_OVERHEAD_BYTES for p in rest):
        return close[0].pid
    return None


class Family(NamedTuple):
    """The server's PIDs and how they were found: "named" (1-3 above), "assumed" (the largest process), or "none"."""

    pids: frozenset[int]
    how: str


def launch_members(known_pids: Iterable[int], listed: Iterable[int]) -> set[int]:
    """The listed PIDs the log names as the server's, and those between the lowest and highest it names (5 above)."""
    known = set(known_pids)
    if len(known) < 2:
        return known & set(listed)
    low, high = min(known), max(known)
    return {pid for pid in listed if pid in known or low < pid < high}


def family(processes: Iterable[GpuProcess], known_pids: Iterable[int] = (), failing_gpu: int | str | None = None) -> Family:
    """The server's processes among ``processes``: the named ones and the PIDs consecutive with them."""
    procs = [(p.pid, p) for p in processes if p.pid is not None]
    listed = {pid for pid, _ in procs}
    seeds = {pid for pid, p in procs if engine_title(p.name)} | launch_members(known_pids, listed)
    how = "named"
    if not seeds:
        on_gpu = [(p.used_bytes, pid) for pid, p in procs if p.used_bytes is not None and (failing_gpu is None or p.gpu in (None, failing_gpu))]
        if not on_gpu:
            return Family(frozenset(), "none")
        seeds = {max(on_gpu)[1]}
        how = "assumed"
    members = set(seeds)
    pids = sorted(listed)
    grew = True
    while grew:
        grew = False
        for pid in pids:
            if pid not in members and any(abs(pid - m) <= FAMILY_PID_GAP for m in members):
                members.add(pid)
                grew = True
    return Family(frozenset(members), how)

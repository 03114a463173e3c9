"""What an orchestrator says about a killed container, pasted beside the log: its limit, its restarts, its exit.

The kill itself (``OOMKilled``, the kernel's "Killed process", a cgroup's ``oom_kill`` count, Slurm's
oom-kill event) is read by the torch parser as a host OOM; this reads the figures around it that
make the host-side advice concrete:

- ``kubectl describe pod``: ``Restart Count:  4``, ``Exit Code:    137``, and the container's
  ``Limits:`` block (``memory:  64Gi`` on one of the lines after it, before ``Requests:``);
- ``kubectl get pod -o json``: ``"restartCount": 4``, ``"exitCode": 137``, ``"limits": {`` with
  ``"memory": "64Gi"`` on the same or a following line;
- a cgroup v2 ``memory.events`` file: its ``oom_kill N`` line (0: the container's limit killed nothing).

Quantities are Kubernetes' (``64Gi``, ``65536Mi``, ``68719476736``, ``64G`` as 10**9). Pure.
"""

from __future__ import annotations

import re

from oomdoctor.base.evidence import Event, Line
from oomdoctor.evidence.parsers.pasted import HOST_ANCHORS
from oomdoctor.input.patterns import lazy

KIND_HOST_DETAIL = "host_detail"

# The scanner's literals for this parser live in pasted.py, which routes lines here without importing it.
ANCHORS: tuple[bytes, ...] = HOST_ANCHORS

_RESTARTS_RE = lazy(("Restart Count", "restartCount"), r'(?:^Restart Count:\s*|"restartCount":\s*)(?P<n>\d+)')
# cgroup v2 memory.events: "oom_kill 3" (a count above 0 is also the torch parser's host OOM); 0 says none.
_CGROUP_KILLS_RE = lazy("oom_kill", r"^oom_kill\s+(?P<n>\d+)$")
_EXIT_RE = lazy(("Exit Code", "exitCode"), r'(?:^Exit Code:\s*|"exitCode":\s*)(?P<n>-?\d+)')
_LIMITS_RE = lazy(("Limits:", '"limits"'), r'^(?:Limits:\s*$|"limits":\s*\{)')
_MEMORY_RE = lazy("memory", r'^"?memory"?:\s*"?(?P<q>\d+(?:\.\d+)?)(?P<unit>Ki|Mi|Gi|Ti|K|M|G|T|k)?"?,?\s*$')
_SECTION_END_RE = lazy(None, r'^(?:Requests:|"requests":|Environment:|Mounts:|Conditions:|\})')
_UNITS = {None: 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}
# Lines of a Limits block (cpu, memory, nvidia.com/gpu, ephemeral-storage): the memory line is among the first few.
_BLOCK_LINES = 6


class HostParser:
    """Incremental: the Limits block is the few lines after its header."""

    def __init__(self) -> None:
        self._limits_left = 0

    def feed(self, line: Line) -> list[Event]:
        msg = line.msg.strip()
        if not msg:
            return []
        if self._limits_left:
            self._limits_left -= 1
            memory = _MEMORY_RE.search(msg)
            if memory is not None:
                self._limits_left = 0
                value = round(float(memory.group("q")) * _UNITS[memory.group("unit")])
                return [Event(KIND_HOST_DETAIL, (line.ref,), {"memory_limit_bytes": value})]
            if _SECTION_END_RE.search(msg):
                self._limits_left = 0
        inline = re.search(r'"limits":\s*\{[^}]*"memory":\s*"(?P<q>\d+(?:\.\d+)?)(?P<unit>Ki|Mi|Gi|Ti|K|M|G|T|k)?"', msg) if '"limits"' in msg else None
        if inline is not None:
            return [Event(KIND_HOST_DETAIL, (line.ref,), {"memory_limit_bytes": round(float(inline.group("q")) * _UNITS[inline.group("unit")])})]
        if _LIMITS_RE.search(msg):
            self._limits_left = _BLOCK_LINES
            return [Event(KIND_HOST_DETAIL, (line.ref,), {"limits_block": True})]
        restarts = _RESTARTS_RE.search(msg)
        if restarts is not None:
            return [Event(KIND_HOST_DETAIL, (line.ref,), {"restart_count": int(restarts.group("n"))})]
        kills = _CGROUP_KILLS_RE.search(msg)
        if kills is not None:
            return [Event(KIND_HOST_DETAIL, (line.ref,), {"cgroup_oom_kills": int(kills.group("n"))})]
        code = _EXIT_RE.search(msg)
        if code is not None:
            return [Event(KIND_HOST_DETAIL, (line.ref,), {"exit_code": int(code.group("n"))})]
        return []

    def finish(self) -> list[Event]:
        return []

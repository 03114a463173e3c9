"""Facts a bug reporter states in prose or in a command they typed (oomdoctor.input.issue_body).

They fill only what no log line says (source "reported" ranks last in store.PRECEDENCE), and the
verdict lists which facts came from the reporter's words, so a reader knows what rests on them.
"""

from __future__ import annotations

from oomdoctor.base.errors import OomdoctorError
from oomdoctor.base.evidence import Event
from oomdoctor.inference.facts.store import Facts
from oomdoctor.input.issue_input import KIND_REPORTED
from oomdoctor.memory.gpus import find_gpu

# Reported names that are facts as they are.
_DIRECT = ("mem_fraction_static", "gpu_memory_utilization", "tp_size", "max_model_len", "context_length", "chunked_prefill_size", "max_num_seqs", "model_path")


def reported_facts(f: Facts, events: list[Event]) -> None:
    reported = [e for e in events if e.kind == KIND_REPORTED]
    if not reported:
        return
    used: list[str] = []
    versions: list[str] = []
    for e in reported:
        name, value = e.get("name"), e.get("value")
        if name in _DIRECT:
            before = f.get(name)
            f.offer(name, value, e.ref, source="reported")
            if before is None and f.get(name) is not None:
                used.append(name)
        elif name == "gpu_name":
            f.set("reported_gpu", value, e.ref)
            try:
                card = find_gpu(str(value).replace(" ", "-"))
            except OomdoctorError:
                continue
            before = f.get("capacity_bytes")
            f.offer("capacity_bytes", card.capacity_bytes, e.ref, source="reported")
            if before is None and f.get("capacity_bytes") is not None:
                used.append("capacity_bytes")
        elif name.endswith("_version"):
            versions.append(f"{name.removesuffix('_version')} {value}")
    if versions:
        f.set("reported_versions", ", ".join(versions), *(e.ref for e in reported if str(e.get("name")).endswith("_version")))
    f.set("reported_facts", tuple(used))

"""In-server capture: on a CUDA OOM, write the allocator's evidence into a bundle directory.

Install in the server (torch is there; oomdoctor's CLI never imports it):

    import oomdoctor.capture; oomdoctor.capture.install("/var/tmp/oom")      # one line

or without touching the code, for the server and every process it spawns:

    export OOMDOCTOR_CAPTURE_DIR=/var/tmp/oom
    export PYTHONPATH="$(python -m oomdoctor.capture --site-dir)${PYTHONPATH:+:$PYTHONPATH}"

On an OOM it writes memory_stats.json (torch.cuda.memory_stats()), the observer's numbers, the OOM
message (oom.log, when the exception reaches the hook or ``guard``), and with ``snapshot=True`` a
memory snapshot pickle; then the OOM propagates unchanged. ``oomdoctor diagnose DIR`` reads it.

Installing touches no CUDA state: it queues the allocator's OOM observer and, with ``snapshot=True``,
the allocation-history recording on torch.cuda's lazy-init queue (both run when the process first
uses CUDA, in a forked worker too, or at once if it already has), so a
process that never uses CUDA never initialises it (a fork-based launcher can still fork safely).
CUDA is queried only inside the observer, when an OOM happens. This module imports only the
standard library (it runs inside the server's Python, 3.10 or later, without oomdoctor's dependencies).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

SITE_DIR = str(Path(__file__).resolve().parent / "_capture_site")
ENV_DIR = "OOMDOCTOR_CAPTURE_DIR"
ENV_SNAPSHOT = "OOMDOCTOR_CAPTURE_SNAPSHOT"

# The bundle manifest's header (oomdoctor.evidence.collected.manifest_header), kept here so this module needs
# nothing outside the standard library; a test checks the two agree.
BUNDLE_KIND = "oomdoctor-bundle"
BUNDLE_VERSION = 1

_state: dict[str, Any] = {"dir": None, "snapshot": False, "installed": False}
_lock = threading.Lock()


def _bundle_dir() -> Path:
    base = Path(_state["dir"])
    d = base / f"capture-{os.getpid()}"
    d.mkdir(parents=True, exist_ok=True)
    manifest = d / "manifest.json"
    if not manifest.exists():
        manifest.write_text(
            json.dumps(
                {**_manifest_header(), "pid": os.getpid(), "gpus": [], "logs": ["oom.log"]},
                indent=2,
                sort_keys=True,
            )
        )
    return d


def _manifest_header() -> dict[str, Any]:
    try:
        from oomdoctor import __version__ as version
    except ImportError:  # loaded by file path into a Python where the oomdoctor package is not importable
        version = "unknown"
    return {"kind": BUNDLE_KIND, "bundle_version": BUNDLE_VERSION, "tool": {"name": "oomdoctor", "version": version}, "source": "capture"}


def _observer(device: int, alloc: int, device_alloc: int, device_free: int) -> None:
    """Called by PyTorch's allocator before it raises the OOM (allocator lock released)."""
    import torch  # lazy: only ever imported inside the server process

    with _lock:
        try:
            d = _bundle_dir()
            stats = torch.cuda.memory_stats(device)
            payload = {"memory_stats": stats, "observer": {"device": device, "alloc": alloc, "device_alloc": device_alloc, "device_free": device_free, "time": time.time()}}
            (d / "memory_stats.json").write_text(json.dumps(payload, indent=1, sort_keys=True))
            if _state["snapshot"]:
                torch.cuda.memory._dump_snapshot(str(d / "snapshot.pickle"))
        except Exception as exc:  # noqa: BLE001 - evidence is best effort; the OOM itself must go on
            print(f"oomdoctor.capture: could not write evidence: {exc}", file=sys.stderr)


def record_exception(exc: BaseException) -> None:
    """Write an OOM's message (with its traceback) to oom.log in the bundle."""
    if _state["dir"] is None or "out of memory" not in str(exc).lower():
        return
    import traceback

    with _lock:
        d = _bundle_dir()
        with open(d / "oom.log", "a", encoding="utf-8") as fh:
            fh.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))


@contextmanager
def guard() -> Iterator[None]:
    """``with oomdoctor.capture.guard(): step()`` records an OOM raised inside and re-raises it unchanged."""
    try:
        yield
    except BaseException as exc:
        record_exception(exc)
        raise


def install(bundle_dir: str | None = None, snapshot: bool | None = None) -> bool:
    """Attach the OOM observer (and an excepthook that records the message); False for a torch built without CUDA.

    Touches no CUDA state (no ``torch.cuda.is_available()``, no device query, and the observer itself is
    attached from torch.cuda's lazy-init queue): see the module docstring.
    """
    bundle_dir = bundle_dir or os.environ.get(ENV_DIR)
    if not bundle_dir:
        raise ValueError(f"give a bundle directory or set {ENV_DIR}")
    _state["dir"] = bundle_dir
    _state["snapshot"] = bool(snapshot if snapshot is not None else os.environ.get(ENV_SNAPSHOT))
    if _state["installed"]:
        return True
    import torch  # lazy: only ever imported inside the server process

    attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
    if attach is None:
        return False  # a CPU-only build of torch: there is no CUDA allocator to observe
    if _state["snapshot"]:
        _when_cuda_initialises(torch, lambda: torch.cuda.memory._record_memory_history(max_entries=100000))
    # Attached when the process initialises CUDA itself, not now: attaching initialises the CUDA
    # driver in this process (seen on an H200 with torch 2.11: a fork-based pool's workers then failed
    # with "CUDA error: initialization error" although torch.cuda.is_initialized() was still False).
    _when_cuda_initialises(torch, lambda: attach(_observer))
    previous = sys.excepthook

    def hook(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
        record_exception(exc)
        previous(exc_type, exc, tb)

    sys.excepthook = hook
    _state["installed"] = True
    return True


def _when_cuda_initialises(torch: Any, fn: Any) -> None:
    """Run ``fn`` once the process initialises CUDA itself (at once if it has), never initialising it here."""
    lazy_call = getattr(torch.cuda, "_lazy_call", None)
    if lazy_call is not None:
        lazy_call(fn)
    else:  # a torch without the lazy-init queue: record from now on, as before
        fn()


def main() -> None:
    if sys.argv[1:] == ["--site-dir"]:
        print(SITE_DIR)
    else:
        print(__doc__)


if __name__ == "__main__":
    main()

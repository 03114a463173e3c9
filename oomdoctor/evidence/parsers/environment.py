"""Environment reports pasted into a bug report: what the GPU, driver, CUDA and library versions were.

Read as their programs print them (format strings of the released code, cited per pattern):

- ``python -m torch.utils.collect_env`` and ``vllm collect-env`` (vllm/collect_env.py, a copy of
  torch's): ``Key: value`` lines up to vLLM 0.8 (``PyTorch version: 2.5.1+cu124``, ``Nvidia driver
  version: 550.54.15``, ``vLLM Version: 0.6.6.post1``), ``Key<padding>: value`` from 0.9 (``PyTorch
  version              : 2.7.0+cu126``); the GPUs are ``nvidia-smi -L`` with the UUIDs removed, one
  ``GPU N: NAME`` line each, on the lines after ``GPU models and configuration:`` (or on the same line
  for one GPU); the environment variables as ``NAME=value`` lines; pip packages as ``[pip3] torch==2.5.1``.
- ``python -m sglang.check_env`` (sglang/check_env.py): ``print(f"{k}: {v}")`` of an ordered dict:
  ``PyTorch: 2.4.0+cu121``, ``sglang: 0.3.1.post2``, ``vllm: 0.5.5``, ``CUDA Driver Version: 550.54.15``,
  ``NVCC: Cuda compilation tools, release 12.4, V12.4.131``, and the GPUs grouped by name,
  ``GPU 0,1,2,3: NVIDIA H100 80GB HBM3``.
- ``nvidia-smi -L``: ``GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)``.

Each line read becomes one ``env_fact`` event (``name``, ``value``); GPU lines carry the indices
they name. "Could not collect", "N/A" and "Module Not Found" are absence, not values. Pure.
"""

from __future__ import annotations

from oomdoctor.base.evidence import Event, Line, LineRef
from oomdoctor.evidence.parsers.pasted import ENV_ANCHORS
from oomdoctor.input.patterns import LazyRegex, lazy

KIND_ENV = "env_fact"
KIND_ENV_GPU = "env_gpu"
KINDS = frozenset({KIND_ENV, KIND_ENV_GPU})

# The scanner's literals for this parser live in pasted.py, which routes lines here without importing it.
ANCHORS: tuple[bytes, ...] = ENV_ANCHORS

_VERSION = r"(?P<value>\d+(?:\.\d+)+[\w.+-]*)"
# (fact name, pattern): the pattern's ``value`` group is the fact. Both eras of collect_env (colon, or
# padded colon) and check_env's bare "name: value" are one pattern each: ``\s*:\s*``.
_LINES: tuple[tuple[str, LazyRegex], ...] = (
    ("torch_version", lazy("PyTorch", rf"^PyTorch(?: version)?\s*:\s*{_VERSION}")),
    ("cuda_version", lazy("CUDA runtime version", rf"^CUDA runtime version\s*:\s*{_VERSION}")),
    ("cuda_build_version", lazy("CUDA used to build PyTorch", rf"^CUDA used to build PyTorch\s*:\s*{_VERSION}")),
    ("cuda_build_version", lazy("NVCC", rf"^NVCC\s*:.*?release\s+{_VERSION}")),
    ("driver_version", lazy(("Nvidia driver version", "CUDA Driver Version"), rf"^(?:Nvidia driver version|CUDA Driver Version)\s*:\s*{_VERSION}")),
    ("vllm_version", lazy(("vLLM Version", "vllm:"), rf"^(?:vLLM Version|vllm)\s*:\s*v?{_VERSION}")),
    ("sglang_version", lazy("sglang:", rf"^sglang\s*:\s*v?{_VERSION}")),
    ("torch_version", lazy("[pip3] torch==", rf"^\[pip3\] torch=={_VERSION}")),
    ("vllm_version", lazy("[pip3] vllm==", rf"^\[pip3\] vllm=={_VERSION}")),
    ("sglang_version", lazy("[pip3] sglang==", rf"^\[pip3\] sglang=={_VERSION}")),
    ("cuda_visible_devices", lazy("CUDA_VISIBLE_DEVICES=", r"^CUDA_VISIBLE_DEVICES=(?P<value>\S*)\s*$")),
    ("nvidia_visible_devices", lazy("NVIDIA_VISIBLE_DEVICES=", r"^NVIDIA_VISIBLE_DEVICES=(?P<value>\S*)\s*$")),
)
# "GPU 0: NVIDIA H100 80GB HBM3" (nvidia-smi -L, collect_env), "GPU 0,1,2,3: NVIDIA H100 80GB HBM3"
# (check_env), after "GPU models and configuration:" or on its own line; the UUID clause dropped. A name
# starts with a letter: "GPU 00000000:18:00.0" is nvidia-smi -q's block header, not a GPU's name.
_GPU_RE = lazy("GPU ", r"^(?:GPU models and configuration\s*:\s*)?GPU (?P<ids>\d+(?:,\d+)*)\s*:\s*(?P<name>(?!.*Compute Capability)[A-Za-z][^(]*?)\s*(?:\(UUID:.*)?$")


# "vllm: Module Not Found", "vLLM Version: Could not collect": the report says the package is absent.
_ABSENT_RE = lazy(None, r"^(?:vLLM Version|vllm|sglang|PyTorch(?: version)?|Nvidia driver version|CUDA runtime version)\s*:\s*(?:Module Not Found|Could not collect|N/A|No CUDA)\s*$")
_GPU_HEADER_RE = lazy("GPU models and configuration", r"^GPU models and configuration\s*:\s*$")


class EnvironmentParser:
    """One line, its fact; the GPU lines under collect_env's header cite that header too."""

    def __init__(self) -> None:
        self._header: LineRef | None = None

    def feed(self, line: Line) -> list[Event]:
        msg = line.msg.strip()
        if not msg or len(msg) > 300:
            return []
        if _GPU_HEADER_RE.search(msg):
            self._header = line.ref
            return []
        gpu = _GPU_RE.search(msg)
        if gpu is not None:
            indices = tuple(int(i) for i in gpu.group("ids").split(","))
            refs = (line.ref,) if self._header is None else (line.ref, self._header)
            return [Event(KIND_ENV_GPU, refs, {"indices": indices, "name": gpu.group("name").strip()})]
        self._header = None
        for name, pattern in _LINES:
            m = pattern.search(msg)
            if m is not None and m.group("value"):
                return [Event(KIND_ENV, (line.ref,), {"name": name, "value": m.group("value")})]
        if _ABSENT_RE.search(msg):
            return [Event(KIND_ENV, (line.ref,), {"name": "absent", "value": None})]
        return []

    def finish(self) -> list[Event]:
        return []

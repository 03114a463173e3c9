"""Phase map of an engine's functions: declared roots, then the static call graph, then names and paths.

A root is a function whose whole body belongs to one phase (vLLM's profile_run, SGLang's
init_memory_pool). Functions it calls by name inside the package inherit that phase, transitively;
a function reached from several roots takes the nearest one (ties: the order roots are declared in).
Calls are resolved by name only, as a reader of the source would without running it:
  self.f()  -> methods f of the same class, else any method f (an inherited one);
  f()       -> f in the same module, else module-level f or class f (its __init__) anywhere;
  obj.f()   -> methods f anywhere, only when few exist and f is not a generic name (forward, get).
Functions no root reaches get a phase from their name and module path (classify.PHASE_RULES), or
stay unknown.
"""

from __future__ import annotations

import re
from collections import defaultdict, deque
from collections.abc import Iterator

import classify

# The modules the phase map covers: model runners, workers, loaders, memory pools, graph runners,
# schedulers, attention backends, model files and quantization methods (their create_weights and post-load hooks
# are loading, their apply a forward pass; vLLM's sit under model_executor, SGLang's under layers.quantization).
# Anything else is traversed but not recorded.
COVERED = re.compile(
    r"model_runner|model_executor|\.worker|executor|loader|weight_utils|memory_pool|mem_cache|cache_engine|block_manager|kv_cache|block_pool"
    r"|allocator|cuda_graph|cudagraph|graph_runner|compilation|schedul|attention|attn|\.models?\.|\.layers\.quantization|torch_memory_saver"
)

_SGLANG_ROOTS = (
    ("graph_capture", r"\w*(Cuda|Device)?GraphRunner\.(capture|__init__)|ModelRunner\.(init_cuda_graphs|init_device_graphs)"),
    ("profiling", r"ModelRunner\.profile_max_num_token"),
    ("kv_pool", r"ModelRunner\.(init_memory_pool|alloc_memory_pool)"),  # alloc_ from 0.5.2x
    ("weight_loading", r"ModelRunner\.(load_model|update_weights_from_disk)"),
    ("encoder", r"embed_mm_inputs|general_mm_embed_routine|\w+\.get_image_feature"),
    ("sampling", r"Sampler\.forward|ModelRunner\.sample"),
    ("scheduler", r"Scheduler\.(get_next_batch_to_run|get_new_batch_prefill|update_running_batch)|ScheduleBatch\.(retract_decode|prepare_for_extend|prepare_for_decode)"),
    ("prefill_decode", r"ModelRunner\.(forward_extend|forward_decode|forward)"),
)
_VLLM_ROOTS = (
    ("graph_capture", r"\w*(ModelRunner|Worker)\.(capture_model|_capture_cudagraphs)|CUDAGraphRunner\.capture"),
    ("profiling", r"\w*(Worker|ModelRunner)\.(profile_run|determine_available_memory|determine_num_available_blocks)"),
    (
        "kv_pool",
        r"\w*(Worker|ModelRunner)\.(initialize_kv_cache|initialize_cache|_init_cache_engine|init_cache_engine|_allocate_kv_cache_tensors|initialize_kv_cache_tensors)"
        r"|CacheEngine\.__init__",
    ),
    ("weight_loading", r"\w*(ModelRunner|Worker)\.load_model|get_model"),
    ("encoder", r"\w*ModelRunner\._execute_mm_encoder"),
    ("sampling", r"Sampler\.forward"),
    ("scheduler", r"Scheduler\.(schedule|_schedule\w*)"),
    ("prefill_decode", r"\w*(ModelRunner|Worker)\.execute_model"),
)
# Declared roots per engine; the derived engines run their base engine's runners under other names.
ROOTS: dict[str, tuple[tuple[str, str], ...]] = {
    "sglang": _SGLANG_ROOTS,
    "sglang-omni": _SGLANG_ROOTS,
    "vllm": _VLLM_ROOTS,
    "vllm-ascend": _VLLM_ROOTS,
    "vllm-omni": _VLLM_ROOTS,
    "torch_memory_saver": (),
}

# Method names too generic to follow through obj.f(): they would join every model to every runner.
_GENERIC_WORDS = """
forward __call__ get set update run step init reset clear append extend pop items keys values copy to cuda cpu
item view reshape size apply load save close start stop wait put add remove format join split strip
"""
GENERIC = frozenset(_GENERIC_WORDS.split())
MAX_TARGETS = 6


def module_phase(module: str) -> str:
    """The phase a covered module's functions get when no root reaches them and their name says nothing."""
    return classify.phase_of("", "", module)


def phase_map(engine: str, modules: list[dict]) -> Iterator[tuple[str, str, str, str]]:
    """(module, function, phase, how) for each covered function of one release; how is root, calls, name or module.

    A module with no functions still yields ("", module_phase, "module") so its release is recorded."""
    funcs: list[tuple[str, str, str, list[str]]] = []  # module, qualname, class, calls
    for mod in modules:
        for qualname, cls, calls in mod["functions"]:
            funcs.append((mod["path"], qualname, cls, calls))
    by_method: dict[str, list[int]] = defaultdict(list)
    by_toplevel: dict[str, list[int]] = defaultdict(list)
    by_class_method: dict[tuple[str, str, str], int] = {}
    for i, (module, qualname, cls, _) in enumerate(funcs):
        leaf = qualname.rsplit(".", 1)[-1]
        if cls:
            by_method[leaf].append(i)
            by_class_method[(module, cls, leaf)] = i
            if leaf == "__init__":
                by_toplevel[cls].append(i)  # calling a class runs its __init__
        elif "." not in qualname:
            by_toplevel[leaf].append(i)

    indexes = _Indexes(funcs, by_method, by_toplevel, by_class_method)

    # Multi-source breadth-first search: the first root to reach a function is the nearest.
    phase: dict[int, tuple[str, str]] = {}
    queue: deque[int] = deque()
    for name, pattern in ROOTS.get(engine, ()):
        rx = re.compile(pattern)
        for i, (_, qualname, _, _) in enumerate(funcs):
            if i not in phase and rx.fullmatch(qualname):
                phase[i] = (name, "root")
                queue.append(i)
    while queue:
        i = queue.popleft()
        for j in indexes.targets(i):
            if j not in phase:
                phase[j] = (phase[i][0], "calls")
                queue.append(j)

    for mod in modules:
        if COVERED.search(mod["path"]):
            yield mod["path"], "", module_phase(mod["path"]), "module"
    for i, (module, qualname, _, _) in enumerate(funcs):
        if not COVERED.search(module):
            continue
        if i in phase:
            yield module, qualname, phase[i][0], phase[i][1]
            continue
        by_name = phase_by_name(qualname, module)
        if by_name != "unknown":
            yield module, qualname, by_name, "name"
        else:
            yield module, qualname, module_phase(module), "module"


class _Indexes:
    """The functions of one release by name, to resolve a call to the functions it may run."""

    def __init__(self, funcs: list[tuple[str, str, str, list[str]]], by_method: dict[str, list[int]], by_toplevel: dict[str, list[int]], by_class_method: dict[tuple[str, str, str], int]) -> None:
        self.funcs, self.by_method, self.by_toplevel, self.by_class_method = funcs, by_method, by_toplevel, by_class_method

    def targets(self, i: int) -> Iterator[int]:
        module, _, cls, calls = self.funcs[i]
        for call in calls:
            if call.startswith("self."):
                name = call[5:]
                own = self.by_class_method.get((module, cls, name))
                if own is not None:
                    yield own
                elif len(self.by_method.get(name, ())) <= MAX_TARGETS:
                    yield from self.by_method.get(name, ())
                continue
            local = [j for j in self.by_toplevel.get(call, ()) if self.funcs[j][0] == module]
            if local:
                yield from local
            elif call in self.by_toplevel and len(self.by_toplevel[call]) <= MAX_TARGETS:
                yield from self.by_toplevel[call]
            elif call not in GENERIC and len(self.by_method.get(call, ())) <= MAX_TARGETS // 2:
                yield from self.by_method.get(call, ())


def phase_by_name(qualname: str, module: str) -> str:
    # A model file's constructors create the parameters: that is weight creation, part of loading.
    if ".models." in module + "." and qualname.endswith("__init__"):
        return "weight_loading"
    for phase, _, by_func, _ in classify.PHASE_RULES:
        if phase != "startup" and by_func is not None and by_func.search(qualname):
            return phase
    return "unknown"

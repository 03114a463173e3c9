"""Rules that decide whether a message concerns memory, and which phase and class it implies.

The rules read the message text, the enclosing function's name and the module path, in that order
of strength: words the engine printed beat the name of the function they were printed from, which
beats the file's place in the package. Entries these rules get wrong go in overrides.toml, with why.
"""

from __future__ import annotations

import re

PHASES = ("weight_loading", "kv_pool", "profiling", "graph_capture", "encoder", "prefill_decode", "sampling", "scheduler", "startup", "unknown")
CLASSES = (
    "startup_kv",
    "weights_dont_fit",
    "cuda_graph",
    "runtime_activation",
    "encoder_starvation",
    "kv_exhaustion",
    "host_oom",
    "unknown_oom",
    "none",
)


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.I)


# A message is about memory when its text (placeholders included: {avail_mem:float} says as much as
# "avail mem") or its enclosing function's name says so.
MEMORY_TEXT = _rx(
    r"memory|\bmem\b|mem[_ ]?(usage|fraction|util)|avail_mem|\boom\b|alloc|avail(able)?[ _](gpu[ _])?(mem|size|tokens|blocks|slots|kv)"
    r"|num_available|free[ _](gpu[ _])?(mem|blocks|slots|tokens|bytes|pages)|\bfreed\b"
    r"|kv[ _-]?cache|(kv|cache|gpu|cpu|free|physical|num|total)[ _]blocks?|block[ _](table|pool|manager)|token[ _]pool|max_total_num_tokens"
    r"|#tokens|total[ _]tokens|token usage|preempt|retract|cuda ?graph|graph capture|captur(e|ing) (cuda )?graphs?|capture[ _]sizes?"
    r"|memory profil|profil(e|ing) run|profiled|profile_run|peak|pinned|swap|\bgib\b|\bgb\b|\bmib\b|\bmb\b|offload|fragment"
    r"|gpu_memory_utilization|torch_memory_saver|expandable_segments|\bvram\b|\bhbm\b"
)
MEMORY_FUNCTION = _rx(
    r"memory|mem_|_mem\b|alloc|kv_cache|cache_engine|profile_run|determine_available|profile_max|capture|cuda_graph|cudagraph"
    r"|preempt|retract|swap|offload|num_blocks|free_gpu|token_to_kv|max_num_token"
)

# A message reports a shortage (not just progress, nor a configuration conflict) when it says something
# did not fit, ran out, or must be made smaller or larger to fit.
PROBLEM = _rx(
    r"not enough|insufficient|out of memory|\boom\b|exceed|too (large|small|big)|larger than|less than|no (available|free|space|more)"
    r"|runs? out|ran out|running out|preempt|retract|evict|exhaust|is full|(does not|doesn't|not) fit|cannot (allocate|fit|get \S+ free)"
    r"|(failed|unable) to allocate|allocation failed|try (increasing|decreasing|lowering|reducing)|please (increase|decrease|lower|reduce)"
)
HOST = _rx(r"pinned (host )?memory|page-locked|pin_memory|host memory|cpu memory|swap space|\bram\b|/dev/shm|system memory|numa node")
HOST_MODULE = _rx(r"cpu_worker|memory_pool_host|host_kv|\.cpu\.")
KV_EXHAUSTION = _rx(
    r"preempt|retract|(kv cache|pool|indices) (is )?full|out of (kv|blocks|tokens|cache)|no free (blocks|slots|tokens)|evict"
    r"|(prefill|decode|extend) out of memory|try to allocate \S+ tokens|runs out of memory"
)
# Memory words strong enough for a class: "free port", "bad word tokens" are not about memory.
CLASS_MEMORY = _rx(
    r"out of memory|\boom\b|memory|\bmem\b|kv[ _-]?cache|cache blocks?|token slots|tokens? (pool|capacity)|allocate \S+ tokens"
    r"|max_total_num_tokens|\bblocks\b|block_manager|block manager|alloc|cuda ?graph|mem-fraction|mem_fraction|gpu_memory_utilization|max-running-requests|max_num_seqs|\bgib\b"
)
# Shortages near memory that are not of GPU or host memory: RDMA registration, ports, tokenizers, collectives.
NOT_OOM = _rx(r"regist|\bport\b|tokenizer|shared memory based|symmetric memory|lora adapter|context length|rope grid")
OOM_WORDS = _rx(r"out of memory|\boom\b|not enough (gpu |device )?memory|insufficient (gpu |device )?memory|memory (is )?(insufficient|exhausted)")
# The pool's size as the subject (a phase) and as a remedy (a class): the flags that size it count only for the class.
KV_SUBJECT = _rx(r"kv[ _-]?cache|cache[ _]blocks?|gpu[ _]blocks|num_gpu_blocks|#tokens|max_total_num_tokens|token[ _]pool")
KV_WORDS = _rx(KV_SUBJECT.pattern + r"|gpu_memory_utilization|gpu-memory-utilization|mem_fraction|mem-fraction")

# (phase, message text, function name, module path): checked in order within each of the three passes.
PHASE_RULES: tuple[tuple[str, re.Pattern[str] | None, re.Pattern[str] | None, re.Pattern[str] | None], ...] = (
    # "Capturing ..." is how every engine's capture progress bar starts (batches, num tokens, prefill shape).
    ("graph_capture", _rx(r"cuda ?graph|cudagraph|graph capture|capture (cuda )?graph|piecewise|^capturing "), _rx(r"capture|cuda_graph|cudagraph|graph_runner"), _rx(r"cuda_graph|cudagraph|graph_runner|piecewise")),
    ("profiling", _rx(r"profil|peak memory|determine.*memory"), _rx(r"profile|determine_available_memory|determine_num_available_blocks|memory_profiling"), _rx(r"profil")),
    ("scheduler", _rx(r"preempt|retract"), _rx(r"schedul|preempt|retract|swap_in|swap_out|policy"), _rx(r"schedul|block_manager|policy|core\.sched")),
    ("kv_pool", KV_SUBJECT, _rx(r"init_memory_pool|kv_cache|cache_engine|allocate_kv|initialize_cache|init_cache|num_blocks|memory_pool|max_num_token"), _rx(r"memory_pool|mem_cache|cache_engine|kv_cache|kv_pool|block_pool|allocator")),
    # process_weights_after_loading: both engines' hook that runs once on every layer after its weights are read
    # (repacking, permuting, requantizing them for a kernel), in quantization modules that are otherwise a forward's.
    ("weight_loading", _rx(r"load(ing)? (the )?(model|weight)|weights? load|checkpoint|safetensors|\bshards?\b"), _rx(r"load_model|load_weight|weight_loader|get_model|download|create_weights|process_weights_after_loading"), _rx(r"model_loader|weight_utils|\.loader|weight_load|load_model|weight_updat|weight_transport")),
    ("encoder", _rx(r"encoder|vision|image|video|audio|multimodal|multi-modal"), _rx(r"encod|vision|image|video|audio|mm_|multimodal"), _rx(r"multimodal|vision|encoder|mm_|audio")),
    ("sampling", _rx(r"sampl|logprob"), _rx(r"sampl|logits|logprob"), _rx(r"sampl|logits")),
    ("prefill_decode", _rx(r"prefill|\bdecode\b|forward pass"), _rx(r"forward|execute_model|prefill|decode|extend|run_batch"), _rx(r"model_runner|\.models\.|model_executor|attention|\.layers\.")),
    ("startup", None, _rx(r"__init__|^init|\binit_|launch|start|setup|config|check|verify|post_init"), _rx(r"server_args|arg_utils|config|engine|entrypoints|launch|platforms|worker|utils")),
)


def phase_of(text: str, function: str, module: str) -> str:
    for phase, by_text, _, _ in PHASE_RULES:
        if by_text is not None and by_text.search(text):
            return phase
    for phase, _, by_func, _ in PHASE_RULES:
        if by_func is not None and by_func.search(function):
            return phase
    for phase, _, _, by_mod in PHASE_RULES:
        if by_mod is not None and by_mod.search(module):
            return phase
    return "unknown"


_PHASE_CLASS = {
    "kv_pool": "startup_kv",
    "weight_loading": "weights_dont_fit",
    "graph_capture": "cuda_graph",
    "encoder": "encoder_starvation",
    "prefill_decode": "runtime_activation",
    "sampling": "runtime_activation",
    "scheduler": "kv_exhaustion",
}


def class_of(text: str, phase: str, module: str = "") -> str:
    """The OOM class a message is evidence for; `none` for progress and for problems not about memory."""
    if not (PROBLEM.search(text) and CLASS_MEMORY.search(text)) or NOT_OOM.search(text):
        return "none"
    # Host memory, unless the text is about the KV pool (vLLM's "No available memory for the cache
    # blocks" mentions that the flag also controls CPU memory); the CPU worker's pool is host memory.
    if (HOST.search(text) and not KV_SUBJECT.search(text)) or HOST_MODULE.search(module):
        return "host_oom"
    if KV_EXHAUSTION.search(text):
        return "kv_exhaustion"
    if phase == "profiling":
        # vLLM's "No available memory for the cache blocks" is raised after profiling: the pool did not fit.
        return "startup_kv" if KV_WORDS.search(text) or "available" in text.lower() else "runtime_activation"
    if phase in ("startup", "unknown"):
        # Outside a known phase only the words decide: the pool's size, or a plain out-of-memory.
        if KV_WORDS.search(text):
            return "startup_kv"
        return "unknown_oom" if OOM_WORDS.search(text) else "none"
    return _PHASE_CLASS[phase]


def is_memory(text: str, function: str) -> bool:
    return bool(MEMORY_TEXT.search(text) or MEMORY_FUNCTION.search(function))

"""The facts store: values, the lines each came from, derivations, and which source set a ranked fact.

Where more than one line or derivation can give the same fact, ``PRECEDENCE`` ranks the sources,
strongest first, and builders *offer* the fact with their source: a source replaces a value only
when it is stronger than the one that set it, and among equals the first report wins (every rank
prints the same line; the first one is the one to cite). So the order the builders run in decides
nothing for these facts, and no builder can overwrite a stronger source by running later.

Sources are named after the event kind that carries the figure where there is one (the parser's
``KIND_*`` string), else after the derivation that computes it; "reported" (what a bug report's
prose states) always ranks last.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from oomdoctor.base.evidence import Event, LineRef
from oomdoctor.inference import catalogue
from oomdoctor.memory.derivation import Derived

if TYPE_CHECKING:
    from typing import Any

_VLLM_CONFIG = ("vllm_args", "vllm_engine_config")

PRECEDENCE: dict[str, tuple[str, ...]] = {
    # --- SGLang settings: the server_args line is what the server ran with; the others echo it.
    "mem_fraction_static": ("server_args", "legacy_memory_profiling", "omni_stage", "sglang_kv_error", "reported"),
    "max_running_requests": ("server_args", "summary"),
    "chunked_prefill_size": ("server_args", "summary", "reported"),
    # --- Settings both engines print: SGLang's server_args, then vLLM's args, then its engine config.
    "tp_size": ("server_args", *_VLLM_CONFIG, "reported"),
    "pp_size": ("server_args", *_VLLM_CONFIG),
    "kv_cache_dtype": ("server_args", *_VLLM_CONFIG),
    "model_path": ("server_args", *_VLLM_CONFIG, "reported"),
    # --- vLLM settings: the arguments, then the engine config, then the lines that echo them.
    "gpu_memory_utilization": (
        *_VLLM_CONFIG,
        "vllm_profile_v0_results",
        "vllm_free_less_than_requested",
        "vllm_startup_summary",
        "vllm_profile_total",
        "vllm_initial_free",
        "reported",
    ),
    "max_model_len": (*_VLLM_CONFIG, "vllm_one_request_does_not_fit", "vllm_concurrency", "reported"),
    "max_num_batched_tokens": (*_VLLM_CONFIG, "vllm_chunked_prefill"),
    "max_num_seqs": (*_VLLM_CONFIG, "reported"),
    "enforce_eager": _VLLM_CONFIG,
    "max_capture_size": _VLLM_CONFIG,
    "block_size": _VLLM_CONFIG,
    # --- The card: the allocator's own figure, then vLLM's profile lines, then u*total / u, then NVML.
    "capacity_bytes": (
        "oom_message",
        "vllm_free_less_than_requested",
        "vllm_startup_summary",
        "vllm_profile_total",
        "vllm_profile_v0_results",
        "vllm_budget_over_util",
        "nvml",
        # A pasted nvidia-smi table's or CSV's total (NVML's figure, from an unknown moment), then the
        # catalogue's capacity of the card an environment report names.
        "nvidia_smi",
        "environment",
        # What the reporter says the card is ("8x H100 80GB"): the weakest figure of all.
        "reported",
    ),
    "requested_bytes": ("oom_message", "snapshot"),
    # --- vLLM's memory profile.
    "free_at_start_bytes": ("vllm_free_less_than_requested", "vllm_startup_summary", "vllm_initial_free"),
    "requested_budget_bytes": ("vllm_free_less_than_requested", "vllm_startup_summary", "vllm_profile_total", "vllm_initial_free"),
    "weights_bytes": ("sglang_budget", "vllm_profile_breakdown", "vllm_profile_v1", "vllm_startup_summary", "vllm_weights"),
    "activation_peak_bytes": ("vllm_profile_breakdown", "vllm_profile_v1", "vllm_startup_summary"),
    "non_torch_bytes": ("vllm_profile_breakdown", "vllm_profile_v1", "vllm_startup_summary"),
    "non_kv_bytes": ("vllm_profile_v0_results", "vllm_profile_v1", "vllm_profile_sum", "vllm_budget_minus_kv"),
    # vLLM's "Available KV cache memory" is the engine's own arithmetic: it beats every other figure.
    "kv_budget_bytes": (
        "vllm_kv_available",
        "sglang_budget",
        "vllm_profile_v0_results",
        "vllm_profile_breakdown",
        "vllm_startup_summary",
        "vllm_one_request_does_not_fit",
    ),
    "kv_needed_bytes": ("vllm_one_request_does_not_fit",),
    "estimated_max_len": ("vllm_one_request_does_not_fit",),
    "kv_capacity_tokens": ("vllm_one_request_does_not_fit", "vllm_kv_tokens", "vllm_gpu_blocks"),
    "max_concurrency": ("vllm_concurrency", "vllm_kv_tokens"),
    "cuda_graph_bytes": ("graph_end", "vllm_graph_done", "vllm_startup_summary", "vllm_graph_estimate"),
    # vLLM's per-token figures (one request's KV over its length, or the budget over its tokens)
    # beat SGLang's pool line.
    "cell_bytes": ("vllm_kv_needed", "vllm_kv_budget", "kv_allocated"),
    # SGLang's allocation error detail: the first report of each rank.
    "kv_requested_tokens": ("kv_alloc_detail",),
    "kv_available_tokens": ("kv_alloc_detail",),
    # Stated by the reporter of a bug (oomdoctor.input.issue_body): only where no log line says it.
    "context_length": ("server_args", "reported"),
    # On a vLLM run its own startup check decides, whatever an SGLang line said.
    "startup_kv_error": ("vllm_errors", "sglang_errors"),
    "startup_kv_error_kind": ("vllm_errors", "sglang_errors"),
}


class UndeclaredFact(KeyError):
    """A builder set a fact the catalogue does not declare (a programming error, never user input)."""


class UnrankedSource(KeyError):
    """A builder offered a fact from a source PRECEDENCE does not rank for it (a programming error)."""


@dataclass
class Facts:
    """Facts of one incident: values, the lines each came from, and derivations of computed ones."""

    values: dict[str, Any] = field(default_factory=dict)
    refs: dict[str, tuple[LineRef, ...]] = field(default_factory=dict)
    derivations: dict[str, Derived] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    run: int = 0
    first_line: LineRef | None = None
    time: str | None = None
    # The source that set each fact of PRECEDENCE.
    origins: dict[str, str] = field(default_factory=dict)

    def set(self, name: str, value: Any, *refs: LineRef | None, derivation: Derived | None = None) -> None:
        if not catalogue.declared(name):
            # A fact outside the vocabulary could never be named by a rule: a typo or a missing entry.
            raise UndeclaredFact(f"fact {name!r} is not declared in oomdoctor/data/facts.toml")
        if value is None:
            return
        self.values[name] = value
        kept = tuple(r for r in refs if r is not None)
        if kept:
            self.refs[name] = kept
        if derivation is not None:
            self.derivations[name] = derivation

    def offer(self, name: str, value: Any, *refs: LineRef | None, source: str, derivation: Derived | None = None) -> None:
        """Set a ranked fact unless a source at least as strong already set it."""
        ranks = PRECEDENCE.get(name, ())
        if source not in ranks:
            raise UnrankedSource(f"fact {name!r}: source {source!r} is not ranked in PRECEDENCE")
        if not catalogue.declared(name):
            raise UndeclaredFact(f"fact {name!r} is not declared in oomdoctor/data/facts.toml")
        if value is None:
            return
        if name in self.values:
            held = self.origins.get(name)
            # A value no ranked source set is kept: nothing may overwrite what it cannot rank.
            if held is None or ranks.index(held) <= ranks.index(source):
                return
        self.set(name, value, *refs, derivation=derivation)
        self.origins[name] = source

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def ref(self, name: str) -> LineRef | None:
        refs = self.refs.get(name)
        return refs[0] if refs else None

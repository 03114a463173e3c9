"""The process titles the engines give their processes, read from the released code in the cache.

    python tools/knowledge/process_titles.py            # the releases already in the cache (extract.py fetches them)

SGLang calls ``setproctitle.setproctitle("sglang::scheduler" + ...)``, vLLM ``set_process_title("EngineCore",
...)`` (vllm/utils: ``f"{VLLM_PROCESS_NAME_PREFIX}::{name}"``, the prefix "VLLM" by default, ``_suffix``
appended), and nvidia-smi and ``ps`` show those titles. A process named so in a pasted ``nvidia-smi``
table is the server's own, never another tenant (oomdoctor/evidence/family.py reads the result).

Writes oomdoctor/data/knowledge/process_titles.json: one entry per title template, with the engine,
the module that sets it and the releases (first..last) that do, sorted, one entry a line.
"""

from __future__ import annotations

import ast
import json
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import releases  # noqa: E402
import scan  # noqa: E402
from extract import DEFAULT_OUT, _cached_versions, compact, default_cache  # noqa: E402

# vLLM's default for VLLM_PROCESS_NAME_PREFIX (vllm/envs.py); the wrapper puts "::" after it.
VLLM_PREFIX = "VLLM"
_NEEDLES = (b"setproctitle", b"set_process_title")


def _title_arg(call: ast.Call) -> ast.expr | None:
    if call.args:
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg in ("name", "title")), None)


def titles_of(source: bytes) -> list[str]:
    """The title templates a module sets: setproctitle's argument, or vLLM's wrapper's name with its prefix."""
    if not any(n in source for n in _NEEDLES):
        return []
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id if isinstance(node.func, ast.Name) else ""
        arg = _title_arg(node)
        if arg is None:
            continue
        template = scan.template_of(arg)
        if template is None:
            template = "{" + scan._expr_name(arg) + ":str}"
        if name == "setproctitle" and "::" in template:
            out.append(template)
        elif name == "set_process_title" and "::" not in template:
            out.append(f"{VLLM_PREFIX}::{template}")
    return out


def main() -> int:
    cache = default_cache()
    found: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    orders: dict[str, list[str]] = {}
    for engine in releases.ENGINES:
        versions = _cached_versions(cache, engine.name)
        orders[engine.name] = versions
        for version in versions:
            archive = releases.cached_archive(cache / "dist" / engine.name, engine.name, version)
            if archive is None:
                continue
            for module, source in scan.iter_sources(archive, engine.package):
                for title in titles_of(source):
                    found[(engine.name, title, module)].add(version)
    entries = [
        {"engine": engine, "title": title, "module": module, "releases": compact(versions, orders[engine])}
        for (engine, title, module), versions in sorted(found.items())
    ]
    out = DEFAULT_OUT / "process_titles.json"
    out.write_text("[\n" + ",\n".join(json.dumps(e, sort_keys=True) for e in entries) + "\n]\n")
    print(f"{out}: {len(entries)} titles")
    return 0


if __name__ == "__main__":
    sys.exit(main())

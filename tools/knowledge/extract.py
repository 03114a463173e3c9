"""Build oomdoctor/data/knowledge/ from the engines' released code.

    python tools/knowledge/extract.py            # every selected release (the documented default)
    python tools/knowledge/extract.py --quick    # last 6 minors of sglang and vllm; the smaller engines in full

Releases are downloaded into a cache outside the repository (~/.cache/oomdoctor-knowledge, or
--cache / $OOMDOCTOR_KNOWLEDGE_CACHE) and reused on the next run; each release's parse is cached there
too, keyed by the scanner's own source, so a rerun only reads JSON. The output is sorted and written
one entry per line, so two runs over the same releases give byte-identical files and a new release
shows as a readable diff. See tools/knowledge/README.md.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import callgraph  # noqa: E402
import classify  # noqa: E402
import frame_phases  # noqa: E402
import recognizer  # noqa: E402
import releases  # noqa: E402
import scan  # noqa: E402
import scan_more  # noqa: E402

from oomdoctor.base.toml_data import tomllib  # noqa: E402  (tomli on Python 3.10)

REPO = HERE.parent.parent
DEFAULT_OUT = REPO / "oomdoctor" / "data" / "knowledge"
SCHEMA = 1


def default_cache() -> Path:
    return Path(os.environ.get("OOMDOCTOR_KNOWLEDGE_CACHE") or Path.home() / ".cache" / "oomdoctor-knowledge")


def _scanner_key() -> str:
    """Hash of the scanner's source: a changed scanner invalidates the cached parses, nothing else does."""
    return hashlib.sha256((HERE / "scan.py").read_bytes()).hexdigest()[:12]


def scan_release(archive: Path, package: str, cache: Path) -> dict:
    """The raw parse of one release (all messages and functions), from the cache when it is there."""
    target = cache / "scan" / f"{archive.name}.{_scanner_key()}.json"
    if target.exists():
        return json.loads(target.read_text())
    modules, failed = scan.scan_archive(archive, package)
    data = {
        "failed_files": failed,
        "modules": [
            {
                "path": m.path,
                "messages": [[x.template, x.level, x.function, x.exception] for x in m.messages],
                "functions": [[f.qualname, f.cls, sorted(f.calls)] for f in m.functions],
            }
            for m in modules
        ],
    }
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, separators=(",", ":")))
    tmp.replace(target)
    return data


def _more_key() -> str:
    """Hash of the second pass's source (and the walk it reuses)."""
    return hashlib.sha256((HERE / "scan_more.py").read_bytes() + (HERE / "scan.py").read_bytes()).hexdigest()[:12]


def scan_release_more(archive: Path, name: str, package: str, cache: Path) -> list[dict]:
    """What the main walk does not read (progress descriptions, C/C++ error texts), from the cache when it is there."""
    target = cache / "scan-more" / f"{archive.name}.{_more_key()}.json"
    if target.exists():
        return json.loads(target.read_text())
    modules = scan_more.scan_archive(archive, name, package)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(modules, separators=(",", ":")))
    tmp.replace(target)
    return modules


def compact(versions: set[str], order: list[str]) -> list[str]:
    """Versions as runs over the engine's selected releases: "0.4.0..0.5.1" covers every selected
    release from 0.4.0 to 0.5.1 (a consecutive run of the list in sources.json), "0.3.0" one release."""
    out, run = [], []
    for v in order:
        if v in versions:
            run.append(v)
            continue
        if run:
            out.append(run[0] if len(run) == 1 else f"{run[0]}..{run[-1]}")
            run = []
    if run:
        out.append(run[0] if len(run) == 1 else f"{run[0]}..{run[-1]}")
    return out


def load_overrides() -> list[dict]:
    with (HERE / "overrides.toml").open("rb") as f:
        return tomllib.load(f).get("message", [])


def load_libraries() -> tuple[dict[str, dict], list[dict]]:
    """The reviewed table of texts no package the extractor reads holds (libraries.toml): sources and messages."""
    with (HERE / "libraries.toml").open("rb") as f:
        data = tomllib.load(f)
    engines = {
        e["name"]: {"package": e["package"], "releases": [{"version": e["release"], "file": "libraries.toml", "modules": 0, "unparsed_files": 0, "phase_map_functions": 0}], "source": e["source"]}
        for e in data.get("engine", [])
    }
    messages = []
    for m in data.get("message", []):
        release = engines[m["engine"]]["releases"][0]["version"]
        messages.append(
            {
                "engine": m["engine"],
                "template": m["template"],
                "phase": m["phase"],
                "class": m["class"],
                "releases": [release],
                "sites": [{"module": m["module"], "function": m["function"], "level": m["level"]}],
                "override": m["why"],
            }
        )
    return engines, messages


def _override(entry: dict, overrides: list[dict]) -> None:
    for o in overrides:
        if o["engine"] != entry["engine"]:
            continue
        if ("template" in o and o["template"] == entry["template"]) or ("match" in o and re.search(o["match"], entry["template"])):
            entry["phase"] = o.get("phase", entry["phase"])
            entry["class"] = o.get("class", entry["class"])
            entry["override"] = o["reason"]
            return


def build_messages(engine: str, order: list[str], scans: dict[str, dict], overrides: list[dict]) -> list[dict]:
    # (template) -> (module, function, level, exception) -> releases
    sites: dict[str, dict[tuple[str, str, str, str], set[str]]] = defaultdict(lambda: defaultdict(set))
    for version, data in scans.items():
        for mod in data["modules"] + data.get("more", []):
            for template, level, function, exception in mod["messages"]:
                if classify.is_memory(template, function):
                    sites[template][(mod["path"], function, level, exception)].add(version)
    entries = []
    for template, where in sites.items():
        all_versions = set().union(*where.values())
        ordered = sorted(where.items(), key=lambda kv: (-len(kv[1]), kv[0]))  # the site most releases share first
        phase, module = "unknown", ordered[0][0][0]
        for (module, function, _, _), _ in ordered:
            phase = classify.phase_of(template, function, module)
            if phase != "unknown":
                break
        entry = {
            "engine": engine,
            "template": template,
            "phase": phase,
            "class": classify.class_of(template, phase, module),
            "releases": compact(all_versions, order),
            # A site's releases are written only where they differ from the template's (a moved message).
            "sites": [
                {"module": m, "function": f, "level": lv, **({"exception": e} if e else {}), **({"releases": compact(vs, order)} if vs != all_versions else {})}
                for (m, f, lv, e), vs in sorted(where.items())
            ],
        }
        _override(entry, overrides)
        entries.append(entry)
    return sorted(entries, key=lambda e: (e["engine"], e["template"]))


def build_functions(engine: str, order: list[str], scans: dict[str, dict]) -> tuple[list[dict], dict[str, int]]:
    """One row per covered module: its releases and path-derived phase, and the functions whose phase
    came from a root or the call graph, or whose name gives another phase than the path, grouped by (phase, how, releases) since most of a
    module's functions share all three. A function a row does not list takes the module's phase:
    listing those too would triple the file and say nothing the path does not. Also returned: how
    many functions the map covers in each release, listed or not."""
    modules: dict[str, set[str]] = defaultdict(set)
    covered: dict[str, int] = defaultdict(int)
    acc: dict[str, dict[str, dict[tuple[str, str], set[str]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(set)))
    for version, data in scans.items():
        for module, function, phase, how in callgraph.phase_map(engine, data["modules"]):
            modules[module].add(version)
            covered[version] += bool(function)
            # Listed: what the call graph found, and names that move a function off its module's phase.
            if how in ("root", "calls") or (how == "name" and phase != callgraph.module_phase(module)):
                acc[module][function][(phase, how)].add(version)
    rows = []
    for module in sorted(modules):
        groups: dict[tuple[str, str, tuple[str, ...]], list[str]] = defaultdict(list)
        for function in sorted(acc[module]):
            for (phase, how), versions in acc[module][function].items():
                groups[(phase, how, tuple(compact(versions, order)))].append(function)
        rows.append(
            {
                "engine": engine,
                "module": module,
                "phase": callgraph.module_phase(module),
                "releases": compact(modules[module], order),
                "groups": [[p, h, list(r), fns] for (p, h, r), fns in sorted(groups.items())],
            }
        )
    return rows, dict(covered)


def _lines(items: list[str], opener: str, closer: str) -> str:
    """One JSON value per line: stable, diffable, and small enough without indentation."""
    return opener + "\n" + ",\n".join(items) + "\n" + closer + "\n"


def _dump(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", type=Path, default=default_cache(), help="download and parse cache (default: %(default)s)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where the data files go (default: oomdoctor/data/knowledge)")
    ap.add_argument("--quick", action="store_true", help=f"only the last {releases.QUICK_MINORS} minors of sglang and vllm (the smaller engines in full)")
    ap.add_argument("--offline", action="store_true", help="use only releases already in the cache (no index queries)")
    ap.add_argument("--engines", nargs="*", help="limit to these distribution names")
    ap.add_argument("--jobs", type=int, default=2, help="parallel parses (default 2)")
    args = ap.parse_args(argv)

    notes: list[str] = []
    plan: list[tuple[releases.Engine, list[str]]] = []
    plan_versions: dict[str, list[str]] = {}
    for engine in releases.ENGINES:
        if args.engines and engine.name not in args.engines:
            continue
        versions = _cached_versions(args.cache, engine.name) if args.offline else releases.index_versions(engine.name) or []
        if not versions:
            notes.append(f"{engine.name}: not on the index, skipped")
            print(notes[-1], file=sys.stderr)
            continue
        last = releases.QUICK_MINORS if args.quick and engine.name in ("sglang", "vllm") else None
        pick = releases.every_final if args.offline else releases.select
        plan.append((engine, pick(versions, engine.first_minor, last)))
        plan_versions[engine.name] = versions

    sources: dict[str, dict] = {}
    messages: list[dict] = []
    functions: dict[str, list[dict]] = {}
    overrides = load_overrides()
    for engine, chosen in plan:
        archives, scans = _read(engine, chosen, args, notes)
        if not args.offline:
            # One more level of bisection where a long series' read releases disagree (releases.midpoints);
            # the offline run reads every cached final, so it reads these too.
            templates = {v: _memory_templates(data) for v, data in scans.items()}

            def disagree(a: str, b: str, t: dict[str, frozenset[str]] = templates) -> bool:
                return a in t and b in t and t[a] != t[b]

            extra = releases.midpoints(plan_versions[engine.name], chosen, disagree, engine.first_minor)
            if extra:
                more_archives, more_scans = _read(engine, extra, args, notes)
                archives.update(more_archives)
                scans.update(more_scans)
                chosen = sorted({*chosen, *extra}, key=releases.version_key)
        order = [v for v in chosen if v in scans]
        functions[engine.name], covered = build_functions(engine.name, order, scans)
        sources[engine.name] = {
            "package": engine.package,
            "releases": [
                {
                    "version": v,
                    "file": archives[v].name,
                    "modules": len(scans[v]["modules"]),
                    "unparsed_files": scans[v]["failed_files"],
                    "phase_map_functions": covered.get(v, 0),
                }
                for v in order
            ],
        }
        messages.extend(build_messages(engine.name, order, scans, overrides))

    if not args.engines:
        reviewed_sources, reviewed = load_libraries()
        sources.update(reviewed_sources)
        messages.extend(reviewed)
    messages.sort(key=lambda m: (m["engine"], m["template"]))  # engines were read in ENGINES order
    args.out.mkdir(parents=True, exist_ok=True)
    # The command that reproduces these files, so a reader knows whether this is the full set.
    command = "python tools/knowledge/extract.py" + (" --quick" if args.quick else "") + (" --engines " + " ".join(args.engines) if args.engines else "")
    header = {"schema": SCHEMA, "generated_by": command}
    (args.out / "sources.json").write_text(_dump({**header, "engines": sources, "notes": sorted(notes)}) + "\n")
    (args.out / "messages.json").write_text(_lines([_dump(m) for m in messages], "[", "]"))
    func_lines = [_dump(row) for eng in sorted(functions) for row in functions[eng]]
    (args.out / "phases.json").write_text(_lines(func_lines, "[", "]"))
    recognizer.write(args.out)  # the recognizer's table of failure messages, from the messages just written
    frame_phases.write(args.out)  # the phase map as the run time looks frames up in it, from the map just written
    for name in ("sources.json", "messages.json", "phases.json", "recognizer.json", "frame_phases.tsv"):
        print(f"{name}: {(args.out / name).stat().st_size / 1e6:.2f} MB", file=sys.stderr)
    return 0


def _read(engine: releases.Engine, chosen: list[str], args: argparse.Namespace, notes: list[str]) -> tuple[dict[str, Path], dict[str, dict]]:
    """Fetch and parse these releases of one engine: (archive per version, parse per version)."""
    print(f"{engine.name}: {len(chosen)} releases {chosen[0]} .. {chosen[-1]}", file=sys.stderr)
    archives: dict[str, Path] = {}
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        fetched = dict(zip(chosen, pool.map(lambda v: releases.fetch(engine.name, v, args.cache), chosen), strict=True))
    for version in chosen:
        path, how = fetched[version]
        if path is None:
            notes.append(f"{engine.name} {version}: {how}, skipped")
            print("  " + notes[-1], file=sys.stderr)
        else:
            archives[version] = path
    scans: dict[str, dict] = {}
    with concurrent.futures.ProcessPoolExecutor(args.jobs) as pool:
        futs = {v: pool.submit(scan_release, p, engine.package, args.cache) for v, p in archives.items()}
        more = {v: pool.submit(scan_release_more, p, engine.name, engine.package, args.cache) for v, p in archives.items()}
        for version, fut in futs.items():
            scans[version] = {**fut.result(), "more": more[version].result()}
            print(f"  {engine.name} {version}: {len(scans[version]['modules'])} modules", file=sys.stderr)
    return archives, scans


def _memory_templates(data: dict) -> frozenset[str]:
    """The memory messages one release prints (what the catalogue keeps of it)."""
    return frozenset(t for mod in data["modules"] + data.get("more", []) for t, _level, function, _exc in mod["messages"] if classify.is_memory(t, function))


def _cached_versions(cache: Path, name: str) -> list[str]:
    """Versions with an archive in the cache, read back from the file names (for --offline)."""
    directory = cache / "dist" / name
    if not directory.is_dir():
        return []
    stem = re.sub(r"[-_.]+", "_", name).lower()
    found = set()
    for path in directory.iterdir():
        m = re.match(r"^(.+?)-(\d[^-]*?)(\.tar\.gz|\.zip|-.+\.whl)$", path.name)
        if m and re.sub(r"[-_.]+", "_", m.group(1)).lower() == stem:
            found.add(m.group(2))
    return sorted(found, key=releases.version_key)


if __name__ == "__main__":
    sys.exit(main())

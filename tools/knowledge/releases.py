"""Which releases of each engine the catalogue is built from, and fetching them into the cache.

The selection rule lives here (not in a hand-kept list) so a rerun picks the same releases from the
same index: the first and the last final release of every minor series from an engine's first
minor of interest on, and the middle one of a series of LONG_SERIES finals or more; in such a series, where
two neighbouring read releases print different memory messages, the final release halfway between them
is read as well (``midpoints``: one more level of bisection). Pre-releases (rc, dev, a, b) are left out:
servers in the field run finals.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Engine:
    name: str  # the distribution name on the index
    package: str  # the import package inside the distribution: only files under it are read
    first_minor: tuple[int, int] | None = None  # older minors are skipped (None: all)
    optional: bool = False  # a missing project is a note, not an error


ENGINES: tuple[Engine, ...] = (
    Engine("sglang", "sglang", (0, 1)),
    Engine("vllm", "vllm", (0, 2)),
    Engine("torch_memory_saver", "torch_memory_saver"),
    Engine("vllm-ascend", "vllm_ascend", optional=True),
    Engine("vllm-omni", "vllm_omni", optional=True),
    Engine("sglang-omni", "sglang_omni", optional=True),
)

# The smaller run (--quick): the last few minors of the two big engines; the others are small enough in full.
QUICK_MINORS = 6

_FINAL = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:\.post(\d+))?$")


def version_key(version: str) -> tuple[int, ...]:
    """Sort key for final releases (1.2.3, 1.2.3.4, 1.2.3.post1); anything else sorts first."""
    m = _FINAL.match(version)
    if not m:
        return (-1,)
    major, minor, patch, micro, post = m.groups()
    return (int(major), int(minor), int(patch or 0), int(micro or 0), int(post or 0))


def is_final(version: str) -> bool:
    return _FINAL.match(version) is not None


# A minor series this long changed within it (SGLang's 0.5 ran to 0.5.23; piecewise graph capture's
# "Capturing num tokens" lived only between its ends): its middle final release is read too.
LONG_SERIES = 9


def select(versions: list[str], first_minor: tuple[int, int] | None, last_minors: int | None = None) -> list[str]:
    """First and last final release of each minor series (and the middle one of a long series), oldest first."""
    by_minor: dict[tuple[int, int], list[str]] = {}
    for v in versions:
        if not is_final(v):
            continue
        key = version_key(v)
        minor = (key[0], key[1])
        if first_minor is not None and minor < first_minor:
            continue
        by_minor.setdefault(minor, []).append(v)
    minors = sorted(by_minor)
    if last_minors is not None:
        minors = minors[-last_minors:]
    chosen: set[str] = set()
    for minor in minors:
        series = sorted(by_minor[minor], key=version_key)
        chosen.update((series[0], series[-1]))
        if len(series) >= LONG_SERIES:
            chosen.add(series[len(series) // 2])
    return sorted(chosen, key=version_key)


def midpoints(versions: list[str], chosen: list[str], disagree: Callable[[str, str], bool], first_minor: tuple[int, int] | None = None) -> list[str]:
    """Finals to read besides ``chosen``: in a minor series of LONG_SERIES finals or more, the one halfway
    between two neighbouring chosen releases whose memory messages ``disagree`` (vLLM 0.6.4 alone printed
    "Memory profiling results: ... initial_memory_usage=...": 0.6.3.post1 and 0.6.6.post1 do not)."""
    by_minor: dict[tuple[int, int], list[str]] = {}
    for v in versions:
        key = version_key(v)
        if is_final(v) and (first_minor is None or (key[0], key[1]) >= first_minor):
            by_minor.setdefault((key[0], key[1]), []).append(v)
    picked = set(chosen)
    extra: list[str] = []
    for series in by_minor.values():
        if len(series) < LONG_SERIES:
            continue
        series.sort(key=version_key)
        read = [i for i, v in enumerate(series) if v in picked]
        for a, b in itertools.pairwise(read):
            if b - a > 1 and disagree(series[a], series[b]):
                extra.append(series[(a + b) // 2])
    return sorted(extra, key=version_key)


def every_final(versions: list[str], first_minor: tuple[int, int] | None, last_minors: int | None = None) -> list[str]:
    """Every final release of the minors ``select`` reads, oldest first: the offline run reads what the cache
    holds, which is what an online run's ``select`` fetched (its middle releases cannot be told from the cache)."""
    finals = [v for v in versions if is_final(v) and (first_minor is None or version_key(v)[:2] >= first_minor)]
    minors = sorted({version_key(v)[:2] for v in finals})
    if last_minors is not None:
        minors = minors[-last_minors:]
    return sorted((v for v in finals if version_key(v)[:2] in minors), key=version_key)


def _pip(*args: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=timeout)


def index_versions(name: str) -> list[str] | None:
    """The versions the index offers, from `pip index versions` (None when the project is not there)."""
    res = _pip("index", "versions", name, timeout=300)
    m = re.search(r"^Available versions: (.*)$", res.stdout, re.M)
    if not m:
        return None
    return [v.strip() for v in m.group(1).split(",") if v.strip()]


def cached_archive(directory: Path, name: str, version: str) -> Path | None:
    """An archive of name==version already in the cache (sdist preferred, then wheel)."""
    if not directory.is_dir():
        return None
    stem = re.sub(r"[-_.]+", "_", name).lower()
    found = []
    for path in directory.iterdir():
        norm = re.sub(r"[-_.]+", "_", path.name).lower()
        base = path.name
        if norm in (f"{stem}_{version.replace('.', '_')}_tar_gz", f"{stem}_{version.replace('.', '_')}_zip"):
            found.append((0, path))
        elif base.endswith(".whl") and norm.startswith(f"{stem}_{version.replace('.', '_')}_"):
            found.append((1, path))
    return min(found)[1] if found else None


def _simple_index_sdist(name: str, version: str, directory: Path) -> Path | None:
    """Fetch the sdist file the index lists for name==version, checking its sha256.

    Used only when `pip download` cannot save an sdist because pip insists on building its metadata
    first, and some engines' setup.py needs torch and a CUDA toolchain to do that (vLLM). This is the
    same simple-index request pip makes (PEP 691 JSON), for one project.
    """
    req = urllib.request.Request(f"https://pypi.org/simple/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        listing = json.load(resp)
    stem = re.sub(r"[-_.]+", "_", name).lower()
    for file in listing.get("files", []):
        fname = file["filename"]
        norm = re.sub(r"[-_.]+", "_", fname).lower()
        if fname.endswith(".tar.gz") and norm == f"{stem}_{version.replace('.', '_')}_tar_gz":
            target = directory / fname
            part = target.with_name(f"{target.name}.{os.getpid()}.{threading.get_ident()}.part")  # two runs never share one
            with urllib.request.urlopen(file["url"], timeout=600) as resp, part.open("wb") as out:
                digest = hashlib.sha256()
                while chunk := resp.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
            want = file.get("hashes", {}).get("sha256")
            if want and digest.hexdigest() != want:
                part.unlink()
                raise RuntimeError(f"{fname}: sha256 mismatch")
            part.rename(target)
            return target
    return None


def fetch(name: str, version: str, cache: Path) -> tuple[Path | None, str]:
    """The release's archive in the cache, downloading it if needed; (path, how or why not)."""
    directory = cache / "dist" / name
    directory.mkdir(parents=True, exist_ok=True)
    hit = cached_archive(directory, name, version)
    if hit:
        return hit, "cached"
    spec = f"{name}=={version}"
    # The sdist first: it is what the project released as source. --no-binary names only the engine so
    # its build requirements may come as wheels, and --no-build-isolation keeps pip from installing
    # them (torch, cmake) just to read a version number.
    res = _pip("download", "--no-deps", "--no-binary", name, "--no-build-isolation", "-d", str(directory), spec)
    hit = cached_archive(directory, name, version)
    if hit:
        return hit, "pip sdist"
    if "metadata-generation-failed" in res.stderr or "setup.py" in res.stderr:
        try:
            got = _simple_index_sdist(name, version, directory)
        except OSError as exc:
            got = None
            print(f"  {spec}: index fetch failed: {exc}", file=sys.stderr)
        if got:
            return got, "index sdist"
    # No sdist for this release (newer sglang ships wheels only): a wheel holds the same .py files.
    _pip("download", "--no-deps", "--only-binary", ":all:", "-d", str(directory), spec)
    hit = cached_archive(directory, name, version)
    if hit:
        return hit, "pip wheel"
    return None, "no sdist or wheel for this interpreter"

"""oomdoctor.capture with a stand-in torch: the one-line install, the environment-variable way
(sitecustomize on PYTHONPATH, for spawned workers too), guard(), and diagnose on what it writes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

FAKE_TORCH = {
    "torch/__init__.py": "from . import cuda, _C\nOutOfMemoryError = type('OutOfMemoryError', (RuntimeError,), {})\n",
    "torch/_C.py": "observers = []\ndef _cuda_attach_out_of_memory_observer(fn):\n    observers.append(fn)\n",
    "torch/cuda/__init__.py": textwrap.dedent(
        """
        from . import memory
        def is_available():
            return True
        def memory_stats(device=None):
            mib = 1 << 20
            return {"allocated_bytes.all.current": 70000 * mib, "reserved_bytes.all.current": 74000 * mib,
                    "inactive_split_bytes.all.current": 3000 * mib, "num_alloc_retries": 4, "num_ooms": 1}
        """
    ),
    "torch/cuda/memory.py": "def _record_memory_history(**kw):\n    pass\ndef _dump_snapshot(path):\n    open(path, 'wb').write(b'\\x80\\x04}\\x94\\x8c\\x08segments\\x94]\\x94s.')\n",
}


@pytest.fixture
def fake_torch(tmp_path: Path) -> Path:
    root = tmp_path / "faketorch"
    for rel, text in FAKE_TORCH.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


SCRIPT = textwrap.dedent(
    """
    import sys, torch
    {install}
    torch._C.observers[0](0, 2 << 30, 79 << 30, 1 << 30)   # what the allocator calls before raising
    try:
        import oomdoctor.capture as cap
        with cap.guard():
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.00 GiB is free. Of the allocated memory 68.36 GiB is allocated by PyTorch, and 2.93 GiB is reserved by PyTorch but unallocated.")
    except torch.OutOfMemoryError as exc:
        print("propagated:", type(exc).__name__)
    """
)


def _run(tmp_path: Path, fake_torch: Path, install: str, env_extra: dict[str, str], pythonpath: list[str]) -> subprocess.CompletedProcess:
    script = tmp_path / "server.py"
    script.write_text(SCRIPT.format(install=install))
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join([*pythonpath, str(fake_torch)]), **env_extra}
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=tmp_path)


def _check_bundle(out: Path, run_cli) -> None:
    (bundle,) = list(out.iterdir())
    stats = json.loads((bundle / "memory_stats.json").read_text())
    assert stats["observer"]["alloc"] == 2 << 30 and stats["memory_stats"]["num_ooms"] == 1
    assert "Tried to allocate 2.00 GiB" in (bundle / "oom.log").read_text()
    d = run_cli("diagnose", str(bundle), "--format", "json").json
    assert d["verdict"]["rule"] == "allocator-stats-fragmentation"


def test_one_line_install(tmp_path: Path, fake_torch: Path, run_cli) -> None:
    out = tmp_path / "oom"
    r = _run(tmp_path, fake_torch, f"import oomdoctor.capture; oomdoctor.capture.install({str(out)!r})", {}, [])
    assert "propagated: OutOfMemoryError" in r.stdout, r.stderr
    _check_bundle(out, run_cli)


def test_environment_variable_way(tmp_path: Path, fake_torch: Path, run_cli) -> None:
    from oomdoctor.capture import SITE_DIR

    out = tmp_path / "oom"
    site = subprocess.run([sys.executable, "-m", "oomdoctor.capture", "--site-dir"], capture_output=True, text=True, cwd="/").stdout.strip()
    assert site == SITE_DIR and Path(site, "sitecustomize.py").is_file()
    r = _run(tmp_path, fake_torch, "pass", {"OOMDOCTOR_CAPTURE_DIR": str(out), "OOMDOCTOR_CAPTURE_SNAPSHOT": "1"}, [site])
    assert "propagated: OutOfMemoryError" in r.stdout, r.stderr
    _check_bundle(out, run_cli)
    (bundle,) = list(out.iterdir())
    assert (bundle / "snapshot.pickle").is_file()


def test_without_the_variable_nothing_is_installed(tmp_path: Path, fake_torch: Path) -> None:
    from oomdoctor.capture import SITE_DIR

    script = tmp_path / "s.py"
    script.write_text("import torch\nprint(len(torch._C.observers))\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{SITE_DIR}:{fake_torch}"}
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env)
    assert r.stdout.strip() == "0", r.stderr


def test_variable_set_without_torch_import_fails_as_usual(tmp_path: Path) -> None:
    """A process without torch under OOMDOCTOR_CAPTURE_DIR gets ModuleNotFoundError (it got AttributeError from the hook)."""
    import importlib.util

    from oomdoctor.capture import SITE_DIR

    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed here")
    script = tmp_path / "s.py"
    script.write_text("try:\n    import torch\nexcept ImportError as exc:\n    print(type(exc).__name__)\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": SITE_DIR, "OOMDOCTOR_CAPTURE_DIR": str(tmp_path / "oom")}
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env)
    assert r.stdout.strip() == "ModuleNotFoundError", r.stderr


# --- trust issue, item 5: no CUDA at install, chaining, no dependencies -------------------------

# A torch whose CUDA records every touch: is_available() / device queries would initialise CUDA in a
# process that may fork next; _lazy_call is torch.cuda's queue of calls run at CUDA's own init.
CUDA_SPY = textwrap.dedent(
    """
    from . import memory
    touched = []
    queued = []
    def is_available():
        touched.append("is_available")
        return True
    def device_count():
        touched.append("device_count")
        return 1
    def _lazy_call(fn):
        queued.append(fn)
    def _init():  # what the program's first CUDA use does
        for fn in queued:
            fn()
    def memory_stats(device=None):
        touched.append("memory_stats")
        return {"allocated_bytes.all.current": 1, "reserved_bytes.all.current": 2, "num_ooms": 1}
    """
)
MEMORY_SPY = "recorded = []\ndef _record_memory_history(**kw):\n    recorded.append(kw)\ndef _dump_snapshot(path):\n    open(path, 'wb').write(b'\\x80\\x04}\\x94.')\n"


# Attaching the OOM observer initialises the CUDA driver in real torch (seen on an H200 with torch
# 2.11: forked workers then failed with "CUDA error: initialization error"; benchmarks/gpu_record.py).
C_SPY = "observers = []\ndef _cuda_attach_out_of_memory_observer(fn):\n    from torch import cuda\n    cuda.touched.append('attach')\n    observers.append(fn)\n"


@pytest.fixture
def spy_torch(fake_torch: Path) -> Path:
    (fake_torch / "torch" / "cuda" / "__init__.py").write_text(CUDA_SPY)
    (fake_torch / "torch" / "cuda" / "memory.py").write_text(MEMORY_SPY)
    (fake_torch / "torch" / "_C.py").write_text(C_SPY)
    return fake_torch


def test_the_hook_touches_cuda_only_when_an_oom_happens(tmp_path: Path, spy_torch: Path) -> None:
    from oomdoctor.capture import SITE_DIR

    script = tmp_path / "s.py"
    script.write_text(
        "import torch\n"
        "print('after import:', torch.cuda.touched, len(torch._C.observers), torch.cuda.memory.recorded)\n"
        "torch.cuda._init()\n"
        "print('after init:', torch.cuda.memory.recorded, len(torch._C.observers))\n"
        "torch.cuda.touched.clear()\n"
        "torch._C.observers[0](0, 2 << 30, 79 << 30, 1 << 30)\n"
        "print('after oom:', torch.cuda.touched)\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{SITE_DIR}:{spy_torch}", "OOMDOCTOR_CAPTURE_DIR": str(tmp_path / "oom"), "OOMDOCTOR_CAPTURE_SNAPSHOT": "1"}
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=tmp_path)
    lines = r.stdout.splitlines()
    assert lines[0] == "after import: [] 0 []", r.stderr  # CUDA untouched: observer and history only queued
    assert lines[1] == "after init: [{'max_entries': 100000}] 1"  # both in place once the program initialised CUDA
    assert lines[2] == "after oom: ['memory_stats']"
    (bundle,) = list((tmp_path / "oom").iterdir())
    assert (bundle / "memory_stats.json").is_file() and (bundle / "snapshot.pickle").is_file()


@pytest.mark.parametrize("enabled", [True, False])
def test_an_existing_sitecustomize_still_runs(tmp_path: Path, fake_torch: Path, enabled: bool) -> None:
    from oomdoctor.capture import SITE_DIR

    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import os\nos.environ['THEIRS_RAN'] = 'yes'\n")
    script = tmp_path / "s.py"
    script.write_text("import os, torch\nprint(os.environ.get('THEIRS_RAN'), len(torch._C.observers))\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{SITE_DIR}:{theirs}:{fake_torch}"}
    if enabled:
        env["OOMDOCTOR_CAPTURE_DIR"] = str(tmp_path / "oom")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.stdout.split() == ["yes", "1" if enabled else "0"], r.stderr


def test_the_hook_works_in_a_python_without_oomdoctor(tmp_path: Path, fake_torch: Path, run_cli) -> None:
    """The server's own Python: oomdoctor (and click, psutil...) not importable; the site dir alone suffices."""
    import shutil

    from oomdoctor.capture import SITE_DIR

    python = shutil.which("python3.11", path="/usr/bin") or shutil.which("python3", path="/usr/bin:/usr/local/bin")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{SITE_DIR}:{fake_torch}", "OOMDOCTOR_CAPTURE_DIR": str(tmp_path / "oom")}
    if python is None or subprocess.run([python, "-s", "-c", "import oomdoctor"], env=env, cwd=tmp_path, capture_output=True).returncode == 0:
        pytest.skip("no system Python without oomdoctor here")
    script = tmp_path / "server.py"
    # No oomdoctor import in the server: the OOM reaches the excepthook the capture installed.
    text = SCRIPT.format(install="pass")
    script.write_text(text.split("try:")[0] + "raise torch.OutOfMemoryError(" + text.split("raise torch.OutOfMemoryError(")[1].split("\n")[0] + "\n")
    r = subprocess.run([python, "-s", str(script)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 1 and "OutOfMemoryError: CUDA out of memory" in r.stderr and "not installed" not in r.stderr, r.stderr
    _check_bundle(tmp_path / "oom", run_cli)


def test_the_capture_modules_need_only_the_standard_library_of_python_310() -> None:
    import ast

    from oomdoctor import capture
    from oomdoctor.evidence import collected

    for path in (Path(capture.__file__), Path(capture.SITE_DIR) / "sitecustomize.py"):
        tree = ast.parse(path.read_text(), feature_version=(3, 10))
        top = {a.name.split(".")[0] for n in tree.body if isinstance(n, ast.Import) for a in n.names}
        top |= {n.module.split(".")[0] for n in tree.body if isinstance(n, ast.ImportFrom) and n.module and n.level == 0}
        assert top - {"__future__"} <= set(sys.stdlib_module_names), path
    header = collected.manifest_header("capture")
    assert (header["kind"], header["bundle_version"]) == (capture.BUNDLE_KIND, capture.BUNDLE_VERSION)

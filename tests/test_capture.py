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

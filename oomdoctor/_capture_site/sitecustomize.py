"""Put on PYTHONPATH by `python -m oomdoctor.capture --site-dir`: installs the capture hook in every
Python process (spawned workers too) once torch has finished importing, if OOMDOCTOR_CAPTURE_DIR is set.

It touches no CUDA state (the hook only attaches an observer; see oomdoctor.capture), loads
oomdoctor/capture.py by its path when the oomdoctor package is not importable in this Python (a
server's own environment), and then runs the ``sitecustomize`` it shadows (the next one on sys.path,
such as Debian's), so being on PYTHONPATH first changes nothing else. Standard library only, 3.10+.
"""

import os
import sys

_HERE = os.path.dirname(os.path.realpath(__file__))


def _load_capture():
    try:
        import oomdoctor.capture

        return oomdoctor.capture
    except ImportError:
        import importlib.util

        path = os.path.join(os.path.dirname(_HERE), "capture.py")
        spec = importlib.util.spec_from_file_location("_oomdoctor_capture", path)
        if spec is None or spec.loader is None:
            raise
        module = importlib.util.module_from_spec(spec)
        sys.modules["_oomdoctor_capture"] = module
        spec.loader.exec_module(module)
        return module


def _install_after_torch():
    class _AfterTorch:
        """Installs the hook right after ``torch`` finishes importing, then steps aside."""

        def find_spec(self, name, path=None, target=None):
            if name != "torch":
                return None
            sys.meta_path.remove(self)
            import importlib.util

            spec = importlib.util.find_spec(name)
            loader = spec.loader if spec is not None else None
            if loader is None:
                return spec  # torch is not importable here: let the import fail as it would without us
            exec_module = loader.exec_module

            def exec_and_install(module):
                exec_module(module)
                try:
                    _load_capture().install()
                except Exception as exc:  # noqa: BLE001 - never break the server
                    print(f"oomdoctor.capture: not installed: {exc}", file=sys.stderr)

            # Patch this one loader instance, which mypy cannot express without an ignore.
            loader.exec_module = exec_and_install  # type: ignore[method-assign]
            return spec

    sys.meta_path.insert(0, _AfterTorch())


def _chain_shadowed_sitecustomize():
    """Run the sitecustomize this one hides: the next one on sys.path outside this directory."""
    import importlib.machinery
    import importlib.util

    others = [p for p in sys.path if os.path.realpath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None or spec.origin is None or os.path.realpath(spec.origin) == os.path.realpath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


if os.environ.get("OOMDOCTOR_CAPTURE_DIR"):
    _install_after_torch()
_chain_shadowed_sitecustomize()

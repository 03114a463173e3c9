"""Put on PYTHONPATH by `python -m oomdoctor.capture --site-dir`: installs the capture hook in every
Python process (spawned workers too) once torch has finished importing, if OOMDOCTOR_CAPTURE_DIR is set."""

import os
import sys

if os.environ.get("OOMDOCTOR_CAPTURE_DIR"):

    class _AfterTorch:
        """Installs the hook right after ``torch`` (and with it torch.cuda) finishes importing, then steps aside."""

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
                    import oomdoctor.capture

                    oomdoctor.capture.install()
                except Exception as exc:  # noqa: BLE001 - never break the server
                    print(f"oomdoctor.capture: not installed: {exc}", file=sys.stderr)

            # Patch this one loader instance, which mypy cannot express without an ignore.
            loader.exec_module = exec_and_install  # type: ignore[method-assign]
            return spec

    sys.meta_path.insert(0, _AfterTorch())

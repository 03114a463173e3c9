"""A traceback frame in CPython's form and in IPython's (Jupyter), the one definition the parsers share."""

from __future__ import annotations

import pytest

from oomdoctor.evidence.parsers.frames import frame_of


@pytest.mark.parametrize(
    "line, frame",
    [
        ('  File "/usr/lib/python3.11/site-packages/vllm/worker/cache_engine.py", line 64, in _allocate_kv_cache', ("/usr/lib/python3.11/site-packages/vllm/worker/cache_engine.py", "_allocate_kv_cache")),
        # IPython 8 in a terminal or a notebook's text output.
        (
            "File ~/miniconda3/envs/q/lib/python3.11/site-packages/vllm/worker/cache_engine.py:64, in CacheEngine._allocate_kv_cache(self, num_blocks, device)",
            ("~/miniconda3/envs/q/lib/python3.11/site-packages/vllm/worker/cache_engine.py", "_allocate_kv_cache"),
        ),
        # JupyterLab's page copied: the path became a link (Qwen3#458).
        (
            "File [~/miniconda3/envs/q/lib/python3.11/site-packages/vllm/worker/cache_engine.py:49](http://10.0.0.1:8888/lab/tree/x/cache_engine.py#line=48), in CacheEngine.__init__(self, cache_config)",
            ("~/miniconda3/envs/q/lib/python3.11/site-packages/vllm/worker/cache_engine.py", "__init__"),
        ),
    ],
)
def test_frames_in_both_forms(line: str, frame: tuple[str, str]) -> None:
    assert frame_of(line) == frame


@pytest.mark.parametrize(
    "line",
    [
        "File sizes: 4.2 GiB, in 3 shards",
        "File /etc/hosts:3 is not readable",
        "    self.gpu_cache = self._allocate_kv_cache(self.num_gpu_blocks, 'cuda')",
    ],
)
def test_lines_that_only_look_like_frames(line: str) -> None:
    assert frame_of(line) is None

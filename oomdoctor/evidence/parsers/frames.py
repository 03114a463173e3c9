"""What a Python traceback frame looks like: one definition for every parser that follows frames.

A frame is ``File "<path>", line <n>, in <function>``; IPython (Jupyter) prints ``File <path>:<n>, in
<Class.function>(<args>)``, which JupyterLab's page turns into a link when copied (``File [<path>:<n>](<url>), in
...``). Its (path, function) pair is what the phase tables read. Pure patterns, compiled on first use.
"""

from __future__ import annotations

from oomdoctor.input.patterns import lazy

# A frame on its own line, as tracebacks print it (any indentation).
FRAME_LINE = lazy("File ", r'^\s*File "([^"]+)", line \d+, in ([\w<>.]+)')
# Frames anywhere in a line: pastes that joined a whole traceback onto one line with spaces.
FRAME_ANYWHERE = lazy("File ", r'File "([^"]+)", line \d+, in ([\w<>.]+)')
# The scanner's literals for a frame line in either form (CPython's quoted path; IPython's "File ~/x.py:49, in f",
# "File /x.py:49", and JupyterLab's copied "File [~/x.py:49](url)").
FRAME_ANCHORS: tuple[bytes, ...] = (b'File "', b"File ~", b"File [", b"File /")
# IPython's frame: the path and line joined by a colon, the function by its qualified name and its arguments.
_IPYTHON_FRAME = lazy("File ", r"^\s*File \[?((?:~|/|[A-Za-z]:\\)[^\s\]]*?\.pyx?):\d+(?:\]\([^)]*\))?, in ([\w<>.]+)")


def frame_of(msg: str) -> tuple[str, str] | None:
    """(path, function) of a frame line, in CPython's form or IPython's; None for any other line."""
    m = FRAME_LINE.match(msg)
    if m:
        return m.group(1), m.group(2)
    m = _IPYTHON_FRAME.match(msg)
    if m:
        # "CacheEngine._allocate_kv_cache": the function's own name, as CPython's frames give it.
        return m.group(1), m.group(2).rsplit(".", 1)[-1]
    return None

"""What a Python traceback frame looks like: one definition for every parser that follows frames.

A frame is ``File "<path>", line <n>, in <function>``; its (path, function) pair is what the phase
tables read. Pure patterns, compiled on first use.
"""

from __future__ import annotations

from oomdoctor.input.patterns import lazy

# A frame on its own line, as tracebacks print it (any indentation).
FRAME_LINE = lazy("File ", r'^\s*File "([^"]+)", line \d+, in ([\w<>.]+)')
# Frames anywhere in a line: pastes that joined a whole traceback onto one line with spaces.
FRAME_ANYWHERE = lazy("File ", r'File "([^"]+)", line \d+, in ([\w<>.]+)')

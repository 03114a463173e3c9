"""`--bundle out.zip`: the report, the summary, the JSON and the (redacted) inputs in one attachment.

GitHub issues do not take .html files but do take .zip; every input is decompressed, redacted line
by line (unless --no-redact) and capped at MAX_INPUT_BYTES so the archive stays attachable.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterator

from oomdoctor.base.errors import InputError
from oomdoctor.input.files import InputStats, iter_line_chunks
from oomdoctor.input.kinds import plain_name
from oomdoctor.input.redact import active as active_redactor
from oomdoctor.input.redact import redact_text
from oomdoctor.report.console import safe_output

MAX_INPUT_BYTES = 64 << 20


def copy_chunks(path: str, redact: bool) -> Iterator[bytes]:
    """A log decompressed and (unless ``redact`` is False) redacted line by line, as UTF-8 blocks."""
    # A block left open by the report's lines or by the previous file ends here: each file is its own stream.
    active_redactor().end_of_stream()
    for chunk in iter_line_chunks(path, InputStats(path=path)):
        text = chunk.decode("utf-8", "replace")
        if redact:
            text = "".join(redact_text(line) for line in text.splitlines(keepends=True))
        yield text.encode("utf-8")


def _not_copyable(path: str) -> str | None:
    """Why an input is not copied: a pipe or device (the diagnosis drained it; opening it again would block)."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return f"cannot be read again ({exc.strerror or exc})"
    if stat.S_ISREG(mode):
        return None
    return "not a regular file (a pipe or device, read once by the diagnosis)"


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "backslashreplace")


def _arcname(path: str, used: set[str]) -> str:
    base = _utf8(plain_name(path) or "stdin.log").decode("utf-8")
    name, n = f"inputs/{base}", 1
    while name in used:
        n += 1
        name = f"inputs/{n}-{base}"
    used.add(name)
    return name


def write_bundle(out_path: str, html: str, markdown: str, json_text: str, input_paths: list[str], redact: bool = True) -> list[str]:
    """Write the zip; returns notes about inputs that were left out or cut.

    The zip is written to a temporary file beside ``out_path`` and renamed over it once complete, so
    an interrupted write (Ctrl-C, a full disk) leaves no valid-looking partial bundle.
    """
    from oomdoctor.report.console import atomic_target

    with atomic_target(out_path) as tmp:
        return _write_zip(tmp, html, markdown, json_text, input_paths, redact)


def _write_zip(out_path: str, html: str, markdown: str, json_text: str, input_paths: list[str], redact: bool) -> list[str]:
    notes: list[str] = []
    used: set[str] = set()
    with zipfile.ZipFile(out_path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        # A file name that is not UTF-8 reaches the reports as a surrogate escape: written as \udcff, not a crash.
        # The reports hold log text: escaped as on the terminal (safe_output), so `cat summary.md` cannot
        # set a terminal's title or clipboard (OSC 52). The input copies stay the logs as they were.
        zf.writestr("report.html", _utf8(safe_output("html", html)))
        zf.writestr("summary.md", _utf8(safe_output("markdown", markdown)))
        zf.writestr("diagnosis.json", _utf8(safe_output("json", json_text)))
        for path in input_paths:
            if path in ("-", "<stdin>"):
                notes.append("stdin was not kept; save it to a file to bundle it")
                continue
            problem = _not_copyable(path)
            if problem:
                notes.append(f"{path}: {problem}; save it to a file to bundle it")
                continue
            name = _arcname(path, used)
            written = 0
            with zf.open(name, "w") as fh:
                try:
                    for data in copy_chunks(path, redact):
                        if written + len(data) > MAX_INPUT_BYTES:
                            notes.append(f"{path}: only the first {MAX_INPUT_BYTES >> 20} MiB are in the bundle")
                            break
                        fh.write(data)
                        written += len(data)
                except InputError as exc:
                    reason = str(exc).removeprefix(f"{path}: ")
                    notes.append(f"{path}: {reason}; {name} holds what was copied before that")
        readme = "oomdoctor bundle: report.html (open in a browser), summary.md (paste into an issue), diagnosis.json, inputs/.\n"
        readme += ("Inputs are redacted.\n" if redact else "Inputs are NOT redacted (--no-redact).\n") + "".join(f"note: {n}\n" for n in notes)
        zf.writestr("README.txt", _utf8(readme))
    return notes

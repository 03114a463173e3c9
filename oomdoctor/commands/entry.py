"""The console entry point: a plain ``oomdoctor diagnose LOG...`` runs without importing click.

At incident time the tool is started by hand or by a runbook step, often many times; click and its
imports cost about as much as reading a small log. ``parse_diagnose`` reads exactly the common form of
the command (paths, --format, -o/--output, --system, --no-redact, --redact-pii, with ``--opt value``
or ``--opt=value``); anything else (help, --version, another command, --bundle, --rules, --summary,
an unknown option or value, a missing path) goes to click, which parses it and words any error the
way it always does. tests/test_entry.py checks that both parsers agree on every argv the fast one
accepts, and that the option table below matches the click command's.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost); mypy reads this as True
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

# The diagnose options the fast path reads: option string -> (parameter, allowed values or None for
# any value, "flag" for a switch). Defaults are those of the click command in cli.py.
DIAGNOSE_OPTIONS: dict[str, tuple[str, tuple[str, ...] | str | None]] = {
    "--format": ("fmt", ("text", "json", "markdown", "html", "prometheus")),
    "-o": ("output", None),
    "--output": ("output", None),
    "--system": ("system", ("auto", "sglang", "vllm", "torch")),
    "--no-redact": ("no_redact", "flag"),
    "--redact-pii": ("redact_pii", "flag"),
}
DIAGNOSE_DEFAULTS: dict[str, Any] = {"fmt": "text", "output": None, "system": "auto", "no_redact": False, "redact_pii": False}


def parse_diagnose(args: Sequence[str]) -> dict[str, Any] | None:
    """The parameters of ``diagnose ARGS`` in its common form, or None for click to parse."""
    params: dict[str, Any] = dict(DIAGNOSE_DEFAULTS)
    paths: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "-" or not arg.startswith("-"):
            paths.append(arg)
            continue
        name, eq, inline = arg.partition("=")
        spec = DIAGNOSE_OPTIONS.get(name)
        if spec is None or (eq and not name.startswith("--")):
            return None  # unknown, or a form click reads differently (-o=x, -ox, --, -h)
        dest, allowed = spec
        if allowed == "flag":
            if eq:
                return None
            params[dest] = True
            continue
        if eq:
            value = inline
        elif i < len(args):
            value = args[i]
            i += 1
        else:
            return None  # missing value: click says so
        if isinstance(allowed, tuple) and value not in allowed:
            return None  # click names the allowed values
        if dest == "output" and _click_refuses_path(value):
            return None
        params[dest] = value
    if not paths:
        return None
    params["paths"] = tuple(paths)
    return params


def _click_refuses_path(value: str) -> bool:
    """What click.Path(dir_okay=False) checks of -o: an existing directory, or an existing file it cannot read."""
    import os

    return os.path.exists(value) and (os.path.isdir(value) or not os.access(value, os.R_OK))


def guarded(work: Callable[[], int]) -> int:
    """Run ``work`` and return its exit code; the one place an error becomes a message and a code."""
    from oomdoctor.base.errors import OomdoctorError
    from oomdoctor.commands.exits import exit_code
    from oomdoctor.report.console import fail

    try:
        return work()
    except KeyboardInterrupt as exc:
        fail("interrupted", exit_code(exc))
    except OomdoctorError as exc:
        fail(str(exc), exit_code(exc))
    except BrokenPipeError as exc:
        return int(exit_code(exc))
    except Exception as exc:  # noqa: BLE001 - the one place an unexpected error becomes exit code 1
        fail(f"internal error: {type(exc).__name__}: {exc} (please report this with the input)", exit_code(exc))


def console_main() -> None:
    """The ``oomdoctor`` console script: a process of its own, so a plain diagnose may skip the teardown."""
    main(fast_exit=True)


def main(argv: Sequence[str] | None = None, fast_exit: bool = False) -> None:
    """``python -m oomdoctor`` and embedders (runpy in-process) exit normally; the console script does not wait for teardown."""
    args = list(sys.argv[1:] if argv is None else argv)
    params = parse_diagnose(args[1:]) if args[:1] == ["diagnose"] else None
    if params is None:
        from oomdoctor.commands.cli import main as click_main

        click_main(args)
        return
    code = guarded(lambda: _diagnose(params))
    if fast_exit:
        _exit_now(code)
    sys.exit(code)


def _diagnose(params: dict[str, Any]) -> int:
    import gc

    # Importing the pipeline allocates tens of thousands of objects and frees almost none, so the cycle
    # collector's passes during it find nothing (~4 ms of a small log); frozen, they stay out of later passes.
    gc.disable()
    try:
        from oomdoctor.commands import diagnose as diagnose_command

        diagnose_command.import_pipeline(params["fmt"])
        gc.freeze()
    finally:
        gc.enable()
    return int(diagnose_command.run(**params))


def _exit_now(code: int) -> None:
    """End the process once the report is out, skipping the interpreter's teardown (~8 ms of a small log).

    Everything the command wrote is flushed first; files it wrote are closed (the report is renamed into
    place, the stdin spool removed, inside ``run``), and the disk cache's tables are written back, so nothing but
    module destruction is skipped.
    """
    import os

    # os._exit skips atexit, where the disk cache's tables write back what this run built afresh.
    disk_cache = sys.modules.get("oomdoctor.base.disk_cache")
    if disk_cache is not None:
        disk_cache.write_back()
    for stream in (sys.stdout, sys.stderr):
        if stream is None:  # started with that descriptor closed (cron, daemons)
            continue
        try:  # noqa: SIM105 - contextlib stays off the start path (~0.4 ms)
            stream.flush()
        except (BrokenPipeError, ValueError):  # the reader went away (| head): what it wanted was written
            pass
    os._exit(code)

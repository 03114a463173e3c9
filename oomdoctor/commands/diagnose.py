"""The diagnose command's work for one incident: inputs, rules, diagnosis, report, bundle (cli.py parses the options)."""

from __future__ import annotations

import os
import sys

from oomdoctor.base.errors import ExitCode, InputError, OutputError, UsageError
from oomdoctor.commands.exits import exit_code
from oomdoctor.report.console import echo, safe_output, warn, write_atomic


def run(
    paths: tuple[str, ...],
    fmt: str = "text",
    output: str | None = None,
    bundle: str | None = None,
    rules_dirs: tuple[str, ...] = (),
    system: str = "auto",
    no_redact: bool = False,
    redact_pii: bool = False,
    server: str | None = None,
    textfile_dir: str | None = None,
) -> ExitCode:
    """Diagnose ``paths`` as one incident, write the report (stdout or ``output``), the bundle and the textfile; the exit code.

    ``server``: the server's identity in the Prometheus samples and the textfile's name (default: the first
    input's name, ``server-8001.log`` -> ``server-8001``).
    """
    from oomdoctor.api import diagnose as run_diagnosis
    from oomdoctor.api import load_rules
    from oomdoctor.input import redact
    from oomdoctor.report.view import build_view

    if "-" in paths:
        stdin_buffer()  # closed standard input (<&-): exit 5 with the reason, not an AttributeError
    with redact.session(pii=redact_pii and not no_redact):
        inputs = [latest_run(p) for p in paths]
        refuse_outputs_among_inputs(inputs, output, bundle)
        rules = load_rules(rules_dirs)
        result = run_diagnosis(inputs, rules=rules, system=system)
        # The JSON and Prometheus reports are the contract alone; the charts are built for the others and a bundle.
        view = build_view(result, redact=not no_redact, report=bool(bundle) or fmt not in ("json", "prometheus"))
        docs = {r.id: r.docs for r in rules}
        identity = server or default_server(inputs)
        report = safe_output(fmt, render(fmt, view, docs, not no_redact, identity))
        for stats in result.inputs:
            for warning in stats.warnings:
                warn(f"{stats.path}: {warning}")
        if output:
            write_atomic(output, report)
        else:
            echo(report, nl=False)
        if bundle:
            from oomdoctor.report.bundle import write_bundle

            html = render("html", view, docs, not no_redact)
            md = render("markdown", view, docs, not no_redact)
            js = render("json", view, docs, not no_redact)
            try:
                notes = write_bundle(bundle, html, md, js, [s.path for s in result.inputs if s.readable], redact=not no_redact)
            except OSError as exc:
                raise OutputError(f"{bundle}: cannot write ({exc.strerror or exc})") from None
            for note in notes:
                warn(f"bundle: {note}")
        if textfile_dir:
            write_textfile(view, textfile_dir, identity)
    return exit_code(result)


def default_server(paths: list[str]) -> str:
    """A server's identity from its log's name: the first input's base name without its suffixes ("-" is stdin)."""
    from oomdoctor.input.kinds import plain_name

    first = next((p for p in paths if p != "-"), "")
    name = plain_name(first.rstrip("/\\")) if first else "stdin"
    for suffix in (".log", ".txt", ".out", ".err"):
        name = name.removesuffix(suffix)
    return name or "server"


def dating_of(view: dict) -> tuple[dict, tuple[str, str] | None]:
    """What dates the incident beyond its own lines (input/dating.py): each input's reference time for a
    year-less stamp, and the last stamped line before the verdict's failure line."""
    from oomdoctor.input import dating

    refs = {}
    for item in view.get("inputs") or []:
        ref = dating.reference(item.get("path") or "")
        if ref is not None:
            refs[item["path"]] = ref
    incidents = view.get("incidents") or []
    preceding = None
    if incidents and incidents[-1].get("path") and incidents[-1].get("first_line"):
        path = incidents[-1]["path"]
        stamp = dating.stamp_before(path, int(incidents[-1]["first_line"]))
        if stamp:
            preceding = (stamp, path)
            if path not in refs and (ref := dating.reference(path)) is not None:
                refs[path] = ref
    return refs, preceding


def write_textfile(view: dict, directory: str, server: str) -> str:
    """The samples as DIR/oomdoctor-<server>.prom for node_exporter's textfile collector (atomic); the path written."""
    from oomdoctor.report.render import prometheus

    path = os.path.join(directory, prometheus.textfile_name(server))
    try:
        os.makedirs(directory, exist_ok=True)
        prometheus.write_textfile(view, path, server, *dating_of(view))
    except OSError as exc:
        raise OutputError(f"{path}: cannot write ({exc.strerror or exc})") from None
    return path


def stdin_buffer(what: str = "-"):
    """Standard input's byte stream; InputError (exit 5) when it is closed (``<&-``) rather than an AttributeError."""
    stream = sys.stdin
    buffer = getattr(stream, "buffer", None) if stream is not None else None
    if buffer is None:
        raise InputError(f"{what}: standard input is closed; pipe the input in or give a path")
    return buffer


def latest_run_quiet(path: str) -> str:
    """An `oomdoctor run --out` directory stands for its newest run (OUT/latest), without a warning per incident."""
    from oomdoctor.commands.run import LATEST

    link = os.path.join(path, LATEST)
    if not (os.path.isdir(path) and os.path.islink(link) and os.path.isdir(link)):
        return path
    # Only a run inside OUT: a link that leads elsewhere is not followed.
    return link if os.path.dirname(os.path.realpath(link)) == os.path.realpath(path) else path


def latest_run(path: str) -> str:
    """An `oomdoctor run --out` directory stands for its newest run (OUT/latest), said on stderr."""
    from oomdoctor.input.kinds import is_bundle_dir

    if path == "-" or not os.path.isdir(path) or is_bundle_dir(path):
        return path
    from oomdoctor.commands.run import LATEST  # only for a directory: keeps the recorder off a plain log's start
    link = os.path.join(path, LATEST)
    if not os.path.islink(link):
        return path
    target = os.path.realpath(link)
    root = os.path.realpath(path)
    if os.path.dirname(target) != root or not os.path.isdir(target):
        return path
    warn(f"{path}: reading the latest run, {link} -> {os.path.basename(target)} (give a run directory to read another)")
    return link


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def refuse_outputs_among_inputs(paths: list[str], output: str | None, bundle: str | None) -> None:
    """An output that is one of the inputs (or a file inside an input directory) would destroy what it reports on."""
    from oomdoctor.input.files import expand_paths

    outs = [o for o in (output, bundle) if o]
    if output and bundle and _same_file(output, bundle):
        raise UsageError(f"-o and --bundle name the same file ({output})")
    if not outs:
        return
    found, _ = expand_paths([p for p in paths if p != "-"])
    for out in outs:
        for inp in [*paths, *found]:
            if inp != "-" and _same_file(out, inp):
                raise UsageError(f"{out}: is one of the inputs; write the report elsewhere")


def render(fmt: str, view: dict, docs: dict, redacted: bool, server: str = "server") -> str:
    if fmt == "json":
        from oomdoctor.report.render import json_out

        return json_out.render(view)
    if fmt == "markdown":
        from oomdoctor.report.render import markdown

        return markdown.render(view)
    if fmt == "html":
        from oomdoctor.report.render import html

        return html.render(view, docs, redacted)
    if fmt == "prometheus":
        from oomdoctor.report.render import prometheus

        return prometheus.render(view, server, *dating_of(view))
    from oomdoctor.report.render import text

    return text.render(view)

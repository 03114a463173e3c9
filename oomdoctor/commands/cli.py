"""Command line: parses options, calls the library, maps errors to the documented exit codes.

Exit codes: 0 no OOM evidence; 3 OOM diagnosed; 4 inconclusive; 2 usage error; 5 unreadable or
invalid input; 1 internal error; 130 interrupted; 143 terminated (SIGTERM while stdin was spooled). Library code raises typed errors (errors.py) and
returns typed outcomes; ``_exit_code`` is the one place either becomes an exit code. Nothing here
imports torch or pynvml.
"""

from __future__ import annotations

import math
import os
import sys
from typing import TYPE_CHECKING

import click

from oomdoctor import __version__
from oomdoctor.base.errors import ExitCode, InputError, OomdoctorError, UsageError
from oomdoctor.base.outcomes import PlanFit
from oomdoctor.commands.diagnose import latest_run_quiet as _latest_run_quiet
from oomdoctor.commands.diagnose import refuse_outputs_among_inputs as _refuse_outputs_among_inputs
from oomdoctor.commands.diagnose import stdin_buffer
from oomdoctor.commands.exits import exit_code as _exit_code
from oomdoctor.report.console import escape_controls, message_line
from oomdoctor.report.console import safe_output as _safe_output
from oomdoctor.report.console import warn as _warn
from oomdoctor.report.console import write_atomic as _write

if TYPE_CHECKING:  # the pipeline is imported only by the commands that run it
    from collections.abc import Iterator

    from oomdoctor.commands.fleet import Options as FleetOptions

EXIT_CODES_HELP = (
    "Exit codes: 0 no OOM evidence, 3 OOM diagnosed, 4 inconclusive (the input stops before a failure is evident), "
    "2 usage error, 5 unreadable or invalid input (or stdin could not be spooled: a full disk), 1 internal error, 130 interrupted, "
    "143 terminated (SIGTERM)."
)


def _finite(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """Refuse NaN and infinities (click's FloatRange lets NaN through: every comparison with it is false)."""
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a finite number")
    return value


# The largest --keep-mb taken: a million MB (1 TB) of head and as much of tail.
MAX_KEEP_MB = 1e6
# The most `triage` reads of one issue (README "Input caps"): a GitHub body is at most 65,536 characters,
# and an export with every comment stays far below this.
MAX_ISSUE_BYTES = 16 << 20


class _Group(click.Group):
    """Maps the typed errors to their exit codes for every command (also under click's test runner)."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except OomdoctorError as exc:
            click.echo(message_line("error", str(exc)), err=True)
            ctx.exit(int(_exit_code(exc)))


@click.group(cls=_Group, help=f"Why an LLM inference server ran out of GPU memory, and which flag to change.\n\n{EXIT_CODES_HELP}")
@click.version_option(__version__, prog_name="oomdoctor")
def cli() -> None:
    pass


def _load_rules(rules_dirs: tuple[str, ...]) -> list:
    from oomdoctor.api import load_rules

    return load_rules(rules_dirs)


@cli.command(short_help="Diagnose server logs: the class of OOM and the flag to change.", help=f"Diagnose server logs (files, .gz/.bz2/.xz, directories, or - for stdin).\n\n{EXIT_CODES_HELP}")
@click.argument("paths", nargs=-1, required=True)
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown", "html", "prometheus"]), default="text", show_default=True, help="Output format (prometheus: samples for node_exporter's textfile collector).")
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False), help="Write the report to this file instead of stdout.")
@click.option("--bundle", "bundle", type=click.Path(dir_okay=False), help="Also write a zip: report.html, summary.md, diagnosis.json and the redacted inputs.")
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(), help="Extra directory of *.toml rules (repeatable).")
@click.option("--system", type=click.Choice(["auto", "sglang", "vllm", "torch"]), default="auto", show_default=True, help="Override the serving system detected from the log.")
@click.option("--no-redact", is_flag=True, help="Keep secrets (API keys, tokens, passwords) in the output; redaction is on by default.")
@click.option("--redact-pii", is_flag=True, help="Also replace emails, host names and IP addresses with consistent pseudonyms (<ip-1>, <host-2>) in every output and bundle member.")
@click.option(
    "--summary",
    is_flag=True,
    help="Each PATH holds many independent incidents (one per log file, bundle or immediate subdirectory): diagnose them on every core "
    "and print a table by class and system with the most common fixes (text or json). Unreadable inputs are listed per file; exit 0 when it ran.",
)
@click.option(
    "--textfile",
    "textfile_dir",
    type=click.Path(file_okay=False),
    help="Also write the Prometheus samples to DIR/oomdoctor-SERVER.prom (node_exporter's textfile collector directory; replaced atomically).",
)
@click.option("--server", "server", metavar="NAME", help="The server's identity in the Prometheus samples and the textfile's name (default: the first input's name without suffixes).")
def diagnose(
    paths: tuple[str, ...], fmt: str, output: str | None, bundle: str | None, rules_dirs: tuple[str, ...], system: str, no_redact: bool, redact_pii: bool, summary: bool, textfile_dir: str | None, server: str | None
) -> None:
    if summary:
        _summary(paths, fmt, output, bundle, rules_dirs, system, no_redact, redact_pii)
        return
    from oomdoctor.commands import diagnose as diagnose_command

    sys.exit(int(diagnose_command.run(paths, fmt, output, bundle, rules_dirs, system, no_redact, redact_pii, server, textfile_dir)))


def _summary(paths: tuple[str, ...], fmt: str, output: str | None, bundle: str | None, rules_dirs: tuple[str, ...], system: str, no_redact: bool, redact_pii: bool) -> None:
    """``diagnose --summary``: many independent incidents in a process pool, then one table (or JSON document)."""
    import json

    from oomdoctor.commands import fleet

    if fmt not in ("text", "json"):
        raise UsageError(f"--summary writes text or json, not {fmt}")
    if bundle:
        raise UsageError("--summary writes no bundle; diagnose one incident to get one")
    if "-" in paths:
        raise UsageError("--summary reads paths, not stdin")
    _refuse_outputs_among_inputs(list(paths), output, None)
    fleet.rules(rules_dirs)  # a bad --rules directory is a usage error here, not one failure per incident
    options = fleet.Options(system=system, rules_dirs=rules_dirs, redact=not no_redact, pii=redact_pii)
    tty = sys.stderr.isatty()

    def progress(done: int, total: int) -> None:
        if tty and (done == total or done % 10 == 0):
            click.echo(f"\roomdoctor: {done}/{total} incidents", err=True, nl=done == total)

    rows = fleet.run(paths, _summary_row, options, progress=progress)
    if fmt == "json":
        report = _safe_output("json", json.dumps(fleet.to_json(rows), indent=2, sort_keys=True) + "\n")
    else:
        report = escape_controls(fleet.render_text(rows))
    if output:
        _write(output, report)
    else:
        click.echo(report, nl=False)
    sys.exit(int(ExitCode.NO_OOM))


def _summary_row(path: str, options: FleetOptions) -> dict:
    """One incident of ``--summary``, in a worker process: its summary row, or its one-line reason for failing."""
    from oomdoctor.api import diagnose as run_diagnosis
    from oomdoctor.commands import fleet
    from oomdoctor.input import redact
    from oomdoctor.report.view import build_view

    try:
        with redact.session(pii=options.pii and options.redact):
            result = run_diagnosis([_latest_run_quiet(path)], rules=fleet.rules(options.rules_dirs), system=options.system)
            view = build_view(result, redact=options.redact)
    except OomdoctorError as exc:
        return fleet.failed(path, str(exc))
    except Exception as exc:  # noqa: BLE001 - one bad input never stops the run; its reason is listed
        return fleet.failed(path, f"internal error: {type(exc).__name__}: {exc}")
    if not any(s.readable for s in result.inputs):
        reasons = [w for s in result.inputs for w in s.warnings] or ["no readable log in it"]
        return fleet.failed(path, reasons[0])
    return fleet.row(path, view)


@cli.command(
    short_help="Snapshot the GPUs and their processes into a bundle.",
    help="Snapshot the GPUs (NVML, else nvidia-smi; never a CUDA context) and their processes into a bundle "
    "directory that `diagnose DIR` reads. Exit codes: 0 bundle with GPU evidence, 5 bundle written but GPU "
    "evidence unavailable (no driver or GPU), 2 usage error (also: DIR is not empty, evidence is never overwritten; a --log that "
    "is missing or no regular file: a FIFO, a device, a link to one), 1 internal error."
)
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(file_okay=False), help="Bundle directory to write: new or empty (an earlier bundle is never overwritten).")
@click.option("--log", "logs", multiple=True, type=click.Path(), help="Log to copy into the bundle (repeatable).")
@click.option("--no-redact", is_flag=True, help="Copy logs and command lines without redacting secrets.")
def collect(out_dir: str, logs: tuple[str, ...], no_redact: bool) -> None:
    from oomdoctor.commands.collect import collect as run_collect

    manifest, evidence = run_collect(out_dir, list(logs), redact=not no_redact)
    n = len(manifest["gpus"])
    procs = sum(len(g["processes"]) for g in manifest["gpus"] if isinstance(g["processes"], list))
    click.echo(escape_controls(f"wrote {out_dir}/manifest.json: {n} GPU(s), {procs} process(es), {len(manifest['logs'])} log(s)"))
    if manifest["gpu_evidence"]["unavailable"]:
        _warn(f"GPU evidence unavailable: {manifest['gpu_evidence']['unavailable']}")
    sys.exit(int(_exit_code(evidence)))


# The largest --gpu-mem-gib taken: far above any accelerator, far below what overflows the arithmetic.
MAX_GPU_MEM_GIB = 1 << 20

# Config fields that, when given, must be positive integers (a zero or negative one is nonsense, not "unset").
_POSITIVE_CONFIG_FIELDS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings", "kv_lora_rank", "v_head_dim", "qk_rope_head_dim", "intermediate_size", "moe_intermediate_size")


def _check_config(model_path: str) -> None:
    """InputError (exit 5) naming the field when config.json gives a size no model has (0, negative, not a number).

    An unreadable config is left to plan.load_model, which says why.
    """
    from pathlib import Path

    from oomdoctor.commands import plan as planner

    p = Path(model_path)
    cfg_path = p / "config.json" if p.is_dir() else p
    try:
        raw = planner.read_config_json(cfg_path)  # capped and depth-checked (README "Input caps")
    except InputError:
        return
    if not isinstance(raw, dict):
        return
    c = planner._text_config(raw)
    for key in _POSITIVE_CONFIG_FIELDS:
        if key not in c or c[key] is None:
            continue
        value = c[key]
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise InputError(f"{cfg_path}: {key} = {value!r} is not a positive integer")


def _check_model(model_path: str, model: object) -> None:
    """InputError (exit 5) when the loaded model has a size no model has (what the config's fields combine to)."""
    cfg_path = os.path.join(model_path, "config.json") if os.path.isdir(model_path) else model_path
    for field in ("layers", "hidden", "heads", "kv_heads", "head_dim", "v_head_dim"):
        value = getattr(model, field, 1)
        if not isinstance(value, int) or value <= 0:
            raise InputError(f"{cfg_path}: the config gives {field} = {value!r}, which no model has")
    weights = getattr(model, "weights_bytes", None)
    if weights is not None and weights <= 0:
        raise InputError(f"{cfg_path}: the weights come to {weights} bytes, which no model has")


@cli.command(
    short_help="Plan the memory budget before launch from a config.json.",
    help="Plan the memory budget before launch from a local config.json (no network): the feasible "
    "--mem-fraction-static / --gpu-memory-utilization window, the engine's own default, KV tokens, and "
    "which GPUs / TP sizes fit. Exit codes: 0 fits, 3 does not fit (an OOM is predicted), 2 usage, 5 bad config."
)
@click.option("--model", "model_path", required=True, type=click.Path(), help="Model directory (config.json, model.safetensors.index.json) or a config.json.")
@click.option("--gpu", "gpu_name", help="GPU name, e.g. H100-80GB, H200, H20, A100-40GB (see the [[gpu]] table in oomdoctor/data/gpus.toml).")
@click.option("--gpu-mem-gib", type=float, help="GPU memory in GiB instead of --gpu.")
@click.option("--tp", "tp", type=click.IntRange(1, 1024), default=1, show_default=True, help="Tensor-parallel size: the GPUs one replica's weights and KV heads are split over.")
@click.option("--context-len", type=click.IntRange(1), help="Maximum context length (default: the model's).")
@click.option(
    "--kv-cache-dtype",
    default="auto",
    show_default=True,
    type=click.Choice(["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"]),
    help="KV cache element type, as the engine's flag of that name (auto: the model's dtype).",
)
@click.option("--system", type=click.Choice(["sglang", "vllm"]), default="sglang", show_default=True, help="The engine whose budget model is planned (--mem-fraction-static or --gpu-memory-utilization).")
@click.option("--at", "at", type=click.FloatRange(0, 1, min_open=True, max_open=True), callback=_finite, help="Also evaluate this --mem-fraction-static / --gpu-memory-utilization value.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown", "html"]), default="text", show_default=True, help="Output format of the plan.")
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False), help="Write the plan to this file instead of stdout.")
def plan(model_path: str, gpu_name: str | None, gpu_mem_gib: float | None, tp: int, context_len: int | None, kv_cache_dtype: str, system: str, at: float | None, fmt: str, output: str | None) -> None:
    import json

    from oomdoctor.commands import plan as planner
    from oomdoctor.memory.gpus import find_gpu

    if (gpu_name is None) == (gpu_mem_gib is None):
        raise UsageError("give exactly one of --gpu NAME or --gpu-mem-gib N")
    if gpu_mem_gib is not None and not (math.isfinite(gpu_mem_gib) and 0 < gpu_mem_gib <= MAX_GPU_MEM_GIB):
        raise UsageError(f"--gpu-mem-gib must be a number of GiB above 0 and at most {MAX_GPU_MEM_GIB} (got {gpu_mem_gib:g})")
    if gpu_name:
        gpu = find_gpu(gpu_name)
        capacity, label = gpu.capacity_bytes, gpu.name
        capacity_source, capacity_note, smi_total = gpu.capacity_source, gpu.capacity_note, gpu.smi_total_bytes
    else:
        assert gpu_mem_gib is not None  # exactly one of the two was given (checked above)
        capacity, label = int(gpu_mem_gib * (1 << 30)), f"{gpu_mem_gib:g} GiB GPU"
        capacity_source, capacity_note, smi_total = "given", "--gpu-mem-gib", None
    try:
        _check_config(model_path)
        model = planner.load_model(model_path)
        _check_model(model_path, model)
        result = planner.plan(model, capacity, label, tp, context_len, kv_cache_dtype, system, at, smi_total_bytes=smi_total)
        fits = [] if result["feasible"] else planner.what_fits(model, context_len, kv_cache_dtype, system)
    except (ArithmeticError, ValueError, TypeError, KeyError, AttributeError) as exc:
        # The config holds numbers no model has (zero heads, negative sizes, strings): exit 5, not 1.
        raise InputError(f"{model_path}: config.json values cannot be planned with ({type(exc).__name__}: {exc})") from None
    result["fits_on"] = fits
    result["capacity_source"], result["capacity_note"] = capacity_source, capacity_note
    if fmt == "json":
        text = json.dumps(result, indent=2, sort_keys=True) + "\n"
    elif fmt in ("markdown", "html"):
        from oomdoctor.report.render import plan_report

        text = plan_report.markdown(result) if fmt == "markdown" else plan_report.html(result)
    else:
        text = planner.render_text(result, fits)
    if output:
        _write(output, text)
    else:
        click.echo(text, nl=False)
    # The exit code follows the recommendation: the model fits when a value of the flag makes it fit.
    # A pinned --at value that does not is reported (INFEASIBLE, and "at" in the JSON), not an exit code.
    sys.exit(int(_exit_code(PlanFit.FITS if result["feasible"] else PlanFit.DOES_NOT_FIT)))


@cli.command(
    "run",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
    short_help="Run a server under the flight recorder (logs, NVML samples).",
    help="Run a server under the flight recorder: each run gets its own directory OUT/<YYYYmmdd-HHMMSS> (OUT/latest points "
    "to the newest; earlier runs are never touched); the server's output passes through unchanged (and goes to RUN/server.log, "
    "redacted in flight, so secrets never reach the disk), GPU memory is sampled with NVML, and on an OOM or an abnormal exit RUN gets a bundle and report.html. "
    "Exits with the server's own exit code. Example: oomdoctor run --out rec -- python -m sglang.launch_server ...",
)
@click.option("--out", "out_dir", default="oomdoctor-run", show_default=True, type=click.Path(file_okay=False), help="Directory that holds one run directory per run (and OUT/latest).")
@click.option("--interval", "interval_ms", default=500, show_default=True, type=click.IntRange(10, 60000), help="Sampling interval in ms.")
@click.option("--no-redact", is_flag=True, help="Keep the raw server.log (secrets included); by default each line is redacted in flight, before it is written.")
@click.option(
    "--keep-mb",
    default=64,
    show_default=True,
    type=click.FloatRange(min=0.001, max=MAX_KEEP_MB),
    callback=_finite,
    help="server.log keeps the first N MB (the startup evidence) and the last N MB, with one line saying how much was dropped between.",
)
@click.option(
    "--textfile",
    "textfile_dir",
    type=click.Path(file_okay=False),
    help="When the server OOMs, also write the diagnosis as Prometheus samples to DIR/oomdoctor-SERVER.prom, SERVER being port-N from the "
    "command's --port, else the --out directory's name (node_exporter's textfile collector directory; replaced atomically).",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run_cmd(out_dir: str, interval_ms: int, no_redact: bool, keep_mb: float, textfile_dir: str | None, command: tuple[str, ...]) -> None:
    from oomdoctor.commands import run as flight

    sys.exit(flight.run(list(command), out_dir, interval_ms, redact=not no_redact, keep_mb=keep_mb, textfile_dir=textfile_dir))


@cli.command(
    short_help="Triage an OOM bug report and write the first reply.",
    help="Triage an OOM bug report: read an issue (a GitHub event payload with --event, an issue's JSON export, or a "
    "markdown body; - for stdin) and write the first reply: the class and the flag when the evidence decides it, a request "
    "for exactly the missing lines when it does not, nothing when there is no OOM evidence or the confidence is below "
    "--threshold. Exit codes: 0 (a reply or silence), 2 usage error, 5 unreadable input."
)
@click.argument("source", required=False)
@click.option("--event", "event_path", type=click.Path(dir_okay=False), help="A GitHub Actions event payload ($GITHUB_EVENT_PATH): issues opened/edited or issue_comment created.")
@click.option("--threshold", type=click.FloatRange(0, 1), callback=_finite, default=0.7, show_default=True, help="Answer only at or above this confidence; below it, stay silent.")
@click.option("--label-prefix", default="oom:", show_default=True, help="Prefix of the suggested labels (e.g. oom:startup_kv, oom:needs-log).")
@click.option("--format", "fmt", type=click.Choice(["markdown", "json"]), default="markdown", show_default=True, help="The reply as markdown (nothing when silent), or JSON with its kind and labels.")
@click.option("--summary", "summary_path", type=click.Path(dir_okay=False), help="A JSONL export of many issues (one issue object a line): print classes, answerable counts and the evidence most often missing.")
@click.option(
    "--comments",
    "comments_path",
    type=click.Path(dir_okay=False),
    help="The issue's comments as JSON (gh api repos/OWNER/REPO/issues/N/comments --paginate): the reply is computed from the whole thread, not only the event's body and new comment.",
)
def triage(source: str | None, event_path: str | None, threshold: float, label_prefix: str, fmt: str, summary_path: str | None, comments_path: str | None) -> None:
    from oomdoctor.commands import triage as tri

    if summary_path:
        replies = [_triage_one(issue, threshold, label_prefix) for issue in _issues_from_jsonl(summary_path)]
        click.echo(escape_controls(tri.summarize(replies)), nl=False)
        return
    if (source is None) == (event_path is None):
        raise UsageError("give exactly one of SOURCE or --event PATH")
    comments = _read_comments(comments_path) if comments_path else None
    issue = _read_issue(event_path or source or "-", comments, event=event_path is not None)
    reply = _triage_one(issue, threshold, label_prefix)
    if fmt == "json":
        click.echo(_safe_output("json", tri.reply_json(reply)), nl=False)
    elif reply.kind != "silent":
        click.echo(escape_controls(reply.body))


def _read_comments(path: str) -> list:
    from oomdoctor.base.limits import memory_budget, read_capped
    from oomdoctor.commands import triage as tri

    with memory_budget(path, "issue's comments"):
        text = read_capped(path, MAX_ISSUE_BYTES, "an issue's comments").decode("utf-8", "replace")
        try:
            return tri.comments_from_json(tri.load_json_stream(text))
        except (ValueError, RecursionError) as exc:
            raise InputError(f"{path}: not the issue's comments ({exc})") from None


def _read_issue(path: str, comments: list | None = None, event: bool = False):
    """The issue in ``path`` (- for stdin): a JSON export or event payload, else a markdown body or a bare log.

    A text starting with ``[`` is JSON only when it is an export (a list of objects that parses); "[2025-..."
    or "[rank0]: ..." starts many logs, which are triaged as they are. An ``--event`` payload must be JSON.
    """
    import re

    from oomdoctor.base.limits import memory_budget, read_capped, too_large
    from oomdoctor.commands import triage as tri
    from oomdoctor.input.kinds import read_json

    with memory_budget(path, "issue"):
        if path == "-":
            raw = stdin_buffer(path).read(MAX_ISSUE_BYTES + 1)
            if len(raw) > MAX_ISSUE_BYTES:
                raise InputError(too_large("-", None, MAX_ISSUE_BYTES, "an issue"))
        else:
            raw = read_capped(path, MAX_ISSUE_BYTES, "an issue")
        text = raw.decode("utf-8", "replace")
        del raw
        head = text.lstrip()[:1]
        if event or head == "{" or re.match(r"\s*\[\s*\{", text):
            try:
                return tri.issue_from_json(read_json(text, path, finite=False), comments)
            except (ValueError, RecursionError, InputError) as exc:
                if event or head == "{":
                    raise InputError(str(exc) if isinstance(exc, InputError) else f"{path}: {exc}") from None
    return tri.Issue(title="", markdown=text)


def _issues_from_jsonl(path: str) -> Iterator:
    """The issues of a JSONL export, one at a time (memory does not grow with the export); each line at most MAX_ISSUE_BYTES."""
    from oomdoctor.base.limits import memory_budget, too_large
    from oomdoctor.commands import triage as tri
    from oomdoctor.input.kinds import read_json

    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            n = 0
            while True:
                n += 1
                with memory_budget(f"{path}:{n}", "issue"):
                    line = fh.readline(MAX_ISSUE_BYTES + 1)
                    if not line:
                        return
                    if len(line) > MAX_ISSUE_BYTES:
                        raise InputError(too_large(f"{path}:{n}", None, MAX_ISSUE_BYTES, "an issue (one JSONL line)"))
                    if not line.strip():
                        continue
                    try:
                        issue = tri.issue_from_json(read_json(line, f"{path}:{n}", finite=False))
                    except (ValueError, RecursionError) as exc:
                        raise InputError(f"{path}:{n}: {exc}") from None
                    del line
                yield issue
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _triage_one(issue, threshold: float, label_prefix: str):
    from oomdoctor.commands import triage as tri

    why = tri.ignored(issue)
    if why:
        return tri.Reply("silent", ignored=why)
    reply = _triage_thread(issue, threshold, label_prefix)
    reply.comment_evidence = tri.comment_has_evidence(issue.comment) if issue.comment is not None else None
    return reply


def _triage_thread(issue, threshold: float, label_prefix: str):
    import os
    import tempfile

    from oomdoctor.api import diagnose as run_diagnosis
    from oomdoctor.base.errors import InputError as _InputError
    from oomdoctor.commands import triage as tri
    from oomdoctor.report.view import build_view

    with tempfile.TemporaryDirectory(prefix="oomdoctor-triage-") as tmp:
        path = os.path.join(tmp, "issue.md")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(tri.issue_text(issue))
        try:
            result = run_diagnosis([path])
        except _InputError:
            return tri.Reply("silent")
        view = build_view(result, redact=True)
    from oomdoctor.input.issue_body import claims_oom, log_lines

    text = tri.issue_text(issue)
    return tri.decide(
        view,
        threshold=threshold,
        label_prefix=label_prefix,
        claims_oom=claims_oom(f"{issue.title}\n{issue.markdown}"),
        log_text="\n".join(log_lines(text)),
        evidence=tri.evidence_key(issue),
    )


@cli.group(help="List, explain and check the rule catalogue.")
def rules() -> None:
    pass


@rules.command("list", help="List every rule: id, class, systems, title.")
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(), help="Extra directory of *.toml rules.")
def rules_list(rules_dirs: tuple[str, ...]) -> None:
    for rule in _load_rules(rules_dirs):
        click.echo(f"{rule.id:34} {rule.klass:20} {','.join(rule.systems):14} {rule.title}")


@rules.command("explain", help="Print one rule's documentation: what, why, example, fix.")
@click.argument("rule_id")
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(), help="Extra directory of *.toml rules.")
def rules_explain(rule_id: str, rules_dirs: tuple[str, ...]) -> None:
    for rule in _load_rules(rules_dirs):
        if rule.id == rule_id:
            click.echo(f"{rule.id}: {rule.title}")
            click.echo(f"class: {rule.klass}   systems: {', '.join(rule.systems)}   severity: {rule.severity}   confidence: {rule.confidence}")
            for key in ("what", "why", "example", "fix"):
                click.echo(f"\n{key.capitalize()}:\n  {rule.docs[key].strip()}")
            if rule.references:
                click.echo("\nReferences:")
                for ref in rule.references:
                    click.echo(f"  {ref}")
            return
    raise UsageError(f"no rule {rule_id!r}; see 'oomdoctor rules list'")


@rules.command("check", short_help="Validate rule files.", help="Validate rule files (the shipped catalogue and --rules directories).")
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(), help="Extra directory of *.toml rules.")
def rules_check(rules_dirs: tuple[str, ...]) -> None:
    loaded = _load_rules(rules_dirs)
    click.echo(f"{len(loaded)} rules OK")


@cli.group(short_help="List and explain the facts rules are written over.", help="List and explain the facts rules are written over (oomdoctor/data/facts.toml).")
def facts() -> None:
    pass


@facts.command("list", help="List every fact: name, type, unit, systems, description.")
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(), help="Extra directory of *.toml rules (to show which rules use each fact).")
def facts_list(rules_dirs: tuple[str, ...]) -> None:
    from oomdoctor.inference import catalogue

    for spec in catalogue.load().facts.values():
        if spec.internal:
            continue
        click.echo(f"{spec.name:34} {spec.type:9} {spec.unit or '-':16} {','.join(spec.systems):22} {spec.doc}")


@facts.command("explain", short_help="Print one fact's documentation and the rules that use it.", help="Print one fact's documentation, the systems that produce it, how to get it and the rules that use it.")
@click.argument("name")
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(), help="Extra directory of *.toml rules.")
def facts_explain(name: str, rules_dirs: tuple[str, ...]) -> None:
    import re

    from oomdoctor.inference import catalogue

    cat = catalogue.load()
    spec = cat.facts.get(name)
    if spec is None or spec.internal:
        hint = cat.suggest(name)
        raise UsageError(f"no fact {name!r}" + (f"; did you mean {hint!r}?" if hint else "; see 'oomdoctor facts list'"))
    click.echo(f"{spec.name}: {spec.doc}")
    click.echo(f"type: {spec.type}" + (f"   unit: {spec.unit}" if spec.unit else ""))
    click.echo(f"produced for: {', '.join(spec.systems)}")
    click.echo(f"when it is missing: {cat.how_to_get(name)}")
    users = [r.id for r in _load_rules(rules_dirs) if name in r.facts_used() or re.search(r"\{" + name + r"\}", r.message)]
    click.echo(f"used by rules: {', '.join(users) if users else 'none'}")


def main(argv: list[str] | None = None) -> None:
    """The ``oomdoctor`` command and ``python -m oomdoctor``."""
    from oomdoctor.commands.exits import guarded

    def invoke() -> int:
        try:
            code = cli.main(args=argv, prog_name="oomdoctor", standalone_mode=False)
            return code if isinstance(code, int) else 0
        except click.exceptions.NoArgsIsHelpError as exc:
            click.echo(exc.format_message() if hasattr(exc, "format_message") else str(exc), err=True)
            return int(_exit_code(exc))
        except click.exceptions.Exit as exc:
            return int(exc.exit_code)
        except click.UsageError as exc:
            exc.show()
            return int(_exit_code(exc))
        except click.Abort as exc:
            raise KeyboardInterrupt from exc

    sys.exit(guarded(invoke))


if __name__ == "__main__":
    main()

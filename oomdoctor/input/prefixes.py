"""Line cleaning: ANSI codes and the ordered table of prefixes that wrap a log message.

Prefixes nest (docker compose around a CI timestamp around SGLang's own rank tag), so the table is
applied repeatedly, outermost first, until no entry matches. Every entry may contribute a rank tag
or a timestamp; the message that is left is what parsers read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from oomdoctor.input.patterns import LazyRegex

if TYPE_CHECKING:
    import re

# Real ESC sequences, and the same codes pasted as caret text ("^[[0;36m") by people copying
# from a terminal or a web console. Tried only on a line holding an escape (strip_ansi).
_ANSI_RE = LazyRegex(None, r"(?:\x1b|\^\[)\[[0-9;?]*[A-Za-z]|\x1b[()][A-Za-z0-9]")


class Stripped(NamedTuple):
    """A message with its prefixes removed, and the identity those prefixes carried."""

    msg: str
    rank: str | None
    ts: str | None
    system: str | None = None  # "sglang" / "vllm" when the prefix style itself says so
    # The node (host, pod, Ray node IP, Slurm task) a multiplexing prefix names: kubectl logs --prefix,
    # Ray's "(pid=N, ip=A.B.C.D)", srun -l's "0: ". None when the line carries no such prefix.
    node: str | None = None
    node_source: str | None = None
    container: str | None = None  # kubectl --prefix's container name (sglang-leader, sglang-worker)
    # A prefix the program's own logger wrote (its timestamp, rank or process tag). Collectors (kubectl,
    # srun -l, docker compose, Buildkite or kubectl --timestamps, a markdown quote) stamp every physical
    # line, a traceback's included, so their prefixes alone never mark the start of a new log record.
    program: bool = False


def _sglang_rank(tags: str) -> str | None:
    tags = tags.strip()
    return tags or None


# vLLM's process tags only: compiled on the first such line.
_RANK_ATTR = LazyRegex(None, r"rank=(\d+)")
_RANK_PART = LazyRegex(None, r"(?:DP|TP|PP|EP|DCP|PCP)\d+")
_PID_ATTR = LazyRegex(None, r"pid=(\d+)")
_IP_ATTR = LazyRegex(None, r"\bip=([0-9a-fA-F.:]+)")


def _vllm_proc_rank(name: str, attrs: str) -> str | None:
    # (VllmWorker rank=3 pid=N) -> rank3; (Worker_TP0_EP0 pid=N) -> TP0 EP0; (EngineCore_DP0 ...) -> DP0
    m = _RANK_ATTR.search(attrs)
    if m:
        return f"rank{m.group(1)}"
    parts = [p for p in name.split("_")[1:] if _RANK_PART.compiled.fullmatch(p)]
    if parts:
        return " ".join(parts)
    m = _PID_ATTR.search(attrs)
    # RayWorkerVllm: vLLM 0.2-0.3's Ray worker actor (vllm/engine/ray_utils.py), RayWorkerWrapper's name before 0.4.
    if name.startswith(("VllmWorkerProcess", "RayWorkerWrapper", "RayWorkerVllm", "Worker")) and m:
        return f"pid{m.group(1)}"
    return None


# (name, pattern). Order matters only among entries that could match the same text; the loop restarts
# from the top after every strip, so outer wrappers may appear in any order. An entry is compiled the
# first time a line starts with a character it can start with (_entries): a log of one format never
# compiles the other formats' entries.
_PREFIXES: tuple[tuple[str, LazyRegex], ...] = (
    # kubectl logs --prefix: "[pod/NAME/CONTAINER] " (also "[NAME/CONTAINER] " from stern-like tools).
    ("kubectl", LazyRegex(None, r"^\[pod/(?P<pod>[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?)/(?P<container>[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)\] ")),
    # srun -l: the Slurm task id, right-aligned to the widest id, then ": ".
    ("srun", LazyRegex(None, r"^ {0,4}(?P<task>\d{1,5}): (?=.)")),
    # Ray's worker and raylet output on the driver: "(pid=1234, ip=10.0.0.2) ", "(raylet, ip=10.0.0.2) ",
    # "(MyActor pid=1234, ip=10.0.0.2) " (actor names may hold ':' and '.'). Named vLLM workers are below.
    (
        "ray",
        LazyRegex(None,
            r"^\((?:(?P<rname>[A-Za-z_][\w.:-]*)(?:, | ))?(?:pid=(?P<pid>\d+))?(?:, )?(?:ip=(?P<ip>[0-9a-fA-F.:]+))?\) "
        ),
    ),
    # Markdown quote from a pasted bug report.
    ("markdown", LazyRegex(None, r"^ {0,3}>+ ?")),
    # A collector's or wrapper's level tag in brackets before the program's own line ("[ERROR]   File ...",
    # "[INFO] Loading safetensors ..."): Python logging's "[%(levelname)s] %(message)s" around a child's output.
    ("level_tag", LazyRegex(None, r"^\[(?:ERROR|WARN(?:ING)?|INFO|DEBUG|CRITICAL|FATAL)\] ?")),
    # docker compose: service name padded to the widest name, then "| " ("sglang-1  | ", v1 "sglang_1  | "); a
    # compose file's container_name has no index ("vllm  | "): a lower-case name and two or more blanks then.
    ("docker", LazyRegex(None, r"^(?:(?P<svc>[A-Za-z0-9][\w.]*[-_][\w.-]*)\s+|[a-z][\w.]*\s{2,})\| ?")),
    # DJL Serving (AWS large model inference containers) relays the engine's output per stream:
    # "WARN  PyProcess W-252-model-stderr: ", "INFO  PyProcess W-252-model-stdout: ".
    ("djl", LazyRegex(None, r"^(?:INFO|WARN|ERROR|DEBUG)\s+PyProcess W-\d+-[\w.-]+-std(?:out|err): ?")),
    # Buildkite's web log copied from the browser: a "  | " gutter before its timestamp.
    ("buildkite_gutter", LazyRegex(None, r"^\s{0,4}\| (?=\[?\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})")),
    # Buildkite / cloud logging / kubectl --timestamps.
    (
        "iso_ts",
        LazyRegex(None,
            r"^\[?(?P<ts>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?)\]? ?"
        ),
    ),
    # torch.distributed elastic: "[rank3]: ".
    ("torch_rank", LazyRegex(None, r"^\[(?P<rank>rank\d+)\]: ?")),
    # SGLang: "[2026-03-02 10:00:41 DP0 PP0 TP0 EP0] ", "[10:00:41 TP1] ", "[03-02 10:00:41] ".
    (
        "sglang",
        LazyRegex(None,
            r"^\[(?P<ts>(?:\d{4}-)?(?:\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}(?:\.\d{3})?)"  # .123: SGLANG_LOG_MS=1
            r"(?P<tags>(?: (?:DP|PP|TP|EP|ATTN_CP|MOE_DP|CP)\d+)*)[^\]]{0,20}\] ?"
            r"(?:(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) [\w./-]+\.py:\d+: )?"
        ),
    ),
    # SGLang 2024: "[gpu=0] Load weight begin. ..." (0.2.7-0.2.14), "[gpu_id=0] ..." (0.1.18-0.2.5).
    ("sglang_gpu", LazyRegex(None, r"^\[gpu(?:_id)?=(?P<gpu>\d+)\] ")),
    # vLLM process tag: "(EngineCore_DP0 pid=1531) ", "(RayWorkerWrapper pid=1699, ip=10.0.0.1) ".
    ("vllm_proc", LazyRegex(None, r"^\((?P<name>[A-Za-z][\w]*)(?P<attrs>(?: [\w]+=[^\s,)]+,?)+)\) ")),
    # vLLM logger: "INFO 08-19 07:51:03 [core.py:396] ", oldest "INFO 08-19 07:51:03 worker.py:10] ".
    (
        "vllm_level",
        LazyRegex(None,
            r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<ts>\d{2}-\d{2} \d{2}:\d{2}:\d{2})"
            r"(?:\.\d+)? \[?[\w./-]+:\d+\] "
        ),
    ),
    # Fields joined by pipes: Python logging's "%(asctime)s | %(levelname)s | %(name)s | " (FastChat's workers stamp every
    # line of a child's stderr so: "2024-03-20 19:18:27 | ERROR | stderr |   File ...") and loguru's default
    # "2023-07-13 01:27:18.636 | ERROR    | module:function:85 - ".
    (
        "pipe_fields",
        LazyRegex(None,
            r"^(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:[,.]\d+)?) \| (?:TRACE|DEBUG|INFO|SUCCESS|WARNING|ERROR|CRITICAL) *\| "
            r"(?:[\w.-]+ \| ?|[\w.<>-]+:[\w.<>-]+:\d+ - )"
        ),
    ),
    # Python logging as SGLang Omni configures it: "2026-03-29 22:51:55,108 [WARNING] ".
    (
        "pylogging",
        LazyRegex(None,
            r"^(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:[,.]\d+)?) "
            # A bare level is Python logging's, unless vLLM's own "LEVEL MM-DD HH:MM:SS [file:N]" follows: then
            # this is a log shipper's stamp and the level is vLLM's. So is a stamp before SGLang's "[HH:MM:SS TP0]",
            # torch's "[rank0]:", vLLM's process tag ("(EngineCore_DP0 pid=N)", "(VllmWorker rank=0 pid=N)") or Ray's
            # "(pid=N, ip=...)": the next pass strips the program's own prefix.
            r"(?:\[(?P<level>[A-Za-z]+)\] |(?=(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d{2}-\d{2} \d{2}:\d{2}:\d{2})|(?=\[\d{2}|\[rank\d+\]:|\((?:[A-Za-z]\w*(?: \w+=[^\s,)]+,?)+|pid=\d+[^)]*)\) )|(?P<l2>[A-Z]+) )"
        ),
    ),
    # A logger's source location after its clock and level, with the process id and rank tags a format may put in it:
    # "2025-06-18 13:43:34 ERROR 31423 [ TP6 PP0 scheduler.py:2547] " ("%(process)d [%(tags)s %(filename)s:%(lineno)d]").
    ("logger_location", LazyRegex(None, r"^(?:\d{1,7} )?\[ ?(?P<tags>(?:(?:DP|PP|TP|EP|ATTN_CP|MOE_DP|CP)\d+ )*)[\w.-]+\.py:\d+\] ?")),
    # llama.cpp's own logger with timestamps (common/log.cpp: minutes, seconds, milliseconds and microseconds since
    # start, then the level's letter): "10.05.651.308 E llama_decode: ..." (llama-server --log-timestamps, llama-box).
    ("llama_cpp_log", LazyRegex(None, r"^\d{1,4}\.\d{2}\.\d{3}\.\d{3} (?:[DIWE] )?")),
    # Process-supervisor tags some launchers add before the engine's own prefix: "(Process) ".
    (
        "supervisor",
        LazyRegex(None, r"^\((?:Process|stdout|stderr)\) "),
    ),
    # A supervisor that relays each child stream with a level, after its own clock: "[03:13:05] stderr/INFO  ",
    # "health/ERROR  " (the stream or check's name, a slash, the level, then one or two blanks: more are the line's own).
    ("stream_level", LazyRegex(None, r"^(?:std(?:out|err)|[a-z][a-z0-9_-]{1,15})/(?:DEBUG|INFO|WARN(?:ING)?|ERROR|CRITICAL|FATAL) {1,2}(?=.)")),
)


# The characters each entry can start with, as a one-character pattern (the same \d and \s as the
# entry's own): a line is tried only against the entries its first character can start
# (tests/test_input_prefixes.py checks every entry's matches against its class). Compiled when the
# first line is split.
_FIRST_CHARS: dict[str, LazyRegex] = {
    name: LazyRegex(None, chars)
    for name, chars in (
        ("kubectl", r"\["),
        ("srun", r"[ \d]"),
        ("ray", r"\("),
        ("markdown", r"[ >]"),
        ("level_tag", r"\["),
        ("docker", r"[A-Za-z0-9]"),
        ("djl", r"[IWED]"),
        ("buildkite_gutter", r"[\s|]"),
        ("iso_ts", r"[\[\d]"),
        ("torch_rank", r"\["),
        ("sglang", r"\["),
        ("sglang_gpu", r"\["),
        ("vllm_proc", r"\("),
        ("vllm_level", r"[DIWEC]"),
        ("pipe_fields", r"\d"),
        ("pylogging", r"\d"),
        ("logger_location", r"[\d\[]"),
        ("llama_cpp_log", r"\d"),
        ("supervisor", r"\("),
        ("stream_level", r"[a-z]"),
    )
}
_BY_FIRST: dict[str, tuple[tuple[str, re.Pattern[str]], ...]] = {}


def _entries(text: str) -> tuple[tuple[str, re.Pattern[str]], ...]:
    """The entries of _PREFIXES, in order, that a text starting like ``text`` can match."""
    first = text[:1]
    found = _BY_FIRST.get(first)
    if found is None:
        found = tuple((name, pattern.compiled) for name, pattern in _PREFIXES if first and _FIRST_CHARS[name].match(first))
        if first.isascii():  # a bounded table: 128 entries at most
            _BY_FIRST[first] = found
    return found


# The prefixes a program's logger writes (see Stripped.program); the others are collectors'.
_PROGRAM_PREFIXES = frozenset({"ray", "torch_rank", "sglang", "sglang_gpu", "vllm_proc", "vllm_level", "pylogging", "logger_location", "pipe_fields", "llama_cpp_log"})


def strip_ansi(text: str) -> str:
    """Remove colour codes, whether real escape bytes or pasted caret text."""
    if "\x1b" not in text and "^[" not in text:
        return text
    return _ANSI_RE.sub("", text)


def _as_shown(raw: str) -> str:
    """One raw line as a terminal shows it: no colour codes, no carriage return, no newline."""
    text = strip_ansi(raw)
    if text.endswith("^M"):
        # A carriage return shown as caret text (cat -v, an editor) and pasted as such.
        text = text[:-2]
    if "\r" in text:
        # tqdm redraws with CR; what a terminal shows is the last non-empty segment.
        segments = [s for s in text.split("\r") if s.strip()]
        text = segments[-1] if segments else ""
    return text.rstrip("\n")


def split_prefix(raw: str) -> Stripped:
    """Strip every known prefix from one raw line; return the message with its rank and time."""
    text = _as_shown(raw)
    ranks: list[str] = []
    ts: str | None = None
    svc: str | None = None
    system: str | None = None
    node: str | None = None
    node_source: str | None = None
    container: str | None = None
    program = False
    for _ in range(8):
        for name, pattern in _entries(text):
            m = pattern.match(text)
            if not m or m.end() == 0:
                continue
            groups = m.groupdict()
            if name == "ray" and (not (groups.get("pid") or groups.get("ip")) or (groups.get("rname") and not groups.get("ip"))):
                continue  # "(Process) " is no Ray prefix; a named process without ip= is vLLM's own tag (below)
            if name in _PROGRAM_PREFIXES:
                program = True
            if name == "kubectl":
                node, node_source = node or groups["pod"], node_source or "kubectl --prefix"
                container = container or groups["container"]
            elif name == "srun":
                if node is not None or ts is not None or ranks:
                    continue  # srun's task id is the outermost prefix; "0: " deeper in is message text
                node, node_source = f"task{int(groups['task'])}", "srun -l"
            elif name == "ray":
                if groups.get("ip"):
                    node, node_source = node or groups["ip"], node_source or "ray prefix"
                if groups.get("pid"):
                    ranks.append(f"pid{groups['pid']}")
            elif name == "docker":
                svc = groups["svc"]
            elif name == "torch_rank":
                ranks.append(groups["rank"])
            elif name in ("sglang", "logger_location"):
                # A location tag's rank tags are SGLang's style, but other loggers print them too: no system then.
                ts = ts or groups.get("ts")
                tag = _sglang_rank(groups["tags"])
                if tag:
                    ranks.append(tag)
                    system = system or ("sglang" if name == "sglang" else None)
            elif name == "sglang_gpu":
                ranks.append(f"gpu{groups['gpu']}")
            elif name in ("vllm_proc", "vllm_level"):
                system = system or "vllm"
            if name == "vllm_proc":
                ip = _IP_ATTR.search(groups["attrs"])
                if ip and node is None:
                    node, node_source = ip.group(1), "ray prefix"
                tag = _vllm_proc_rank(groups["name"], groups["attrs"])
                if tag:
                    ranks.append(tag)
            elif groups.get("ts"):
                ts = ts or groups["ts"]
            text = text[m.end() :]
            break
        else:
            break
    rank = ranks[0] if ranks else None
    if svc and rank:
        rank = f"{svc}/{rank}"
    if node and rank and node_source != "ray prefix":
        # Ranks of different nodes share tags (TP0 on every node): the node keeps them apart. A line
        # with the node prefix alone (a traceback line) keeps no rank, so that it joins the record of
        # the line above it, as an unprefixed continuation line does. Ray's worker tags keep their pid
        # rank (pids already differ), as before node identity existed.
        rank = f"{node}/{rank}"
    return Stripped(msg=text, rank=rank, ts=ts, system=system, node=node, node_source=node_source, container=container, program=program)

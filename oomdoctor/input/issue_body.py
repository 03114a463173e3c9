"""Bug-report bodies (GitHub/GitLab markdown, or an issue's JSON export) as diagnose input.

The log is what the reporter pasted in fenced code blocks, ``<details>`` blocks, quoted blocks and
indented code; prose is not evidence. The body is turned into a text of the same number of lines in
which every prose line is blank, so the scanner reads only pasted machine output and every citation
still points at the body's own line. The launch flags, GPU, engine version and model the reporter
states in prose (or in a shell command they typed) become *reported* facts, marked as such and
weaker than anything the log says. Pure functions, no I/O.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from oomdoctor.base.oom_words import failure_pattern

if TYPE_CHECKING:
    from typing import Any

# --- recognising a body --------------------------------------------------------------------------
_FENCE_RE = re.compile(r"^\s{0,3}(```+|~~~+)")
_DETAILS_OPEN_RE = re.compile(r"<details\b", re.I)
_DETAILS_CLOSE_RE = re.compile(r"</details\s*>", re.I)
_SUMMARY_RE = re.compile(r"</?summary\b[^>]*>", re.I)
_HEADING_RE = re.compile(r"^\s{0,3}#{1,6}\s+\S")
_QUOTE_RE = re.compile(r"^\s{0,3}>\s?")
# A line that looks like machine output even when it is not fenced (a log pasted bare into the body).
_LOGLIKE_RE = re.compile(
    r"^\s*(?:\[?\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}|\[\d{2}:\d{2}:\d{2}|\((?:\w+ )?\w*pid=\d+|(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)\b"
    r"|Traceback \(most recent call last\)|\s*File \"|[\w.]*(?:Error|Exception)\b:|torch\.|\[rank\d+\]:|\[TP\d+\]|\d+%\|)"
)
# Machine output that is not a log line: nvidia-smi's table (its borders, its GPU and process rows and
# the lines naming MiB) and CSV queries, and an environment report's lines (collect_env, check_env).
# A reporter pastes them bare or quoted as often as fenced; a markdown table of their own has none of these words.
_MACHINE_RE = re.compile(
    r"^\s*(?:[+|][-=+]{8,}[+|]?\s*$|\|.*(?:NVIDIA-SMI|MiB|Persistence-M|Processes:|Bus-Id|Process name|Memory-Usage|No running processes)|\|\s+\d+\s+\S"
    r"|pid, process_name|\d+, [^,]+, \d+ MiB\s*$|(?:index, )?name, memory\."
    r"|(?:PyTorch version|CUDA runtime version|CUDA used to build PyTorch|Nvidia driver version|CUDA Driver Version|GPU models and configuration|vLLM Version|PyTorch|sglang|vllm)\s*:"
    r"|GPU \d+(?:,\d+)*\s*:\s*\S|\[pip3\] |(?:export\s+)?(?:CUDA|NVIDIA)_VISIBLE_DEVICES=)"
)


_CLAIM_RE = re.compile(r"(?i)\bout of memory\b|\bOOM\b|OutOfMemory|\bOOMKilled\b|memory (?:error|issue|leak)|not enough memory|显存")


def claims_oom(text: str) -> bool:
    """The reporter says it ran out of memory in their own words (prose or title), not in pasted output."""
    log = log_lines(text)
    prose = "\n".join(line for line, kept in zip(text.splitlines(), log, strict=False) if not kept.strip())
    return bool(_CLAIM_RE.search(prose))


def looks_like_issue(text: str) -> bool:
    """A markdown bug report rather than a raw log: fenced blocks or <details>, and prose around them."""
    head = text[:65536]
    lines = head.splitlines()
    fences = sum(1 for ln in lines if _FENCE_RE.match(ln))
    details = bool(_DETAILS_OPEN_RE.search(head))
    if fences < 2 and not details:
        return False
    prose = sum(1 for ln in lines if _is_prose(ln))
    return prose >= 2


def _is_prose(line: str) -> bool:
    s = line.strip()
    if not s or _FENCE_RE.match(line) or _LOGLIKE_RE.match(line) or _MACHINE_RE.match(line):
        return False
    return bool(_HEADING_RE.match(line)) or (len(s.split()) >= 4 and not s.startswith(("at ", "File ")))


# --- an issue's JSON export ------------------------------------------------------------------------
# The first line of oomdoctor's own triage reply (oomdoctor.commands.triage.MARKER): its flags are
# oomdoctor's advice, not the reporter's evidence.
TRIAGE_MARKER = "<!-- oomdoctor-triage"


def thread_markdown(data: Any) -> str | None:
    """The markdown of an issue and its comments, oldest first, from a GitHub REST export or event payload.

    Accepts an issue object ({"title", "body", "comments": [...]}) with optional embedded comments, a
    webhook payload ({"issue": {...}, "comment": {...}}), or a list of issue/comment objects. Comments
    that carry oomdoctor's triage marker are left out.
    """
    parts: list[str] = []

    def add(obj: Any) -> None:
        if isinstance(obj, dict) and isinstance(obj.get("body"), str) and (not parts or TRIAGE_MARKER not in obj["body"]):
            parts.append(obj["body"])

    if isinstance(data, dict) and isinstance(data.get("issue"), dict):
        add(data["issue"])
        comments = data["issue"].get("comments")
        if isinstance(comments, list):
            for c in comments:
                add(c)
        add(data.get("comment"))
    elif isinstance(data, dict) and "body" in data and ("title" in data or "number" in data):
        add(data)
        comments = data.get("comments")
        if isinstance(comments, list):
            for c in comments:
                add(c)
    elif isinstance(data, list) and data and all(isinstance(x, dict) and "body" in x for x in data):
        for x in data:
            add(x)
    else:
        return None
    return "\n\n".join(p.replace("\r\n", "\n") for p in parts)


def is_issue_json(text: str) -> bool:
    s = text.lstrip()[:1]
    if s not in ("{", "["):
        return False
    try:
        return thread_markdown(json.loads(text)) is not None
    except (ValueError, RecursionError):
        return False


# --- the body's log, in place ----------------------------------------------------------------------
def log_lines(text: str) -> list[str]:
    """The body with every prose line blanked: same line count, machine output kept where it stands."""
    out: list[str] = []
    in_fence: str | None = None
    in_details = 0
    for line in text.splitlines():
        m = _FENCE_RE.match(line)
        if in_fence is not None:
            if m and m.group(1)[0] == in_fence[0] and len(m.group(1)) >= len(in_fence) and not line.strip()[len(m.group(1)) :].strip():
                in_fence = None
                out.append("")
            else:
                out.append(line)
            continue
        if m:
            in_fence = m.group(1)
            out.append("")
            continue
        if _DETAILS_OPEN_RE.search(line):
            in_details += 1
        if _DETAILS_CLOSE_RE.search(line):
            in_details = max(in_details - 1, 0)
            out.append("")
            continue
        if _SUMMARY_RE.search(line):
            out.append("")  # a <summary> is the fold's title, written by the reporter
            continue
        stripped = re.sub(r"<details[^>]*>", "", line, flags=re.I)
        if in_details and stripped.strip() and not _HEADING_RE.match(stripped) and not _is_prose(stripped):
            out.append(stripped)  # a log pasted in <details> without a fence
            continue
        if _QUOTE_RE.match(line) and (_LOGLIKE_RE.match(_QUOTE_RE.sub("", line)) or _MACHINE_RE.match(_QUOTE_RE.sub("", line))):
            out.append(line)  # the prefix stripper removes the quote marker
            continue
        if line.startswith("    ") and not _is_prose(line):
            out.append(line)  # indented code
            continue
        if (_LOGLIKE_RE.match(line) or _MACHINE_RE.match(line)) and not _is_prose(line):
            out.append(line)  # a bare pasted log line, nvidia-smi or environment output
            continue
        code = _inline_log(line)
        out.append(code)  # an error quoted in inline code (`RuntimeError: ...`), else nothing
    if in_fence is not None and any(x.strip() for x in out[-3:]):
        # The body ends inside a code block: the paste (or its stored copy) was cut.
        out.append(CUT_MARK)
    return out


# Appended after a body that ends inside an open code block; the record parser reads it as a cut mark.
CUT_MARK = "[... cut: the body ends inside a code block ...]"
# Inline code that is machine output: an error line quoted in a sentence or a multi-line backtick span.
_INLINE_RE = re.compile(r"`([^`]{12,})`?")
_ERRORISH_RE = re.compile("(?i)" + failure_pattern(r"\b[\w.]*(?:Error|Exception)\b:", r"KV cache", r"Traceback", r"Killed", r"SIGKILL"))


def _inline_log(line: str) -> str:
    """The inline code of a prose line when it quotes machine output, else an empty line."""
    spans = [m.group(1) for m in _INLINE_RE.finditer(line)]
    if not spans and line.lstrip().startswith("`"):
        spans = [line.lstrip().lstrip("`")]
    quoted = [s for s in spans if _ERRORISH_RE.search(s) and not s.lstrip().startswith(("python ", "vllm ", "sglang ", "docker ", "--"))]
    return " ".join(quoted)


# --- what the reporter states ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Reported:
    """A fact the reporter stated in prose or in a command they typed, with the body line it is on."""

    name: str
    value: Any
    line: int
    text: str


@dataclass
class IssueEvidence:
    log: list[str]
    reported: list[Reported] = field(default_factory=list)


_FLAG_PATTERNS: tuple[tuple[str, re.Pattern[str], type], ...] = (
    ("mem_fraction_static", re.compile(r"--mem[-_]fraction[-_]static[= ]+([0-9.]+)"), float),
    ("gpu_memory_utilization", re.compile(r"--gpu[-_]memory[-_]utilization[= ]+([0-9.]+)|gpu_memory_utilization\s*=\s*([0-9.]+)"), float),
    ("tp_size", re.compile(r"(?:--tp(?:[-_]size)?|--tensor[-_]parallel[-_]size|-tp)[= ]+(\d+)|tensor_parallel_size\s*=\s*(\d+)"), int),
    ("max_model_len", re.compile(r"--max[-_]model[-_]len[= ]+(\d+)|max_model_len\s*=\s*(\d+)"), int),
    ("context_length", re.compile(r"--context[-_]length[= ]+(\d+)"), int),
    ("chunked_prefill_size", re.compile(r"--chunked[-_]prefill[-_]size[= ]+(\d+)"), int),
    ("max_num_seqs", re.compile(r"--max[-_]num[-_]seqs[= ]+(\d+)"), int),
    ("model_path", re.compile(r"--model(?:[-_]path)?[= ]+([\w./-]+)|\bLLM\(\s*model\s*=\s*[\"']([\w./-]+)"), str),
)
_VERSION_RE = re.compile(r"\b(sglang|vllm|vllm[-_]ascend|torch|transformers)\s*(?:version\s*[:=]?\s*|==\s*|v)?(\d+\.\d+(?:\.\d+)?(?:\.post\d+|rc\d+|\.dev\d+)?)", re.I)
_GPU_RE = re.compile(
    r"\b(?:(\d+)\s*[x\u00d7*]\s*)?(?:NVIDIA\s+)?(H100|H200|H20|H800|A100|A800|A10G?|A6000|L40S?|L4|L20|RTX\s*\d{4}(?:\s*Ti)?|V100|T4|MI300X?|MI250X?|B200|GB200|910B)"
    r"(?:[\s-]*(?:SXM\d?|PCIe|NVL))?(?:[\s-]*(\d+)\s*G(?:i)?B)?",
    re.I,
)


def reported_facts(text: str, log: list[str]) -> list[Reported]:
    """Flags, GPU, versions and model the reporter states; a value the pasted log also states is the log's."""
    found: list[Reported] = []
    seen: set[str] = set()
    for number, line in enumerate(text.splitlines(), 1):
        for name, pattern, kind in _FLAG_PATTERNS:
            if name in seen:
                continue
            m = pattern.search(line)
            if m:
                raw = next(g for g in m.groups() if g is not None)
                try:
                    found.append(Reported(name, kind(raw), number, line.strip()[:200]))
                    seen.add(name)
                except ValueError:
                    continue
        for m in _VERSION_RE.finditer(line):
            name = f"{m.group(1).lower().replace('-', '_')}_version"
            if name not in seen:
                found.append(Reported(name, m.group(2), number, line.strip()[:200]))
                seen.add(name)
        if "gpu_name" not in seen and not log[number - 1].strip():
            g = _GPU_RE.search(line)
            if g:
                count = int(g.group(1)) if g.group(1) else None
                name = re.sub(r"\s+", " ", g.group(2)).upper() + (f"-{g.group(3)}GB" if g.group(3) else "")
                found.append(Reported("gpu_name", name, number, line.strip()[:200]))
                seen.add("gpu_name")
                if count:
                    found.append(Reported("gpu_count", count, number, line.strip()[:200]))
    return found


def read(text: str) -> IssueEvidence:
    log = log_lines(text)
    return IssueEvidence(log=log, reported=reported_facts(text, log))

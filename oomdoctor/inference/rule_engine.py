"""Rules as data: loading and validating ``rules/*.toml`` and evaluating their conditions.

A condition combines named facts with all / any / not and comparisons; nothing in a rule file is
ever evaluated as code. Evaluation is three-valued: a comparison on a fact that is absent is
*unknown*, so a rule that cannot be decided is reported as not evaluated, with the facts it lacked.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from oomdoctor.base import built_in
from oomdoctor.base.errors import RuleError
from oomdoctor.base.limits import nesting_depth
from oomdoctor.inference import catalogue, classes

if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

SYSTEMS = ("sglang", "vllm", "torch", "any")
SEVERITIES = ("error", "warning", "info")
OPERATORS = ("gt", "ge", "lt", "le", "eq", "ne", "in", "present")
_REQUIRED = ("id", "title", "class", "systems", "severity", "confidence", "priority", "when", "message", "advice", "docs", "references")
_DOC_KEYS = ("what", "why", "example", "fix")


class Rule(NamedTuple):
    """One validated rule file."""

    id: str
    title: str
    klass: str
    systems: tuple[str, ...]
    severity: str
    confidence: float
    priority: int
    when: dict[str, Any]
    message: str
    advice: tuple[str, ...]
    docs: dict[str, str]
    references: tuple[str, ...]
    path: str = ""
    negative_example: str | None = None

    def facts_used(self) -> set[str]:
        used: set[str] = set()
        _collect_facts(self.when, used)
        return used


@dataclass
class Evaluation:
    """The outcome of one rule on one set of facts."""

    result: bool | None
    missing: set[str] = field(default_factory=set)
    used: set[str] = field(default_factory=set)


def _collect_facts(node: dict[str, Any], out: set[str]) -> None:
    for key in ("all", "any"):
        if key in node:
            for child in node[key]:
                _collect_facts(child, out)
    if "not" in node:
        _collect_facts(node["not"], out)
    if "fact" in node:
        out.add(node["fact"])
        for op in OPERATORS:
            rhs = node.get(op)
            if isinstance(rhs, dict) and "fact" in rhs:
                out.add(rhs["fact"])


def _fail(path: str, where: str, problem: str) -> RuleError:
    return RuleError(f"{path}: {where}: {problem}")


def _check_condition(node: Any, path: str, where: str) -> None:
    if not isinstance(node, dict):
        raise _fail(path, where, "a condition must be a table, e.g. { fact = \"torch_oom\", eq = true }")
    combinators = [k for k in ("all", "any", "not") if k in node]
    if combinators:
        if len(node) != 1:
            raise _fail(path, where, f"'{combinators[0]}' must stand alone in its table; found keys {sorted(node)}")
        key = combinators[0]
        if key == "not":
            _check_condition(node["not"], path, f"{where}.not")
            return
        children = node[key]
        if not isinstance(children, list) or not children:
            raise _fail(path, where, f"'{key}' takes a non-empty list of conditions, e.g. {key} = [{{ fact = \"torch_oom\", eq = true }}]")
        for i, child in enumerate(children):
            _check_condition(child, path, f"{where}.{key}[{i}]")
        return
    if "fact" not in node:
        raise _fail(path, where, "write either all/any/not or a comparison: { fact = \"NAME\", <op> = VALUE }")
    if not isinstance(node["fact"], str) or not node["fact"]:
        raise _fail(path, where, "'fact' must be a fact name (a string)")
    ops = [k for k in node if k != "fact"]
    if len(ops) != 1 or ops[0] not in OPERATORS:
        raise _fail(path, where, f"a comparison needs exactly one operator of {', '.join(OPERATORS)}; found {ops or 'none'}")
    op = ops[0]
    rhs = node[op]
    if isinstance(rhs, dict) and (set(rhs) != {"fact"} or not isinstance(rhs["fact"], str)):
        raise _fail(path, where, "a right-hand side table may only name another fact: { fact = \"NAME\" }")
    if op == "in" and not isinstance(rhs, list):
        raise _fail(path, where, "'in' takes a list, e.g. in = [\"forward\", \"unknown\"]")
    if op == "present" and not isinstance(rhs, bool):
        raise _fail(path, where, "'present' takes true or false")
    if op in ("gt", "ge", "lt", "le") and not (isinstance(rhs, (int, float)) and not isinstance(rhs, bool)) and not isinstance(rhs, dict):
        raise _fail(path, where, f"'{op}' compares numbers; write a number or {{ fact = \"NAME\" }}")


_PLACEHOLDER_RE = re.compile(r"\{(\w+)\}")


def _check_fact_names(names: list[str], path: str, where: str) -> None:
    """Every fact a rule names must be declared in the catalogue; a typo would never fire."""
    known = catalogue.load()
    for name in names:
        if name not in known or known.facts[name].internal:
            hint = known.suggest(name)
            did_you_mean = f"; did you mean {hint!r}?" if hint else "; see 'oomdoctor facts list'"
            raise _fail(path, where, f"unknown fact {name!r}{did_you_mean}")


def parse_rule(data: dict[str, Any], path: str, known_advice: Iterable[str] | None = None) -> Rule:
    """Validate one rule's TOML data; raise RuleError naming file, field and what to write."""
    stem = os.path.splitext(os.path.basename(path))[0]
    for key in _REQUIRED:
        if key not in data:
            raise _fail(path, f"field '{key}'", "missing; every rule needs " + ", ".join(_REQUIRED))
    unknown = set(data) - set(_REQUIRED) - {"negative_example"}
    if unknown:
        raise _fail(path, f"field '{sorted(unknown)[0]}'", "unknown field; allowed: " + ", ".join((*_REQUIRED, "negative_example")))
    if data["id"] != stem:
        raise _fail(path, "field 'id'", f"must equal the file name without .toml: id = \"{stem}\"")
    if not isinstance(data["title"], str) or not data["title"].strip():
        raise _fail(path, "field 'title'", "write a short title string")
    class_names = classes.load().names()
    if data["class"] not in class_names:
        raise _fail(path, "field 'class'", f"{data['class']!r} is not a class; write one of: {', '.join(class_names)}")
    systems = data["systems"]
    if not isinstance(systems, list) or not systems or any(s not in SYSTEMS for s in systems):
        raise _fail(path, "field 'systems'", f"write a list drawn from {list(SYSTEMS)}, e.g. systems = [\"sglang\"]")
    if data["severity"] not in SEVERITIES:
        raise _fail(path, "field 'severity'", f"write one of {', '.join(SEVERITIES)}")
    conf = data["confidence"]
    if not isinstance(conf, (int, float)) or isinstance(conf, bool) or not 0.0 <= conf <= 1.0:
        raise _fail(path, "field 'confidence'", "write a number from 0.0 to 1.0")
    if not isinstance(data["priority"], int) or isinstance(data["priority"], bool):
        raise _fail(path, "field 'priority'", "write an integer; lower means its fix comes first")
    if not isinstance(data["message"], str) or not data["message"].strip():
        raise _fail(path, "field 'message'", "write a one-sentence message; {fact_name} placeholders name facts")
    advice = data["advice"]
    if not isinstance(advice, list) or any(not isinstance(a, str) for a in advice):
        raise _fail(path, "field 'advice'", "write a list of advice ids, e.g. advice = [\"raise-mem-fraction-static\"]")
    if known_advice is not None:
        known = set(known_advice)
        for a in advice:
            if a not in known:
                raise _fail(path, "field 'advice'", f"unknown advice id {a!r}; known: {', '.join(sorted(known))}")
    docs = data["docs"]
    if not isinstance(docs, dict) or any(not isinstance(docs.get(k), str) or not str(docs.get(k)).strip() for k in _DOC_KEYS):
        raise _fail(path, "table 'docs'", "write [docs] with what, why, example and fix, each a non-empty string")
    refs = data["references"]
    if not isinstance(refs, list) or any(not isinstance(r, str) for r in refs):
        raise _fail(path, "field 'references'", "write a list of strings (URLs or document sections)")
    _check_condition(data["when"], path, "table 'when'")
    used: set[str] = set()
    _collect_facts(data["when"], used)
    _check_fact_names(sorted(used), path, "table 'when'")
    _check_fact_names(sorted(set(_PLACEHOLDER_RE.findall(data["message"]))), path, "field 'message'")
    negative = data.get("negative_example")
    if negative is not None and not isinstance(negative, str):
        raise _fail(path, "field 'negative_example'", "write the path of the near-miss fixture")
    return Rule(
        id=data["id"],
        title=data["title"],
        klass=data["class"],
        systems=tuple(systems),
        severity=data["severity"],
        confidence=float(conf),
        priority=data["priority"],
        when=data["when"],
        message=data["message"],
        advice=tuple(advice),
        docs={k: docs[k] for k in _DOC_KEYS},
        references=tuple(refs),
        path=path,
        negative_example=negative,
    )


# Input caps for rule files: a rule is a short file, and its conditions are walked recursively
# (validation, fact names, evaluation), so nesting deeper than any real rule is refused up front.
MAX_RULE_FILE_BYTES = 256 * 1024
MAX_RULE_DEPTH = 32


_nesting_depth = nesting_depth


def load_rule_file(path: str | os.PathLike[str], known_advice: Iterable[str] | None = None) -> Rule:
    path = os.fspath(path)
    return _parse_rule_bytes(path, _read_rule_bytes(path), known_advice)


def _read_rule_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_RULE_FILE_BYTES + 1)
    except OSError as exc:
        raise RuleError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if len(raw) > MAX_RULE_FILE_BYTES:
        raise RuleError(f"{path}: larger than {MAX_RULE_FILE_BYTES >> 10} KiB; a rule is a short file")
    return raw


def _parse_rule_bytes(path: str, raw: bytes, known_advice: Iterable[str] | None) -> Rule:
    from oomdoctor.base.toml_data import tomllib  # only a user's rule file is TOML at run time

    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise RuleError(f"{path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise RuleError(f"{path}: not valid TOML ({exc})") from None
    except RecursionError:
        raise RuleError(f"{path}: nested deeper than a rule can be (at most {MAX_RULE_DEPTH} levels of tables and arrays)") from None
    if _nesting_depth(data, MAX_RULE_DEPTH) > MAX_RULE_DEPTH:
        raise RuleError(f"{path}: nested deeper than a rule can be (at most {MAX_RULE_DEPTH} levels of tables and arrays)")
    return parse_rule(data, str(path), known_advice)


def _toml_files(directory: str) -> list[str]:
    """The ``*.toml`` files of a directory, by name."""
    with os.scandir(directory) as entries:
        return sorted(e.path for e in entries if e.name.endswith(".toml") and e.is_file())


def builtin_rule_paths() -> list[str]:
    """The rule files shipped with the package (``rules/``, installed as ``oomdoctor.rules``), by name."""
    return [os.path.join(built_in.rules_dir(), name) for name in sorted(built_in.rules())]


def load_rules(extra_dirs: Iterable[str] = (), known_advice: Iterable[str] | None = None, builtin: bool = True) -> list[Rule]:
    """The shipped catalogue plus every ``*.toml`` in the user's --rules directories.

    The shipped rules come parsed from data/built_in.json (their TOML, parsed once by
    tools/built_in_data.py); they are validated here like the user's, so a bad rule fails at its load.
    """
    for d in extra_dirs:
        if not os.path.isdir(d):
            raise RuleError(f"{d}: --rules takes a directory of *.toml rule files")
    advice_ids = None if known_advice is None else tuple(sorted(known_advice))
    loaded: list[Rule] = []
    if builtin:
        shipped = built_in.rules()
        folder = built_in.rules_dir()  # one stat, not one per rule
        loaded.extend(parse_rule(shipped[name], os.path.join(folder, name), advice_ids) for name in sorted(shipped))
    for d in extra_dirs:
        loaded.extend(_parse_rule_bytes(p, _read_rule_bytes(p), advice_ids) for p in _toml_files(d))
    seen: dict[str, str] = {}
    for rule in loaded:
        if rule.id in seen:
            raise RuleError(f"{rule.path}: field 'id': {rule.id!r} is already defined in {seen[rule.id]}; ids are unique")
        seen[rule.id] = rule.path
    return loaded


# --- evaluation ---------------------------------------------------------------------------------


def _compare(op: str, left: Any, right: Any) -> bool:
    try:
        if op == "eq":
            return left == right
        if op == "ne":
            return left != right
        if op == "in":
            return left in right
        if op == "gt":
            return left > right
        if op == "ge":
            return left >= right
        if op == "lt":
            return left < right
        if op == "le":
            return left <= right
    except TypeError:
        return False
    return False


def evaluate(node: dict[str, Any], facts: dict[str, Any]) -> Evaluation:
    """Three-valued evaluation of a condition tree over facts."""
    if "all" in node:
        parts = [evaluate(c, facts) for c in node["all"]]
        ev = Evaluation(None)
        for p in parts:
            ev.used |= p.used
        if any(p.result is False for p in parts):
            ev.result = False
        elif all(p.result is True for p in parts):
            ev.result = True
        else:
            for p in parts:
                ev.missing |= p.missing
        return ev
    if "any" in node:
        parts = [evaluate(c, facts) for c in node["any"]]
        ev = Evaluation(None)
        if any(p.result is True for p in parts):
            ev.result = True
            for p in parts:
                if p.result is True:
                    ev.used |= p.used
        elif all(p.result is False for p in parts):
            ev.result = False
        else:
            for p in parts:
                ev.missing |= p.missing
                ev.used |= p.used
        return ev
    if "not" in node:
        inner = evaluate(node["not"], facts)
        return Evaluation(None if inner.result is None else not inner.result, inner.missing, inner.used)
    name = node["fact"]
    op = next(k for k in node if k != "fact")
    rhs = node[op]
    if op == "present":
        return Evaluation((name in facts) == rhs, set(), {name} if name in facts else set())
    if name not in facts:
        return Evaluation(None, {name})
    if isinstance(rhs, dict):
        other = rhs["fact"]
        if other not in facts:
            return Evaluation(None, {other})
        return Evaluation(_compare(op, facts[name], facts[other]), set(), {name, other})
    return Evaluation(_compare(op, facts[name], rhs), set(), {name})

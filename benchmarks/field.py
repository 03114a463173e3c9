"""Score oomdoctor on the field corpus (tests/fixtures/field/): real logs pasted in public threads.

    python benchmarks/field.py [--details] [--dir tests/fixtures/field]

Prints accuracy (the verdict class equals the label; `not_oom` means the verdict `none`), the
confident-wrong count (a wrong class at confidence >= 0.7), a per-class table, and how the
differential of the `unknown_oom` verdicts does: the label among its first two candidates (cases
whose label names a class), the same where the evidence put it there (its likelihood above the third
candidate's: equal odds are listed in a fixed order, phases.toml's likely class, then each class's share of a server's life, and a
label placed second by that order alone is not counted), among the candidates tied for first or second
place, and any first candidate of likelihood >= 0.7 that is not the label. The corpus is a
check, not a tuning target: thresholds are argued in the code from first principles and fixtures.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from oomdoctor.api import diagnose  # noqa: E402

CONFIDENT = 0.7


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=str(REPO / "tests" / "fixtures" / "field"))
    ap.add_argument("--details", action="store_true", help="one line per case")
    args = ap.parse_args()
    cases = sorted(Path(args.dir).glob("*.toml"))
    right = 0
    confident_wrong: list[str] = []
    per_class: dict[str, Counter[str]] = defaultdict(Counter)
    incomplete_right = incomplete_total = 0
    diff_total = diff_top_two = diff_tied = diff_by_evidence = 0
    diff_confident_wrong: list[str] = []
    for meta_path in cases:
        meta = tomllib.loads(meta_path.read_text())
        log = meta_path.with_suffix(".log")
        want = "none" if meta["label"] == "not_oom" else meta["label"]
        differential: list[dict] = []
        try:
            d = diagnose([str(log)])
            got, conf, evidence = d.verdict_class, d.verdict_confidence, d.evidence.status
            differential = d.findings[0].extra.get("differential", []) if d.findings else []
        except Exception as exc:  # noqa: BLE001 - a crash is scored as a wrong answer and shown
            got, conf, evidence = f"error:{type(exc).__name__}", 0.0, "?"
        if got == "unknown_oom" and differential:
            if differential[0]["likelihood"] >= CONFIDENT and differential[0]["class"] != want:
                diff_confident_wrong.append(f"{meta_path.stem}: {differential[0]['class']} at {differential[0]['likelihood']:.2f}, label {want}")
            if want not in ("unknown_oom", "none"):
                diff_total += 1
                top_two = want in [c["class"] for c in differential[:2]]
                diff_top_two += top_two
                # In the first two by the evidence: above every candidate past the second, not level with one.
                third = differential[2]["likelihood"] if len(differential) > 2 else -1.0
                diff_by_evidence += top_two and next(c["likelihood"] for c in differential if c["class"] == want) > third
                # Candidates tied with the second are as likely as it: a tie is not an order.
                second = differential[min(1, len(differential) - 1)]["likelihood"]
                diff_tied += want in [c["class"] for c in differential if c["likelihood"] >= second]
        ok = got == want
        right += ok
        per_class[want]["total"] += 1
        per_class[want]["right"] += ok
        if meta.get("cut_at_end") or meta.get("damage"):
            incomplete_total += 1
            incomplete_right += ok
        if not ok and conf >= CONFIDENT:
            confident_wrong.append(f"{meta_path.stem}: {got} at {conf:.2f}, label {want}")
        if args.details:
            mark = "ok " if ok else "BAD"
            print(f"{mark} {meta_path.stem:60} label={want:20} got={got:20} conf={conf:.2f} evidence={evidence}")
    n = len(cases)
    print(f"field corpus: {n} cases")
    print(f"accuracy: {right}/{n} = {right / n:.2f}" if n else "accuracy: n/a")
    print(f"damaged or cut pastes: {incomplete_right}/{incomplete_total} right")
    print(f"confident wrong (wrong class at confidence >= {CONFIDENT}): {len(confident_wrong)}")
    for line in confident_wrong:
        print(f"  {line}")
    if diff_total:
        print(f"unknown_oom differential: label in the first two {diff_top_two}/{diff_total} = {diff_top_two / diff_total:.2f}; among those tied for the first two places {diff_tied}/{diff_total} = {diff_tied / diff_total:.2f}")
        print(f"unknown_oom differential: label in the first two by the evidence (above the third, not by the order of a tie) {diff_by_evidence}/{diff_total} = {diff_by_evidence / diff_total:.2f}")
    print(f"differential first at likelihood >= {CONFIDENT} and not the label: {len(diff_confident_wrong)}")
    for line in diff_confident_wrong:
        print(f"  {line}")
    print(f"{'label':22} {'cases':>5} {'right':>5}")
    for label in sorted(per_class):
        c = per_class[label]
        print(f"{label:22} {c['total']:5} {c['right']:5}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

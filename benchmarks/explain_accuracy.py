"""How often does `cudadoctor explain` name the right cause? Top-1/top-3 on sets of real reports.

    python benchmarks/explain_accuracy.py                         # every set under tests/data
    python benchmarks/explain_accuracy.py tests/data/explain_unseen/cases.toml --misses
    python benchmarks/explain_accuracy.py --markdown FILE...      # per-id tables for RESULTS.md

A set is a TOML file of [[case]] (id, url, text) or a folder of such files with `expect` per file
(tests/data/explain_corpus). Scored offline, on the text alone (no facts of this machine):

- answer: the ranked causes explain prints: its matches, then, when no match is strong, its
  low-confidence guesses (rank.answer_ids). This is the headline figure.
- strict (--strict): its matches only; "not recognised" is a miss (how issue 6 scored).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from explain_sets import DATA, cases, score  # noqa: E402  (the tests' loader and scorer: one way to read a set)

SETS = {
    "unseen (blind, issue 17)": DATA / "explain_unseen/cases.toml",
    "fresh (final unseen check, issue 17)": DATA / "explain_fresh/cases.toml",
    "fresh2 (round 3's fresh set, issue 17)": DATA / "explain_fresh2/cases.toml",
    "fresh3 (round 4's blind set, scored; in-sample since)": DATA / "explain_fresh3/cases.toml",
    "fresh4 (second unseen check of round 4, scored; in-sample since)": DATA / "explain_fresh4/cases.toml",
    "fresh5 (round 6's blind set, scored once at r7-frozen; in-sample since)": DATA / "explain_fresh5/cases.toml",
    "fresh6 (round 8's blind set, scored at r8-before and r8-frozen; in-sample since)": DATA / "explain_fresh6/cases.toml",
    "fresh7 (round 9's blind set, scored at r8-before, r8-frozen and r9-before; in-sample since)": DATA / "explain_fresh7/cases.toml",
    "fresh8 (round 10's blind set, scored at r10-before and r10-frozen; in-sample since)": DATA / "explain_fresh8/cases.toml",
    "fresh9 (round 11's blind sample of forum threads, scored at r11-before; in-sample since)": DATA / "explain_fresh9/cases.toml",
    "fresh10 (round 12's blind set, scored at r12-before; in-sample since)": DATA / "explain_fresh10/cases.toml",
    "fresh11 (round 13's blind set, scored at r13-before and r13-frozen; in-sample since)": DATA / "explain_fresh11/cases.toml",
    "fresh12 (round 14's blind set, scored at r14-before; in-sample since)": DATA / "explain_fresh12/cases.toml",
    "fresh13 (round 15's blind set, scored at r15-before; in-sample since)": DATA / "explain_fresh13/cases.toml",
    "fresh14 (round 16's blind set, scored at r16-before; not tuned on)": DATA / "explain_fresh14/cases.toml",
    "dev3 (round 4's tuning set, issue 17)": DATA / "explain_dev3/cases.toml",
    "dev4 (round 4's second tuning set, issue 17)": DATA / "explain_dev4/cases.toml",
    "dev5 (round 6's tuning set, issue 17)": DATA / "explain_dev5/cases.toml",
    "dev6 (round 7's tuning set, issue 17)": DATA / "explain_dev6/cases.toml",
    "heldout (issue 6, tuned on since)": DATA / "explain_heldout/cases.toml",
    "dev (tuning set, issue 17)": DATA / "explain_dev/cases.toml",
    "dev2 (round 3's tuning set, issue 17)": DATA / "explain_dev2/cases.toml",
    "corpus (in-sample)": DATA / "explain_corpus",
}


def pct(a: int, n: int) -> str:
    return f"{a}/{n} = {100.0 * a / n:.1f}%" if n else "0/0"


def markdown(r: dict) -> str:
    lines = ["| id | cases | top-1 | top-3 |", "|---|---|---|---|"]
    lines += [f"| {i} | {n} | {a} | {b} |" for i, (n, a, b) in sorted(r["per"].items())]
    lines += ["", "| expected | got (top-3) | thread |", "|---|---|---|"]
    lines += [f"| {e} | {', '.join(g) or '(nothing)'} | {u} |" for e, g, u in r["misses"]]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("paths", nargs="*", type=Path)
    ap.add_argument("--misses", action="store_true", help="list every case not right at top-1")
    ap.add_argument("--markdown", action="store_true", help="per-id table and misses as markdown")
    ap.add_argument("--strict", action="store_true", help="score the matches only (no low-confidence guesses)")
    a = ap.parse_args()
    sets = {str(p): p for p in a.paths} or {k: v for k, v in SETS.items() if v.exists()}
    for p in a.paths:
        if not p.exists():
            print(f"explain_accuracy: no set at {p}", file=sys.stderr)
            return 2
    for name, path in sets.items():
        r = score(cases(path), a.strict)
        kind = "strict" if a.strict else "answer"
        print(f"{name} [{kind}]: top-1 {pct(r['top1'], r['n'])}, top-3 {pct(r['top3'], r['n'])}")
        if a.markdown:
            print(markdown(r))
        elif a.misses:
            for e, g, u in r["misses"]:
                print(f"  miss: expected {e}, got {g or '(nothing)'}  {u}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Would explain be righter if its classifier re-ordered a strong match against that wording's alternatives?
(Issue 17, session 29: tried and rejected, tests/data/explain_unseen/RESULTS.md.)

    pip install -e '.[train]'
    python benchmarks/explain_rerank_cv.py

Five folds over the blind sets (explain_unseen and explain_fresh*, every fifth set per fold); the other labelled sets
always train. Per fold the classifier is trained without the fold (scripts/build_learned.py's settings), and each
held-out report is answered twice: as explain answers (the fold's classifier only fills in when no match is strong), and
with the first strong match replaced by one of its wording's alternatives when the classifier gives that alternative a
probability higher by more than a margin. The signatures were written with all sets in view, so the absolute figures
are in-sample; the difference between the two answers is what this measures.
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "scripts")]

import build_learned  # noqa: E402
import explain_sets  # noqa: E402
from cudadoctor.explain import learned, rank  # noqa: E402

MARGINS = (0.0, 0.2, 0.4)


def main() -> int:
    rows = build_learned.rows()
    blind = sorted({r["set"] for r in rows if r["set"].startswith("explain_fresh") or r["set"] == "explain_unseen"})
    res: collections.Counter = collections.Counter()
    for k in range(5):
        held = blind[k::5]
        model, _ = build_learned.train([r for r in rows if r["set"] not in held])
        lm = learned.Model.from_dict(model)
        learned.guess = lambda text, path=None, lm=lm: lm.rank(text)  # explain's fallback uses the fold's classifier
        for r in (r for r in rows if r["set"] in held):
            base = explain_sets.answer(r["text"])
            probs = {c: p for p, c in lm.rank(r["text"])}
            strong = [m for m in rank.rank(rank.matches(explain_sets.SIGS, explain_sets.SCANNER.scan_text(r["text"])))
                      if m.strong]
            res["n"] += 1
            res["explain"] += base[:1] == [r["id"]]
            for margin in MARGINS:
                ids = base
                if strong and strong[0].alternatives:
                    first = strong[0].id
                    better = [a for a in strong[0].alternatives if probs.get(a, 0) > probs.get(first, 0) + margin]
                    if better:
                        best = max(better, key=lambda a: probs[a])
                        ids = [best] + [i for i in base if i != best]
                res[margin] += ids[:1] == [r["id"]]
        print(f"fold {k + 1}/5 done ({res['n']} reports so far)", flush=True)
    n = res["n"]
    print(f"top-1 over {n} held-out blind reports: explain {res['explain']} ({100 * res['explain'] / n:.1f}%)")
    for margin in MARGINS:
        print(f"  re-ranked by the classifier, margin {margin}: {res[margin]} ({100 * res[margin] / n:.1f}%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Would expert-written reports teach explain's classifier what real reports need? (Issue 17, session 31: tried and
rejected, tests/data/explain_unseen/RESULTS.md, round 28.)

    pip install -e '.[train]'
    python benchmarks/explain_synthetic_cv.py                                   # the classifier as trained today
    python benchmarks/explain_synthetic_cv.py benchmarks/data/explain_synthetic/sA.toml benchmarks/data/explain_synthetic/sB.toml

Five folds over the blind sets (explain_unseen and explain_fresh*, every fifth set per fold; `--exclude SET` leaves a
set out, e.g. a blind set not yet scored); the other labelled sets always train, plus any extra TOML of [[case]] id/text
given. Per fold the classifier is trained without the fold (scripts/build_learned.py's settings) and every held-out
report is answered as explain answers (the fold's classifier fills in only where no signature matches strongly).
Printed apart: the reports a signature matches strongly and those it does not (where the classifier decides). The
signatures were written with all sets in view, so the absolute figures are in-sample for them; comparing two runs
measures the classifier's training data.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "scripts")]

import build_learned  # noqa: E402
import explain_sets  # noqa: E402
from cudadoctor.explain import learned, rank  # noqa: E402


def main(argv: list) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("extra", nargs="*", help="TOML files of [[case]] id/text added to every fold's training")
    ap.add_argument("--exclude", action="append", default=[], help="a labelled set left out entirely (e.g. explain_fresh26)")
    a = ap.parse_args(argv)
    rows = [r for r in build_learned.rows() if r["set"] not in a.exclude]
    extra = []
    for p in a.extra:
        with open(p, "rb") as f:
            extra += [{"id": c["id"], "set": "extra", "n": i, "text": c["text"]} for i, c in enumerate(tomllib.load(f)["case"])]
    blind = sorted({r["set"] for r in rows if r["set"].startswith("explain_fresh") or r["set"] == "explain_unseen"})
    res: collections.Counter = collections.Counter()
    for k in range(5):
        held = blind[k::5]
        model, _ = build_learned.train([r for r in rows if r["set"] not in held] + extra)
        lm = learned.Model.from_dict(model)
        learned.guess = lambda text, path=None, lm=lm: lm.rank(text)  # explain's fallback uses the fold's classifier
        for r in (r for r in rows if r["set"] in held):
            ids = explain_sets.answer(r["text"])
            strong = any(m.strong for m in rank.matches(explain_sets.SIGS, explain_sets.SCANNER.scan_text(r["text"])))
            kind = "strong match" if strong else "no strong match"
            res[kind, "n"] += 1
            res[kind, 1] += ids[:1] == [r["id"]]
            res[kind, 3] += r["id"] in ids[:3]
        print(f"fold {k + 1}/5 done", flush=True)
    print(f"extra training reports: {len(extra)}")
    for kind in ("strong match", "no strong match", "all"):
        n = res[kind, "n"] if kind != "all" else res["strong match", "n"] + res["no strong match", "n"]
        t1 = res[kind, 1] if kind != "all" else res["strong match", 1] + res["no strong match", 1]
        t3 = res[kind, 3] if kind != "all" else res["strong match", 3] + res["no strong match", 3]
        print(f"{kind}: {n} held-out reports, top-1 {t1} ({100 * t1 / n:.1f}%), top-3 {t3} ({100 * t3 / n:.1f}%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""Train cudadoctor/explain/learned.json, the linear classifier explain consults when no signature matches strongly.

    pip install scikit-learn              # needed here only: explain reads the file with the standard library
    python scripts/build_learned.py          # train on every labelled set of real reports and write the model
    python scripts/build_learned.py --check  # exit 1 when the model was not trained on the sets as they are now
                                             # (no scikit-learn needed: a test runs this)

The model (chosen on data collected before the choice, issue 17; see learned.py): multinomial logistic regression,
C = 10, over two tf-idf blocks, each normalised to unit length: the words explain's guesses read (binary) and the
lower-cased character 3-5-grams inside words (sublinear counts, the 20,000 most frequent seen in at least two
reports). Half the features, those with the smallest largest weight, are dropped; the rest are stored as int8 with
one scale per cause. Their idf stays so that a text's vector is normalised as in training. Before writing, every
training text is ranked by learned.py and by scikit-learn with the same stored weights, and the two must agree.

The review sets (cases written to test patterns) and the expert answers (explain_oracle) are not real reports with a
settled cause, and stay out (explain_sets.labelled_reports), as do the texts themselves: the file holds features and weights, and for every 40th
report its set, its place in the set and scikit-learn's top three (a test scores those reports again and compares).
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from cudadoctor.explain import learned  # noqa: E402
from explain_sets import labelled_reports  # noqa: E402

C = 10.0
CHAR_FEATURES = 20000
KEEP = 0.5  # share of features kept, by their largest absolute weight
SETTINGS = {"C": C, "char_features": CHAR_FEATURES, "keep": KEEP, "min_df": 2, "model": "multinomial logistic regression"}
PROBE_EVERY = 40  # scikit-learn's own top three for every 40th report go in the file: a test holds the scorer to them


def rows() -> list:
    return [{"id": c["id"], "set": name, "n": i, "text": c["text"]}
            for name, cs in labelled_reports().items() for i, c in enumerate(cs)]


def sk_top3(sk: tuple, text: str) -> list:
    """scikit-learn's [(probability, cause)] top three for a text, with the fitted vectorizers and model."""
    import numpy as np
    from scipy.sparse import hstack

    wv, cv, m = sk
    p = m.predict_proba(hstack([wv.transform([text]), cv.transform([learned.head(text)])]).tocsr())[0]
    return [(float(p[i]), str(m.classes_[i])) for i in np.argsort(-p)[:3]]


def train(rs: list) -> dict:
    import numpy as np
    from scipy.sparse import hstack
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    texts = [r["text"] for r in rs]
    wv = TfidfVectorizer(analyzer=lambda t: sorted(learned.words(t)), sublinear_tf=True, binary=True)
    cv = TfidfVectorizer(analyzer="char_wb", ngram_range=learned.GRAMS, min_df=2, sublinear_tf=True,
                         max_features=CHAR_FEATURES, lowercase=False)
    X = hstack([wv.fit_transform(texts), cv.fit_transform([learned.head(t) for t in texts])]).tocsr()
    m = LogisticRegression(C=C, max_iter=5000).fit(X, [r["id"] for r in rs])
    W = m.coef_.copy()
    big = np.abs(W).max(0)
    keep = big >= np.quantile(big, 1 - KEEP)
    W[:, ~keep] = 0
    scale = np.abs(W).max(1) / 127
    scale[scale == 0] = 1.0
    Q = np.round(W / scale[:, None]).astype(np.int8)
    m.coef_ = Q * scale[:, None]  # what learned.py will compute, so the check below compares like with like
    kept = np.flatnonzero(keep)
    row = {int(f): r for r, f in enumerate(kept)}
    nw = len(wv.vocabulary_)

    def table(vocab: dict, idf, off: int) -> dict:
        return {t: [round(float(idf[i]), 6), row.get(off + i, -1)] for t, i in sorted(vocab.items())}

    model = {
        "about": "cudadoctor explain's classifier: built by scripts/build_learned.py from the labelled real reports",
        "reports": len(rs),
        "digest": learned.digest(rs, SETTINGS),
        "causes": [str(c) for c in m.classes_],
        "intercept": [round(float(b), 6) for b in m.intercept_],
        "scale": [float(s) for s in scale],
        "words": table(wv.vocabulary_, wv.idf_, 0),
        "grams": table(cv.vocabulary_, cv.idf_, nw),
        "weights": base64.b64encode(np.ascontiguousarray(Q.T[kept]).tobytes()).decode("ascii"),
    }
    # learned.py rounds idf to 6 places; refit the check on that rounding
    wv.idf_ = np.array([model["words"][t][0] for t, _ in sorted(wv.vocabulary_.items(), key=lambda kv: kv[1])])
    cv.idf_ = np.array([model["grams"][t][0] for t, _ in sorted(cv.vocabulary_.items(), key=lambda kv: kv[1])])
    m.intercept_ = np.array(model["intercept"])
    model["probes"] = [[r["set"], r["n"], [list(t) for t in sk_top3((wv, cv, m), r["text"])]] for r in rs[::PROBE_EVERY]]
    return model, (wv, cv, m)


def agree(model: dict, sk: tuple, texts: list) -> int:
    """How many texts the stored model ranks differently (top three) from scikit-learn, or with probabilities
    more than 1e-6 apart."""
    lm = learned.Model.from_dict(model)
    bad = 0
    for t in texts:
        want, got = sk_top3(sk, t), lm.rank(t)[:3]
        if [c for _, c in got] != [c for _, c in want] or max(abs(a - b) for (a, _), (b, _) in zip(got, want)) > 1e-6:
            bad += 1
    return bad


def main(argv: list) -> int:
    rs = rows()
    if "--check" in argv:
        try:
            have = json.loads(learned.MODEL.read_text(encoding="utf-8")).get("digest")
        except (OSError, ValueError):
            have = None
        ok = have == learned.digest(rs, SETTINGS)
        whole = learned.load(str(learned.MODEL)) is not None
        print("learned.json is current" if ok and whole else "learned.json is damaged: rebuild it" if ok else
              "learned.json is stale: pip install -e '.[train]' && python scripts/build_learned.py")
        return 0 if ok and whole else 1
    try:
        import sklearn  # noqa: F401  (only this build needs it)
    except ImportError:
        print("build_learned.py needs scikit-learn: pip install -e '.[train]'", file=sys.stderr)
        return 2
    model, sk = train(rs)
    bad = agree(model, sk, [r["text"] for r in rs])
    if bad:
        print(f"learned.py and scikit-learn disagree on {bad} of {len(rs)} reports: not written", file=sys.stderr)
        return 1
    learned.MODEL.write_text(json.dumps(model, ensure_ascii=True, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {learned.MODEL} ({len(rs)} reports, {len(model['causes'])} causes, "
          f"{len(model['words'])} words, {len(model['grams'])} character grams; learned.py agrees on all)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

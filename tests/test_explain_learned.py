"""The classifier trained on the labelled real reports (explain/learned.py) and its place in explain's answer: first
among the guesses when no signature matches strongly, never before a match."""

from __future__ import annotations

import base64
import json
import math
import random
import subprocess
import sys
from array import array
from pathlib import Path
from unittest import mock

import pytest

from cudadoctor.explain import learned, rank
from explain_sets import DATA, SCANNER, SIGS, answer, cases

ROOT = Path(__file__).resolve().parent.parent


def _model(rows: list, words: dict, grams: dict | None = None, intercept=None) -> dict:
    """A hand-made model: rows are int8 weight rows (one per kept feature), scale 0.1 for every cause."""
    causes = ["nccl", "out-of-memory", "wsl"]
    return {"causes": causes, "intercept": intercept or [0.0] * 3, "scale": [0.1] * 3, "words": words,
            "grams": grams or {}, "weights": base64.b64encode(array("b", [x for r in rows for x in r]).tobytes()).decode()}


SMALL = _model([[40, 0, 0], [0, 30, 0], [0, 0, 50]],
               {"allreduce": [2.0, 0], "batch": [1.0, 1], "wslconfig": [1.0, 2], "training": [1.0, -1]})


@pytest.fixture
def small(tmp_path, monkeypatch):
    p = tmp_path / "learned.json"
    p.write_text(json.dumps(SMALL))
    monkeypatch.setattr(learned, "MODEL", p)
    learned.load.cache_clear()
    yield p
    learned.load.cache_clear()


def test_grams_are_scikit_learns_char_wb_grams():
    assert learned.grams("ab") == {" ab": 1, "ab ": 1, " ab ": 1}  # a word shorter than the gram counts once, whole
    assert learned.grams("a") == {" a ": 1}
    g = learned.grams("sm_120  sm_120\nxy")
    assert g[" sm"] == 2 and g["sm_12"] == 2 and g["_120 "] == 2 and g[" xy "] == 1 and "0 s" not in g


def test_grams_agree_with_scikit_learn_where_it_is_installed():
    text = pytest.importorskip("sklearn.feature_extraction.text")
    an = text.CountVectorizer(analyzer="char_wb", ngram_range=learned.GRAMS, lowercase=False).build_analyzer()
    rnd = random.Random(17)
    for _ in range(200):
        s = "".join(rnd.choice("ab_ 1\n\tÿ界.") for _ in range(rnd.randint(0, 40)))
        assert learned.grams(s) == __import__("collections").Counter(an(s)), repr(s)


def test_the_score_is_the_softmax_of_the_normalised_features(small):
    got = learned.guess("allreduce of a large batch hangs")
    # words block: allreduce (idf 2) and batch (idf 1), unit length -> 2/sqrt5 and 1/sqrt5; weights 4.0 and 3.0
    z = [4.0 * 2 / math.sqrt(5), 3.0 * 1 / math.sqrt(5), 0.0]
    e = [math.exp(x) for x in z]
    want = sorted(((x / sum(e), c) for x, c in zip(e, ["nccl", "out-of-memory", "wsl"])), reverse=True)
    assert [c for _, c in got] == [c for _, c in want]
    assert all(abs(a - b) < 1e-9 for (a, _), (b, _) in zip(got, want))


def test_a_dropped_feature_still_counts_in_the_length(small):
    # 'training' has no weights (row -1) but lengthens the vector, so allreduce weighs less than alone
    alone = dict((c, p) for p, c in learned.guess("allreduce"))
    both = dict((c, p) for p, c in learned.guess("allreduce training"))
    assert alone["nccl"] > both["nccl"] > 1 / 3


def test_no_known_feature_no_guess(small):
    assert learned.guess("zzz qqq") == []
    assert learned.guess("") == []


def test_a_missing_or_broken_model_gives_no_guess(tmp_path):
    assert learned.guess("allreduce hangs", path=str(tmp_path / "none.json")) == []
    for bad in ["{not json", json.dumps({"causes": ["a"]}), json.dumps({**SMALL, "intercept": [0.0]})]:
        p = tmp_path / "bad.json"
        p.write_text(bad)
        learned.load.cache_clear()
        assert learned.guess("allreduce hangs", path=str(p)) == []
    learned.load.cache_clear()


def test_the_model_leads_the_guesses_when_nothing_matches_strongly(small):
    text = "our wslconfig setting is ignored"
    assert rank.matches(SIGS, SCANNER.scan_text(text)) == []
    got = answer(text)
    assert got[0] == "wsl" and len(got) == 3


TEXT = "the fan spins but nothing renders, stuck at 100 percent utilisation"


def _usual_first() -> str:
    with mock.patch.object(learned, "guess", return_value=[]):
        return answer(TEXT)[0]


def test_the_usual_guess_comes_second_when_the_model_does_not_name_it():
    assert rank.matches(SIGS, SCANNER.scan_text(TEXT)) == []
    usual = _usual_first()
    others = [i for i in ("nccl", "wsl", "out-of-memory", "driver-install") if i != usual][:3]
    with mock.patch.object(learned, "guess", return_value=[(0.6, others[0]), (0.3, others[1]), (0.1, others[2])]):
        got = [(c, s.id) for c, s in rank.fallback(SIGS, [], TEXT)]
    assert [i for _, i in got] == [others[0], usual, others[1]]
    assert got[0][0] >= got[1][0] >= got[2][0]  # confidences follow the order


def test_the_usual_guess_stays_second_when_the_model_names_it_third():
    usual = _usual_first()
    others = [i for i in ("nccl", "wsl", "out-of-memory") if i != usual][:2]
    with mock.patch.object(learned, "guess", return_value=[(0.6, others[0]), (0.3, others[1]), (0.1, usual)]):
        got = [(c, s.id) for c, s in rank.fallback(SIGS, [], TEXT)]
    assert [i for _, i in got] == [others[0], usual, others[1]]
    assert got[0][0] >= got[1][0] >= got[2][0]


def test_a_match_is_never_displaced_by_the_model(small):
    text = "allreduce wslconfig\nRuntimeError: CUDA error: out of memory. Tried to allocate 2.00 GiB"
    assert answer(text)[0] == "out-of-memory"


def test_without_a_model_the_word_guesses_answer(tmp_path, monkeypatch):
    monkeypatch.setattr(learned, "MODEL", tmp_path / "none.json")
    learned.load.cache_clear()
    try:
        assert learned.guess(TEXT) == [] and len(answer(TEXT)) == 3
    finally:
        learned.load.cache_clear()


def test_the_packaged_model_is_trained_on_every_labelled_set_as_it_is():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_learned.py"), "--check"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    d = json.loads(learned.MODEL.read_text())
    assert set(d["causes"]) <= {s.id for s in SIGS}


def test_the_packaged_model_holds_features_not_texts():
    d = json.loads(learned.MODEL.read_text())
    assert set(d) == {"about", "reports", "digest", "causes", "intercept", "scale", "words", "grams", "weights"}
    assert all(not any(ch.isspace() for ch in w) for w in d["words"])
    assert max(len(g) for g in d["grams"]) <= learned.GRAMS[1]


def test_the_packaged_model_reads_its_training_reports():
    """The scorer and the file agree: on the reports it was trained on, the model ranks the labelled cause first
    almost always (a feature read differently from training would break this, not a wording)."""
    rows = [c for d in sorted(DATA.glob("explain_*")) if d.is_dir() and d.name not in ("explain_review", "explain_oracle")
            for c in cases(d)]
    m = learned.load()
    top1 = sum(m.rank(c["text"])[0][1] == c["id"] for c in rows)
    assert top1 >= 0.95 * len(rows), (top1, len(rows))

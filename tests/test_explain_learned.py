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
from collections import Counter
from pathlib import Path
from unittest import mock

import pytest

from cudadoctor.explain import learned, rank
from explain_sets import SCANNER, SIGS, answer, labelled_reports

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
        assert learned.grams(s) == Counter(an(s)), repr(s)


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


BROKEN = [
    "{not json",
    json.dumps({"causes": ["a"]}),
    json.dumps({**SMALL, "intercept": [0.0]}),
    json.dumps({**SMALL, "causes": []}),
    json.dumps({**SMALL, "weights": base64.b64encode(bytes(4)).decode()}),  # rows cut: 4 bytes for 3 causes
    json.dumps({**SMALL, "weights": base64.b64encode(bytes(3)).decode()}),  # one row left; rows 1 and 2 point past it
    json.dumps({**SMALL, "words": {"allreduce": [2.0, 7]}}),  # a row that is not there
    json.dumps({**SMALL, "words": {"allreduce": "x"}}),
    json.dumps({**SMALL, "words": ["allreduce"]}),
    json.dumps({**SMALL, "scale": ["a", 1, 1]}),
    json.dumps({**SMALL, "intercept": None}),
    json.dumps({**SMALL, "causes": [1, 2, 3]}),
    json.dumps([1, 2]),
]


@pytest.mark.parametrize("bad", BROKEN, ids=range(len(BROKEN)))
def test_a_missing_or_damaged_model_gives_no_guess(tmp_path, bad):
    assert learned.guess("allreduce hangs", path=str(tmp_path / "none.json")) == []
    p = tmp_path / "bad.json"
    p.write_text(bad)
    learned.load.cache_clear()
    try:
        assert learned.guess("allreduce batch wslconfig", path=str(p)) == []
    finally:
        learned.load.cache_clear()


def test_a_guess_is_as_sure_as_the_model(small):
    text = "our wslconfig setting is ignored"
    p = dict((c, q) for q, c in learned.guess(text))["wsl"]
    conf, s = rank.fallback(SIGS, [], text)[0]
    assert s.id == "wsl" and conf == round(rank.GUESS_MAX * p, 3)


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


def test_a_match_is_never_displaced_by_the_model():
    text = "allreduce wslconfig\nRuntimeError: CUDA error: out of memory. Tried to allocate 2.00 GiB"
    with mock.patch.object(learned, "guess", return_value=[(1.0, "wsl")]):
        assert answer(text)[0] == "out-of-memory" and "wsl" not in answer(text)[:1]


def test_the_model_never_repeats_a_weak_match():
    text = "torch.cuda.is_available() returns False"
    found = rank.matches(SIGS, SCANNER.scan_text(text))
    assert found and not any(m.strong for m in found)
    with mock.patch.object(learned, "guess", return_value=[(0.9, found[0].id), (0.05, "nccl"), (0.05, "wsl")]):
        got = answer(text)
    assert len(got) == len(set(got)) == 3 and got[0] == found[0].id and got[1] == "nccl"
    usual = _usual_first()  # nothing matches: the model's first cause is also the hand-written guess
    others = [i for i in ("nccl", "wsl", "out-of-memory") if i != usual][:2]
    with mock.patch.object(learned, "guess", return_value=[(0.9, usual), (0.05, others[0]), (0.05, others[1])]):
        assert answer(TEXT) == [usual, others[0], others[1]]


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
    assert set(d) == {"about", "reports", "digest", "causes", "intercept", "scale", "words", "grams", "weights", "probes"}
    assert all(not any(ch.isspace() for ch in w) for w in d["words"])
    assert max(len(g) for g in d["grams"]) <= learned.GRAMS[1]


def test_the_packaged_model_scores_as_scikit_learn_did():
    """The build stored scikit-learn's top three for every 40th report: this scorer must give the same causes and
    probabilities (a feature read or weighted differently from training would move them)."""
    rows = labelled_reports()
    probes = json.loads(learned.MODEL.read_text())["probes"]
    assert len(probes) >= sum(map(len, rows.values())) // 40
    m = learned.load()
    for name, i, want in probes:
        got = m.rank(rows[name][i]["text"])[:3]
        assert [c for _, c in got] == [c for _, c in want], (name, i)
        assert all(abs(a - b) < 1e-6 for (a, _), (b, _) in zip(got, want)), (name, i, got, want)


def test_the_packaged_model_reads_its_training_reports():
    rows = [c for cs in labelled_reports().values() for c in cs]
    m = learned.load()
    top1 = sum(m.rank(c["text"])[0][1] == c["id"] for c in rows)
    assert top1 >= 0.99 * len(rows), (top1, len(rows))

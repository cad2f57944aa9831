"""The nearest-labelled-reports vote (explain/neighbours.py) and its place in explain's answer: first among the guesses
when no signature matches strongly, never before a strong match."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cudadoctor.explain import neighbours, rank
from explain_sets import SCANNER, SIGS, answer

ROOT = Path(__file__).resolve().parent.parent


def _index(tmp_path: Path, rows: list) -> str:
    p = tmp_path / "index.jsonl"
    p.write_text("".join(json.dumps({"id": i, "set": "t", "url": "", "words": sorted(neighbours.words(t))}) + "\n"
                         for i, t in rows))
    return str(p)


@pytest.fixture
def small(tmp_path, monkeypatch):
    path = _index(tmp_path, [
        ("nccl", "allreduce hangs across two nodes with infiniband"),
        ("nccl", "allreduce hangs on infiniband after the switch firmware update"),
        ("nccl", "broadcast hangs across nodes, infiniband"),
        ("out-of-memory", "tried to allocate 2 GiB while training a large batch"),
        ("wsl", "ubuntu on windows cannot see the card"),
    ])
    monkeypatch.setattr(neighbours, "INDEX", Path(path))
    neighbours.load.cache_clear()
    yield path
    neighbours.load.cache_clear()


def test_the_vote_goes_to_the_reports_sharing_the_telling_words(small):
    got = neighbours.vote("our allreduce hangs forever over infiniband")
    assert got[0][1] == "nccl" and got[0][0] == 1.0
    got = neighbours.vote("allreduce hangs while training a large batch")  # three words of one report, two of others
    assert [i for _, i in got] == ["out-of-memory", "nccl"]
    assert abs(sum(s for s, _ in got) - 1.0) < 0.01


def test_no_shared_word_no_vote(small):
    assert neighbours.vote("zzz qqq") == []
    assert neighbours.vote("") == []


def test_only_the_k_closest_vote(small):
    # the single closest report is the out-of-memory one; three nccl reports a little further away outvote it
    text = "large batch hangs across nodes"
    assert [i for _, i in neighbours.vote(text, k=1)] == ["out-of-memory"]
    assert [i for _, i in neighbours.vote(text)] == ["nccl", "out-of-memory"]


def test_a_missing_or_broken_index_gives_no_vote(tmp_path):
    assert neighbours.vote("allreduce hangs", path=str(tmp_path / "none.jsonl")) == []
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    assert neighbours.vote("allreduce hangs", path=str(bad)) == []


def test_the_vote_leads_the_guesses_when_nothing_matches_strongly(small):
    text = "after the switch firmware update our jobs stall, infiniband"
    found = rank.matches(SIGS, SCANNER.scan_text(text))
    assert not any(m.strong for m in found)
    assert answer(text)[0] == "nccl"
    assert len(answer(text)) == 3  # the voted cause's alternatives and the word guesses fill the answer


def test_a_strong_match_is_never_displaced_by_the_vote(small):
    text = "infiniband allreduce hangs\nRuntimeError: CUDA error: out of memory. Tried to allocate 2.00 GiB"
    assert answer(text)[0] == "out-of-memory"


def test_the_packaged_index_is_built_from_every_labelled_set():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_neighbours.py"), "--check"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    ids = {json.loads(line)["id"] for line in neighbours.INDEX.read_text().splitlines()}
    assert ids <= {s.id for s in SIGS}


def test_the_packaged_index_holds_words_not_texts():
    line = json.loads(neighbours.INDEX.read_text().splitlines()[0])
    assert set(line) == {"id", "set", "url", "words"}
    assert all(" " not in w for w in line["words"])

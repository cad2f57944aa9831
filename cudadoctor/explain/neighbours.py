"""The labelled reports closest to a text: a nearest-neighbour vote, for the guess explain makes when no signature
matches strongly.

The index (neighbours.jsonl, built by scripts/build_neighbours.py from every labelled set under tests/data) holds, per
real report, its cause id and the set of words its text uses: no text. A text's neighbours are the K reports whose
words it shares most (cosine over words weighted by how rare they are across reports, idf); each votes for its cause
with its similarity. Written by hand because it is thirty lines over a few thousand short word sets: a library
(scikit-learn) would cost start-up and a dependency for nothing it does better here.

Chosen on data collected before the choice (issue 17): K = 15 was the best of 1-25 on the four blind sets of rounds
8-11 (each voted on by the sets before it); on the five later blind sets it put the right cause first on 60 of 95
reports with no strong match, where the word guesses alone did on 50.
"""

from __future__ import annotations

import functools
import json
import math
from collections import Counter
from pathlib import Path
from typing import Optional

INDEX = Path(__file__).with_name("neighbours.jsonl")
K = 15


def words(text: str) -> set:
    from cudadoctor.explain.rank import _words  # the guesses' own tokeniser and stop words

    return _words(text[:65536])


@functools.lru_cache(maxsize=2)
def load(path: Optional[str] = None) -> tuple:
    """(ids, word sets, their idf-weighted norms, idf) of the index; empty when the file is missing or unreadable (the
    guesses then come from the signatures' words alone)."""
    try:
        rows = [json.loads(line) for line in Path(path or INDEX).read_text(encoding="utf-8").splitlines()
                if line.startswith("{")]
    except (OSError, ValueError):
        return (), (), (), {}
    sets = tuple(frozenset(r["words"]) for r in rows)
    df = Counter(w for ws in sets for w in ws)
    idf = {w: math.log(len(rows) / c) for w, c in df.items()}
    norms = tuple(math.sqrt(sum(idf[w] ** 2 for w in ws)) for ws in sets)
    return tuple(r["id"] for r in rows), sets, norms, idf


def vote(text: str, k: int = K, path: Optional[str] = None) -> list:
    """[(share of the vote, id)] best first, from the k labelled reports closest to the text (cosine of idf-weighted
    word sets); [] when it shares no telling word with any of them."""
    ids, sets, norms, idf = load(path)
    q = frozenset(w for w in words(text) if idf.get(w))
    if not q:
        return []
    qn = math.sqrt(sum(idf[w] ** 2 for w in q))
    near = []
    for i, ws in enumerate(sets):
        shared = q & ws
        if shared:
            near.append((sum(idf[w] ** 2 for w in shared) / (qn * norms[i]), i))
    tally: dict = {}
    for sim, i in sorted(near, reverse=True)[:k]:
        tally[ids[i]] = tally.get(ids[i], 0.0) + sim
    total = sum(tally.values()) or 1.0
    return sorted(((round(v / total, 3), c) for c, v in tally.items()), key=lambda t: (-t[0], t[1]))


"""Match a GPU name ('RTX 4090', 'NVIDIA GeForce RTX 4090', 'Tesla V100-SXM2-16GB') to archs rows."""

from __future__ import annotations

import re

_NOISE = {"nvidia", "geforce"}


def tokens(name: str) -> list:
    return [t for t in re.split(r"[^a-z0-9]+", (name or "").lower()) if t and t not in _NOISE]


def _contains(hay: list, needle: list) -> bool:
    n = len(needle)
    return n > 0 and any(hay[i:i + n] == needle for i in range(len(hay) - n + 1))


def match_examples(name: str, archs: list) -> list:
    """[{'cc', 'architecture', 'example'}] for rows with an example matching `name`.

    Exact token matches win; otherwise the query may be part of a name ('4090' in 'RTX 4090') or a
    name part of the query ('H100' in 'H100 80GB HBM3'). The longest example match wins per row.
    """
    q = tokens(name)
    if not q:
        return []
    exact, partial = [], []
    for row in archs:
        best = None
        for ex in row.get("examples", []):
            t = tokens(ex)
            if t == q:
                exact.append({"cc": row["cc"], "architecture": row["architecture"], "example": ex})
                best = None
                break
            if _contains(t, q) or _contains(q, t):
                if best is None or len(t) > len(tokens(best)):
                    best = ex
        if best is not None and not any(e["cc"] == row["cc"] for e in exact):
            partial.append({"cc": row["cc"], "architecture": row["architecture"], "example": best, "len": len(tokens(best))})
    if exact:
        return exact
    if not partial:
        return []
    # prefer the rows whose matching example name is longest (most specific)
    top = max(p["len"] for p in partial)
    return [{k: v for k, v in p.items() if k != "len"} for p in partial if p["len"] == top]

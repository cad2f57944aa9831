"""From raw hits to ranked matches: confidence per signature, root cause first."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cudadoctor.explain.scan import ScanResult

STRONG = 0.6  # a match this confident ranks above every weaker one


@dataclass
class Match:
    signature: object  # signatures.Signature
    confidence: float
    count: int
    evidence: list = field(default_factory=list)  # [Hit], first seen first
    captures: dict = field(default_factory=dict)
    rank_priority: int = 0

    @property
    def id(self) -> str:
        return self.signature.id

    @property
    def strong(self) -> bool:
        return self.confidence >= STRONG

    @property
    def first_pos(self) -> int:
        return min((h.pos for h in self.evidence), default=0)

    @property
    def before(self) -> str:
        firsts = sorted(self.evidence, key=lambda h: h.pos)
        return next((h.before for h in firsts if h.before), "")


def matches(signatures: tuple, res: ScanResult) -> list:
    out = []
    for si, sig in enumerate(signatures):
        miss = 1.0
        count = 0
        evidence: list = []
        for pi, pat in enumerate(sig.patterns):
            key = (si, pi)
            if key not in res.hits:
                continue
            if pat.context and not any(c in res.context_seen for c in pat.context):
                continue
            miss *= 1.0 - pat.weight
            count = max(count, res.counts.get(key, 0))
            evidence.extend(res.hits[key])
        if not evidence:
            continue
        evidence = _dedupe(sorted(evidence, key=lambda h: h.pos))
        caps: dict = {}
        for h in evidence:
            for k, v in h.captures.items():
                caps.setdefault(k, v)
        out.append(Match(sig, round(1.0 - miss, 3), count, evidence[:3], caps, sig.priority))
    return rank(out)


def _dedupe(hits: list) -> list:
    seen, out = set(), []
    for h in hits:
        if h.line_no not in seen:
            seen.add(h.line_no)
            out.append(h)
    return out


def rank(found: list) -> list:
    """Strong matches first; among them the root cause (higher priority, and anything that
    `explains` another match outranks it); then confidence; then the earliest in the text."""
    present = {m.id: m for m in found}
    for _ in range(len(found)):
        changed = False
        for m in found:
            if not m.strong:
                continue
            for other in m.signature.explains:
                o = present.get(other)
                if o is not None and m.rank_priority <= o.rank_priority:
                    m.rank_priority = o.rank_priority + 1
                    changed = True
        if not changed:
            break
    return sorted(found, key=lambda m: (not m.strong, -m.rank_priority, -m.confidence, m.first_pos))


_WORD = re.compile(r"[a-z0-9_]{3,}")


def closest(signatures: tuple, sample: str, limit: int = 3) -> list:
    """Signatures sharing the most words with the text (for an honest 'not recognised')."""
    words = set(_WORD.findall(sample.lower()))
    scored = []
    for sig in signatures:
        kw = sig.keywords()
        if not kw:
            continue
        common = words & kw
        if common:
            scored.append((len(common) / len(kw) ** 0.5, sig))
    scored.sort(key=lambda t: -t[0])
    return [(round(s, 3), sig) for s, sig in scored[:limit]]

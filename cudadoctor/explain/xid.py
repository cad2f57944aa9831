"""Xid codes in an explained text, answered from the Xid catalogue (matrix/xid.toml), the one `health` and
`check` judge with."""

from __future__ import annotations

import re

RE_XID = re.compile(r"\bxid\b\s*(?:\(pci:[0-9a-f:.]*\)\s*:?\s*)?(\d{1,3})\b", re.I)
MAX_CODES = 4


def codes(match) -> list:
    """The Xid codes of a match: its capture, then every code on its evidence lines, first seen first."""
    found = []
    for text in [match.captures.get("xid", "")] + [h.text for h in match.evidence]:
        for c in ([text] if text.isdigit() else RE_XID.findall(text or "")):
            if int(c) not in found:
                found.append(int(c))
    return found[:MAX_CODES]


def notes(match) -> list:
    """One line per Xid code: meaning, origin, NVIDIA's action."""
    found = codes(match)
    if not found:
        return []
    from cudadoctor.matrix.xid import catalogue

    cat = catalogue()
    out = []
    for code in found:
        x = cat.get(code)
        verdict = {"fail": "the node needs attention", "warn": "worth watching", "info": "the node is fine"}[x.severity]
        out.append(f"{x.title}: {x.meaning} (origin: {x.origin or 'unknown'}; {verdict}). "
                   f"NVIDIA's action, {x.action.name}: {x.action.text}")
    return out

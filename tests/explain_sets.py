"""The sets of real reports explain is measured on (tests/data/explain_*), loaded one way for every test."""

from __future__ import annotations

import sys
from pathlib import Path

from cudadoctor.explain import rank, scan, signatures

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DATA = Path(__file__).parent / "data"
CORPUS = DATA / "explain_corpus"  # in-sample: the signatures were written against it
HELDOUT = DATA / "explain_heldout" / "cases.toml"  # blind for issue 6, tuned on since
UNSEEN = DATA / "explain_unseen" / "cases.toml"  # blind for issue 17 (collected before any change)
DEV = DATA / "explain_dev" / "cases.toml"  # issue 17's tuning set (in-sample)
FRESH = DATA / "explain_fresh" / "cases.toml"  # issue 17's last check, collected after tuning
DEV2 = DATA / "explain_dev2" / "cases.toml"  # issue 17 round 3's tuning set (in-sample)
FRESH2 = DATA / "explain_fresh2" / "cases.toml"  # issue 17 round 3's fresh set, collected after round 3's tuning

SIGS = signatures.load()
SCANNER = scan.Scanner(SIGS)


def cases(path: Path) -> list:
    """[{id, url, text, ...}] of a set file, or of the corpus folder (one file per id)."""
    if path.is_dir():
        out = []
        for f in sorted(path.glob("*.toml")):
            with open(f, "rb") as fh:
                d = tomllib.load(fh)
            out += [dict(c, id=d["expect"]) for c in d["case"]]
        return out
    with open(path, "rb") as fh:
        return tomllib.load(fh)["case"]


def urls(path: Path) -> set:
    return {c["url"].rstrip("/") for c in cases(path)} if path.exists() else set()


def answer(text: str, strict: bool = False) -> list:
    """The ids explain puts forward offline, best first (strict: its matches only)."""
    found = rank.matches(SIGS, SCANNER.scan_text(text))
    return [m.id for m in found] if strict else rank.answer_ids(SIGS, found, text)


def accuracy(path: Path, strict: bool = False) -> tuple:
    """(top-1, top-3, n, misses) on a set."""
    top1 = top3 = 0
    misses = []
    cs = cases(path)
    for c in cs:
        got = answer(c["text"], strict)
        top1 += got[:1] == [c["id"]]
        top3 += c["id"] in got[:3]
        if got[:1] != [c["id"]]:
            misses.append((c["id"], got[:3], c["url"]))
    return top1, top3, len(cs), misses

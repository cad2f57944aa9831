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
FRESH3 = DATA / "explain_fresh3" / "cases.toml"  # issue 17 round 4's blind set, committed before round 4's tuning
DEV3 = DATA / "explain_dev3" / "cases.toml"  # issue 17 round 4's tuning set (split from fresh3's collection)
DEV4 = DATA / "explain_dev4" / "cases.toml"  # issue 17 round 4's second tuning set, collected after fresh3
FRESH4 = DATA / "explain_fresh4" / "cases.toml"  # issue 17's second unseen check of round 4 (threads nobody had met)
FRESH5 = DATA / "explain_fresh5" / "cases.toml"  # issue 17 round 6's blind set (threads nobody had met), committed before tuning
DEV5 = DATA / "explain_dev5" / "cases.toml"  # issue 17 round 6's tuning set (split from fresh5's collection)
DEV6 = DATA / "explain_dev6" / "cases.toml"  # issue 17 round 7's tuning set, collected after fresh5 was committed
FRESH6 = DATA / "explain_fresh6" / "cases.toml"  # issue 17 round 8's blind set (threads nobody had met), committed before scoring
FRESH7 = DATA / "explain_fresh7" / "cases.toml"  # issue 17 round 9's blind set (threads nobody had met), committed before scoring
FRESH8 = DATA / "explain_fresh8" / "cases.toml"  # issue 17 round 10's blind set (threads nobody had met), committed before scoring
FRESH9 = DATA / "explain_fresh9" / "cases.toml"  # issue 17 round 11's blind sample (forum and Q&A threads), committed before scoring
FRESH10 = DATA / "explain_fresh10" / "cases.toml"  # issue 17 round 12's blind set (threads nobody had met), committed before scoring
FRESH11 = DATA / "explain_fresh11" / "cases.toml"  # issue 17 round 13's blind set (threads nobody had met), committed before scoring
FRESH12 = DATA / "explain_fresh12" / "cases.toml"  # issue 17 round 14's blind set (threads nobody had met), committed before scoring
FRESH13 = DATA / "explain_fresh13" / "cases.toml"  # issue 17 round 15's blind set (threads nobody had met), committed before scoring
FRESH14 = DATA / "explain_fresh14" / "cases.toml"  # issue 17 round 16's blind set (threads nobody had met), committed before scoring
FRESH15 = DATA / "explain_fresh15" / "cases.toml"  # issue 17 round 17's blind set (threads nobody had met), committed before scoring
FRESH16 = DATA / "explain_fresh16" / "cases.toml"  # issue 17 round 18's blind set (threads nobody had met), committed before scoring
FRESH17 = DATA / "explain_fresh17" / "cases.toml"  # issue 17 round 19's blind set (threads nobody had met), committed before scoring
FRESH18 = DATA / "explain_fresh18" / "cases.toml"  # issue 17 round 20's blind set (threads nobody had met), committed before scoring
FRESH19 = DATA / "explain_fresh19" / "cases.toml"  # issue 17 round 21's blind set (threads nobody had met), committed before scoring
FRESH20 = DATA / "explain_fresh20" / "cases.toml"  # issue 17 round 22's blind set (threads nobody had met), committed before scoring
FRESH21 = DATA / "explain_fresh21" / "cases.toml"  # issue 17 round 23's blind set (threads nobody had met), committed before scoring
FRESH22 = DATA / "explain_fresh22" / "cases.toml"  # issue 17 round 24's blind set (threads nobody had met), committed before scoring
FRESH23 = DATA / "explain_fresh23" / "cases.toml"  # issue 17 round 25's blind set (threads nobody had met), committed before scoring
FRESH24 = DATA / "explain_fresh24" / "cases.toml"  # issue 17 round 26's blind set (threads nobody had met), committed before scoring
FRESH25 = DATA / "explain_fresh25" / "cases.toml"  # issue 17 round 27's blind set (threads nobody had met), committed before scoring
FRESH26 = DATA / "explain_fresh26" / "cases.toml"  # issue 17 round 28's blind set (threads nobody had met), committed before scoring
FRESH27 = DATA / "explain_fresh27" / "cases.toml"  # issue 17 round 29's blind set (threads nobody had met), committed before scoring
FRESH28 = DATA / "explain_fresh28" / "cases.toml"  # issue 17 round 30's blind set (threads nobody had met), committed before scoring
FRESH29 = DATA / "explain_fresh29" / "cases.toml"  # issue 17 round 31's blind set (threads nobody had met), committed before scoring
FRESH30 = DATA / "explain_fresh30" / "cases.toml"  # issue 17 round 32's blind set (threads nobody had met), committed before scoring
FRESH31 = DATA / "explain_fresh31" / "cases.toml"  # issue 17 round 33's blind set (threads nobody had met), committed before scoring
FRESH32 = DATA / "explain_fresh32" / "cases.toml"  # issue 17 round 34's blind set (threads nobody had met), committed before scoring
FRESH33 = DATA / "explain_fresh33" / "cases.toml"  # issue 17 round 35's blind set (threads nobody had met), committed before scoring
FRESH34 = DATA / "explain_fresh34" / "cases.toml"  # issue 17 round 36's blind set (threads nobody had met), committed before scoring
FRESH35 = DATA / "explain_fresh35" / "cases.toml"  # issue 17 round 37's blind set (threads nobody had met), committed before scoring
FRESH36 = DATA / "explain_fresh36" / "cases.toml"  # issue 17 round 38's blind set (threads nobody had met), committed before scoring
FRESH37 = DATA / "explain_fresh37" / "cases.toml"  # issue 17 round 39's blind set (threads nobody had met), committed before scoring
FRESH38 = DATA / "explain_fresh38" / "cases.toml"  # issue 17 round 40's blind set (threads nobody had met), committed before scoring
FRESH39 = DATA / "explain_fresh39" / "cases.toml"  # issue 17 round 41's blind set (threads nobody had met), committed before scoring
FRESH40 = DATA / "explain_fresh40" / "cases.toml"  # issue 17 round 42's blind set (threads nobody had met), committed before scoring
FRESH41 = DATA / "explain_fresh41" / "cases.toml"  # issue 17 round 43's blind set (threads nobody had met), committed before scoring
FRESH42 = DATA / "explain_fresh42" / "cases.toml"  # issue 17 round 44's blind set (threads nobody had met; 30 of 39 out-of-memory), committed before scoring
FRESH43 = DATA / "explain_fresh43" / "cases.toml"  # issue 17 round 45's blind set (threads nobody had met), committed before scoring
FRESH44 = DATA / "explain_fresh44" / "cases.toml"  # issue 17 round 46's blind set (threads nobody had met), committed before scoring
FRESH45 = DATA / "explain_fresh45" / "cases.toml"  # issue 17 round 47's blind set (threads nobody had met), committed before scoring
FRESH46 = DATA / "explain_fresh46" / "cases.toml"  # issue 17 round 48's blind set (threads nobody had met), committed before scoring
FRESH47 = DATA / "explain_fresh47" / "cases.toml"  # issue 17 round 49's blind set (threads nobody had met), committed before scoring
FRESH48 = DATA / "explain_fresh48" / "cases.toml"  # issue 17 round 50's blind set (threads nobody had met; small), committed before scoring
FRESH49 = DATA / "explain_fresh49" / "cases.toml"  # issue 17 round 51's blind set (threads nobody had met), committed before scoring
FRESH50 = DATA / "explain_fresh50" / "cases.toml"  # issue 17 round 52's blind set (threads nobody had met), committed before scoring
FRESH51 = DATA / "explain_fresh51" / "cases.toml"  # issue 17 round 53's blind set (threads nobody had met), committed before scoring
FRESH52 = DATA / "explain_fresh52" / "cases.toml"  # issue 17 round 54's blind set (threads nobody had met), committed before scoring
FRESH53 = DATA / "explain_fresh53" / "cases.toml"  # issue 17 round 55's blind set (threads nobody had met), committed before scoring
FRESH54 = DATA / "explain_fresh54" / "cases.toml"  # issue 17 round 56's blind set (threads nobody had met; small), committed before scoring
FRESH55 = DATA / "explain_fresh55" / "cases.toml"  # issue 17 round 57's blind set (threads nobody had met), committed before scoring
FRESH56 = DATA / "explain_fresh56" / "cases.toml"  # issue 17 round 58's blind set (threads nobody had met), committed before scoring
FRESH57 = DATA / "explain_fresh57" / "cases.toml"  # issue 17 round 59's blind set (threads nobody had met), committed before scoring
FRESH58 = DATA / "explain_fresh58" / "cases.toml"  # issue 17 round 60's blind set (threads nobody had met), committed before scoring
FRESH59 = DATA / "explain_fresh59" / "cases.toml"  # issue 17 round 61's blind set (threads nobody had met), committed before scoring
FRESH60 = DATA / "explain_fresh60" / "cases.toml"  # issue 17 round 62's blind set (threads nobody had met; small), committed before scoring

SIGS = signatures.load()
SCANNER = scan.Scanner(SIGS)


def cases(path: Path) -> list:
    """[{id, url, text, ...}] of a set file (or the folder that holds its cases.toml), or of the corpus folder (one
    file per id)."""
    if (path / "cases.toml").is_file():
        path = path / "cases.toml"
    if path.is_dir():
        out = []
        for f in sorted(path.glob("*.toml")):
            with open(f, "rb") as fh:
                d = tomllib.load(fh)
            out += [dict(c, id=d["expect"]) for c in d["case"]]
        return out
    with open(path, "rb") as fh:
        return tomllib.load(fh)["case"]


NOT_REPORTS = ("explain_review", "explain_oracle")  # cases written to test patterns, and expert answers: no settled cause


def labelled_reports() -> dict:
    """Every set of real reports with a settled cause under tests/data, {set name: cases}, in name order: what
    explain's classifier is trained on (scripts/build_learned.py)."""
    return {d.name: cases(d) for d in sorted(DATA.glob("explain_*")) if d.is_dir() and d.name not in NOT_REPORTS}


def _thread(url: str) -> str:
    """One spelling per thread: no trailing slash, GitHub's owner/repo case ignored, and a pull request and an issue
    of one number are one thread."""
    return url.strip().rstrip("/").lower().replace("/pull/", "/issues/")


def urls(path: Path) -> set:
    return {_thread(c["url"]) for c in cases(path)} if path.exists() else set()


def met_urls(*sets: Path) -> set:
    """Every thread the collectors of these sets met in search results (met_urls.txt beside each set)."""
    return {_thread(u) for s in sets for u in (s.parent / "met_urls.txt").read_text().split()}


def named_cases(*groups: tuple) -> list:
    """pytest params of (text, expected) pairs from named case lists, ((name, cases), ...), each id "<name>-<index>"."""
    import pytest

    return [pytest.param(t, e, id=f"{name}-{i}") for name, cases in groups for i, (t, e) in enumerate(cases)]


def answer(text: str, strict: bool = False) -> list:
    """The ids explain puts forward offline, best first (strict: its matches only)."""
    found = rank.matches(SIGS, SCANNER.scan_text(text))
    return [m.id for m in found] if strict else rank.answer_ids(SIGS, found, text)


def strong_ids(text: str) -> list:
    """The ids explain matches strongly in a text, root cause first."""
    return [m.id for m in rank.rank(rank.matches(SIGS, SCANNER.scan_text(text))) if m.strong]


def review_cases(name: str) -> list:
    """A file of written cases under data/explain_review/ (`expect` first, or `expect_not` strongly)."""
    import tomllib

    with open(DATA / "explain_review" / name, "rb") as f:
        return tomllib.load(f)["case"]


def score(cs: list, strict: bool = False) -> dict:
    """Top-1/top-3 of explain's answer on cases: {n, top1, top3, per: id -> [cases, top-1, top-3],
    misses: [(expected id, top-3 answer, url)] of the cases not right at top-1}."""
    per: dict = {}
    misses = []
    top1 = top3 = 0
    for c in cs:
        ids = answer(c["text"], strict)
        hit1, hit3 = ids[:1] == [c["id"]], c["id"] in ids[:3]
        top1 += hit1
        top3 += hit3
        p = per.setdefault(c["id"], [0, 0, 0])
        p[0] += 1
        p[1] += hit1
        p[2] += hit3
        if not hit1:
            misses.append((c["id"], ids[:3], c.get("url", "")))
    return {"n": len(cs), "top1": top1, "top3": top3, "per": per, "misses": misses}


def accuracy(path: Path, strict: bool = False) -> tuple:
    """(top-1, top-3, n, misses) on a set."""
    r = score(cases(path), strict)
    return r["top1"], r["top3"], r["n"], r["misses"]

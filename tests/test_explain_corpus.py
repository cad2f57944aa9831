"""The real-world corpus: every signature has >= 5 real cases; top-1 accuracy on them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cudadoctor.explain import rank, scan, signatures

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CORPUS = Path(__file__).parent / "data" / "explain_corpus"
SIGS = signatures.load()
SCANNER = scan.Scanner(SIGS)


def load_cases() -> list:
    out = []
    for path in sorted(CORPUS.glob("*.toml")):
        with open(path, "rb") as f:
            d = tomllib.load(f)
        for i, c in enumerate(d["case"]):
            out.append(pytest.param(d["expect"], c, id=f"{path.stem}-{i + 1}"))
    return out


CASES = load_cases()


def test_every_signature_has_five_real_cases():
    counts: dict = {}
    for p in CASES:
        expect, case = p.values
        assert case["url"].startswith("https://github.com/"), case
        assert case["cause"].strip() and case["text"].strip()
        counts[expect] = counts.get(expect, 0) + 1
    ids = {s.id for s in SIGS}
    assert set(counts) <= ids, set(counts) - ids
    short = {i: counts.get(i, 0) for i in ids if counts.get(i, 0) < 5}
    assert not short, short


@pytest.mark.parametrize("expect,case", CASES)
def test_case_top1(expect, case):
    found = rank.matches(SIGS, SCANNER.scan_text(case["text"]))
    assert [m.id for m in found][:1] == [expect], (case["url"], [(m.id, m.confidence) for m in found])


def test_top1_accuracy_report():
    ok = 0
    for p in CASES:
        expect, case = p.values
        found = rank.matches(SIGS, SCANNER.scan_text(case["text"]))
        ok += bool(found) and found[0].id == expect
    acc = ok / len(CASES)
    print(f"\nexplain corpus top-1 accuracy: {ok}/{len(CASES)} = {acc:.3f}")
    assert acc >= 0.95

"""Issue 17's sets of real reports: the blind set (collected and committed before any change), the
tuning sets (dev, dev2) and the fresh checks (fresh, fresh2, each collected after a round of tuning).
Well-formed, disjoint from each other and from the older corpora, and the accuracy floors measured in
tests/data/explain_unseen/RESULTS.md."""

from __future__ import annotations

from collections import Counter

import pytest

from explain_sets import (CORPUS, DEV, DEV2, DEV3, DEV4, DEV5, DEV6, FRESH, FRESH2, FRESH3, FRESH4, FRESH5, FRESH6, FRESH7,
                          FRESH8, FRESH9, FRESH10, FRESH11, FRESH12, FRESH13, FRESH14, FRESH15, FRESH16,
                          FRESH17, FRESH18, FRESH19, FRESH20, FRESH21, FRESH22, FRESH23, FRESH24, FRESH25, FRESH26, FRESH27, FRESH28, FRESH29, FRESH30, FRESH31, FRESH32, FRESH33, FRESH34, FRESH35, FRESH36, FRESH37, FRESH38, FRESH39, FRESH40, FRESH41, FRESH42, FRESH43, FRESH44, FRESH45, FRESH46, FRESH47, FRESH48, FRESH49, FRESH50, FRESH51, FRESH52, FRESH53, FRESH54, FRESH55, FRESH56, FRESH57, FRESH58, FRESH59, FRESH60, HELDOUT, SIGS, UNSEEN, accuracy, cases, met_urls, urls)

SETS = {"unseen": UNSEEN, "dev": DEV, "fresh": FRESH, "dev2": DEV2, "fresh2": FRESH2, "fresh3": FRESH3, "dev3": DEV3,
        "dev4": DEV4, "fresh4": FRESH4, "fresh5": FRESH5, "dev5": DEV5, "dev6": DEV6, "fresh6": FRESH6, "fresh7": FRESH7,
        "fresh8": FRESH8, "fresh9": FRESH9, "fresh10": FRESH10, "fresh11": FRESH11, "fresh12": FRESH12, "fresh13": FRESH13, "fresh14": FRESH14,
        "fresh15": FRESH15, "fresh16": FRESH16, "fresh17": FRESH17,
        "fresh18": FRESH18, "fresh19": FRESH19, "fresh20": FRESH20, "fresh21": FRESH21,
        "fresh22": FRESH22, "fresh23": FRESH23, "fresh24": FRESH24, "fresh25": FRESH25,
        "fresh26": FRESH26, "fresh27": FRESH27, "fresh28": FRESH28, "fresh29": FRESH29, "fresh30": FRESH30, "fresh31": FRESH31, "fresh32": FRESH32, "fresh33": FRESH33, "fresh34": FRESH34, "fresh35": FRESH35, "fresh36": FRESH36, "fresh37": FRESH37, "fresh38": FRESH38, "fresh39": FRESH39, "fresh40": FRESH40, "fresh41": FRESH41, "fresh42": FRESH42, "fresh43": FRESH43, "fresh44": FRESH44, "fresh45": FRESH45, "fresh46": FRESH46, "fresh47": FRESH47, "fresh48": FRESH48, "fresh49": FRESH49, "fresh50": FRESH50, "fresh51": FRESH51, "fresh52": FRESH52, "fresh53": FRESH53, "fresh54": FRESH54, "fresh55": FRESH55, "fresh56": FRESH56, "fresh57": FRESH57, "fresh58": FRESH58, "fresh59": FRESH59, "fresh60": FRESH60}
# floors a little under the measured figures (RESULTS.md) so data fixes do not flake the suite
FLOORS = {  # set: (top-1, top-3) of the answer explain prints
    "unseen": (0.97, 0.99),  # blind at its first scoring only; tuned on since
    "dev": (0.97, 0.99),
    "fresh": (0.95, 0.99),  # blind at its first scoring only; tuned on since
    "dev2": (0.88, 0.99),  # in-sample (tuned on)
    "fresh2": (0.95, 0.98),  # blind at its one scoring (89/110, 95/110); round 4 tuned on it (in-sample since)
    "fresh3": (0.92, 0.95),  # blind at its scoring after round 4 (112/132, 122/132); fixes since (in-sample)
    "fresh4": (0.90, 0.95),  # blind at its one scoring (71/86, 77/86, code r5-frozen); fixes since (in-sample)
    "dev3": (0.95, 0.95),  # round 4's tuning sets (in-sample)
    "dev4": (0.90, 0.94),
    "fresh5": (0.89, 0.94),  # blind at its one scoring (92/105, 97/105, code r7-frozen); in-sample since (95, 100 in round 8)
    "dev5": (0.95, 0.95),  # round 6's tuning set (in-sample)
    "dev6": (0.90, 0.97),  # round 7's tuning set (in-sample; 100/124, 113/124 at first sight)
    "fresh6": (0.95, 0.98),  # blind at its one scoring (98/113, 104/113 with r8-before and r8-frozen); in-sample since
    "fresh7": (0.89, 0.94),  # blind at its scoring (81/95, 86/95 with r9-before; 80/95, 85/95 with r8-before); in-sample since
    "fresh8": (0.94, 0.96),  # blind at its one scoring (95/110, 105/110 with r10-before and r10-frozen); in-sample since
    "fresh9": (0.99, 0.99),  # 8 forum reports, blind at its one scoring (5/8, 6/8 with r11-before); in-sample since
    "fresh10": (0.91, 0.95),  # blind at its one scoring (47/60, 53/60 with r12-before); in-sample since (56/60, 58/60)
    "fresh11": (0.89, 0.95),  # blind at its one scoring (64/80, 71/80 with r13-before and r13-frozen); in-sample since
    "fresh12": (0.87, 0.97),  # blind at its one scoring (63/77, 74/77 with r14-before); in-sample since (69/77, 76/77)
    "fresh13": (0.78, 0.89),  # blind at its one scoring (53/69, 62/69 with r15-before); in-sample since (55/69, 63/69)
    "fresh14": (0.80, 0.91),  # blind at its one scoring (47/57, 53/57 with r16-before); not tuned on
    "fresh15": (0.93, 0.98),  # blind at its one scoring (56/61, 60/61 r17-before; 56/61, 61/61 r17-frozen); 17b since
    "fresh16": (0.73, 0.86),  # blind at its one scoring (52/69, 60/69 r18-before); not tuned on (the vote's index holds it)
    "fresh17": (0.77, 0.89),  # blind at its one scoring (55/66, 59/66 r19-before; 51/66, 62/66 r19-frozen); the model holds it
    "fresh18": (0.81, 0.90),  # blind at its one scoring (64/77, 71/77 r20-before; 61/77, 66/77 r19-before); the model holds it
    "fresh19": (0.83, 0.93),  # blind at its one scoring (51/60, 57/60 r21-before); then round 21's in-sample fixes
    "fresh20": (0.81, 0.93),  # blind at its one scoring (60/72, 68/72 r22-before and r22-frozen); round 23's fixes since
    "fresh21": (0.81, 0.94),  # blind at its one scoring (59/71, 68/71 r23-before and r23-frozen); Warp's "Driver 0.0" since
    "fresh22": (0.77, 0.95),  # blind at its one scoring (48/61, 59/61 r24-before, r23-before and r23-frozen); not tuned on
    "fresh23": (0.78, 0.89),  # blind at its one scoring (52/65, 59/65 r25-before); round 25's in-sample fixes since
    "fresh24": (0.86, 0.93),  # blind at its one scoring (39/44, 42/44 r26-before and r25-before); not tuned on
    "fresh25": (0.85, 0.93),  # blind at its one scoring (51/61, 58/61 r27-before and r27-fixes); round 27's fixes since
    "fresh26": (0.95, 0.98),  # blind at its one scoring (53/57, 55/57 r28-before); round 28's in-sample fixes since
    "fresh27": (0.93, 0.97),  # blind at its one scoring (40/49, 45/49 r29-before and r29-fixes); round 29's in-sample fixes since
    "fresh28": (0.93, 0.95),  # blind at its one scoring (49/52, 50/52 r30-before); round 30's in-sample fix since
    "fresh29": (0.85, 0.92),  # blind at its one scoring (34/40, 37/40 r31-before); round 31's in-sample fixes since
    "fresh30": (0.97, 0.97),  # blind at its one scoring (33/38, 37/38 r32-before); round 32's fixes since (38/38; 37/38 after the review's matrix names)
    "fresh31": (0.97, 0.97),  # blind at its one scoring (39/46, 43/46 r33-before); round 33's in-sample fixes since (46/46)
    "fresh32": (0.96, 0.96),  # blind at its one scoring (45/50, 48/50 r34-before); round 34's in-sample fixes since (49/50)
    "fresh33": (0.97, 1.0),  # blind at its one scoring (36/38, 38/38 r35-before); round 35's in-sample fix since (38/38)
    "fresh34": (0.97, 1.0),  # blind at its one scoring (40/44, 42/44 r36-before); round 36's in-sample fixes since (44/44)
    "fresh35": (0.96, 1.0),  # blind at its one scoring (50/54, 53/54 r37-before); round 37's in-sample fix since (52/54)
    "fresh36": (1.0, 1.0),  # blind at its one scoring (16/16, 16/16 r38-before); not tuned on
    "fresh37": (0.97, 0.97),  # blind at its one scoring (30/36, 33/36 r39-before); round 39 tuned on it (36/36 in-sample since)
    "fresh38": (0.91, 0.98),  # blind at its one scoring (51/57, 56/57 r40-before); round 40 tuned on it (53/57, 57/57 in-sample since)
    "fresh39": (0.93, 0.99),  # blind at its one scoring (50/59, 55/59 r41-before); round 41 tuned on it (56/59, 59/59 in-sample since)
    "fresh40": (0.96, 0.99),  # blind at its one scoring (49/53, 51/53 r42-before); round 42 tuned on it (52/53, 53/53 in-sample since)
    "fresh41": (0.92, 0.96),  # blind at its one scoring (45/50, 49/50 r43-before); round 43 tuned on it (47/50, 49/50 in-sample since)
    "fresh42": (0.97, 0.97),  # blind at its one scoring (38/39, 38/39 r44-before; 30 of 39 out-of-memory); not tuned on
    "fresh43": (0.89, 0.97),  # blind at its one scoring (33/37, 36/37 r45-before); tuned on after (37/37)
    "fresh44": (0.97, 1.0),  # blind at its one scoring (44/45, 45/45 r46-before); tuned on after (45/45)
    "fresh45": (0.93, 1.0),  # blind at its one scoring (29/31, 31/31 r47-before); tuned on after (31/31)
    "fresh46": (0.92, 0.94),  # blind at its one scoring (36/39, 37/39 r48-before); tuned on after (38/39)
    "fresh47": (0.91, 0.95),  # blind at its one scoring (45/49, 47/49 r49-before); tuned on after (47/49)
    "fresh48": (0.95, 0.95),  # blind at its one scoring (19/20, 19/20 r50-before; small); not tuned on (its miss: no WSL in the text)
    "fresh49": (0.90, 1.0),  # blind at its one scoring (55/61, 61/61 r51-before); tuned on after (60/61)
    "fresh50": (0.82, 1.0),  # blind at its one scoring (33/40, 40/40 r52-before); tuned on after (37/40)
    "fresh51": (0.88, 0.97),  # blind at its one scoring (39/44, 43/44 r53-before); tuned on after (42/44)
    "fresh52": (0.90, 0.96),  # blind at its one scoring (45/50, 48/50 r54-before); tuned on after (50/50)
    "fresh53": (0.80, 0.97),  # blind at its one scoring (29/36, 35/36 r55-before); tuned on after (35/36)
    "fresh54": (0.80, 1.0),  # blind at its one scoring (12/15, 15/15 r56-before; small); tuned on after (15/15)
    "fresh55": (0.96, 0.96),  # blind at its one scoring (23/29, 27/29 r57-before); tuned on after (28/29)
    "fresh56": (0.96, 0.96),  # blind at its one scoring (29/31, 29/31 r58-before); tuned on after (31/31)
    "fresh57": (0.96, 0.96),  # blind at its one scoring (22/26, 25/26 r59-before); tuned on after (26/26)
    "fresh58": (0.93, 0.95),  # blind at its one scoring (42/45, 43/45 r60-before); no rule changed after
    "fresh59": (0.97, 1.0),  # blind at its one scoring (40/43, 41/43 r61-before); no rule changed after (42/43, 43/43)
    "fresh60": (0.80, 0.93),  # blind at its one scoring (11/15, 13/15 r62-before; small); tuned on after (12/15, 14/15)
}


@pytest.mark.parametrize("name", SETS)
def test_set_is_well_formed(name):
    path = SETS[name]
    if not path.exists():
        pytest.skip(f"{path} not collected yet")
    known = {s.id for s in SIGS}
    cs = cases(path)
    us = [c["url"].rstrip("/") for c in cs]
    assert len(us) == len(set(us)), "one case per thread"
    for c in cs:
        assert c["id"] in known, (c["id"], c["url"])
        assert c["url"].startswith("https://"), c["url"]
        assert c["cause"].strip() and c["text"].strip(), c["url"]


def test_blind_set_has_four_reports_per_id_and_a_hundred_in_all():
    cs = cases(UNSEEN)
    counts = Counter(c["id"] for c in cs)
    assert len(cs) >= 100
    assert min(counts.values()) >= 4, counts
    assert len(counts) >= 29


def test_round3_fresh_set_has_three_reports_per_id_and_a_hundred_in_all():
    if not FRESH2.exists():
        pytest.skip(f"{FRESH2} not collected yet")
    cs = cases(FRESH2)
    counts = Counter(c["id"] for c in cs)
    assert len(cs) >= 100
    assert min(counts.values()) >= 3, counts
    assert set(counts) == {s.id for s in SIGS}


def test_round3_fresh_set_excludes_every_thread_met_while_tuning():
    if not FRESH2.exists() or not (DEV2.parent / "met_urls.txt").exists():
        pytest.skip("round 3 sets not collected yet")
    seen = met_urls(DEV2)
    assert not urls(FRESH2) & seen, sorted(urls(FRESH2) & seen)


def test_round4_blind_set_has_four_reports_per_id_and_a_hundred_in_all():
    cs = cases(FRESH3)
    counts = Counter(c["id"] for c in cs)
    assert len(cs) >= 100
    assert set(counts.values()) == {4}, counts
    assert set(counts) == {s.id for s in SIGS}


def test_round4_blind_set_excludes_every_thread_met_while_tuning_round3():
    met = met_urls(DEV2)
    assert not urls(FRESH3) & met, sorted(urls(FRESH3) & met)


def test_round5_blind_set_excludes_every_thread_any_collector_met_before():
    met = met_urls(DEV2, DEV3, DEV4)
    assert not urls(FRESH4) & met, sorted(urls(FRESH4) & met)


def test_round6_blind_set_excludes_every_thread_any_earlier_collector_met():
    met = met_urls(DEV2, DEV3, DEV4, FRESH4)
    assert not urls(FRESH5) & met, sorted(urls(FRESH5) & met)


def test_round7_tuning_set_excludes_every_thread_round6_met():
    met = met_urls(DEV2, DEV3, DEV4, FRESH4, DEV5)
    assert not urls(DEV6) & met, sorted(urls(DEV6) & met)


# from round 8 on, each blind set was collected excluding every thread the collectors of round 7's sets and of every
# earlier blind set met: the rows derive from this order, so a new round adds one name here
MET_BEFORE_ROUND8 = (DEV2, DEV3, DEV4, FRESH4, DEV5, DEV6)
BLIND_FROM_ROUND8 = (FRESH6, FRESH7, FRESH8, FRESH9, FRESH10, FRESH11, FRESH12, FRESH13, FRESH14, FRESH15, FRESH16,
                     FRESH17, FRESH18, FRESH19, FRESH20, FRESH21, FRESH22, FRESH23, FRESH24, FRESH25, FRESH26, FRESH27, FRESH28, FRESH29, FRESH30, FRESH31, FRESH32, FRESH33, FRESH34, FRESH35, FRESH36, FRESH37, FRESH38, FRESH39, FRESH40, FRESH41, FRESH42, FRESH43, FRESH44, FRESH45, FRESH46, FRESH47, FRESH48, FRESH49, FRESH50, FRESH51, FRESH52, FRESH53, FRESH54, FRESH55, FRESH56, FRESH57, FRESH58, FRESH59, FRESH60)


@pytest.mark.parametrize("fresh, earlier", [
    (fresh, MET_BEFORE_ROUND8 + BLIND_FROM_ROUND8[:i]) for i, fresh in enumerate(BLIND_FROM_ROUND8)
], ids=[f"round{8 + i}" for i in range(len(BLIND_FROM_ROUND8))])
def test_blind_set_excludes_every_thread_any_earlier_collector_met(fresh, earlier):
    met = met_urls(*earlier).union(*(urls(p) for p in SETS.values() if p != fresh), urls(CORPUS), urls(HELDOUT))
    assert not urls(fresh) & met, sorted(urls(fresh) & met)


def test_sets_share_no_thread():
    sets = {"corpus": urls(CORPUS), "heldout": urls(HELDOUT), **{k: urls(v) for k, v in SETS.items()}}
    names = sorted(sets)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not sets[a] & sets[b], (a, b, sorted(sets[a] & sets[b]))


@pytest.mark.parametrize("name", SETS)
def test_accuracy_floor(name):
    path = SETS[name]
    if not path.exists():
        pytest.skip(f"{path} not collected yet")
    if name not in FLOORS:  # a fresh set is scored once, by benchmarks/explain_accuracy.py, before it gets a floor
        pytest.skip(f"{name}: no floor before its first scoring")
    top1, top3, n, misses = accuracy(path)
    print(f"\n{name}: top-1 {top1}/{n} = {top1 / n:.3f}, top-3 {top3}/{n} = {top3 / n:.3f}")
    for m in misses:
        print("  miss:", m)
    lo1, lo3 = FLOORS[name]
    assert top1 / n >= lo1, misses
    assert top3 / n >= lo3, misses


def test_the_expert_baseline_covers_each_unseen_report_once():
    # tests/data/explain_oracle: the expert-from-text answers RESULTS.md scores, one per report of fresh10-14
    import json

    from explain_sets import _thread

    rows = [json.loads(line) for line in open(FRESH10.parent.parent / "explain_oracle" / "expert_answers.jsonl") if line.strip()]
    want = set().union(*(urls(p) for p in (FRESH10, FRESH11, FRESH12, FRESH13, FRESH14)))
    assert len(rows) == len(want) and {_thread(r["url"]) for r in rows} == want
    known = {s.id for s in SIGS}
    for r in rows:
        assert len(set(r["top3"])) == 3 and set(r["top3"]) <= known and r["carries"] in ("yes", "partly", "no")

"""Rounds 32-37's rules (fresh30-35's misses, read after scoring): the arch gate's unplaceable GPU names, and two
reviews' cases (s32_review.toml, s32_review_c.toml). The rules' own cases (s32_r32.toml) run with round 28's in
test_explain_round28.py."""

from __future__ import annotations

import pytest

from explain_sets import answer, review_cases, strong_ids
from cudadoctor.explain import versions

GATE = {"needs": "gpu", "has": "torch_ver", "test": "wheel_lacks_arch", "all": True}


def test_a_gpu_name_the_matrix_cannot_place_does_not_veto_the_gate():
    # (review s32: "RTX 5000" is now placed, as the Quadro RTX 5000 and the RTX 5000 Ada: a name the matrix knows
    # vetoes when its GPUs have the kernels; "GT 9999" stands for a name it cannot place)
    assert versions.gate_holds(GATE, {}, {"gpu_name": ["gt 9999", "rtx 5090"], "torch_ver": ["2.5.1+cu124"]})
    assert not versions.gate_holds(GATE, {}, {"gpu_name": ["gt 9999"], "torch_ver": ["2.5.1+cu124"]})  # nothing left
    assert not versions.gate_holds(GATE, {}, {"gpu_name": ["rtx 5000", "rtx 5090"], "torch_ver": ["2.5.1+cu124"]})
    # a placed GPU the wheel has still vetoes (every named GPU must lack it)
    assert not versions.gate_holds(GATE, {}, {"gpu_name": ["rtx 4090", "rtx 5090"], "torch_ver": ["2.5.1+cu124"]})


REVIEW = review_cases("s32_review.toml") + review_cases("s32_review_c.toml")


@pytest.mark.parametrize("case", REVIEW, ids=lambda c: c["name"])
def test_review_cases(case):
    # a review of rounds 32-34's rules by a helper that had not written them (expectations written before running):
    # 12 hijacks found, fixed (hints for the reporter's own words, unless-lists, the matrix's Quadro/Ada names)
    if "expect" in case:
        assert answer(case["text"])[:1] == [case["expect"]]
    else:
        assert not set(strong_ids(case["text"])) & set(case["expect_not"])

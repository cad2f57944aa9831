"""The compatibility rule against real H200 results (tests/data/h200/nokernelimage.txt) and a table of
known cases (a/f variants, PTX JIT across majors, PTX newer than the driver)."""

from __future__ import annotations

import os
import re

import pytest

from cudadoctor.compat import (
    NATIVE,
    NO_IMAGE,
    PTX_JIT,
    PTX_TOO_NEW,
    ptx_isa_cuda,
    select_for_binary,
    select_image,
    verdict_runs,
)

DATA = os.path.join(os.path.dirname(__file__), "data", "h200", "nokernelimage.txt")
H200 = (9, 0)


def h200_cases() -> list:
    """(label, sass, ptx, launch code) per build in the capture; images from cuobjdump's file names."""
    cases, label, cur = [], "", None
    for line in open(DATA).read().splitlines():
        if line.startswith("== "):
            label = line[3:].strip()
            continue
        m = re.match(r"launch=(\d+)", line)
        if m:
            cur = {"label": label or "nvcc default (no -arch)", "sass": [], "ptx": [], "code": int(m.group(1))}
            cases.append(cur)
            label = ""
            continue
        m = re.match(r"(ELF|PTX) file\s+\d+: .*\.(sm_\d+a?)\.(cubin|ptx)$", line)
        if m and cur is not None:
            arch = m.group(2)
            if m.group(1) == "ELF":
                cur["sass"].append(arch)
            else:
                cur["ptx"].append(arch.replace("sm_", "compute_"))
    return cases


def test_capture_has_every_build():
    labels = [c["label"] for c in h200_cases()]
    assert len(labels) == 8
    assert "arch=compute_90,code=sm_90a" in labels and "nvcc default (no -arch)" in labels


@pytest.mark.parametrize("case", h200_cases(), ids=lambda c: c["label"])
def test_rule_reproduces_every_h200_result(case):
    sel = select_image(case["sass"], case["ptx"], H200, driver_cuda="13.0")
    if case["code"] == 209:
        assert sel.verdict == NO_IMAGE
    else:
        assert case["code"] == 0
        assert verdict_runs(sel.verdict)


def test_h200_verdicts_exactly():
    got = {c["label"]: select_image(c["sass"], c["ptx"], H200).verdict for c in h200_cases()}
    assert got == {
        "arch=compute_80,code=sm_80": NO_IMAGE,
        "arch=compute_80,code=compute_80": PTX_JIT,
        "arch=compute_90,code=sm_90": NATIVE,
        "arch=compute_100,code=compute_100": NO_IMAGE,
        "arch=compute_100,code=sm_100": NO_IMAGE,
        "arch=compute_86,code=sm_86": NO_IMAGE,
        "arch=compute_90,code=sm_90a": NATIVE,
        "nvcc default (no -arch)": PTX_JIT,
    }


TABLE = [
    # sass, ptx, cc, verdict, image
    (["sm_86"], [], (8, 9), NATIVE, "sm_86"),          # same major, newer minor runs older-minor SASS
    (["sm_89"], [], (8, 6), NO_IMAGE, ""),             # never a newer minor
    (["sm_80", "sm_86"], [], (8, 6), NATIVE, "sm_86"),  # the closest SASS wins
    (["sm_90", "sm_90a"], [], (9, 0), NATIVE, "sm_90a"),
    (["sm_90a"], [], (10, 0), NO_IMAGE, ""),           # arch-specific: exactly 9.0 only
    (["sm_100a"], [], (10, 3), NO_IMAGE, ""),
    (["sm_100f"], [], (10, 3), NATIVE, "sm_100f"),     # family: same major, minor >= 0
    (["sm_100f"], [], (12, 0), NO_IMAGE, ""),
    (["sm_120"], [], (12, 1), NATIVE, "sm_120"),
    ([], ["compute_90a"], (9, 0), PTX_JIT, "compute_90a"),
    ([], ["compute_90a"], (10, 0), NO_IMAGE, ""),
    ([], ["compute_75"], (12, 0), PTX_JIT, "compute_75"),  # PTX JIT crosses majors
    ([], ["compute_80", "compute_90"], (9, 0), PTX_JIT, "compute_90"),  # the newest usable PTX
    (["sm_80"], ["compute_80"], (8, 6), NATIVE, "sm_80"),  # SASS preferred to JIT
    ([], ["compute_120"], (9, 0), NO_IMAGE, ""),
    ([], [], (9, 0), NO_IMAGE, ""),
]


@pytest.mark.parametrize("sass,ptx,cc,verdict,image", TABLE)
def test_rule_table(sass, ptx, cc, verdict, image):
    sel = select_image(sass, ptx, cc)
    assert (sel.verdict, sel.image) == (verdict, image)


def test_ptx_newer_than_driver_is_error_222():
    # PTX ISA 9.0 (CUDA 13.0) on a driver whose maximum CUDA is 12.4: JIT fails
    sel = select_for_binary([], ["compute_80"], (9, 0), driver_cuda="12.4", ptx_isa={"compute_80": "9.0"})
    assert sel.verdict == PTX_TOO_NEW
    assert select_for_binary([], ["compute_80"], (9, 0), driver_cuda="13.0",
                             ptx_isa={"compute_80": "9.0"}).verdict == PTX_JIT
    # SASS that fits needs no JIT, whatever the PTX
    assert select_for_binary(["sm_90"], ["compute_90"], (9, 0), driver_cuda="12.4",
                             ptx_isa={"compute_90": "9.0"}).verdict == NATIVE
    # unknown PTX ISA or driver: no guess
    assert select_for_binary([], ["compute_80"], (9, 0), driver_cuda=None, ptx_isa={"compute_80": "9.0"}).verdict == PTX_JIT


def test_ptx_isa_table():
    assert ptx_isa_cuda("9.0") == "13.0"
    assert ptx_isa_cuda("8.8") == "12.9"
    assert ptx_isa_cuda("8.5") == "12.5"
    assert ptx_isa_cuda("7.8") == "11.8"
    assert ptx_isa_cuda("99.9") is None

"""Round 28's patterns (fresh26's misses) and rounds 32-37's (fresh30-35's), read after scoring: each names its cause
with a strong match, and leaves the look-alikes alone (tests/data/explain_review/s31.toml, s32_r32.toml)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from explain_sets import answer, review_cases, strong_ids

# round 28's cases (s31.toml) and rounds 32-37's (s32_r32.toml): the same two checks
CASES = review_cases("s31.toml") + review_cases("s32_r32.toml")


@pytest.mark.parametrize("case", [c for c in CASES if "expect" in c], ids=lambda c: c["name"])
def test_named_first_and_strong(case):
    assert answer(case["text"])[:1] == [case["expect"]]
    assert strong_ids(case["text"])[:1] == [case["expect"]]


@pytest.mark.parametrize("case", [c for c in CASES if "expect_not" in c], ids=lambda c: c["name"])
def test_look_alikes_left_alone(case):
    assert not set(strong_ids(case["text"])) & set(case["expect_not"])


MINED = review_cases("s31_mined.toml")


@pytest.mark.parametrize("case", [c for c in MINED if "expect" in c], ids=lambda c: c["name"])
def test_mined_message_names_its_cause(case):
    # a project's own wording of a cause, as the program prints it (mined from its source, session 31)
    assert strong_ids(case["text"])[:1] == [case["expect"]], case["source"]


@pytest.mark.parametrize("case", [c for c in MINED if c.get("expect_no_strong")], ids=lambda c: c["name"])
def test_mined_message_in_a_traceback_source_line_is_not_the_error(case):
    assert strong_ids(case["text"]) == []


ROUND29 = review_cases("s31_r29.toml")


@pytest.mark.parametrize("case", ROUND29, ids=lambda c: c["name"])
def test_round29_cases(case):
    # round 29's patterns (fresh27's misses): cuDNN's VERSION_MISMATCH, NVRTC's builtins, 999 at initialisation
    assert answer(case["text"])[:1] == [case["expect"]]
    if case.get("weak"):
        assert strong_ids(case["text"]) == []
    else:
        assert strong_ids(case["text"])[:1] == [case["expect"]]


def test_error_code_999_stands_aside_where_signatures_do():
    # error_codes.toml reads no sets: its 999 entry repeats _sets.toml's init_failed
    sets = tomllib.loads((Path(__file__).parent.parent / "cudadoctor" / "explain" / "signatures" / "_sets.toml").read_text())
    codes = tomllib.loads((Path(__file__).parent.parent / "cudadoctor" / "explain" / "error_codes.toml").read_text())
    entry = next(c for c in codes["code"] if c["number"] == 999)
    assert set(sets["sets"]["init_failed"]) <= set(entry["unless"])


H200 = Path(__file__).parent / "data" / "h200"


@pytest.mark.parametrize("name", ["s31_cuinit_no_uvm.txt", "s31_torch_no_uvm.txt"])
def test_real_cuinit_999_without_nvidia_uvm_is_no_driver(name):
    # recorded on an H200 with /dev/nvidia-uvm unopenable (tests/data/h200/README.md): the driver's state, not a lost GPU
    text = (H200 / name).read_text()
    assert answer(text)[:1] == ["no-driver-or-device"]
    assert strong_ids(text)[:1] == ["no-driver-or-device"]


@pytest.mark.parametrize("text, expect", [
    ("cuInit(0) returned 999 (CUDA_ERROR_UNKNOWN)", "no-driver-or-device"),
    ("cudaGetDeviceCount returned 999\n-> unknown error", "no-driver-or-device"),
    ("CUDA error at kernel.cu:88 code=999(cudaErrorUnknown) \"cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost)\"", "device-lost"),
    ("cudaMemcpy returned 999", "device-lost"),
])
def test_999_at_initialisation_and_during_a_run(text, expect):
    assert answer(text)[:1] == [expect]

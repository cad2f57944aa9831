"""Gates that share readings (readings_from), and the toolkit gate: a library's failed kernel (cuDNN's or cuBLAS's
EXECUTION_FAILED, cuRAND's LAUNCH_FAILURE) in a report that names a CUDA toolkit which builds no code its GPU runs
(versions.toolkit_lacks_gpu). A missing matrix proves nothing: test_explain_versions_gate.py, for every gate."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from cudadoctor.explain import personal, rank, signatures, versions
from cudadoctor.explain.scan import Scanner
from explain_sets import SCANNER, SIGS


@pytest.mark.parametrize("gpu, toolkit, lacks", [
    ("GTX 1080", "7.5", True),  # Pascal (6.1) under CUDA 7.5, whose newest arch is 5.3
    ("GTX 1080", "8.0", False),
    ("RTX 3090", "10.2", True),  # Ampere under CUDA 10
    ("RTX 3090", "11.0", False),  # an sm_80 cubin (CUDA 11.0) runs on 8.6: same major, older minor
    ("RTX 4090", "11.7", False),  # sm_86 runs on Ada's 8.9
    ("H100", "11.7", True),  # Hopper's 9.0 needs CUDA 11.8
    ("H100", "11.8", False),
    ("RTX 5090", "12.6", True),  # Blackwell's 12.0 needs CUDA 12.8
    ("RTX 5090", "12.8", False),
    ("GTX 780", "12.4", True),  # Kepler, dropped by CUDA 12
    ("Tesla T4", "9.0", False),  # an sm_70 cubin runs on Turing's 7.5 by the binary rule
    ("sm_86", "10.2", True),
    ("Quadro Unknown 9", "10.2", False),  # a GPU the matrix cannot name proves nothing
    ("RTX 3090", "99.1", False),  # nor does a toolkit it does not know
])
def test_toolkit_lacks_gpu(gpu, toolkit, lacks):
    assert versions.toolkit_lacks_gpu(gpu, toolkit) is lacks


@pytest.mark.parametrize("cc, first", [((8, 6), "11.0"), ((12, 0), "12.8"), ((9, 0), "11.8"), ((6, 1), "8.0")])
def test_first_toolkit_for(cc, first):
    assert versions.first_toolkit_for(cc) == first


@pytest.mark.parametrize("text", [
    # the build has no code for the GPU, ahead of the library's status
    "Check failed: status == CURAND_STATUS_SUCCESS (201 vs. 0) CURAND_STATUS_LAUNCH_FAILURE\nGTX 1080, built with CUDA 7.5",
    "cuBLAS error: CUBLAS_STATUS_EXECUTION_FAILED\nRTX 5090 with CUDA 12.4 from the conda env",
    "RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED\nGPU: RTX3090, cudatoolkit=10.2",
    # in a torch program too: which binary lacks the GPU is torch-arch-unsupported's question (the first alternative)
    "import torch\ncuBLAS error: CUBLAS_STATUS_EXECUTION_FAILED\nRTX 5090 with CUDA 12.4",
])
def test_the_toolkit_gate_ranks_the_build_first(text):
    found = rank.matches(SIGS, SCANNER.scan_text(text))
    assert found[0].id == "no-kernel-image" and found[0].gated == "toolkit_lacks_gpu", [m.id for m in found]
    assert "cublas-cudnn-status" in [m.id for m in found]
    assert found[0].alternatives[0] == "torch-arch-unsupported"


@pytest.mark.parametrize("text", [
    "cuBLAS error: CUBLAS_STATUS_EXECUTION_FAILED\nRTX 5090 with CUDA 12.8 from the conda env",  # a toolkit that has it
    "cuBLAS error: CUBLAS_STATUS_EXECUTION_FAILED\nRTX 3080 with CUDA 11.0",  # an sm_80 cubin runs on 8.6
    # the newest CUDA the driver runs is not a build's toolkit
    "CUDNN_STATUS_EXECUTION_FAILED\nRTX 5090\n| NVIDIA-SMI 550.54  Driver Version: 550.54  CUDA Version: 12.4 |",
    "CUDNN_STATUS_EXECUTION_FAILED\nRTX 5090\nDriver: 550.54, CUDA Version: 12.4",
    # requirements and ranges (review s30)
    "CUDNN_STATUS_EXECUTION_FAILED on an RTX 5090; the docs say it requires CUDA 12.4 or later",
    "CUDNN_STATUS_EXECUTION_FAILED on an RTX 5090; the repo requires CUDA 11.8",
    "CUDNN_STATUS_EXECUTION_FAILED on an RTX 5090; it needs at least CUDA 12.4",
    "CUDNN_STATUS_EXECUTION_FAILED on an RTX 5090; minimum CUDA 12.1",
    "CUDNN_STATUS_EXECUTION_FAILED on an RTX 5090; the wheel supports CUDA 11.8 - 12.4",
    "CUDNN_STATUS_EXECUTION_FAILED on an RTX 5090 with CUDA 12.10",  # not read as 12.1
    "CUDA error: out of memory\nRTX 5090 with CUDA 12.4",  # no kernel that could not run: the readings do not count
    # every toolkit and every GPU the report names must agree (all = true)
    "CUBLAS_STATUS_EXECUTION_FAILED\nRTX 5090, CUDA 12.4 at first, then CUDA 12.8",
    "CUBLAS_STATUS_EXECUTION_FAILED\nRTX 5090 and an RTX 4090 in one box, CUDA 12.4",
])
def test_the_toolkit_gate_holds_only_where_it_should(text):
    found = rank.matches(SIGS, SCANNER.scan_text(text))
    assert not any(m.gated == "toolkit_lacks_gpu" for m in found), [(m.id, m.gated) for m in found]


def test_another_signatures_readings_speak_only_through_the_gate():
    """no-kernel-image reads torch-arch-unsupported's GPU for its gate; where the gate does not hold, that GPU is not
    one of its captures (the personal notes would name it)."""
    found = rank.matches(SIGS, SCANNER.scan_text("CUDA error: no kernel image is available\nRTX 5090 with CUDA 12.8"))
    nki = next(m for m in found if m.id == "no-kernel-image")
    assert not nki.gated and versions.reading(nki.captures, "gpu") is None, nki.captures
    held = rank.matches(SIGS, SCANNER.scan_text("CUDA error: no kernel image is available\nRTX 5090 with CUDA 12.4"))
    nki = next(m for m in held if m.id == "no-kernel-image")
    assert nki.gated == "toolkit_lacks_gpu" and versions.reading(nki.captures, "gpu") == "RTX 5090"


def test_the_gate_personalises_the_answer():
    text = "cuBLAS error: CUBLAS_STATUS_EXECUTION_FAILED\nRTX 5090 with CUDA 12.4 from the conda env"
    found = rank.matches(SIGS, SCANNER.scan_text(text))
    assert found[0].id == "no-kernel-image" and found[0].gated == "toolkit_lacks_gpu"
    p = personal.personalise(found[0], {}, personal.load_matrix())
    assert any("CUDA 12.4" in n and "RTX 5090" in n and "12.8" in n for n in p.notes), p.notes
    ungated = personal.personalise(dataclasses.replace(found[0], gated=""), {}, personal.load_matrix())
    assert not any("builds no code" in n for n in ungated.notes), ungated.notes
    # a torch wheel read beside it is the wheel gate's to judge: no wheel verdict under the toolkit gate
    text = "import torch\ntorch 2.7.0+cu128\nno kernel image is available for execution on the device\nRTX 5090, CUDA 12.4"
    found = rank.matches(SIGS, SCANNER.scan_text(text))
    m = next(m for m in found if m.gated == "toolkit_lacks_gpu")
    notes = personal.personalise(m, {}, personal.load_matrix()).notes
    assert not any("that torch has no kernel" in n for n in notes), notes


def _sig(sid: str, patterns: list, gate=None) -> dict:
    d = {"id": sid, "title": "t", "layer": "l", "priority": 50, "meaning": "m", "causes": ["c"], "confirm": ["c"],
         "fixes": ["f"], "pattern": patterns}
    if gate is not None:
        d["gate"] = gate
    return d


def _toy(gate) -> tuple:
    """Two signatures: `reader` reads a GPU (capture only), `user` reads a toolkit and gates on both."""
    reader = _sig("reader", [{"contains": ["cuda capability"], "capture": r"capability (?P<gpu>\d\.\d)", "weight": 0}])
    user = _sig("user", [{"contains": ["toolkit "], "capture": r"toolkit (?P<toolkit>\d+\.\d)", "weight": 0}], gate)
    return tuple(signatures.parse(d, f"{d['id']}.toml") for d in (reader, user))


TEXT = "GPU of cuda capability 8.6\nbuilt with toolkit 10.2\n"


def test_a_gate_reads_another_signatures_readings_only_when_told():
    base = {"needs": "gpu", "has": "toolkit", "weight": 0.8, "test": "toolkit_lacks_gpu"}
    alone = _toy(base)
    assert [m.id for m in rank.matches(alone, Scanner(alone).scan_text(TEXT))] == []
    shared = _toy({**base, "readings_from": ["reader"]})
    found = rank.matches(shared, Scanner(shared).scan_text(TEXT))
    assert [(m.id, m.gated, m.confidence) for m in found] == [("user", "toolkit_lacks_gpu", 0.8)]


def test_an_unknown_readings_from_is_rejected(tmp_path: Path):
    (tmp_path / "user.toml").write_text(
        'id = "user"\ntitle = "t"\nlayer = "l"\npriority = 1\nmeaning = "m"\ncauses = ["c"]\nconfirm = ["c"]\n'
        'fixes = ["f"]\ngate = { needs = "a", has = "b", weight = 0.5, readings_from = ["nobody"] }\n'
        '[[pattern]]\ncontains = ["x"]\n')
    with pytest.raises(signatures.SignatureError, match="unknown ids.*nobody"):
        signatures.load_dir(tmp_path)


@pytest.mark.parametrize("name, ccs", [("RTX3090", {(8, 6)}), ("GTX1080", {(6, 1)}), ("rtx 3090", {(8, 6)}),
                                       ("RTX5090", {(12, 0)}), ("gtx1050ti", {(6, 1)})])
def test_a_gpu_written_without_a_space_is_named(name, ccs):
    """(round 27) "RTX3090" as often as "RTX 3090": a GPU the matrix cannot name made every all=true gate fail."""
    assert versions.gpu_ccs(name) == ccs


# (round 27, general facts its misses carried; texts written here, not copied from the set)
ROUND27 = [
    # an NGC container's banner: the host driver is older than the container's build and forward compatibility cannot
    # help; the 803 its compat libcuda raises on the old kernel driver is the consequence
    ("ngc_banner_803", "=== NVIDIA PyTorch ===\nERROR: This container was built for NVIDIA Driver Release 535.86 or "
     "later, but\n       version 470.199 was detected and compatibility mode is UNAVAILABLE.\n\n"
     "       [[CUDA Driver UNAVAILABLE (cuInit(0) returned 803)]]", "driver-too-old"),
    # 804 beside it: forward compatibility refused on this GPU
    ("ngc_banner_804", "ERROR: This container was built for NVIDIA Driver Release 450.36 or later, but\n"
     "version 440.100 was detected and compatibility mode is UNAVAILABLE.\n"
     "[[CUDA Driver UNAVAILABLE (cuInit(0) returned 804)]]", "forward-compat"),
    # an 803 without the banner stays the user-space / kernel driver mismatch
    ("plain_803", "RuntimeError: Unexpected error from cudaGetDeviceCount(). Error 803: system has unsupported "
     "display driver / cuda driver combination", "system-driver-mismatch"),
    # an initialization error in a program that starts one process per GPU
    ("fork_multiple_processes", "I start multiple processes, one per GPU, and all of them fail with\n"
     "pycuda._driver.LogicError: cuMemAlloc failed: initialization error", "cuda-fork"),
    # a library's failed kernel named in other words ("Kernal image error") with a toolkit that predates the GPU
    ("kernal_image_title", "RTX3090 Cuda 10.1 Kernal image error\nTensorFlow 2.3 from pip", "no-kernel-image"),
]


@pytest.mark.parametrize("name, text, first", ROUND27, ids=[c[0] for c in ROUND27])
def test_round27_general_facts(name, text, first):
    """A strong match names it first, not only the low-confidence guesses."""
    found = rank.matches(SIGS, SCANNER.scan_text(text))
    assert found and found[0].strong and found[0].id == first, [(m.id, m.confidence) for m in found]


@pytest.mark.parametrize("text", [
    "After resume every script fails:\nRuntimeError: CUDA error: initialization error\nNo multiple processes involved.",
    "RuntimeError: CUDA error: initialization error\nI am not using multiple processes at all.",
    "RuntimeError: CUDA error: initialization error\nnvidia-smi shows multiple processes on GPU 0",
    "RuntimeError: CUDA error: initialization error\nThe GPU is shared by multiple processes; it began after resume",
    "RuntimeError: CUDA error: initialization error\nI do not run multiple processes, one script only",
])
def test_processes_named_in_passing_are_no_fork(text):
    found = rank.matches(SIGS, SCANNER.scan_text(text))
    assert "cuda-fork" not in [m.id for m in found if m.strong], [(m.id, m.confidence) for m in found]

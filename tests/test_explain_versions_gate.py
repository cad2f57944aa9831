"""The torch-wheel gate: a "no kernel image" report naming a torch wheel and a GPU that the version matrix says
the wheel has no kernel for (versions.wheel_lacks_arch)."""

from __future__ import annotations

import dataclasses

import pytest

from cudadoctor import matrix
from cudadoctor.explain import personal, rank, signatures, versions
from explain_sets import SCANNER, SIGS, answer, named_cases


@pytest.mark.parametrize("gpu, torch, lacks", [
    ("sm_61", "2.8.0+cu128", True),  # cu128 wheels of 2.8 start at sm_70
    ("6.1", "2.9+ with CUDA 12.8", True),
    ("GTX 1050", "2.8.0+cu128", True),  # a GPU name, through the matrix's architecture table
    ("GTX 1050", "2.8.0+cu126", False),  # cu126 keeps sm_60, which runs on sm_61
    ("8.6", "2.8.0+cu128", False),
    ("sm_120", "2.6.0+cu124", True),
    ("sm_120", "2.7, cuda 12.8", False),  # 2.7's cu128 wheel has sm_120
    ("sm_120", "2.7", False),  # a bare release: only when every wheel of it lacks the GPU
    ("rtx 5090", "2.5.1", True),
    ("sm_61", "9.9", False),  # a release the matrix does not know proves nothing
    ("sm_61", "2.8.0+cu999", False),  # nor does a wheel it does not know
    ("Quadro Unknown 9", "2.8.0+cu128", False),  # nor a GPU it cannot name
])
def test_wheel_lacks_arch(gpu, torch, lacks):
    assert versions.wheel_lacks_arch(gpu, torch) is lacks


def test_a_missing_matrix_proves_nothing(monkeypatch):
    def broken():
        raise OSError("no matrix")

    monkeypatch.setattr(matrix, "load", broken)
    assert versions.wheel_lacks_arch("sm_61", "2.8.0+cu128") is False
    assert versions.toolkit_lacks_gpu("RTX 3090", "10.2") is False  # the toolkit gate (test_explain_toolkit_gate.py)
    assert versions.first_toolkit_for((8, 6)) is None


def test_the_gate_personalises_the_fix():
    text = ("GPU: NVIDIA GeForce GTX 1050 (compute capability 6.1)\nPyTorch: 2.8.0+cu128\n"
            "torch.AcceleratorError: CUDA error: no kernel image is available for execution on the device")
    found = rank.matches(SIGS, SCANNER.scan_text(text))
    assert found[0].id == "torch-arch-unsupported" and found[0].gated
    p = personal.personalise(found[0], {}, personal.load_matrix())
    assert any("torch 2.8.0+cu128" in n and ("GTX 1050" in n or "capability 6.1" in n) for n in p.notes), p.notes
    # the note follows the gate's verdict (Match.gated), not a second look at the first readings
    ungated = personal.personalise(dataclasses.replace(found[0], gated=""), {}, personal.load_matrix())
    assert not any("by the version matrix" in n for n in ungated.notes), ungated.notes
    assert any("no kernels for cc 6.1" in n for n in p.notes), p.notes
    # the command installs a wheel the matrix says has a kernel for cc 6.1
    assert p.commands and "pip install" in p.commands[0] and "--index-url" in p.commands[0], p.commands
    cu = p.commands[0].rsplit("/", 1)[1]
    rel = p.commands[0].split("'torch==")[1].split(".*")[0]
    m = matrix.load()
    assert m.runs_on(m.variant_for(rel, f"{cu[2:-1]}.{cu[-1]}"), (6, 1)) != "no-kernel-image"


EVERY_READING_AGREES = [
    # every GPU and every wheel the report names must lack: a display GPU beside the failing one proves nothing
    ("GPU 0: NVIDIA GeForce GTX 1050 Ti\nGPU 1: NVIDIA GeForce RTX 3090\ntorch 2.8.0+cu128\n"
     "RuntimeError: CUDA error: no kernel image is available for execution on the device", "no-kernel-image"),
    # two wheels on one line (the one left and the one in use): both are read
    ("First I had torch 2.8.0+cu128 and it refused the GTX 1080, so I went to torch 2.8.0+cu126.\n"
     "RuntimeError: CUDA error: no kernel image is available for execution on the device", "no-kernel-image"),
    # ... and when every one lacks the GPU, the gate holds
    ("torch 2.8.0+cu128 on a GTX 1080, and torch 2.9.0+cu128 too\n"
     "RuntimeError: CUDA error: no kernel image is available for execution on the device", "torch-arch-unsupported"),
]


def test_a_gate_all_must_be_a_bool(tmp_path):
    base = (signatures.SIGNATURE_DIR / "torch-arch-unsupported.toml").read_text()
    (tmp_path / "x.toml").write_text(base.replace("all = true", 'all = "yes"'))
    (tmp_path / "_sets.toml").write_text((signatures.SIGNATURE_DIR / "_sets.toml").read_text())  # the shared sets
    with pytest.raises(signatures.SignatureError, match="all"):
        signatures.load_dir(tmp_path)


DATACENTER_NAMES = [(text, "torch-arch-unsupported") for text in (
    # datacenter GPUs named by model (Kaggle's P100, Azure's K80, a V100 server) with a cu128/cu121 wheel
    "torch.__version__ = 2.7.0+cu128\n!nvidia-smi -> Tesla P100-PCIE-16GB\n"
    "RuntimeError: CUDA error: no kernel image is available for execution on the device",
    "RuntimeError: CUDA error: no kernel image is available for execution on the device\ntorch: 2.1.0+cu121\n"
    "nvidia-smi: Tesla K80, driver 470.239.06",
    "CUDA error: no kernel image is available for execution on the device\npytorch version: 2.7.1+cu128\n"
    "Device: cuda:0 Tesla V100-SXM2-32GB : cudaMallocAsync",
)]


TORCH_PROGRAM_NO_RELEASE = [
    # a torch program on a GPU no torch wheel the matrix knows has (cc 3.5 and older): torch's own kernels cannot run
    ("Tesla K40 (compute capability 3.5)\n>>> import torch; torch.ones(1).cuda() + 1\nRuntimeError: CUDA error: "
     "no kernel image is available for execution on the device", "torch-arch-unsupported"),
    # a GT 730 (sold as Fermi 2.1 and as Kepler 3.5: no torch wheel has either), a GTX 860M (5.0) some wheels have
    ("GeForce GT 730\n>>> import torch; torch.ones(1).cuda() + 1\nRuntimeError: CUDA error: "
     "no kernel image is available for execution on the device", "torch-arch-unsupported"),
    ("GeForce GTX 860M\n>>> import torch; torch.ones(1).cuda() + 1\nRuntimeError: CUDA error: "
     "no kernel image is available for execution on the device", "no-kernel-image"),
    # a GPU name the matrix cannot place proves nothing: alone it leaves the generic cause first; (round 32) beside a
    # reading the matrix can place (here the same GPU's compute capability, 3.5, which no wheel has) it is left out,
    # and the readings that can be placed decide (before, it vetoed them: "RTX5000" in a title beside an RTX 5090)
    ("GeForce GT 7300 XYZ\n>>> import torch; torch.ones(1).cuda() + 1\nRuntimeError: CUDA "
     "error: no kernel image is available for execution on the device", "no-kernel-image"),
    ("GeForce GT 7300 XYZ (compute capability 3.5)\n>>> import torch; torch.ones(1).cuda() + 1\nRuntimeError: CUDA "
     "error: no kernel image is available for execution on the device", "torch-arch-unsupported"),
    ("My GeForce has cuda capability 2.1.\n>>> import torch\n>>> torch.rand(3).cuda() * 2\nRuntimeError: cuda runtime "
     "error (8) : invalid device function", "torch-arch-unsupported"),
    # "pytorch" in prose or a path is no torch program (review): the generic cause stays first
    ("conda env /home/u/envs/pytorch-gpu, running darknet on a GeForce (cuda capability 2.1):\nCUDA Error: invalid "
     "device function", "no-kernel-image"),
    # a markdown system-info block ("- **PyTorch:** 2.9.1+cu130"): the wheel starts at sm_75, a GTX 1080 Ti is sm_61
    ("worker error: CUDA error: no kernel image is available for execution on the device\n## System Info\n"
     "- **PyTorch:** 2.9.1+cu130\n- **GPU:** NVIDIA GeForce GTX 1080 Ti", "torch-arch-unsupported"),
    # (session 25) a GPU most wheels lack (K80: sm_37 only in the cu116-cu118 wheels; RTX 50xx: sm_120 only in cu128 and
    # later), a torch program and no other binary named: torch's wheel first, the generic cause second
    ("Tesla K80 (compute capability 3.7)\nimport torch\nRuntimeError: CUDA error: no kernel image is available for "
     "execution on the device", "torch-arch-unsupported"),
    ("Error when trying to use nvidia 5090\nRuntimeError:\nCUDA error: no kernel image is available for execution on "
     "the device CUDA kernel errors might be asynchronously reported at some other API call", "torch-arch-unsupported"),
    # ... but not where the report names a binary with kernels of its own (flash-attn, a JIT extension, ggml)
    ("Error when trying to use nvidia 5090\n  File \"/venv/lib/site-packages/flash_attn/flash_attn_interface.py\"\n"
     "RuntimeError: CUDA error: no kernel image is available for execution on the device CUDA kernel errors might be "
     "asynchronously reported at some other API call", "no-kernel-image"),
    ("RTX 5080, torch.utils.cpp_extension.load(name='fused', ...)\nRuntimeError: CUDA error: no kernel image is "
     "available for execution on the device\nCUDA kernel errors might be asynchronously reported", "no-kernel-image"),
    # (round 17b) a GeForce named by its number alone on the error line ("on 5070TI")
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device on 5070TI\nCUDA kernel errors "
     "might be asynchronously reported at some other API call", "torch-arch-unsupported"),
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device on 3090\nCUDA kernel errors "
     "might be asynchronously reported at some other API call", "no-kernel-image"),
    # a GPU most wheels have (Pascal: most wheels have sm_61): no prior, the generic cause
    ("GeForce GTX 1080\nimport torch\nRuntimeError: CUDA error: no kernel image is available for execution on the "
     "device", "no-kernel-image"),
    ("NVIDIA GeForce RTX 3090\nimport torch\nRuntimeError: CUDA error: no kernel image is available for execution on "
     "the device", "no-kernel-image"),
    # not a torch program: the program's own binary lacks the GPU
    ("lc0 v0.26 on a GT 730 (compute capability 3.5)\nCUDA error: no kernel image is available for execution on the "
     "device (../../src/neural/cuda/common_kernels.cu:254)", "no-kernel-image"),
    # a release the matrix does not know proves nothing, and every reading must agree
    ("GT 730 (compute capability 3.5), pytorch 1.2\nRuntimeError: CUDA error: no kernel image is available for "
     "execution on the device", "no-kernel-image"),
]


@pytest.mark.parametrize("text, first", named_cases(
    ("every_reading_agrees", EVERY_READING_AGREES),
    ("datacenter_names", DATACENTER_NAMES),
    ("torch_program_no_release", TORCH_PROGRAM_NO_RELEASE),
))
def test_the_gate_answers(text, first):
    assert answer(text)[:1] == [first], answer(text)


def test_no_wheel_named_means_most_wheels_the_matrix_knows():
    assert versions.wheel_lacks_arch("3.5", "import torch") is True
    assert versions.wheel_lacks_arch("3.7", "import torch") is True  # only the cu116-cu118 wheels have sm_37
    assert versions.wheel_lacks_arch("sm_120", "import torch") is True  # the wheels before cu128 stop at sm_90
    assert versions.wheel_lacks_arch("6.1", "import torch") is False  # most wheels have sm_61
    assert versions.wheel_lacks_arch("8.6", "import torch") is False
    lacking, total = versions.wheels_lacking("3.5")
    assert total > 0 and lacking == total
    lacking, total = versions.wheels_lacking("sm_120")
    assert total // 2 < lacking < total
    assert versions.wheels_lacking("GeForce GT 9999 XYZ") == (0, 0)  # a GPU the matrix cannot place
    assert versions.gpu_ccs("5070TI") == versions.gpu_ccs("RTX 5070 Ti") == {(12, 0)}
    assert versions.wheel_lacks_arch("3.5", "9.9") is False  # a release the matrix does not know


def test_the_fallback_note_names_no_release():
    text = ("Tesla K40m (compute capability 3.5)\n>>> import torch; torch.ones(1).cuda() + 1\n"
            "RuntimeError: CUDA error: no kernel image is available for execution on the device")
    found = rank.matches(SIGS, SCANNER.scan_text(text))
    assert found[0].id == "torch-arch-unsupported" and found[0].gated
    notes = personal.personalise(found[0], {}, personal.load_matrix()).notes
    assert any("runs torch on a GPU of compute capability 3.5" in n for n in notes), notes
    assert not any("names torch import torch" in n for n in notes), notes


@pytest.mark.parametrize("arch, nvcc, lacks", [
    ("sm_100", "12.6", True),  # Blackwell's sm_100 came with CUDA 12.8
    ("sm_100", "12.8", False),
    ("compute_35", "12.4", True),  # Kepler's last nvcc was 11.8
    ("compute_35", "11.8", False),
    ("sm_90a", "11.8", False),  # an arch-specific variant is read as its compute capability
    ("sm_61", "13.0", True),  # CUDA 13 dropped Pascal
    ("sm_999", "12.6", False),  # an arch the matrix does not know proves nothing
    ("sm_100", "banana", False),
])
def test_nvcc_lacks_arch(arch, nvcc, lacks):
    assert versions.nvcc_lacks_arch(arch, nvcc) is lacks


@pytest.mark.parametrize("text, first", [
    # (round 25, gdrcopy#325's shape) a prose report: the arch nvcc lacks and nvcc's own version line
    ("building with CUDA 12.6 fails as it does not support `sm_100`.\n$ nvcc --version\n"
     "Cuda compilation tools, release 12.6, V12.6.68", "nvcc-unsupported-arch"),
    ("nvcc 12.4 with -gencode arch=compute_35,code=sm_35: the build stops", "nvcc-unsupported-arch"),
])
def test_nvcc_gate_confirms_without_the_error_line(text, first):
    assert answer(text, strict=True)[:1] == [first], answer(text, strict=True)


@pytest.mark.parametrize("text", [
    # the nvcc can build the arch: nothing to confirm
    "building with CUDA 12.8, which does support `sm_100`.\nCuda compilation tools, release 12.8, V12.8.61",
    # an arch without an nvcc, or an nvcc without an arch, proves nothing
    "my build does not support `sm_100` yet",
    "Cuda compilation tools, release 12.6, V12.6.68",
])
def test_nvcc_gate_needs_both_and_a_lack(text):
    assert "nvcc-unsupported-arch" not in answer(text, strict=True), answer(text, strict=True)


def test_real_nvcc13_refusing_sm_61_with_and_without_its_error_line():
    # recorded here: nvcc 13.0 asked for Pascal's sm_61 (CUDA 13 dropped it)
    from pathlib import Path

    text = (Path(__file__).parent / "data" / "nvcc" / "s29_nvcc13_sm61.txt").read_text()
    assert "Unsupported gpu architecture 'sm_61'" in text
    assert answer(text, strict=True)[:1] == ["nvcc-unsupported-arch"], answer(text, strict=True)
    # the error line gone (a report that paraphrases it): nvcc's release and the arch it was asked for still say it
    rest = "\n".join(ln for ln in text.splitlines() if "nvcc fatal" not in ln)
    assert answer(rest, strict=True)[:1] == ["nvcc-unsupported-arch"], answer(rest, strict=True)

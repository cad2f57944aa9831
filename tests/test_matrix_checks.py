"""The matrix checks (orders 80-85) against scenarios, and the real H200 machine (all OK)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from cudadoctor.checks.registry import ordered, run_steps
from cudadoctor.facts.compiler import CompilerInfo, HostCompiler, parse_compiler_version
from cudadoctor.facts.driver import parse_smi_banner
from cudadoctor.facts.toolkit import parse_nvcc_version
from cudadoctor.facts.types import GpuInfo, NvccInstall, SmiInfo, ToolkitInfo, TorchDevice, TorchInfo
from cudadoctor.model import Fact, Status

DATA = Path(__file__).parent / "data" / "matrix"


def steps():
    return [s for s in ordered() if s.id.startswith("matrix.")]


def facts(driver, cuda, gpus, torch=None, nvcc=(), gcc=None):
    f = {"nvidia_smi": Fact.found(SmiInfo(driver_version=driver, cuda_version=cuda, gpus=[
        GpuInfo(index=i, name=n, compute_capability=c) for i, (n, c) in enumerate(gpus)]))}
    if torch is not None:
        f["torch"] = Fact.found(torch)
    if nvcc:
        f["toolkit"] = Fact.found(ToolkitInfo(
            installs=[NvccInstall(nvcc=f"/usr/local/cuda-{v}/bin/nvcc", version=v, found_via=["PATH"]) for v in nvcc],
            path_nvcc=f"/usr/local/cuda-{nvcc[0]}/bin/nvcc"))
    if gcc:
        f["compiler"] = Fact.found(CompilerInfo(compilers=[HostCompiler("g++", "/usr/bin/g++", "/usr/bin/g++-x", "gcc", gcc)]))
    return f


def results(f):
    return {r.id: r for r in run_steps(steps(), f)}


def ids(res, step_id):
    return {(x.id, x.status) for x in res[step_id].findings}


def finding(res, fid):
    return next(x for r in res.values() for x in r.findings if x.id == fid)


def test_steps_registered_in_order():
    got = [(s.id, s.order) for s in steps()]
    assert [i for i, _ in got] == ["matrix.driver-toolkit", "matrix.driver-torch", "matrix.nvcc-gpu",
                                   "matrix.torch-gpu", "matrix.cudnn", "matrix.host-compiler", "matrix.freshness"]
    assert all(80 <= o <= 89 for _, o in got)


def test_rtx5090_with_torch_2_6_cu124():
    # torch 2.6.0+cu124 is built for 5.0-9.0 (CONDA / BLD); an RTX 5090 is cc 12.0 and needs cu128 (2.7+)
    t = TorchInfo(installed=True, version="2.6.0+cu124", cuda="12.4", cudnn_version=90100,
                  arch_list=["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"])
    res = results(facts("570.133.07", "12.8", [("NVIDIA GeForce RTX 5090", "12.0")], t))
    assert res["matrix.torch-gpu"].status is Status.FAIL
    f = finding(res, "matrix.torch-gpu.no-kernel-image")
    assert f.fix.commands[0] == "pip install 'torch==2.7.*' --index-url https://download.pytorch.org/whl/cu128"
    assert all("whl/cu128" in c for c in f.fix.commands)  # R570 cannot run cu130
    assert ids(res, "matrix.driver-torch") == {("matrix.driver-torch.ok", Status.OK)}


def test_gtx1080_with_torch_2_9_cu130():
    # 2.9 cu130 is 7.5-12.0 (+PTX 12.0): nothing for cc 6.1; cuDNN 9.13 needs cc >= 7.5;
    # nvcc 13.0 dropped sm_61 (last: 12.9)
    t = TorchInfo(installed=True, version="2.9.0+cu130", cuda="13.0", cudnn_version=91300,
                  arch_list=["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"])
    res = results(facts("580.95.05", "13.0", [("NVIDIA GeForce GTX 1080", "6.1")], t, nvcc=["13.0"], gcc="13.3.0"))
    assert ("matrix.torch-gpu.no-kernel-image", Status.FAIL) in ids(res, "matrix.torch-gpu")
    fix = finding(res, "matrix.torch-gpu.no-kernel-image").fix
    assert fix.commands[0] == "pip install 'torch==2.9.*' --index-url https://download.pytorch.org/whl/cu126"
    assert ("matrix.cudnn.gpu-unsupported", Status.FAIL) in ids(res, "matrix.cudnn")
    assert ("matrix.nvcc-gpu.cannot-target", Status.FAIL) in ids(res, "matrix.nvcc-gpu")
    assert "sudo apt install cuda-toolkit-12-9" in finding(res, "matrix.nvcc-gpu.cannot-target").fix.commands
    assert res["matrix.driver-torch"].status is Status.OK
    assert res["matrix.host-compiler"].status is Status.OK  # gcc 13 <= 15 for CUDA 13.0


def test_driver_525_with_torch_cu128():
    # R525 reports CUDA 12.0; cu128 runs only through 12.x minor-version compatibility (floor 525.60.13)
    t = TorchInfo(installed=True, version="2.7.1+cu128", cuda="12.8", cudnn_version=90701,
                  arch_list=["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"])
    res = results(facts("525.60.13", "12.0", [("Tesla T4", "7.5")], t))
    assert ids(res, "matrix.driver-torch") == {("matrix.driver-torch.minor-compat", Status.WARN)}
    f = finding(res, "matrix.driver-torch.minor-compat")
    assert "sudo apt install nvidia-driver-570" in f.fix.commands
    assert f.evidence["min_driver_full"] == "570.26"


def test_driver_525_too_old_for_cu130():
    t = TorchInfo(installed=True, version="2.9.0+cu130", cuda="13.0", arch_list=["sm_75", "sm_80", "sm_86", "sm_90"])
    res = results(facts("525.60.13", "12.0", [("Tesla T4", "7.5")], t))
    f = finding(res, "matrix.driver-torch.driver-too-old")
    assert f.status is Status.FAIL
    # the same release in a 12.x variant (runs under minor-version compatibility), or the newest 11.8 wheel
    assert f.fix.commands[0] == "pip install 'torch==2.9.*' --index-url https://download.pytorch.org/whl/cu128"
    assert "pip install 'torch==2.7.*' --index-url https://download.pytorch.org/whl/cu118" in f.fix.commands
    assert "sudo apt install nvidia-driver-580" in f.fix.commands


def test_gcc13_with_nvcc_12_1():
    # cpp_extension.py: CUDA 12.0-12.2 accept gcc < 13
    res = results(facts("535.104.05", "12.2", [("NVIDIA A100-SXM4-80GB", "8.0")], nvcc=["12.1"], gcc="13.2.0"))
    f = finding(res, "matrix.host-compiler.gcc-too-new")
    assert f.status is Status.FAIL
    assert "sudo apt install gcc-12 g++-12" in f.fix.commands
    assert res["matrix.driver-toolkit"].status is Status.OK


def test_nvcc_newer_than_driver_is_minor_compat():
    res = results(facts("535.104.05", "12.2", [("NVIDIA L4", "8.9")], nvcc=["12.6"], gcc="12.3.0"))
    assert ids(res, "matrix.driver-toolkit") == {("matrix.driver-toolkit.minor-compat", Status.WARN)}
    res = results(facts("470.57.02", "11.4", [("NVIDIA L4", "8.9")], nvcc=["12.6"], gcc="12.3.0"))
    assert ids(res, "matrix.driver-toolkit") == {("matrix.driver-toolkit.driver-too-old", Status.FAIL)}


def test_nvcc_too_old_for_blackwell():
    res = results(facts("570.133.07", "12.8", [("NVIDIA GeForce RTX 5090", "12.0")], nvcc=["12.6"], gcc="12.3.0"))
    f = finding(res, "matrix.nvcc-gpu.cannot-target")
    assert f.status is Status.FAIL and "sudo apt install cuda-toolkit-12-8" in f.fix.commands


def test_cudnn_shadowed():
    t = TorchInfo(installed=True, version="2.8.0+cu128", cuda="12.8", cudnn_version=90100,
                  arch_list=["sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
                  libraries=["/usr/lib/x86_64-linux-gnu/libcudnn.so.9.1.0"])
    res = results(facts("570.133.07", "12.8", [("NVIDIA L4", "8.9")], t))
    # cuDNN 9.1 under torch 2.8's 9.10 (its wheel's pin): an older minor, which torch refuses
    assert ("matrix.cudnn.older-than-torch", Status.FAIL) in ids(res, "matrix.cudnn")


def test_nothing_to_compare_is_skip():
    res = results({})
    assert {r.status for r in res.values()} == {Status.SKIP}


def test_compiler_version_parsing():
    assert parse_compiler_version("gcc (Ubuntu 13.3.0-6ubuntu2~24.04.1) 13.3.0\nCopyright (C) 2023 Free Software Foundation")[:2] == ("gcc", "13.3.0")
    assert parse_compiler_version("Ubuntu clang version 18.1.3 (1ubuntu1)\nTarget: x86_64")[:2] == ("clang", "18.1.3")


# --- the real H200 machine (tests/data/matrix, copied from a capture): every matrix check is OK


def h200_facts():
    smi = parse_smi_banner((DATA / "nvidia_smi.txt").read_text())
    ver, build = parse_nvcc_version((DATA / "nvcc_version.txt").read_text())
    info = (DATA / "torch_info.txt").read_text()
    tver, tcuda = re.search(r"^torch (\S+) cuda (\S+)", info, re.M).groups()
    arch = ast.literal_eval(re.search(r"^arch_list (.*)$", info, re.M).group(1))
    cudnn = int(re.search(r"^cudnn (\d+)", info, re.M).group(1))
    gcc_line = (DATA / "gcc_version.txt").read_text().split(":", 1)[1].strip()
    fam, gver, _ = parse_compiler_version(f"gcc {gcc_line}")
    return {
        "nvidia_smi": Fact.found(SmiInfo(driver_version=smi["driver_version"], cuda_version=smi["cuda_version"],
                                         gpus=[GpuInfo(0, "NVIDIA H200", compute_capability="9.0")])),
        "toolkit": Fact.found(ToolkitInfo(installs=[NvccInstall(
            "/usr/local/cuda/bin/nvcc", "/usr/local/cuda-13.0/bin/nvcc", "/usr/local/cuda-13.0", ver, build, ["PATH"])],
            path_nvcc="/usr/local/cuda/bin/nvcc")),
        "torch": Fact.found(TorchInfo(installed=True, version=tver, cuda=tcuda, arch_list=arch, cudnn_version=cudnn,
                                      devices=[TorchDevice(0, "NVIDIA H200", "9.0")])),
        "compiler": Fact.found(CompilerInfo(compilers=[HostCompiler("g++", "/usr/bin/g++", "/usr/bin/g++-13", fam, gver)])),
    }


def test_h200_fixture_all_ok():
    f = h200_facts()
    assert f["nvidia_smi"].value.driver_version == "580.159.04" and f["torch"].value.version == "2.11.0+cu130"
    res = results(f)
    assert {k: r.status for k, r in res.items()} == {k: Status.OK for k in res}
    assert {x.id for r in res.values() for x in r.findings} == {
        "matrix.driver-toolkit.ok", "matrix.driver-torch.ok", "matrix.nvcc-gpu.ok", "matrix.torch-gpu.ok",
        "matrix.cudnn.ok", "matrix.host-compiler.ok", "matrix.freshness.ok"}


@pytest.mark.parametrize("gpu", [("NVIDIA H200", "9.0")])
def test_h200_recommend_includes_its_own_wheel(gpu):
    from cudadoctor.matrix import load

    recs = load().recommend_torch((9, 0), "580.159.04", "13.0")
    assert any(r["torch"] == "2.11" and r["cu"] == "cu130" and r["driver"] == "full" for r in recs)

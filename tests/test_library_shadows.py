"""A library loaded from somewhere other than torch's own copy, judged by version (issue 13): older than
torch's FAIL naming the error torch gives, newer WARN, the same version OK; matrix.cudnn reads the same facts."""

from __future__ import annotations

import pytest

from cudadoctor.checks.registry import ordered, run_steps
from cudadoctor.facts import libs as L
from cudadoctor.facts.types import CudnnInfo, SmiInfo, GpuInfo, TorchInfo
from cudadoctor.model import Fact, Status

SITE = "/opt/torch/.venv/lib/python3.12/site-packages"
SYS = "/usr/lib/x86_64-linux-gnu"
TORCH_ERR = ("RuntimeError: cuDNN version incompatibility: PyTorch was compiled  against (9, 19, 0) but found runtime "
             "version (9, 14, 0). PyTorch already comes bundled with cuDNN.")


def lib(family, version, origin, path, via="", detail=""):
    return L.LibFile(family=family, path=path, realpath=path, version=version, origin=origin, via=via,
                     origin_detail=detail)


def wheel_cudnn(family="libcudnn_graph"):
    return lib(family, "9.19.0.56", L.PIP, f"{SITE}/nvidia/cudnn/lib/{family}.so.9", "torch's RUNPATH",
               "nvidia-cudnn-cu13 9.19.0.56")


def system_copy(family, version):
    return lib(family, version, L.SYSTEM, f"{SYS}/{family}.so.{version}", f"LD_LIBRARY_PATH entry {SYS}")


def facts(loaded, copies, cudnn=None, cudnn_version=91900):
    info = L.LibsInfo(method="maps", loaded=loaded, copies=copies, ld_library_path=[SYS, "/usr/local/nvidia/lib64"])
    torch = TorchInfo(installed=True, version="2.11.0+cu130", cuda="13.0", available=True, device_count=1,
                      cudnn=cudnn, cudnn_version=cudnn_version, python="/opt/torch/.venv/bin/python3")
    smi = SmiInfo(driver_version="580.159.04", cuda_version="13.0",
                  gpus=[GpuInfo(index=0, name="NVIDIA H200", compute_capability="9.0")])
    return {"libs": Fact.found(info), "torch": Fact.found(torch), "nvidia_smi": Fact.found(smi)}


def judge(f, step):
    res = run_steps(ordered([step]), f)[0]
    return res, {x.id: x for x in res.findings}


def test_an_older_cudnn_than_torch_was_built_against_fails_with_torchs_own_words():
    cud = CudnnInfo(available=True, compiled="9.19.0", runtime="9.14.0", version_error=TORCH_ERR)
    f = facts([system_copy("libcudnn_graph", "9.14.0"), wheel_cudnn("libcudnn")],
              [wheel_cudnn(), system_copy("libcudnn_graph", "9.14.0")], cud, cudnn_version=None)
    res, by = judge(f, "libraries")
    older = by["libs.shadows-older"]
    assert older.status is Status.FAIL and res.status is Status.FAIL
    assert TORCH_ERR in older.summary  # torch's words, verbatim, from torch itself
    assert older.fix.commands == ("export LD_LIBRARY_PATH=/usr/local/nvidia/lib64",)
    m_res, m = judge(f, "matrix.cudnn")
    assert m["matrix.cudnn.older-than-torch"].status is Status.FAIL
    assert m["matrix.cudnn.older-than-torch"].evidence["error"] == TORCH_ERR
    assert m["matrix.cudnn.older-than-torch"].fix.commands == ("export LD_LIBRARY_PATH=/usr/local/nvidia/lib64",)
    assert "no cuDNN" not in m_res.summary


def test_compiled_against_comes_from_torch_not_from_the_loaded_library():
    # the wheel copy on disk says 9.19.0.56, but torch says it was built against 9.15: 9.14 is still older
    cud = CudnnInfo(available=True, compiled="9.15.0", runtime="9.14.0")
    f = facts([system_copy("libcudnn_graph", "9.14.0")], [wheel_cudnn()], cud)
    _, by = judge(f, "libraries")
    assert "9.15.0 (torch was compiled against)" in by["libs.shadows-older"].summary
    assert "(9, 15, 0)" in by["libs.shadows-older"].summary


@pytest.mark.parametrize("version,fid,status", [
    ("9.20.1", "libs.shadows-newer", Status.WARN),
    ("9.19.0", "libs.shadows-same", Status.OK),
    ("9.19.2", "libs.shadows-newer", Status.WARN),  # a newer patch: compatible, but not torch's
])
def test_newer_is_a_warning_and_the_same_version_a_note(version, fid, status):
    cud = CudnnInfo(available=True, compiled="9.19.0", runtime=version)
    f = facts([system_copy("libcudnn_graph", version)], [wheel_cudnn()], cud)
    res, by = judge(f, "libraries")
    assert by[fid].status is status
    assert not [x for x in res.findings if x.id.startswith("libs.shadows-") and x.id != fid]
    _, m = judge(f, "matrix.cudnn")
    assert "matrix.cudnn.older-than-torch" not in m


def test_an_older_cublas_fails_with_an_undefined_symbol():
    old = lib("libcublas", "13.0.0.19", L.TOOLKIT, "/usr/local/cuda-13.0/lib64/libcublas.so.13.0.0.19",
              "LD_LIBRARY_PATH entry /usr/local/cuda-13.0/lib64")
    mine = lib("libcublas", "13.1.0.3", L.PIP, f"{SITE}/nvidia/cu13/lib/libcublas.so.13", "torch's RUNPATH",
               "nvidia-cublas 13.1.0.3")
    f = facts([old], [mine, old])
    f["libs"].value.ld_library_path = ["/usr/local/cuda-13.0/lib64"]
    _, by = judge(f, "libraries")
    assert by["libs.shadows-older"].status is Status.FAIL and "undefined symbol" in by["libs.shadows-older"].summary
    assert by["libs.shadows-older"].fix.commands == ("unset LD_LIBRARY_PATH",)


def test_driver_libraries_and_torchs_own_copies_are_not_shadows():
    f = facts([lib("libcuda", "580.159.04", L.SYSTEM, "/usr/local/nvidia/lib64/libcuda.so.580.159.04",
                   "LD_LIBRARY_PATH entry /usr/local/nvidia/lib64"), wheel_cudnn()], [wheel_cudnn()])
    res, by = judge(f, "libraries")
    assert not [x for x in by if x.startswith("libs.shadows")] and res.status is Status.OK


def test_matrix_cudnn_reads_the_loaded_cudnn_when_torch_refused_to_say():
    # a 0.1.0 report: no cuDNN versions from torch, cudnn_version None (version() raised), libs loaded 9.14 + 9.19
    f = facts([system_copy("libcudnn_graph", "9.14.0"), wheel_cudnn("libcudnn")], [wheel_cudnn()], None,
              cudnn_version=None)
    res, by = judge(f, "matrix.cudnn")
    assert res.status is Status.FAIL and "matrix.cudnn.older-than-torch" in by
    assert by["matrix.cudnn.older-than-torch"].evidence["cudnn"] == "9.14.0"


def test_matrix_cudnn_without_any_cudnn_answer_says_unknown_not_none():
    f = facts([], [], None, cudnn_version=None)
    del f["libs"]
    res, by = judge(f, "matrix.cudnn")
    assert res.status is Status.SKIP and "unknown" in res.summary and "no cuDNN" not in res.summary
    built_without = facts([], [], CudnnInfo(available=False), cudnn_version=None)
    res, by = judge(built_without, "matrix.cudnn")
    assert list(by) == ["matrix.cudnn.not-built"]

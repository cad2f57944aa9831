"""The driver-API probe tells a build failure (the toolkit's) from a launch failure (the driver's or GPU's):
a broken nvcc first on PATH that still prints a version was reported as "did not run through the CUDA driver
API", quoting nvcc's banner (issue 13)."""

from __future__ import annotations

import os

from cudadoctor.checks.probe_launch import check_probe_launch
from cudadoctor.checks.registry import Context
from cudadoctor.facts.types import NvccInstall, ToolkitInfo
from cudadoctor.model import Fact, Status
from cudadoctor.probes import build as B
from cudadoctor.probes import run as R
from cudadoctor.probes.run import LaunchInfo
from cudadoctor.system.host import HostSystem

KERNELS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "probe_kernels")
BANNER = ("nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2025 NVIDIA Corporation\n"
          "Cuda compilation tools, release 13.0, V13.0.88\nBuild cuda_13.0.r13.0/compiler.36424714_0")
GOOD_TK = ToolkitInfo(installs=[
    NvccInstall(nvcc="/tmp/bad/nvcc", realpath="/tmp/bad/nvcc", root="/tmp", version="13.0", is_toolkit=False),
    NvccInstall(nvcc="/usr/local/cuda-13.0/bin/nvcc", realpath="/usr/local/cuda-13.0/bin/nvcc",
                root="/usr/local/cuda-13.0", version="13.0", is_toolkit=True)])


def broken_nvcc(folder) -> str:
    """An nvcc that answers --version like 13.0 and fails every build, printing its banner."""
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / "nvcc"
    p.write_text("#!/bin/sh\ncat <<'EOF'\n" + BANNER + "\nEOF\n[ \"$1\" = --version ] && exit 0\nexit 1\n")
    p.chmod(0o755)
    return str(p)


def judge(info: LaunchInfo, tk=GOOD_TK):
    out = check_probe_launch(Context(facts={"probe_launch": Fact.found(info, "probe"), "toolkit": Fact.found(tk)}))
    return out, {f.id: f for f in out.findings}


def test_a_broken_nvcc_is_a_build_failure_not_a_launch_failure(tmp_path, monkeypatch):
    nvcc = broken_nvcc(tmp_path / "bad")
    monkeypatch.setattr(B, "nvrtc_candidates", lambda system, sp: [])  # no NVRTC to fall back to
    system = HostSystem(env={"PATH": f"{os.path.dirname(nvcc)}:/usr/bin:/bin", "HOME": str(tmp_path)})
    res = R.run_probes(system, (9, 0), quick=True, kernels=False, runtime=False, launch=False, kernels_dir=KERNELS,
                       cache_dir=str(tmp_path / "cache"))
    assert res.nvcc_failure_path == nvcc
    assert res.nvcc_failure.startswith("exit code 1: nvcc: NVIDIA (R) Cuda compiler driver")
    info = LaunchInfo.from_result(res)
    out, f = judge(info)
    assert f["probe.launch.build-failed"].status is Status.FAIL
    assert nvcc in f["probe.launch.build-failed"].summary
    assert "probe.launch.native-failed" not in f
    assert out.summary.startswith("build failed") and "launch not tested" in out.summary
    assert any(c.startswith("export PATH=/usr/local/cuda-13.0/bin:$PATH") for c in f["probe.launch.build-failed"].fix.commands)


def test_nvrtc_tests_the_launch_when_nvcc_cannot_build(monkeypatch):
    nvcc = B.Compiler("nvcc", "/tmp/bad/nvcc", "13.0", "nvcc 13.0 V13.0.88")
    nvrtc = B.Compiler("nvrtc", "/usr/local/cuda/lib64/libnvrtc.so.13", "13.0", "nvrtc 13.0 x")
    picks = []

    def pick(system, prefer="auto", site_packages=None):
        picks.append(prefer)
        return (nvcc if prefer == "auto" else nvrtc), ""

    def rows(system, comp, cc, judge_cc, driver_cuda, quick, kernels_dir, use_cache, cache_dir):
        spec = B.plan(cc, comp, quick=True)[0]
        if comp.kind == "nvcc":
            return [(R.Row("native", "", ""), B.Built(spec, error="exit code 1: " + BANNER, compiler_failed=True))]
        return [(R.Row("native", "", "", sass=["sm_90"], predicted="native"), B.Built(spec, path="/x.cubin"))]

    monkeypatch.setattr(B, "pick_compiler", pick)
    monkeypatch.setattr(R, "build_rows", rows)
    res = R.run_probes(HostSystem(), (9, 0), quick=True, kernels=False, runtime=False, launch=False)
    assert picks == ["auto", "nvrtc"] and res.compiler == "nvrtc 13.0"
    assert res.nvcc_failure_path == "/tmp/bad/nvcc" and res.rows[0].sass == ["sm_90"]


def test_launch_verdict_stands_next_to_the_nvcc_failure():
    ran = [{"name": "native", "sass": ["sm_90"], "ptx": [], "predicted": "native", "driver_api": "native",
            "match": True, "driver_error": ""},
           {"name": "sass-foreign", "sass": ["sm_89"], "ptx": [], "predicted": "no-kernel-image",
            "driver_api": "no-kernel-image", "match": True, "driver_error": ""}]
    info = LaunchInfo(cc="9.0", device="NVIDIA H200", compiler="nvrtc 13.0", rows=ran,
                      nvcc_failure="exit code 1: " + BANNER, nvcc_failure_path="/tmp/bad/nvcc")
    out, f = judge(info)
    assert f["probe.launch.build-failed"].status is Status.FAIL
    assert f["probe.launch.ok"].status is Status.OK
    assert "nvrtc 13.0" in out.summary and "native-failed" not in str(list(f))


def test_a_real_launch_failure_is_still_a_launch_failure():
    bad = [{"name": "native", "sass": ["sm_90"], "ptx": [], "predicted": "native",
            "driver_api": "error:CUDA_ERROR_LAUNCH_FAILED", "match": None, "driver_error": "cuLaunchKernel -> 719"}]
    out, f = judge(LaunchInfo(cc="9.0", device="NVIDIA H200", compiler="nvcc 13.0", rows=bad))
    assert f["probe.launch.native-failed"].status is Status.FAIL and "build-failed" not in str(list(f))


def test_an_nvcc_linked_into_another_folder_is_pointed_back_to_its_own():
    # (session 33, seen on the H200) a link to a working nvcc in another PATH folder answers --version but finds no
    # headers ("cuda_runtime.h: No such file or directory"): the fix names the real folder, which has no other install
    tk = ToolkitInfo(installs=[NvccInstall(nvcc="/tmp/nosmi/nvcc", realpath="/usr/local/cuda-13.0/bin/nvcc",
                                           root="/usr/local/cuda-13.0", version="13.0", is_toolkit=True)])
    err = "exit code 1: <command-line>: fatal error: cuda_runtime.h: No such file or directory"
    info = LaunchInfo(cc="9.0", device="NVIDIA H200", compiler="nvrtc 13.0", rows=[],
                      nvcc_failure=err, nvcc_failure_path="/tmp/nosmi/nvcc")
    out, f = judge(info, tk)
    b = f["probe.launch.build-failed"]
    assert b.status is Status.FAIL and "is a link to /usr/local/cuda-13.0/bin/nvcc" in b.detail
    assert any(c.startswith("export PATH=/usr/local/cuda-13.0/bin:$PATH CUDA_HOME=/usr/local/cuda-13.0")
               for c in b.fix.commands)

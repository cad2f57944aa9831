"""Scanning site-packages for CUDA binaries, the probe check steps, and the archs/scan/probe commands."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from cudadoctor.checks.probe_launch import check_probe_launch
from cudadoctor.checks.probe_scan import check_probe_scan
from cudadoctor.checks.registry import Context
from cudadoctor.facts.types import EnvInfo, GpuInfo, SmiInfo
from cudadoctor.model import Fact, Status
from cudadoctor.probes.run import LaunchInfo
from cudadoctor.probes.scan import ScanFile, ScanInfo, arch_list_targets, scan_python
from fakes.system import FakeCmd, FakeSystem
from test_fatbin import _host_elf, make_entry, make_fatbin

SP = "/venv/lib/python3.12/site-packages"


def _fs() -> FakeSystem:
    fs = FakeSystem()
    fs.add_exe("/venv/bin/python", FakeCmd(stdout=json.dumps({"python": "/venv/bin/python", "site": [SP, "/nope"]})))
    fs.add_file(f"{SP}/torch/lib/libtorch_cuda.so", _host_elf({".nv_fatbin": make_fatbin(
        make_entry(2, 80), make_entry(2, 90), make_entry(2, 100))}))
    fs.add_file(f"{SP}/myext/_C.cpython-312-x86_64-linux-gnu.so",
                _host_elf({".nv_fatbin": make_fatbin(make_entry(2, 80))}))
    fs.add_file(f"{SP}/jitonly/k.so.1", _host_elf({".nv_fatbin": make_fatbin(make_entry(1, 75))}))
    fs.add_file(f"{SP}/numpy/core/_multiarray.so", _host_elf({".text": b"\x90" * 16}))
    fs.add_file(f"{SP}/broken/kernels.cubin", b"\x7fELF\x02\x01")
    fs.add_file(f"{SP}/pkg/__init__.py", "")
    return fs


def test_scan_finds_cuda_binaries_and_their_archs():
    info, err = scan_python(_fs(), "/venv/bin/python")
    assert err == ""
    assert info.python == "/venv/bin/python" and info.site_packages == [SP]
    by = {f.package: f for f in info.files}
    assert set(by) == {"torch", "myext", "jitonly", "broken"}  # numpy has no CUDA code
    assert by["torch"].sass == ["sm_80", "sm_90", "sm_100"]
    assert by["myext"].sass == ["sm_80"]
    assert by["jitonly"].ptx == ["compute_75"]
    assert "truncated" in by["broken"].error
    assert info.candidates == 5


def test_scan_when_the_interpreter_hangs_or_is_missing():
    fs = FakeSystem()
    fs.add_exe("/venv/bin/python", FakeCmd(hang=True))
    info, err = scan_python(fs, "/venv/bin/python")
    assert "no answer" in err and info.files == []
    _, err = scan_python(fs, "/missing/python")
    assert err


def _ctx(scan=None, cc="9.0", arch_list=None, scan_fact=None) -> Context:
    smi = SmiInfo(path="/usr/bin/nvidia-smi", driver_version="580.159.04", cuda_version="13.0",
                  gpus=[GpuInfo(0, "NVIDIA H200", compute_capability=cc)] if cc else [])
    facts = {"nvidia_smi": Fact.found(smi, "nvidia-smi"),
             "env": Fact.found(EnvInfo(vars={"TORCH_CUDA_ARCH_LIST": arch_list} if arch_list else {}), "env")}
    if scan_fact is not None:
        facts["probe_scan"] = scan_fact
    elif scan is not None:
        facts["probe_scan"] = Fact.found(scan, "scan")
    return Context(facts=facts)


def _ids(out) -> dict:
    return {f.id: f.status for f in out.findings}


def test_check_names_the_extension_that_cannot_run():
    info, _ = scan_python(_fs(), "/venv/bin/python")
    out = check_probe_scan(_ctx(info))
    ids = _ids(out)
    assert ids["probe.scan.no-kernel-image"] == Status.FAIL
    assert ids["probe.scan.ptx-jit-only"] == Status.WARN
    assert ids["probe.scan.unreadable"] == Status.WARN
    assert "probe.scan.ok" not in ids
    bad = next(f for f in out.findings if f.id == "probe.scan.no-kernel-image")
    assert bad.affects == "myext"
    assert any("--cc 9.0" in c for c in bad.fix.commands)
    assert any("TORCH_CUDA_ARCH_LIST=\"9.0\"" in c and "/venv/bin/python" in c for c in bad.fix.commands)


def test_check_ok_and_skip_and_ptx_too_new():
    ok = ScanInfo(python="/p", site_packages=[SP], files=[ScanFile(f"{SP}/torch/lib/x.so", "torch", "elf",
                                                                   ["sm_80", "sm_90"], [])])
    assert _ids(check_probe_scan(_ctx(ok))) == {"probe.scan.ok": Status.OK}
    assert _ids(check_probe_scan(_ctx(ok, cc=None))) == {"probe.scan.no-gpu": Status.SKIP}
    newer = ScanInfo(python="/p", site_packages=[SP], files=[ScanFile(f"{SP}/ext/x.so", "ext", "elf", [],
                                                                      ["compute_80"], {"compute_80": "9.1"})])
    out = check_probe_scan(_ctx(newer))
    assert _ids(out)["probe.scan.ptx-too-new"] == Status.FAIL  # 13.1 PTX, 13.0 driver
    new_f = next(f for f in out.findings if f.id == "probe.scan.ptx-too-new")
    assert "CUDA 13.1" in new_f.fix.text and "driver >= 590" in new_f.fix.text  # the matrix's minimum for 13.1


def test_check_warns_on_torch_cuda_arch_list():
    ok = ScanInfo(python="/p")
    ids = _ids(check_probe_scan(_ctx(ok, arch_list="8.0;8.6")))
    assert ids["probe.arch-list.cannot-run"] == Status.WARN
    assert "probe.arch-list.cannot-run" not in _ids(check_probe_scan(_ctx(ok, arch_list="8.0+PTX")))
    assert "probe.arch-list.cannot-run" not in _ids(check_probe_scan(_ctx(ok, arch_list="9.0a")))
    failed = _ids(check_probe_scan(_ctx(scan_fact=Fact.failed("scan", "python hung"))))
    assert failed == {"probe.scan.failed": Status.SKIP}


def test_arch_list_targets():
    assert arch_list_targets("8.0;8.6+PTX 9.0a") == (["sm_80", "sm_86", "sm_90a"], ["compute_86"])
    assert arch_list_targets("Ampere") is None
    assert arch_list_targets("") is None


def _launch_ctx(state: str, rows=None, error=""):
    info = LaunchInfo(cc="9.0", device="NVIDIA H200", driver_cuda="13.0", compiler="nvcc 13.0", rows=rows or [])
    f = {"found": Fact.found(info, "probe"), "na": Fact.not_applicable("probe", error),
         "nf": Fact.not_found("probe", error, value=info), "timeout": Fact.timeout("probe", error, value=info),
         "failed": Fact.failed("probe", error, value=info)}[state]
    return Context(facts={"probe_launch": f})


def _row(name, sass, verdict, observed, match=True):
    return {"name": name, "sass": sass, "ptx": [], "predicted": verdict, "driver_api": observed, "match": match,
            "driver_error": ""}


def test_launch_check_statuses():
    good = [_row("native", ["sm_90"], "native", "native"),
            _row("sass-foreign", ["sm_89"], "no-kernel-image", "no-kernel-image")]
    assert _ids(check_probe_launch(_launch_ctx("found", good))) == {"probe.launch.ok": Status.OK}
    bad = [_row("native", ["sm_90"], "native", "error:CUDA_ERROR_LAUNCH_FAILED", match=None)]
    assert _ids(check_probe_launch(_launch_ctx("found", bad)))["probe.launch.native-failed"] == Status.FAIL
    mism = good[:1] + [_row("sass-foreign", ["sm_89"], "no-kernel-image", "native", match=False)]
    assert _ids(check_probe_launch(_launch_ctx("found", mism)))["probe.launch.mismatch"] == Status.WARN
    assert _ids(check_probe_launch(_launch_ctx("na", error="no GPU"))) == {"probe.launch.skipped": Status.SKIP}
    assert _ids(check_probe_launch(_launch_ctx("nf", error="no nvcc"))) == {"probe.launch.no-compiler": Status.SKIP}
    assert _ids(check_probe_launch(_launch_ctx("timeout", error="hung"))) == {"probe.launch.timeout": Status.FAIL}


def _gpu_deps():
    smi = SmiInfo(path="/usr/bin/nvidia-smi", driver_version="580.159.04", cuda_version="13.0",
                  gpus=[GpuInfo(0, "NVIDIA H200", compute_capability="9.0")])
    return {"nvidia_smi": Fact.found(smi, "nvidia-smi"), "nvml": Fact.failed("nvml", "")}


@pytest.mark.parametrize("stdout,state", [
    ("", "not_applicable"),  # the child said nothing of ours
    ('@@CDPROBE@@{"type": "fatal", "stage": "load-libcuda", "error": {"name": "no-libcuda", "message": "x"}}\n',
     "not_applicable"),
    ('@@CDPROBE@@{"type": "fatal", "stage": "cuInit", "error": {"call": "cuInit", "code": 999, '
     '"name": "CUDA_ERROR_UNKNOWN", "message": "unknown error"}}\n', "failed"),
])
def test_probe_gatherer_states(stdout, state):
    from cudadoctor.facts.probes import gather_probe_launch
    from cudadoctor.facts.registry import Options

    fs = FakeSystem()
    fs.on([fs.own_python(), "-m", "cudadoctor.probes.launch"], FakeCmd(stdout=stdout))
    f = gather_probe_launch(fs, Options(), _gpu_deps())
    assert f.state.value == state, f
    if state == "failed":
        assert "CUDA_ERROR_UNKNOWN" in f.error
        assert _ids(check_probe_launch(Context(facts={"probe_launch": f}))) == {"probe.launch.failed": Status.WARN}


def test_probe_gatherer_times_out():
    from cudadoctor.facts.probes import gather_probe_launch
    from cudadoctor.facts.registry import Options

    fs = FakeSystem()
    fs.on([fs.own_python(), "-m", "cudadoctor.probes.launch"], FakeCmd(hang=True))
    f = gather_probe_launch(fs, Options(), _gpu_deps())  # the fake ends a hung command at once, timed out
    assert f.state.value == "timeout"
    assert _ids(check_probe_launch(Context(facts={"probe_launch": f}))) == {"probe.launch.timeout": Status.FAIL}


def test_probe_gatherer_skips_without_gpu():
    from cudadoctor.facts.probes import gather_probe_launch
    from cudadoctor.facts.registry import Options
    from cudadoctor.model import FactState

    deps = {"nvidia_smi": Fact.not_found("nvidia-smi", "not on PATH"), "nvml": Fact.failed("nvml", "no library")}
    f = gather_probe_launch(FakeSystem(), Options(), deps)
    assert f.state == FactState.NOT_APPLICABLE


# ---------------------------------------------------------------- commands


def _cli(args):
    from cudadoctor.cli import app

    return CliRunner().invoke(app, args)


def test_archs_command_exit_codes_and_json(tmp_path):
    good = tmp_path / "good.fatbin"
    good.write_bytes(make_fatbin(make_entry(2, 90), make_entry(1, 90)))
    old = tmp_path / "old.fatbin"
    old.write_bytes(make_fatbin(make_entry(2, 80)))
    r = _cli(["archs", str(good), "--cc", "9.0", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["files"][0]["sass"] == ["sm_90"] and d["files"][0]["ptx"] == ["compute_90"]
    assert d["files"][0]["verdict"] == "native"
    r = _cli(["archs", str(good), str(old), "--cc", "9.0", "--json"])
    assert r.exit_code == 1
    assert [f["verdict"] for f in json.loads(r.stdout)["files"]] == ["native", "no-kernel-image"]
    assert _cli(["archs", str(old), "--cc", "8.6"]).exit_code == 0
    bad = tmp_path / "bad.so"
    bad.write_bytes(b"\x7fELF\x02\x01\x01")
    r = _cli(["archs", str(good), str(bad), "--cc", "9.0"])
    assert r.exit_code == 2 and "truncated" in r.output and "Traceback" not in r.output
    assert _cli(["archs", str(tmp_path / "missing.so"), "--cc", "9.0"]).exit_code == 2
    assert _cli(["archs", str(good), "--cc", "nine"]).exit_code == 2


def test_scan_command_on_a_folder(tmp_path):
    (tmp_path / "ext").mkdir()
    (tmp_path / "ext" / "_C.so").write_bytes(_host_elf({".nv_fatbin": make_fatbin(make_entry(2, 80))}))
    r = _cli(["scan", "--path", str(tmp_path), "--cc", "9.0", "--json"])
    assert r.exit_code == 1, r.output
    d = json.loads(r.stdout)
    assert d["cannot_run"] == [str(tmp_path / "ext" / "_C.so")]
    assert _cli(["scan", "--path", str(tmp_path), "--cc", "8.6"]).exit_code == 0
    assert _cli(["scan", "--path", str(tmp_path / "nope"), "--cc", "9.0"]).exit_code == 2


def test_probe_command_bad_input():
    assert _cli(["probe", "--cc", "x"]).exit_code == 2
    assert _cli(["probe", "--compiler", "gcc"]).exit_code == 2


@pytest.mark.gpu
def test_probe_on_the_gpu_matches_the_rule():
    exe = shutil.which("cudadoctor") or os.path.join(os.path.dirname(sys.executable), "cudadoctor")
    r = subprocess.run([exe, "probe", "--json"], capture_output=True, text=True, timeout=600)
    d = json.loads(r.stdout)
    assert d["mismatches"] == [], d
    rows = {b["name"]: b for b in d["builds"]}
    assert rows["native"]["driver_api"] == "native"
    assert rows["sass-foreign"]["driver_api"] == "no-kernel-image"
    assert all(k["ok"] for k in d["kernels"])


def test_nvidia_libraries_are_not_judged_by_their_embedded_fatbin():
    # Seen on the H200 (2026-11-29): libcufft.so.12 from the nvidia-cufft wheel embeds one sm_75 cubin
    # (cuobjdump agrees) and still runs on cc 9.0; an extension with the same images cannot.
    cufft = ScanFile(f"{SP}/nvidia/cu13/lib/libcufft.so.12", "nvidia", "elf", ["sm_75"], [])
    ext = ScanFile(f"{SP}/myext/_C.so", "myext", "elf", ["sm_75"], [])
    out = check_probe_scan(_ctx(ScanInfo(python="/p", site_packages=[SP], files=[cufft, ext])))
    bad = next(f for f in out.findings if f.id == "probe.scan.no-kernel-image")
    assert bad.affects == "myext" and "libcufft" not in bad.detail
    only_vendor = check_probe_scan(_ctx(ScanInfo(python="/p", site_packages=[SP], files=[cufft])))
    assert _ids(only_vendor) == {"probe.scan.ok": Status.OK}


def test_the_drivers_own_libraries_are_not_judged_by_their_embedded_fatbin():
    # Seen on the 2x H200 (2026-11-30): LD_LIBRARY_PATH=/usr/local/nvidia/lib64 is the driver's folder, and
    # libnvoptix.so.580.159.04 there has one module of sm_75/sm_80 SASS among 35; judged by the rule it was
    # a false "no kernel image" whose fix dropped the driver folder from LD_LIBRARY_PATH.
    drv = "/usr/local/nvidia/lib64"
    optix = ScanFile(f"{drv}/libnvoptix.so.580.159.04", "", "elf", ["sm_75", "sm_80"], [])
    other = ScanFile(f"{drv}/libsomething.so.580.159.04", "", "elf", ["sm_75"], [])
    mine = ScanFile("/home/u/lib/libmine.so.1", "", "elf", ["sm_80"], [])
    out = check_probe_scan(_ctx(ScanInfo(python="/p", site_packages=[SP], files=[optix, other])))
    assert _ids(out) == {"probe.scan.ok": Status.OK}
    out = check_probe_scan(_ctx(ScanInfo(python="/p", site_packages=[SP], files=[optix, mine])))
    bad = next(f for f in out.findings if f.id == "probe.scan.no-kernel-image")
    assert "libmine" in bad.detail and "libnvoptix" not in bad.detail


def test_scan_commands_ld_library_path_fix_keeps_the_other_folders():
    # `cudadoctor scan` on the 2x H200 (2026-11-30) printed "fix: unset LD_LIBRARY_PATH" for a user's .so
    # while LD_LIBRARY_PATH also held the driver's folder; check printed the right rewrite. Both now keep it.
    from cudadoctor.commands.scan import fix_command

    f = ScanFile("/home/u/lib/libmine.so", "libmine.so", "elf", ["sm_80"], [], origin="LD_LIBRARY_PATH",
                 root="/home/u/lib")
    env = {"LD_LIBRARY_PATH": "/usr/local/nvidia/lib64:/home/u/lib:/usr/local/nvidia/lib"}
    assert fix_command(f, (9, 0), "/usr/bin/python3", env) == \
        "export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib"
    assert fix_command(f, (9, 0), "/usr/bin/python3", {"LD_LIBRARY_PATH": "/home/u/lib"}) == "unset LD_LIBRARY_PATH"


def test_ptx_only_binaries_fail_where_cuda_disable_ptx_jit_forbids_their_jit():
    # (session 35, H200: a compute_80-only kernel failed "PTX JIT compilation was disabled" under CUDA_DISABLE_PTX_JIT=1
    # with a cold JIT cache, ran from a warm one; torch, with SASS, ran)
    info, _ = scan_python(_fs(), "/venv/bin/python")
    ctx = _ctx(info)
    ctx.facts["env"] = Fact.found(EnvInfo(vars={"CUDA_DISABLE_PTX_JIT": "1"}), "env")
    out = check_probe_scan(ctx)
    f = next(f for f in out.findings if f.id == "probe.scan.ptx-jit-only")
    assert f.status is Status.FAIL and f.evidence["CUDA_DISABLE_PTX_JIT"] == "1"
    assert f.fix.commands[0] == "unset CUDA_DISABLE_PTX_JIT"
    ctx.facts["env"] = Fact.found(EnvInfo(vars={"CUDA_DISABLE_PTX_JIT": "0"}), "env")
    assert _ids(check_probe_scan(ctx))["probe.scan.ptx-jit-only"] == Status.WARN

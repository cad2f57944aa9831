"""health's kernel-launch child (cudadoctor/probes/health_launch.py) run for real against a fake libcuda.so.1
compiled here (tests/fakes/libcuda_health.py), its PTX checked with ptxas, and the parent's reading of it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from fakes import libcuda_health

from cudadoctor.facts.health import gather_launch
from cudadoctor.facts.health_launch import LAUNCH_SCRIPT, launch_argv
from cudadoctor.facts.registry import Options
from cudadoctor.model import FactState
from cudadoctor.paths import data_dir
from cudadoctor.probes.health_launch import ptx_for
from cudadoctor.system.host import HostSystem

PTX = data_dir("probe_kernels") / "health.ptx"


@pytest.fixture(scope="module")
def fakecuda(tmp_path_factory):
    if not libcuda_health.compiler():
        pytest.skip("no C compiler to build the fake libcuda.so.1")
    d = tmp_path_factory.mktemp("fakecuda")
    libcuda_health.build_libcuda(d)
    return d


def launch(fakecuda, timeout=20.0, **env):
    e = dict(os.environ, LD_LIBRARY_PATH=str(fakecuda), **env)
    e.pop("CUDA_VISIBLE_DEVICES", None)
    return gather_launch(HostSystem(e), Options(extra={"launch_timeout": timeout}), {})


def test_every_gpu_runs_the_kernel_and_the_values_are_checked(fakecuda, tmp_path):
    log = tmp_path / "modules.txt"
    fact = launch(fakecuda, FAKE_CUDA_COUNT="8", FAKE_CUDA_LOG=str(log))
    info = fact.value
    assert fact.state is FactState.FOUND and info.stopped == "" and info.error is None
    assert info.count == 8 and [d.ordinal for d in info.devices] == list(range(8))
    assert all(d.ok and d.wrong == 0 and d.step == "done" for d in info.devices)
    assert info.devices[0].uuid == "GPU-3cf3053a-1dca-59d4-1825-812007e0dc7d"
    assert info.devices[1].pci_bus_id == "0000:00:07.0" and info.devices[0].cc == "9.0"
    assert info.cuda_version == "13.0" and info.libcuda.endswith("libcuda.so.1")
    # the shipped PTX reached the driver, unchanged for a cc 9.0 GPU
    assert log.read_text().count(".target sm_75") == 8


def test_wrong_values_and_a_failing_context(fakecuda):
    info = launch(fakecuda, FAKE_CUDA_WRONG="0", FAKE_CUDA_FAIL="1:cuDevicePrimaryCtxRetain:46").value
    d0, d1 = info.devices
    assert (d0.ok, d0.wrong, d0.step) == (False, 1, "done")
    assert (d1.ok, d1.step, d1.error.code, d1.error.name) == (False, "context", 46, "CUDA_ERROR_DEVICE_UNAVAILABLE")


def test_cuinit_errors_are_reported(fakecuda):
    info = launch(fakecuda, FAKE_CUINIT="999").value
    assert (info.error.call, info.error.code, info.error.name) == ("cuInit", 999, "CUDA_ERROR_UNKNOWN")
    assert info.devices == [] and info.stopped == ""


def test_a_hang_on_one_gpu_keeps_the_other_and_names_the_stuck_one(fakecuda):
    fact = launch(fakecuda, timeout=3.0, FAKE_CUDA_HANG="1:cuCtxSynchronize")
    info = fact.value
    assert info.timed_out and [d.ordinal for d in info.devices] == [0] and info.devices[0].ok
    assert "launching on GPU(s) 1" in info.stopped and "(killed)" in info.stopped


def test_a_hang_in_cuinit(fakecuda):
    info = launch(fakecuda, timeout=2.0, FAKE_CUINIT="hang").value
    assert info.timed_out and info.count is None and "initialising CUDA (cuInit)" in info.stopped


def test_no_libcuda(tmp_path):
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path))
    if any(os.path.exists(os.path.join(d, "libcuda.so.1")) for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64")):
        pytest.skip("this machine has a libcuda.so.1")
    info = gather_launch(HostSystem(env), Options(), {}).value
    assert info.error.name == "LIBCUDA_NOT_LOADABLE"


def test_the_child_is_started_isolated_and_without_site():
    argv = launch_argv("/usr/bin/python3")
    assert argv[:3] == ["/usr/bin/python3", "-I", "-S"] and argv[3] == LAUNCH_SCRIPT and argv[4] == str(PTX)
    # stdlib only apart from cudadoctor's own binding, imported while cuInit runs
    p = subprocess.run([sys.executable, "-I", "-S", "-X", "importtime", LAUNCH_SCRIPT, "/nonexistent.ptx"],
                       capture_output=True, text=True, timeout=60, env={"LD_LIBRARY_PATH": "/nonexistent"})
    mods = {ln.split("|")[-1].strip() for ln in p.stderr.splitlines() if ln.startswith("import time:")}
    assert not {m for m in mods if m.split(".")[0] in ("pynvml", "torch", "typer", "rich", "click", "numpy")}


def test_older_gpus_get_an_older_ptx_target():
    ptx = PTX.read_bytes()
    assert ptx_for(ptx, (9, 0)) == ptx and ptx_for(ptx, (7, 5)) == ptx
    assert b".target sm_50" in ptx_for(ptx, (6, 1)) and b".version 4.0" in ptx_for(ptx, (6, 1))
    assert b".target sm_30" in ptx_for(ptx, (3, 7)) and b".version 3.1" in ptx_for(ptx, (3, 7))


@pytest.mark.nvcc
@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90", "sm_100", "sm_120"])
def test_ptxas_compiles_the_kernel(tmp_path, arch):
    ptxas = shutil.which("ptxas") or os.path.join(os.path.dirname(os.path.realpath(shutil.which("nvcc"))), "ptxas")
    src = tmp_path / "health.ptx"
    src.write_bytes(ptx_for(PTX.read_bytes(), (int(arch[3:-1]), int(arch[-1]))))
    p = subprocess.run([ptxas, f"-arch={arch}", str(src), "-o", str(tmp_path / "k.cubin")], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr


@pytest.mark.nvcc
def test_ptxas_compiles_the_older_targets_for_a_newer_gpu(tmp_path):
    ptxas = shutil.which("ptxas") or os.path.join(os.path.dirname(os.path.realpath(shutil.which("nvcc"))), "ptxas")
    for cc in ((6, 0), (3, 5)):
        src = tmp_path / "old.ptx"
        src.write_bytes(ptx_for(PTX.read_bytes(), cc))
        p = subprocess.run([ptxas, "-arch=sm_90", str(src), "-o", str(tmp_path / "k.cubin")], capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 0, (cc, p.stderr)

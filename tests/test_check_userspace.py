"""The kernel module answers in /proc but the driver's user-space libraries (libcuda, libnvidia-ml) are not there: a
container given /dev/nvidia* by hand without the NVIDIA runtime, or a partial driver install. Reproduced on the H200
by hiding the libraries' folder from one process tree (tests/data/h200/s32_nolibs_*.txt): nvidia-smi "couldn't find
libnvidia-ml.so library", torch "Found no NVIDIA driver on your system". Before, `check` said only "nvidia-smi
failed: ... run it yourself and read the message"."""

from __future__ import annotations

import json
from pathlib import Path

from fakes.system import FakeCmd
from helpers import check, ids, steps
from scenarios import h200, torch_stages

H200 = Path(__file__).parent / "data" / "h200"
NO_NVML = FakeCmd(json.dumps({"error": "NVML_ERROR_LIBRARY_NOT_FOUND", "message": "NVML Shared Library Not Found"}))
TORCH = FakeCmd(torch_stages(available=False, init_error="RuntimeError: Found no NVIDIA driver on your system. Please "
                             "check that you have an NVIDIA GPU and installed a driver from "
                             "http://www.nvidia.com/Download/index.aspx"))
SMI_NO_NVML = FakeCmd("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that the "
                      "NVIDIA Display Driver is properly installed and present in your system.\nPlease also try adding "
                      "directory that contains libnvidia-ml.so to your system PATH.\n", returncode=12)


def machine(container: bool = True, smi=SMI_NO_NVML, libcuda: bool = False):
    fs = h200(smi=smi, smi_csv=smi, nvml=NO_NVML, torch=TORCH)
    for f in ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0"):
        fs.add_file(f, "")
    if container:
        fs.add_file("/.dockerenv", "")
    if libcuda:
        fs.add_file("/usr/local/nvidia/lib64/libcuda.so.1", "")
    return fs


def driver_finding(r):
    return steps(r)["driver"].findings[0]


def test_container_given_the_devices_without_the_runtime():
    r = check(machine())
    f = driver_finding(r)
    assert f.id == "driver.userspace-missing" and f.status.value == "fail"
    assert "580.159.04" in f.summary and "docker" in f.summary
    assert f.fix.commands[0].startswith("docker run --gpus all") and any("nvidia-ctk runtime configure" in c
                                                                        for c in f.fix.commands)
    assert ids(r)["torch.cuda.unavailable"] == "fail" and "driver step" in steps(r)["torch.cuda"].findings[0].detail


def test_host_with_the_module_but_not_its_libraries():
    f = driver_finding(check(machine(container=False)))
    assert f.id == "driver.userspace-missing" and "libnvidia-compute-580" in f.fix.commands[0]


def test_no_nvidia_smi_either_is_the_same_verdict():
    f = driver_finding(check(machine(smi=False)))
    assert f.id == "driver.userspace-missing"


def test_with_libcuda_there_it_is_a_compute_only_container_not_missing_libraries():
    # nvidia-smi present without its libnvidia-ml, libcuda mounted: CUDA works, nvidia-smi and NVML do not
    r = check(machine(libcuda=True))
    assert "driver.userspace-missing" not in ids(r) and ids(r)["driver.smi-missing"] == "warn"
    assert "without NVML" in steps(r)["driver"].summary
    assert "cannot load libnvidia-ml" in next(f for f in steps(r)["driver"].findings if f.id == "driver.smi-missing").summary


def test_recorded_nvidia_smi_words_are_read_as_nvml_missing():
    from cudadoctor.facts.driver import smi_problem

    text = (H200 / "s32_nolibs_smi.txt").read_text()
    assert smi_problem(text) == "nvml-missing"

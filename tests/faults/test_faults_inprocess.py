"""Faults that cannot be staged on the real machine without root, through the fake System in-process:
/proc/driver/nvidia unreadable (a hardened container, a restrictive LSM)."""

from __future__ import annotations

from helpers import check, ids, status  # tests/ is on sys.path (tests/conftest.py)
from scenarios import h200

from cudadoctor.model import FactState


def test_proc_driver_nvidia_unreadable_on_a_healthy_gpu():
    fs = h200()
    fs.unreadable.update({"/proc/driver/nvidia/version", "/proc/driver/nvidia/params"})
    rep = check(fs)
    km = rep.facts["kernel_module"]
    assert km.state is FactState.FAILED and "Permission denied" in km.error
    # nvidia-smi and NVML still answer: the driver is judged from them, nothing crashes
    assert status(rep)["driver"] == "ok" and ids(rep)["driver.ok"] == "ok"
    assert not [i for i, s in ids(rep).items() if s == "error"]


def test_proc_driver_nvidia_unreadable_and_nvidia_smi_fails():
    from fakes.system import FakeCmd

    msg = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
           "latest NVIDIA driver is installed and running.\n")
    fs = h200(smi=FakeCmd(msg, returncode=9), nvml=FakeCmd('{"error": "NVML_ERROR_DRIVER_NOT_LOADED", '
                                                             '"message": "Driver Not Loaded"}'))
    fs.unreadable.update({"/proc/driver/nvidia/version", "/proc/driver/nvidia/params"})
    rep = check(fs)
    assert ids(rep).get("driver.not-loaded") == "fail"
    assert rep.exit_code == 1


def test_proc_driver_nvidia_unreadable_with_nvml_hung():
    from fakes.system import FakeCmd

    fs = h200(smi=False, nvml=FakeCmd(hang=True))
    fs.unreadable.update({"/proc/driver/nvidia/version", "/proc/driver/nvidia/params"})
    rep = check(fs)
    assert ids(rep).get("driver.nvml-hang") == "fail"

"""A libnvidia-ml.so.1 that is not the driver's, first on LD_LIBRARY_PATH (an old driver's copy kept in a project
folder, a dummy or stub library): nvidia-smi and NVML load it. Seen on the H200 (session 33, a placeholder
libnvidia-ml in a folder put first on LD_LIBRARY_PATH): nvidia-smi "Failed to initialize NVML: Function Not Found",
and `check` said only "nvidia-smi failed ... run it yourself"; with an old driver's copy NVML says "Driver/library
version mismatch", and `check` told the user to reboot to load the new kernel module, which cannot help."""

from __future__ import annotations

import json
from pathlib import Path

from fakes.system import FakeCmd
from helpers import check, steps
from scenarios import h200

H200 = Path(__file__).parent / "data" / "h200"
PLACEHOLDER = (H200 / "s33_nvml_shadow_placeholder_smi.txt").read_text()  # recorded on the H200, session 33
OLD = (H200 / "s33_nvml_shadow_old_smi.txt").read_text()
LDP = "/opt/old-driver/lib:/usr/local/nvidia/lib64:/usr/local/nvidia/lib"
DRIVER_ML = "/usr/local/nvidia/lib64/libnvidia-ml.so.580.159.04"


def machine(smi_text: str, nvml_err: str, old: str = "535.54.03", ldp: str = LDP):
    smi = FakeCmd(smi_text, returncode=255 if "Function" in smi_text else 18)
    nvml = FakeCmd(json.dumps({"error": nvml_err, "message": smi_text.splitlines()[0]}))
    fs = h200(env={"LD_LIBRARY_PATH": ldp}, smi=smi, smi_csv=smi, nvml=nvml)
    fs.add_file(DRIVER_ML, "")
    fs.symlinks["/usr/local/nvidia/lib64/libnvidia-ml.so.1"] = DRIVER_ML
    fs.add_file("/opt/old-driver/lib/libnvidia-ml.so.1" if not old else f"/opt/old-driver/lib/libnvidia-ml.so.{old}", "")
    if old:
        fs.symlinks["/opt/old-driver/lib/libnvidia-ml.so.1"] = f"/opt/old-driver/lib/libnvidia-ml.so.{old}"
    return fs


def driver_finding(fs):
    return steps(check(fs))["driver"].findings[0]


def test_an_old_drivers_nvml_first_on_ld_library_path_is_not_a_reboot():
    f = driver_finding(machine(OLD, "NVML_ERROR_LIB_RM_VERSION_MISMATCH"))
    assert f.id == "driver.nvml-shadowed" and f.status.value == "fail"
    assert "/opt/old-driver/lib/libnvidia-ml.so.535.54.03" in f.summary and "580.159.04" in f.summary
    assert f.fix.commands[0] == "export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib"
    assert "sudo reboot" not in f.fix.commands


def test_a_placeholder_nvml_first_on_ld_library_path_is_named():
    # the H200 case: a library with no version in its name and none of NVML's functions
    f = driver_finding(machine(PLACEHOLDER, "NVML_ERROR_FUNCTION_NOT_FOUND", old="", ldp="/opt/old-driver/lib"))
    assert f.id == "driver.nvml-shadowed" and "/opt/old-driver/lib/libnvidia-ml.so.1" in f.summary
    assert f.fix.commands[0] == "unset LD_LIBRARY_PATH"


def test_a_real_mismatch_with_the_drivers_own_copy_is_still_a_reboot():
    # the user-space driver upgraded under a loaded module: the copy the loader picks is the driver's folder's
    fs = machine("Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.159",
                 "NVML_ERROR_LIB_RM_VERSION_MISMATCH", ldp="/usr/local/nvidia/lib64:/usr/local/nvidia/lib")
    f = driver_finding(fs)
    assert f.id == "driver.version-mismatch" and "sudo reboot" in f.fix.commands


def test_the_whole_checklist_names_a_shadowed_nvml_once():
    # (session 33's H200 run, s33_nvml_shadow_old_check_full.txt: the driver step and the libraries step both failed on
    # the one copy, with the same fix: two problems for one fault) the driver step names it; the libraries step,
    # later, leaves libnvidia-ml out of its kernel-module comparison when the driver step already did
    sts = steps(check(machine(OLD, "NVML_ERROR_LIB_RM_VERSION_MISMATCH")))
    assert [f.id for f in sts["driver"].findings if f.status.value == "fail"] == ["driver.nvml-shadowed"]
    assert "libs.driver-mismatch" not in [f.id for f in sts["libraries"].findings]
    # without the driver step (--skip driver) the libraries step still names it
    alone = steps(check(machine(OLD, "NVML_ERROR_LIB_RM_VERSION_MISMATCH"), skip=["driver"]))
    assert "libs.driver-mismatch" in [f.id for f in alone["libraries"].findings]

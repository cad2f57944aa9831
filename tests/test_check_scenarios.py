"""The ordered checklist against real recorded outputs (tests/data/h200) and fakes of each fault."""

from __future__ import annotations

import json
import time
from pathlib import Path

from fakes.system import FakeCmd
from helpers import check, ids, status, steps
from scenarios import H200, h200, nvml_answer, torch_stages

from cudadoctor.facts.torch import PROBE_SCRIPT

H200_DATA = Path(__file__).parent / "data" / "h200"

CORE = ["driver", "torch.cuda", "device.capability", "torch.op", "toolkit.nvcc"]


def core(report):
    st = status(report)
    return {k: st[k] for k in CORE if k in st}


def test_golden_healthy_h200_all_ok():
    r = check(h200())
    assert core(r) == {k: "ok" for k in CORE}
    assert r.exit_code == 0 or any(s.status.value == "fail" for s in r.steps if s.id not in CORE)
    s = steps(r)
    assert "580.159.04" in s["driver"].summary and "CUDA 13.0" in s["driver"].summary
    assert "NVIDIA H200" in s["driver"].summary
    assert "2.11.0+cu130" in s["torch.cuda"].summary
    assert "cc 9.0" in s["device.capability"].summary and "sm_90" in s["device.capability"].summary
    assert "nvcc 13.0" in s["toolkit.nvcc"].summary and "13.0" in s["toolkit.nvcc"].summary
    f = ids(r)
    assert f["driver.ok"] == "ok" and f["torch.cuda.ok"] == "ok" and f["device.capability.ok"] == "ok"
    assert f["torch.op.ok"] == "ok" and f["toolkit.nvcc.ok"] == "ok"
    facts = r.facts
    assert facts["nvidia_smi"].value.driver_version == "580.159.04"
    assert facts["nvidia_smi"].value.cuda_version == "13.0"
    assert facts["kernel_module"].value.version == "580.159.04"
    assert facts["kernel_module"].value.flavour == "open"
    assert facts["torch"].value.version == "2.11.0+cu130"


def test_no_driver_at_all_fails_but_runs_gpu_free_steps():
    fs = h200(smi=False, proc=False, nvml=FakeCmd('{"error": "NVML_ERROR_LIBRARY_NOT_FOUND", "message": "x"}'),
              torch=FakeCmd(torch_stages(available=False, init_error="RuntimeError: Found no NVIDIA driver on your system.")))
    r = check(fs)
    st = status(r)
    assert st["driver"] == "fail" and ids(r)["driver.none"] == "fail"
    assert st["device.capability"] == "skip" and steps(r)["device.capability"].waits_on == ("driver",)
    assert st["toolkit.nvcc"] == "ok"  # runs without a GPU
    assert ids(r)["torch.cuda.no-driver"] == "fail"
    assert r.exit_code == 1


def test_nvidia_smi_missing_but_driver_answers_through_nvml():
    r = check(h200(smi=False))
    assert ids(r)["driver.smi-missing"] == "warn"
    assert status(r)["driver"] == "warn"
    assert "580.159.04" in steps(r)["driver"].summary


def test_nvidia_smi_not_communicating_is_not_loaded():
    msg = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
           "latest NVIDIA driver is installed and running.\n")
    fs = h200(smi=FakeCmd(msg, returncode=9), proc=False,
              nvml=FakeCmd('{"error": "NVML_ERROR_DRIVER_NOT_LOADED", "message": "Driver Not Loaded"}'),
              torch=FakeCmd(torch_stages(available=False, init_error="RuntimeError: Found no NVIDIA driver")))
    r = check(fs)
    assert ids(r)["driver.not-loaded"] == "fail"
    assert r.exit_code == 1


def test_nvidia_smi_hangs_run_finishes_near_timeout():
    fs = h200(smi=FakeCmd(hang=True))
    fs.hang_sleep = 0.5
    t0 = time.monotonic()
    r = check(fs, timeout_smi=0.5)
    took = time.monotonic() - t0
    assert ids(r)["driver.smi-hang"] == "fail"
    assert took < 3.0  # concurrent: the hang costs its timeout once, not per call
    assert r.exit_code == 1


def test_nvml_driver_library_mismatch():
    msg = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.173\n"
    fs = h200(smi=FakeCmd(msg, returncode=18),
              nvml=FakeCmd('{"error": "NVML_ERROR_LIB_RM_VERSION_MISMATCH", "message": "mismatch"}'))
    r = check(fs)
    f = [f for f in steps(r)["driver"].findings if f.id == "driver.version-mismatch"][0]
    assert f.status.value == "fail"
    assert f.evidence["kernel module"] == "580.159.04" and f.evidence["user-space NVML library"] == "580.173"


def test_kernel_module_differs_from_nvml_library_without_smi_message():
    fs = h200(nvml=FakeCmd(nvml_answer(driver_version="580.173")))
    r = check(fs, only=["driver"])
    assert ids(r)["driver.version-mismatch"] == "fail"


def test_visible_devices_empty_hides_all():
    fs = h200(env={"CUDA_VISIBLE_DEVICES": ""},
              torch=FakeCmd(torch_stages(available=False, visible="", init_error="")))
    r = check(fs)
    assert ids(r)["torch.cuda.hidden-by-visible-devices"] == "fail"
    assert status(r)["torch.op"] == "skip"


def test_visible_devices_nonexistent_ordinal():
    fs = h200(env={"CUDA_VISIBLE_DEVICES": "7"}, torch=FakeCmd(torch_stages(available=False, visible="7")))
    r = check(fs)
    f = [f for f in steps(r)["torch.cuda"].findings][0]
    assert f.id == "torch.cuda.hidden-by-visible-devices" and f.status.value == "fail"
    assert "unset CUDA_VISIBLE_DEVICES" in f.fix.commands


def test_visible_devices_minus_one():
    fs = h200(env={"CUDA_VISIBLE_DEVICES": "-1"}, torch=FakeCmd(torch_stages(available=False, visible="-1")))
    assert ids(check(fs))["torch.cuda.hidden-by-visible-devices"] == "fail"


def test_torch_missing_is_warn_with_hint():
    r = check(h200(torch=FakeCmd(torch_stages(not_installed=True))))
    assert ids(r)["torch.cuda.not-installed"] == "warn"  # issue 16: a target without torch is not a grey skip
    assert ids(r)["torch.op.not-run"] == "skip"
    assert status(r)["torch.op"] == "skip"
    assert status(r)["device.capability"] == "ok"  # cc still read from the driver


def test_torch_import_fails_on_missing_library():
    err = "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory"
    r = check(h200(torch=FakeCmd(torch_stages(import_error=err))))
    assert ids(r)["torch.cuda.import-failed"] == "fail"


def test_cpu_only_torch_fake():
    r = check(h200(torch=FakeCmd(torch_stages(version="2.13.0+cpu", cuda=None, available=False, arch=[]))))
    f = ids(r)
    assert f["torch.cuda.cpu-only"] == "fail"
    assert r.exit_code == 1


def test_torch_child_crashes_sigsegv():
    fs = h200(torch=FakeCmd(torch_stages(upto="import"), returncode=-11))
    r = check(fs)
    f = steps(r)["torch.cuda"].findings[0]
    assert f.id == "torch.cuda.probe-crashed" and f.status.value == "fail"
    assert "SIGSEGV" in f.summary and "is_available" in f.summary


def test_torch_child_hangs():
    fs = h200(torch=FakeCmd(hang=True))
    r = check(fs, timeout_torch=0.2)
    assert ids(r)["torch.cuda.probe-hung"] == "fail"


def test_target_interpreter_missing():
    fs = h200()
    r = check(fs, python="/nope/python")
    assert ids(r)["torch.cuda.python-missing"] == "fail"


def test_nvcc_missing_is_ok_for_running_torch():
    fs = h200(nvcc=False, env={"CUDA_HOME": None, "TORCH_CUDA_ARCH_LIST": None})
    fs.symlinks.clear()
    r = check(fs)
    assert ids(r)["toolkit.nvcc.absent"] == "ok"


def test_nvcc_missing_warns_when_building_extensions():
    fs = h200(nvcc=False, env={"CUDA_HOME": None})
    fs.symlinks.clear()
    assert ids(check(fs))["toolkit.nvcc.absent"] == "warn"


def test_nvcc_12_with_torch_cu130_is_major_mismatch():
    v121 = ("nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.1, V12.1.105\n"
            "Build cuda_12.1.r12.1/compiler.32688072_0\n")
    fs = h200(nvcc=False, env={"CUDA_HOME": None, "PATH": "/opt/fake/bin:/usr/local/nvidia/bin:/usr/bin:/bin"})
    fs.symlinks.clear()
    fs.add_exe("/opt/fake/bin/nvcc", FakeCmd(v121))
    r = check(fs)
    assert ids(r)["toolkit.nvcc.major-mismatch"] == "fail"
    assert r.exit_code == 1


def test_nvcc_minor_mismatch_warns():
    v131 = "Cuda compilation tools, release 13.1, V13.1.80\n"
    fs = h200(nvcc=FakeCmd(v131))
    assert ids(check(fs))["toolkit.nvcc.minor-mismatch"] == "warn"


def test_cuda_home_missing_folder():
    fs = h200(env={"CUDA_HOME": "/opt/cuda-12.4"})
    r = check(fs)
    assert ids(r)["toolkit.cuda-home.missing"] == "warn"


def test_nvcc_hangs_becomes_warning():
    fs = h200(nvcc=FakeCmd(hang=True))
    r = check(fs)
    assert ids(r)["toolkit.nvcc.unreadable"] == "warn"


def test_gpu_not_in_torch_arch_list_is_unsupported():
    fs = h200(torch=FakeCmd(torch_stages(arch=["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86"])))
    r = check(fs)
    assert ids(r)["device.capability.unsupported"] == "fail"


def test_gpu_reached_only_through_ptx_warns():
    fs = h200(torch=FakeCmd(torch_stages(arch=["sm_80", "sm_86", "compute_86"])))
    assert ids(check(fs))["device.capability.ptx-jit"] == "warn"


def test_op_error_kept_verbatim():
    err = "CUDA error: no kernel image is available for execution on the device"
    fs = h200(torch=FakeCmd(torch_stages(op={"ok": False, "error_type": "AcceleratorError", "error": err})))
    r = check(fs)
    f = [f for f in steps(r)["torch.op"].findings][0]
    assert f.id == "torch.op.failed" and f.evidence["error"] == "AcceleratorError: " + err


def test_driver_too_old_for_torch():
    fs = h200(torch=FakeCmd(torch_stages(available=False, init_error=(
        "RuntimeError: The NVIDIA driver on your system is too old (found version 12020)."))),
        smi=FakeCmd((open(__file__).read() and "") or "| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2 |\n"),
        smi_csv=FakeCmd("0, NVIDIA H200, GPU-1, 00000000:00:06.0, 9.0, 143771, 535.104.05, Disabled, Enabled, Default\n"),
        nvml=FakeCmd(nvml_answer(driver_version="535.104.05", cuda_driver_version="12.2")))
    fs.files["/proc/driver/nvidia/version"] = b"NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Release Build\n"
    r = check(fs)
    assert ids(r)["torch.cuda.driver-too-old"] == "fail"


def test_only_and_skip():
    r = check(h200(), only=["driver"])
    assert [s.id for s in r.steps] == ["driver"]
    r = check(h200(), skip=["torch.op", "driver"])
    assert "torch.op" not in [s.id for s in r.steps] and "driver" not in [s.id for s in r.steps]


def test_path_nvcc_differs_from_cuda_home():
    v121 = "Cuda compilation tools, release 12.1, V12.1.105\n"
    fs = h200(env={"PATH": "/opt/fake/bin:/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/bin:/bin"})
    fs.add_exe("/opt/fake/bin/nvcc", FakeCmd(v121))
    r = check(fs)
    assert ids(r)["toolkit.cuda-home.differs"] == "warn"
    assert "PATH nvcc 12.1" in steps(r)["toolkit.nvcc"].summary


def _fix_cmds(report, step):
    return " ".join(c for f in steps(report)[step].findings if f.fix for c in f.fix.commands)


def test_cpu_only_fix_names_a_variant_this_release_has_and_the_driver_runs():
    cpu = FakeCmd(torch_stages(version="2.13.0+cpu", cuda=None, available=False, arch=[]))
    r = check(h200(torch=cpu))
    assert "torch==2.13.0 --index-url https://download.pytorch.org/whl/cu130" in _fix_cmds(r, "torch.cuda")
    old = h200(torch=cpu, smi=FakeCmd("| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2 |\n"),
               smi_csv=FakeCmd("0, NVIDIA H200, GPU-1, 00000000:00:06.0, 9.0, 143771, 535.104.05, Disabled, Enabled, Default\n"),
               nvml=FakeCmd(nvml_answer(driver_version="535.104.05", cuda_driver_version="12.2")))
    old.files["/proc/driver/nvidia/version"] = b"NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Release Build\n"
    assert "torch==2.13.0 --index-url https://download.pytorch.org/whl/cu126" in _fix_cmds(check(old), "torch.cuda")


def test_r610_banner_kmd_and_umd_versions():
    # R610+ drivers print "KMD Version" / "CUDA UMD Version" (shared/reference/matrix_facts.md §2, UMD sources)
    banner = ("| NVIDIA-SMI 610.43.02              KMD Version: 610.43.02      CUDA UMD Version: 13.3     |\n"
              "|   0  NVIDIA H200                    On  |   00000000:00:06.0 Off |                    0 |\n")
    fs = h200(smi=FakeCmd(banner), smi_csv=FakeCmd(
        "0, NVIDIA H200, GPU-1, 00000000:00:06.0, 9.0, 143771, 610.43.02, Disabled, Enabled, Default\n"),
        nvml=FakeCmd(nvml_answer(driver_version="610.43.02", cuda_driver_version="13.3")))
    fs.files["/proc/driver/nvidia/version"] = b"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  610.43.02  Release Build\n"
    r = check(fs, only=["driver"])
    smi = r.facts["nvidia_smi"].value
    assert (smi.driver_version, smi.cuda_version, smi.banner_style) == ("610.43.02", "13.3", "kmd-umd")
    assert ids(r)["driver.ok"] == "ok"


def test_nvidia_smi_not_executable_while_nvml_answers():
    fs = h200(smi=False)
    fs.add_file("/usr/local/nvidia/bin/nvidia-smi", b"\x7fELF")  # present, no execute bit
    r = check(fs, only=["driver"])
    assert ids(r)["driver.smi-not-executable"] == "warn"
    assert "580.159.04" in steps(r)["driver"].summary


def test_major_mismatch_suggests_a_variant_this_torch_release_has():
    v121 = "Cuda compilation tools, release 12.1, V12.1.105\n"
    fs = h200(nvcc=False, env={"CUDA_HOME": None, "PATH": "/opt/fake/bin:/usr/local/nvidia/bin:/usr/bin:/bin"})
    fs.symlinks.clear()
    fs.add_exe("/opt/fake/bin/nvcc", FakeCmd(v121))
    r = check(fs, only=["toolkit.nvcc"])
    cmds = _fix_cmds(r, "toolkit.nvcc")
    assert "torch==2.11.0 --index-url https://download.pytorch.org/whl/cu12" in cmds and "cu121" not in cmds


# torch's own words when /dev/nvidia-uvm cannot be opened, recorded on an H200 (tests/data/h200/s31_torch_no_uvm.txt)
NO_UVM = (H200 / "s31_torch_no_uvm.txt").read_text().strip().splitlines()[-1]
# nvidia-smi as it answered on an H200 whose /dev/nvidia0 a device cgroup refused (session 31, EPERM through a shim)
NO_DEVICES = FakeCmd(stdout="No devices were found\n", returncode=6)


def with_files(fs, files):
    for n in files:
        fs.add_file(n, "")
    return fs


def torch999(files=(), **kw):
    return with_files(h200(torch=FakeCmd(torch_stages(available=False, init_error=NO_UVM)), **kw), files)


def finding(r, step, fid=None):
    fs = steps(r)[step].findings
    return next(f for f in fs if fid is None or f.id == fid)


def no_gpu_machine(files=("/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia-uvm"), **env):
    return with_files(h200(smi=NO_DEVICES, smi_csv=NO_DEVICES, nvml=FakeCmd(nvml_answer(device_count=0, gpus=[])),
                           env=env or None), files)


def test_cuda_unknown_error_with_the_driver_answering_is_nvidia_uvm_after_a_suspend():
    r = check(torch999(files=("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm")))
    f = finding(r, "torch.cuda", "torch.cuda.uvm")
    assert f.status.value == "fail" and ids(r)["driver.ok"] == "ok"
    assert f.evidence["/dev/nvidia-uvm"] == "present"
    assert any("rmmod nvidia_uvm" in c for c in f.fix.commands)


def test_cuda_unknown_error_without_dev_nvidia_uvm_loads_the_module():
    r = check(torch999(files=("/dev/nvidia0", "/dev/nvidiactl")))
    f = finding(r, "torch.cuda", "torch.cuda.uvm")
    assert f.evidence["/dev/nvidia-uvm"] == "missing"
    assert f.fix.commands[:2] == ("sudo modprobe nvidia-uvm", "sudo nvidia-modprobe -u -c=0")


def test_cuda_unknown_error_in_a_container_names_the_runtime():
    r = check(torch999(files=("/.dockerenv", "/dev/nvidia0")))
    f = finding(r, "torch.cuda", "torch.cuda.uvm")
    assert "docker" in f.fix.text and any("--gpus all" in c for c in f.fix.commands)


def test_other_init_errors_stay_generic():
    fs = h200(torch=FakeCmd(torch_stages(available=False, init_error="RuntimeError: CUDA error: out of memory")))
    found = ids(check(fs))
    assert "torch.cuda.unavailable" in found and "torch.cuda.uvm" not in found


def test_no_devices_with_gpu_files_the_user_may_not_open_is_permissions():
    fs = no_gpu_machine()
    fs.denied.update({"/dev/nvidia0", "/dev/nvidiactl"})
    f = next(f for f in steps(check(fs))["driver"].findings)
    assert f.id == "driver.device-permission" and f.status.value == "fail"
    assert sorted(f.evidence["denied"]) == ["/dev/nvidia0", "/dev/nvidiactl"] and "ls -l /dev/nvidia*" in f.fix.commands


def test_no_devices_in_a_slurm_job_is_a_job_without_a_gpu_request():
    f = next(f for f in steps(check(no_gpu_machine(SLURM_JOB_ID="4242")))["driver"].findings)
    assert f.id == "driver.slurm-no-gpu" and any("--gpus=1" in c for c in f.fix.commands)
    assert "scontrol show job 4242 | grep -iE 'tres|gres'" in f.fix.commands


def test_no_devices_in_a_container_with_the_files_is_its_device_cgroup():
    fs = no_gpu_machine()
    fs.add_file("/.dockerenv", "")
    f = next(f for f in steps(check(fs))["driver"].findings)
    assert f.id == "driver.container-no-gpu-access" and any("--gpus all" in c for c in f.fix.commands)


def test_no_devices_on_a_host_stays_the_driver_log_and_the_bus():
    f = next(f for f in steps(check(no_gpu_machine()))["driver"].findings)
    assert f.id == "driver.no-devices" and "lspci -nn | grep -i nvidia" in f.fix.commands


def test_no_devices_without_gpu_files_stays_generic_even_in_slurm():
    fs = h200(smi=NO_DEVICES, smi_csv=NO_DEVICES, nvml=FakeCmd(nvml_answer(device_count=0, gpus=[])),
              env={"SLURM_JOB_ID": "7"})
    assert next(f for f in steps(check(fs))["driver"].findings).id == "driver.no-devices"

# The review of the uvm and no-GPU verdicts (a helper, session 31): each asserts the verdict a CUDA/HPC expert gave
# before the code was changed; 11 of these 12 failed at 694e28a


# ---------------- torch.cuda.uvm

def test_999_with_a_lost_gpu_is_not_nvidia_uvm():
    """Xid 79: nvidia-smi 'Unable to determine the device handle ... Unknown Error', NVML still gives the version;
    cuInit fails 999. The driver step says gpu-lost; the torch step must not blame nvidia_uvm / suggest rmmod."""
    lost = FakeCmd(stdout="Unable to determine the device handle for GPU0000:00:06.0: Unknown Error\n", returncode=255)
    r = check(torch999(files=("/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia-uvm"), smi=lost, smi_csv=lost))
    assert ids(r).get("driver.gpu-lost") == "fail"
    assert "torch.cuda.uvm" not in ids(r), finding(r, "torch.cuda").fix.commands


def test_999_on_wsl2_does_not_modprobe_nvidia_uvm():
    """WSL2 has no /dev/nvidia* (CUDA goes through /dev/dxg): modprobe nvidia-uvm / nvidia-modprobe are wrong there."""
    fs = torch999()
    fs.add_file("/proc/version", "Linux version 5.15.167.4-microsoft-standard-WSL2 (root@...) #1 SMP\n")
    fs.add_file("/dev/dxg", "")
    r = check(fs)
    f = finding(r, "torch.cuda")
    assert not any("modprobe" in c for c in f.fix.commands), (f.id, f.summary, f.fix.commands)


def test_999_with_nvidia_uvm_refused_by_its_permissions_is_not_a_suspend():
    fs = torch999(files=("/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia-uvm"))
    fs.denied.add("/dev/nvidia-uvm")
    r = check(fs)
    f = finding(r, "torch.cuda")
    assert not any("rmmod" in c for c in f.fix.commands), (f.summary, f.fix.commands)
    assert "permission" in f.summary.lower()


def test_999_in_a_kubernetes_pod_does_not_say_docker_run():
    r = check(torch999(files=("/dev/nvidia0",), env={"KUBERNETES_SERVICE_HOST": "10.0.0.1"}))
    f = finding(r, "torch.cuda", "torch.cuda.uvm")
    assert not any(c.startswith("docker ") for c in f.fix.commands), f.fix.commands


# ---------------- driver._no_gpu

def test_slurm_job_that_was_given_a_gpu_whose_gpu_failed_is_not_a_missing_request():
    """ConstrainDevices, job given GPU 1 (SLURM_JOB_GPUS=1, CUDA_VISIBLE_DEVICES=0); GPU 1 failed to initialise,
    GPU 0 refused by the cgroup: nvidia-smi 'No devices were found'. The job DID request a GPU."""
    fs = no_gpu_machine(files=("/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia-uvm"),
                        SLURM_JOB_ID="77", SLURM_JOB_GPUS="1", SLURM_STEP_GPUS="1", CUDA_VISIBLE_DEVICES="0")
    f = finding(check(fs), "driver")
    assert f.id != "driver.slurm-no-gpu", f.summary


def test_permission_verdict_needs_every_gpu_file_refused():
    """/dev/nvidia1 is 0660 (refused), /dev/nvidia0 is open to all: nvidia0's GPU would be listed if it worked,
    so its permissions are not why no GPU is listed."""
    fs = no_gpu_machine(files=("/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia-uvm"))
    fs.denied.add("/dev/nvidia1")
    f = finding(check(fs), "driver")
    assert f.id != "driver.device-permission", f.summary


def test_refused_nvidia_uvm_alone_does_not_explain_no_devices():
    """NVML never opens /dev/nvidia-uvm: it cannot make nvidia-smi list no GPU."""
    fs = no_gpu_machine()
    fs.denied.add("/dev/nvidia-uvm")
    f = finding(check(fs), "driver")
    assert f.id != "driver.device-permission", f.summary


def test_permission_in_a_rootless_podman_container_is_not_usermod_inside_it():
    """Rootless podman drops supplementary groups (crun: --group-add keep-groups keeps them); usermod in the
    container cannot help."""
    fs = no_gpu_machine()
    fs.add_file("/run/.containerenv", "")
    fs.denied.update({"/dev/nvidia0", "/dev/nvidiactl"})
    f = finding(check(fs), "driver")
    assert f.id == "driver.device-permission"
    assert not any("usermod" in c for c in f.fix.commands), f.fix.commands


def test_kubernetes_pod_without_gpu_is_not_docker_run():
    fs = no_gpu_machine(KUBERNETES_SERVICE_HOST="10.0.0.1")
    f = finding(check(fs), "driver")
    assert f.id == "driver.container-no-gpu-access"
    assert not all(c.startswith(("docker ", "sudo nvidia-ctk", "nvidia-smi")) for c in f.fix.commands), f.fix.commands


def test_nvidiactl_refused_insufficient_permissions_reaches_the_permission_verdict():
    """/dev/nvidiactl 0660: nvidia-smi says 'Failed to initialize NVML: Insufficient Permissions' (smi problem
    'no-permission'), the commonest form of the permission case."""
    perm = FakeCmd(stdout="Failed to initialize NVML: Insufficient Permissions\n", returncode=4)
    fs = h200(smi=perm, smi_csv=perm, nvml=FakeCmd('{"error": "NVML_ERROR_NO_PERMISSION", "message": "Insufficient Permissions"}'))
    for n in ("/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia-uvm"):
        fs.add_file(n, "")
    fs.denied.update({"/dev/nvidiactl", "/dev/nvidia0"})
    f = finding(check(fs), "driver")
    assert f.id == "driver.device-permission", (f.id, f.summary)


def test_slurm_job_id_is_quoted_in_the_fix():
    fs = no_gpu_machine(SLURM_JOB_ID="1;id")
    f = finding(check(fs), "driver")
    assert f.id == "driver.slurm-no-gpu"
    assert not any("show job 1;id" in c for c in f.fix.commands), f.fix.commands


# ---------------- output

def test_json_report_of_the_permission_case_is_valid():
    from cudadoctor.render.json_report import render_json
    fs = no_gpu_machine()
    fs.denied.update({"/dev/nvidia0", "/dev/nvidiactl"})
    r = check(fs)
    from cudadoctor.facts.registry import Options  # noqa
    env = fs.env
    try:
        text = render_json(r, env)
    except Exception as e:  # env may be required
        raise AssertionError(f"render_json: {e!r}")
    d = json.loads(text)
    drv = next(s for s in d["steps"] if s["id"] == "driver")
    f = drv["findings"][0]
    assert f["id"] == "driver.device-permission" and f["evidence"]["denied"] == ["/dev/nvidia0", "/dev/nvidiactl"] or \
        sorted(f["evidence"]["denied"]) == ["/dev/nvidia0", "/dev/nvidiactl"]
    assert d["facts"]["device_nodes"]["value"]["denied"]
    try:
        import jsonschema
        schema = json.load(open("cudadoctor/schema/report-1.json"))
        jsonschema.validate(d, schema)
    except ImportError:
        pass


def test_torch_unavailable_under_a_failing_driver_step_points_at_it():
    # as on the H200 with /dev/nvidia0 refused: nvidia-smi finds no GPU, torch says "No CUDA GPUs are available"
    fs = no_gpu_machine(SLURM_JOB_ID="9")
    fs.on([fs.python, PROBE_SCRIPT],
          FakeCmd(torch_stages(available=False, init_error="RuntimeError: No CUDA GPUs are available")))
    f = next(f for f in steps(check(fs))["torch.cuda"].findings if f.id == "torch.cuda.unavailable")
    assert "driver step" in f.detail and f.fix.commands[0] == "cudadoctor check --only driver"


def test_no_nvidia_smi_and_no_nvml_in_a_compute_only_container_warns_without_claiming_nvml():
    fs = h200(smi=False, nvml=FakeCmd(json.dumps({"error": "LibraryNotFound", "message": "NVML Shared Library Not Found"})))
    fs.add_file("/.dockerenv", "")
    fs.add_file("/usr/local/nvidia/lib64/libcuda.so.1", "")  # the compute capability mounts libcuda
    r = check(fs)
    f = next(f for f in steps(r)["driver"].findings if f.id == "driver.smi-missing")
    assert f.status.value == "warn" and "NVML cannot be used" in f.summary
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in f.fix.commands[0] and ids(r)["torch.cuda.ok"] == "ok"


def test_torch_import_fails_on_a_damaged_wheel_library_names_its_package_and_pins_the_reinstall():
    # recorded on the H200 with torch's cuDNN wheel folder and the system's libcudnn hidden (tests/data/h200/README.md)
    err = (H200_DATA / "s32_nocudnn_at_all.torch.txt").read_text().strip().splitlines()[-1]
    r = check(h200(torch=FakeCmd(torch_stages(import_error=err))))
    f = next(f for f in steps(r)["torch.cuda"].findings if f.id == "torch.cuda.import-failed")
    assert "libcudnn.so.9" in f.detail and "nvidia-cudnn-cu13" in f.detail
    assert "pip show -f nvidia-cudnn-cu13" in f.fix.commands[0]
    assert f.fix.commands[-1].endswith("--force-reinstall torch==2.11.0")


def test_torch_import_fails_without_a_version_names_no_cudnn_wheel():
    # a cuDNN wheel's name carries torch's CUDA major, unknown without the version: not guessed from cuDNN's own 9
    fs = h200(torch=FakeCmd(torch_stages(import_error="ImportError: libcudnn.so.9: cannot open shared object file",
                                         version="")))
    f = next(f for f in steps(check(fs))["torch.cuda"].findings if f.id == "torch.cuda.import-failed")
    assert "cu9" not in " ".join(f.fix.commands) and "nvidia-cudnn" not in f.detail


def test_torch_import_fails_names_the_installed_package_that_ships_the_library():
    # a PyPI torch's metadata has no +cu tag ("2.11.0"); the installed nvidia-* packages say which ships libcudnn
    err = (H200_DATA / "s32_nocudnn_at_all.torch.txt").read_text().strip().splitlines()[-1]
    pk = {"nvidia-cudnn-cu13": "9.19.0.56", "nvidia-cublas": "13.1.0.3", "nvidia-nccl-cu13": "2.28.7"}
    fs = h200(torch=FakeCmd(torch_stages(import_error=err, version="2.11.0", nvidia_packages=pk)))
    f = next(f for f in steps(check(fs))["torch.cuda"].findings if f.id == "torch.cuda.import-failed")
    assert "nvidia-cudnn-cu13 9.19.0.56" in f.detail and "pip show -f nvidia-cudnn-cu13 " in f.fix.commands[0]

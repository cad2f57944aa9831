"""Scenarios: FakeSystems built from real recorded outputs (tests/data/h200) and variations of them."""

from __future__ import annotations

import json
import os
from pathlib import Path

from fakes.system import FakeCmd, FakeSystem

from cudadoctor.facts.driver import SMI_QUERY
from cudadoctor.facts.torch import MARK, PROBE_SCRIPT
from cudadoctor.facts.triton import probe_argv

DATA = Path(__file__).parent / "data"
H200 = DATA / "h200"
PY = "/opt/torch/.venv/bin/python3"
OWN_PY = PY  # cudadoctor installed in the torch venv, as a user would
SMI = "/usr/local/nvidia/bin/nvidia-smi"
NVCC = "/usr/local/cuda-13.0/bin/nvcc"
UUID = "GPU-8493e5ec-97b3-c7b9-38a5-38d6fbfc8bda"


def recorded(name: str) -> str:
    """A recorded output without its `$ command` first line and `wall=` last line."""
    lines = (H200 / name).read_text().splitlines()
    if lines and lines[0].startswith("$ "):
        lines = lines[1:]
    if lines and lines[-1].startswith("wall="):
        lines = lines[:-1]
    return "\n".join(lines) + "\n"


def smi_csv_answer() -> str:
    # Values from nvidia_smi_csv.txt (name, driver, cc, memory, bus id, MIG, persistence) and
    # nvidia_smi_q.xml (index 0, uuid, compute mode), in cudadoctor's own field order (SMI_QUERY).
    assert SMI_QUERY.startswith("index,name,uuid,pci.bus_id,compute_cap,memory.total")
    return f"0, NVIDIA H200, {UUID}, 00000000:00:06.0, 9.0, 143771, 580.159.04, Disabled, Enabled, Default\n"


def nvml_answer(**over) -> str:
    gpu = {"index": 0, "name": "NVIDIA H200", "uuid": UUID, "pci_bus_id": "00000000:00:06.0",
           "compute_capability": "9.0", "memory_total_mib": 143771, "memory_used_mib": 0, "mig_mode": False,
           "persistence_mode": True, "compute_mode": "Default", "pcie_gen": 5, "pcie_gen_max": 5,
           "pcie_width": 16, "pcie_width_max": 16, "power_w": 117.0, "power_limit_w": 700.0,
           "temperature_c": 33, "ecc_enabled": True, "throttle_reasons": ["gpu_idle"], "processes": []}
    gpu.update(over.pop("gpu", {}))
    d = {"error": "", "driver_version": "580.159.04", "nvml_version": "13.580.159.04",
         "cuda_driver_version": "13.0", "device_count": 1, "gpus": [gpu]}
    d.update(over)
    return json.dumps(d)


def torch_stages(version="2.11.0+cu130", cuda="13.0", available=True, count=1, arch=None, devices=None,
                 op=None, python=PY, visible=None, init_error="", import_error="", not_installed=False,
                 upto="done", warnings=(), nvidia_packages=None) -> str:
    """The torch probe's staged output, with torch_info.txt's values by default."""
    arch = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"] if arch is None else arch
    devices = [{"index": 0, "name": "NVIDIA H200", "capability": "9.0", "total_memory_mib": 143155,
                "multi_processor_count": 132, "uuid": UUID[4:]}] if devices is None else devices
    op = {"ok": True, "seconds": 0.12, "checked": True} if op is None else op
    stages = [("python", {"executable": python, "version": "3.12.3", "prefix": os.path.dirname(os.path.dirname(python)),
                          "visible_devices": visible})]
    if not_installed or import_error:
        stages.append(("import", {"installed": False, "not_found": not_installed,
                                  "import_error": import_error or "ModuleNotFoundError: No module named 'torch'",
                                  # (session 32) a broken torch's version, read from its metadata
                                  **({"version": version, "nvidia_packages": nvidia_packages or {}}
                                     if import_error else {})}))
        stages.append(("done", {}))
    else:
        stages.append(("import", {"installed": True, "version": version, "cuda": cuda, "hip": None,
                                  "git": "70d99e998b4955e0049d13a98d77ae1b14db1f45", "arch_list": arch,
                                  "import_s": 0.9, "file": "/opt/torch/.venv/lib/python3.12/site-packages/torch/__init__.py"}))
        stages.append(("cuda", {"available": available, "device_count": count if available else 0,
                                "init_error": init_error, "warnings": list(warnings)}))
        if available:
            stages.append(("devices", {"devices": devices}))
            stages.append(("op", op))
        stages.append(("libs", {"libraries": [], "cudnn_version": 91900 if cuda else None,
                                "nccl_version": "2.28.9" if cuda else ""}))
        stages.append(("done", {}))
    out = ["some junk a sitecustomize printed"]
    for name, rec in stages:
        rec = dict(rec, stage=name)
        out.append(f"{MARK} {json.dumps(rec)}")
        if name == upto:
            break
    return "\n".join(out) + "\n"


def triton_answer(case: str = "healthy", returncode: int = 0) -> FakeCmd:
    """The Triton probe's recorded answer on the H200 (s34_triton_<case>.txt: its marked lines were stdout, the rest
    its stderr)."""
    lines = (H200 / f"s34_triton_{case}.txt").read_text().splitlines()
    out = "".join(ln + "\n" for ln in lines if ln.startswith(MARK))
    err = "".join(ln + "\n" for ln in lines if not ln.startswith(MARK))
    return FakeCmd(out, err, returncode)


def on_triton(fs: FakeSystem, python: str, answer: FakeCmd) -> FakeSystem:
    for gpu_ops in (True, False):
        fs.on(probe_argv(fs, python, gpu_ops), answer)
    return fs


def h200(env=None, torch=None, smi=None, smi_csv=None, nvml=None, nvcc=None, proc=True, python=PY,
         extra_exes=None, triton=None) -> FakeSystem:
    """The healthy H200 machine. Pass a FakeCmd (or None to remove) to vary one layer."""
    base_env = {
        "PATH": "/opt/torch/.venv/bin:/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:"
                "/usr/sbin:/usr/bin:/sbin:/bin",
        "CUDA_HOME": "/usr/local/cuda", "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64:/usr/local/nvidia/lib",
        "TORCH_CUDA_ARCH_LIST": "9.0a", "HOME": "/root",
    }
    if env:
        base_env.update(env)
        base_env = {k: v for k, v in base_env.items() if v is not None}
    fs = FakeSystem(env=base_env, python=python)
    files = {
        "/etc/os-release": 'PRETTY_NAME="Ubuntu 24.04.3 LTS"\n',
        "/usr/local/cuda-13.0/include/cuda_runtime.h": "",
        "/usr/local/cuda-13.0/version.json": "{}",
    }
    if proc:
        pv = (H200 / "proc_version.txt").read_text().splitlines()
        files["/proc/driver/nvidia/version"] = pv[0] + "\n" + pv[1] + "\n"
        files["/proc/driver/nvidia/params"] = "\n".join(pv[2:]) + "\n"
    for p, c in files.items():
        fs.add_file(p, c)
    fs.symlinks.update({"/usr/local/cuda": "/usr/local/cuda-13.0", "/usr/local/cuda-13": "/usr/local/cuda-13.0"})
    if smi is not False:
        fs.add_exe(SMI, smi if smi is not None else FakeCmd(recorded("nvidia_smi.txt")))
        fs.add_exe("/usr/bin/nvidia-smi", smi if smi is not None else FakeCmd(recorded("nvidia_smi.txt")))
        csv = smi_csv if smi_csv is not None else (smi if smi is not None else FakeCmd(smi_csv_answer()))
        fs.on([SMI, f"--query-gpu={SMI_QUERY}", "--format=csv,noheader,nounits"], csv)
    fs.add_exe(python)
    fs.on([python, "-m", "cudadoctor.system.nvml_probe"], nvml if nvml is not None else FakeCmd(nvml_answer()))
    fs.add_exe(python)
    fs.on([python, PROBE_SCRIPT], torch if torch is not None else FakeCmd(torch_stages(python=python)))
    on_triton(fs, python, triton if triton is not None else triton_answer())
    if nvcc is not False:
        fs.add_exe(NVCC, nvcc if nvcc is not None else FakeCmd(recorded("nvcc_version.txt")))
    fs.add_exe("/sbin/ldconfig", FakeCmd((H200 / "ldconfig.txt").read_text()))
    for p, a in (extra_exes or {}).items():
        fs.add_exe(p, a)
    return fs

"""Fixture trees for the libraries / environment / WSL / container tests (built from tests/data)."""

from __future__ import annotations

import os

from cudadoctor.facts.driver import parse_ldconfig
from cudadoctor.facts.registry import Options, gather
from cudadoctor.facts.types import (
    EnvInfo,
    KernelModuleInfo,
    LdconfigInfo,
    NvccInstall,
    NvmlGpu,
    NvmlInfo,
    PlatformInfo,
    SmiInfo,
    GpuInfo,
    ToolkitInfo,
    TorchDevice,
    TorchInfo,
    UserspaceDriverInfo,
)
from cudadoctor.model import Fact

try:
    from tests.fakes.system import FakeCmd, FakeSystem  # noqa: F401
except ImportError:  # pragma: no cover - tests/ on sys.path instead of the repository root
    from fakes.system import FakeCmd, FakeSystem  # noqa: F401

DATA = os.path.join(os.path.dirname(__file__), "data")
SITE = "/opt/torch/.venv/lib/python3.12/site-packages"
TORCH_FILE = SITE + "/torch/__init__.py"


def data(*parts: str) -> str:
    with open(os.path.join(DATA, *parts), encoding="utf-8") as f:
        return f.read()


def h200_env() -> dict:
    env = {}
    for line in data("libs", "env.txt").splitlines():
        k, sep, v = line.partition("=")
        if sep:
            env[k] = v
    return env


def h200_system(env: dict = None) -> FakeSystem:
    """The H200 machine's library layout: pip wheels in the venv, the toolkit, the system cuDNN 9.14."""
    s = FakeSystem(env=env if env is not None else h200_env(), python="/opt/torch/.venv/bin/python3")
    for p in data("libs", "h200_maps.txt").split():
        s.add_file(p, b"\x7fELF")
    ld = parse_ldconfig(data("libs", "ldconfig.txt"))
    for name, paths in ld.items():
        for p in paths:
            s.add_file(p, b"\x7fELF")
    # the system cuDNN 9.14 (ldconfig and collect_env name it)
    for sub in ("", "_adv", "_cnn", "_graph", "_ops", "_heuristic", "_engines_precompiled",
                "_engines_runtime_compiled"):
        real = f"/usr/lib/x86_64-linux-gnu/libcudnn{sub}.so.9.14.0"
        s.add_file(real, b"\x7fELF")
        s.files.pop(f"/lib/x86_64-linux-gnu/libcudnn{sub}.so.9", None)
        s.symlinks[f"/lib/x86_64-linux-gnu/libcudnn{sub}.so.9"] = real
    # the toolkit: /usr/local/cuda -> /usr/local/cuda-13.0
    tk = "/usr/local/cuda-13.0/targets/x86_64-linux/lib"
    for so, ver in (("libcudart.so.13", "13.0.96"), ("libcublas.so.13", "13.1.0.3"),
                    ("libcublasLt.so.13", "13.1.0.3"), ("libnvJitLink.so.13", "13.0.88"),
                    ("libnvrtc.so.13", "13.0.88"), ("libcusparse.so.12", "12.6.3.3")):
        real = f"{tk}/{so.rsplit('.so.', 1)[0]}.so.{ver}"
        s.add_file(real, b"\x7fELF")
        s.files.pop(f"/usr/local/cuda/targets/x86_64-linux/lib/{so}", None)
        s.symlinks[f"/usr/local/cuda/targets/x86_64-linux/lib/{so}"] = real
        s.symlinks[f"{tk}/{so}"] = real
    s.symlinks["/usr/local/cuda"] = "/usr/local/cuda-13.0"
    s.add_exe("/usr/local/cuda-13.0/bin/nvcc")
    # the driver's libraries (container-injected under /usr/local/nvidia/lib64)
    s.files.pop("/usr/local/nvidia/lib64/libcuda.so.1", None)
    s.symlinks["/usr/local/nvidia/lib64/libcuda.so.1"] = "libcuda.so.580.159.04"
    s.files.pop("/usr/local/nvidia/lib64/libnvidia-ml.so.1", None)
    s.add_file("/usr/local/nvidia/lib64/libnvidia-ml.so.580.159.04", b"\x7fELF")
    s.symlinks["/usr/local/nvidia/lib64/libnvidia-ml.so.1"] = "libnvidia-ml.so.580.159.04"
    # pip wheels: dist-info RECORDs
    for line in data("libs", "h200_wheels.txt").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        dist, *files = line.split()
        s.add_file(f"{SITE}/{dist}/RECORD", "".join(f"{f},sha256=x,1\n" for f in files))
        for f in files:
            s.add_file(f"{SITE}/{f}", b"\x7fELF")
    s.add_exe("/usr/bin/ldd")
    return s


def h200_torch(libraries=None, **kw) -> TorchInfo:
    t = TorchInfo(python="/opt/torch/.venv/bin/python3", python_version="3.12.3", prefix="/opt/torch/.venv",
                  installed=True, version="2.11.0+cu130", cuda="13.0", file=TORCH_FILE,
                  arch_list=["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"], cudnn_version=91900,
                  nccl_version="2.28.9", available=True, device_count=1,
                  devices=[TorchDevice(0, "NVIDIA H200", "9.0", 143155, 132,
                                       "8493e5ec-97b3-c7b9-38a5-38d6fbfc8bda")],
                  libraries=list(data("libs", "h200_maps.txt").split()) if libraries is None else libraries,
                  stage="libs")
    for k, v in kw.items():
        setattr(t, k, v)
    return t


def h200_toolkit() -> ToolkitInfo:
    return ToolkitInfo(installs=[NvccInstall(nvcc="/usr/local/cuda/bin/nvcc", realpath="/usr/local/cuda-13.0/bin/nvcc",
                                             root="/usr/local/cuda-13.0", version="13.0", build="V13.0.88",
                                             found_via=["PATH", "CUDA_HOME", "/usr/local/cuda"])],
                       path_nvcc="/usr/local/cuda/bin/nvcc", home_var="CUDA_HOME", home="/usr/local/cuda",
                       home_exists=True, home_nvcc="/usr/local/cuda/bin/nvcc")


H200_UUID = "GPU-8493e5ec-97b3-c7b9-38a5-38d6fbfc8bda"


def h200_smi() -> SmiInfo:
    return SmiInfo(path="/usr/local/nvidia/bin/nvidia-smi", driver_version="580.159.04", cuda_version="13.0",
                   banner_style="classic",
                   gpus=[GpuInfo(0, "NVIDIA H200", H200_UUID, "00000000:00:06.0", "9.0", 143771, "Disabled",
                                 "Enabled", "Default")])


def h200_nvml(**gpu_kw) -> NvmlInfo:
    g = NvmlGpu(index=0, name="NVIDIA H200", uuid=H200_UUID, pci_bus_id="00000000:00:06.0",
                compute_capability="9.0", memory_total_mib=143771, mig_mode=False, persistence_mode=True,
                compute_mode="Default", ecc_enabled=True, ecc_uncorrected_volatile=0,
                retired_pages_pending=False, remapped_rows_pending=False, remapped_rows_failure=False)
    for k, v in gpu_kw.items():
        setattr(g, k, v)
    return NvmlInfo(driver_version="580.159.04", nvml_version="13.580.159.04", cuda_driver_version="13.0",
                    device_count=1, gpus=[g])


def h200_kernel_module(**params) -> KernelModuleInfo:
    text = data("libs", "proc_version.txt")
    p = {}
    for line in text.splitlines()[2:]:
        k, _, v = line.partition(":")
        if k.strip():
            p[k.strip()] = v.strip().strip('"')
    p.update(params)
    return KernelModuleInfo(version="580.159.04", flavour="open", text=text.splitlines()[0], params=p)


def gather_libs(system: FakeSystem, torch: TorchInfo = None, torch_fact: Fact = None,
                toolkit: ToolkitInfo = None) -> Fact:
    ld = Fact.found(LdconfigInfo(libraries=parse_ldconfig(data("libs", "ldconfig.txt"))), "ldconfig -p")
    given = {"ldconfig": ld,
             "torch": torch_fact if torch_fact is not None else Fact.found(torch or h200_torch()),
             "toolkit": Fact.found(toolkit or h200_toolkit())}
    return gather(system, ["libs"], Options(), given=given)["libs"]


def base_facts(system: FakeSystem = None, **over) -> dict:
    """A healthy H200's facts for the checks; `over` replaces single facts."""
    system = system or h200_system()
    facts = {
        "platform": Fact.found(PlatformInfo(system="Linux", release="6.18.44", machine="x86_64",
                                            distro="Ubuntu 24.04.3 LTS")),
        "env": Fact.found(EnvInfo(vars=dict(system.env))),
        "nvidia_smi": Fact.found(h200_smi()),
        "nvml": Fact.found(h200_nvml()),
        "kernel_module": Fact.found(h200_kernel_module()),
        "userspace_driver": Fact.found(UserspaceDriverInfo(
            libcuda="/usr/local/nvidia/lib64/libcuda.so.580.159.04", libcuda_version="580.159.04",
            libnvidia_ml="/usr/local/nvidia/lib64/libnvidia-ml.so.580.159.04",
            libnvidia_ml_version="580.159.04")),
        "torch": Fact.found(h200_torch()),
        "toolkit": Fact.found(h200_toolkit()),
    }
    facts.update({k: v for k, v in over.items() if k != "libs"})
    if "libs" in over:
        facts["libs"] = over["libs"]
    else:
        facts["libs"] = gather_libs(system, torch=facts["torch"].value if facts["torch"].value else None,
                                    torch_fact=facts["torch"], toolkit=facts["toolkit"].value)
    return facts


def finding_ids(step_result) -> dict:
    return {f.id: f.status for f in step_result.findings}

"""WSL: version, /dev/dxg, the Windows driver's libraries in /usr/lib/wsl/lib, and Linux driver packages
that must not be installed inside WSL."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from cudadoctor.facts.libs import DEFAULT_DIRS, WSL_LIB, file_version
from cudadoctor.facts.registry import Options, gatherer
from cudadoctor.model import Fact
from cudadoctor.system.base import System

#: Linux driver packages that replace or shadow the WSL driver libraries (NVIDIA's WSL user guide:
#: "Do not install any Linux display driver in WSL")
RE_LINUX_DRIVER_PKG = re.compile(
    r"^(nvidia-driver-\d+.*|nvidia-dkms-\d+.*|nvidia-kernel-(common|source)-\d+.*|nvidia-utils-\d+.*|"
    r"libnvidia-compute-\d+.*|libnvidia-gl-\d+.*|nvidia-compute-utils-\d+.*|cuda-drivers(-\d+)?|"
    r"nvidia-open(-\d+)?|nvidia-driver(-cuda)?|nvidia-kmod.*|xorg-x11-drv-nvidia.*|kmod-nvidia.*)$")
#: CUDA meta-packages that pull cuda-drivers in (use cuda-toolkit-X-Y under WSL)
RE_CUDA_META_PKG = re.compile(r"^cuda(-\d+-\d+)?$")


@dataclass
class WslInfo:
    version: int = 0  # 1 or 2
    kernel: str = ""  # /proc/version
    distro: str = ""  # WSL_DISTRO_NAME
    dev_dxg: bool = False
    lib_dir: bool = False  # /usr/lib/wsl/lib exists
    lib_files: list[str] = field(default_factory=list)
    libcuda: str = ""  # /usr/lib/wsl/lib/libcuda.so.1 when present
    libcuda_is_symlink: bool = False
    smi: str = ""  # /usr/lib/wsl/lib/nvidia-smi when present
    smi_on_path: str = ""  # the nvidia-smi PATH runs
    libcuda_resolved: str = ""  # the libcuda.so.1 the loader would take (realpath)
    libcuda_resolved_via: str = ""
    linux_libcuda: list[str] = field(default_factory=list)  # libcuda.so.* from a Linux driver install
    ld_conf_has_wsl: bool = False  # /etc/ld.so.conf.d names /usr/lib/wsl/lib
    package_tool: str = ""  # "dpkg", "rpm" or ""
    packages_error: str = ""
    linux_driver_packages: list[str] = field(default_factory=list)
    cuda_meta_packages: list[str] = field(default_factory=list)
    cuda_toolkit_packages: list[str] = field(default_factory=list)


def installed_packages(system: System, opts: Options) -> tuple:
    """(tool, [(name, version)], error) from dpkg-query or rpm, with a timeout."""
    dq = system.which("dpkg-query")
    if dq:
        res = system.run([dq, "-W", "-f=${Package} ${Version} ${db:Status-Abbrev}\n"], opts.timeout_tool)
        if not res.ok:
            return "dpkg", [], res.describe()
        out = []
        for line in res.stdout.splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[2].startswith("ii"):
                out.append((parts[0], parts[1]))
        return "dpkg", out, ""
    rpm = system.which("rpm")
    if rpm:
        res = system.run([rpm, "-qa", "--qf", "%{NAME} %{VERSION}\n"], opts.timeout_tool)
        if not res.ok:
            return "rpm", [], res.describe()
        return "rpm", [tuple(line.split()[:2]) for line in res.stdout.splitlines() if len(line.split()) >= 2], ""
    return "", [], ""


@gatherer("wsl", value_type=WslInfo, needs=("platform", "ldconfig"))
def gather_wsl(system: System, opts: Options, deps: dict) -> Fact:
    """WSL set-up for CUDA (only under WSL)."""
    plat = deps.get("platform")
    if plat is None or plat.value is None or not plat.value.is_wsl:
        return Fact.not_applicable("/proc/version", "not WSL")
    info = WslInfo(version=plat.value.wsl_version or 0, distro=system.env.get("WSL_DISTRO_NAME", ""))
    info.kernel = (system.read_text("/proc/version") or "").strip()
    info.dev_dxg = system.exists("/dev/dxg")
    info.lib_dir = system.is_dir(WSL_LIB)
    info.lib_files = system.listdir(WSL_LIB) if info.lib_dir else []
    p = os.path.join(WSL_LIB, "libcuda.so.1")
    if system.exists(p):
        info.libcuda = p
        info.libcuda_is_symlink = system.is_symlink(p)
    smi = os.path.join(WSL_LIB, "nvidia-smi")
    info.smi = smi if system.exists(smi) else ""
    info.smi_on_path = system.which("nvidia-smi") or ""
    ld = deps.get("ldconfig")
    cache = ld.value.libraries if ld is not None and ld.ok else {}
    for d in (system.env.get("LD_LIBRARY_PATH") or "").split(":"):
        if d and system.exists(os.path.join(d, "libcuda.so.1")):
            info.libcuda_resolved = system.realpath(os.path.join(d, "libcuda.so.1"))
            info.libcuda_resolved_via = f"LD_LIBRARY_PATH entry {d}"
            break
    else:
        for q in cache.get("libcuda.so.1", []):
            if system.exists(q):
                info.libcuda_resolved = system.realpath(q)
                info.libcuda_resolved_via = "ldconfig cache"
                break
    for d in DEFAULT_DIRS:
        for name in system.listdir(d):
            if name.startswith("libcuda.so") and file_version(name).count(".") >= 1:
                info.linux_libcuda.append(os.path.join(d, name))
    for name in system.listdir("/etc/ld.so.conf.d"):
        text = system.read_text(os.path.join("/etc/ld.so.conf.d", name)) or ""
        if WSL_LIB in text:
            info.ld_conf_has_wsl = True
    info.package_tool, pkgs, info.packages_error = installed_packages(system, opts)
    for name, ver in pkgs:
        if RE_LINUX_DRIVER_PKG.match(name):
            info.linux_driver_packages.append(f"{name} {ver}")
        elif RE_CUDA_META_PKG.match(name):
            info.cuda_meta_packages.append(f"{name} {ver}")
        elif name.startswith("cuda-toolkit-"):
            info.cuda_toolkit_packages.append(f"{name} {ver}")
    return Fact.found(info, f"/proc/version, /dev/dxg, {WSL_LIB}, {info.package_tool or 'no package tool'}")

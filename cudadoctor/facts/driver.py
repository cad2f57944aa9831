"""The driver layer: nvidia-smi as a user runs it, NVML, the kernel module, the user-space libraries."""

from __future__ import annotations

import json
import os
import re
from concurrent.futures import ThreadPoolExecutor

from cudadoctor.facts.registry import Options, gatherer
from cudadoctor.facts.types import (
    GpuInfo,
    KernelModuleInfo,
    LdconfigInfo,
    NvmlGpu,
    NvmlInfo,
    SmiInfo,
    UserspaceDriverInfo,
)
from cudadoctor.model import Fact, from_jsonable
from cudadoctor.system.base import System

# R610+ drivers print "KMD Version" / "CUDA UMD Version" instead of "Driver Version" / "CUDA Version".
RE_DRIVER = re.compile(r"(?:Driver|KMD) Version:\s*([0-9][0-9.]*)")
RE_CUDA = re.compile(r"CUDA(?: UMD)? Version:\s*([0-9][0-9.]*|ERR!|N/A)")
RE_NVML_LIB = re.compile(r"NVML library version:\s*([0-9][0-9.]*)")
RE_MODULE = re.compile(r"Kernel Module(?: for [\w-]+)?\s+([0-9]+\.[0-9]+(?:\.[0-9]+)?)")
RE_LIBVER = re.compile(r"\.so\.([0-9]+\.[0-9]+(?:\.[0-9]+)?)$")

SMI_QUERY = ("index,name,uuid,pci.bus_id,compute_cap,memory.total,driver_version,"
             "mig.mode.current,persistence_mode,compute_mode")
WSL_SMI = "/usr/lib/wsl/lib/nvidia-smi"

SMI_PROBLEMS = [
    ("no-driver", re.compile(r"couldn'?t communicate with the NVIDIA driver|NVIDIA driver is not loaded", re.I)),
    ("nvml-mismatch", re.compile(r"Driver/library version mismatch", re.I)),
    ("no-devices", re.compile(r"No devices were found", re.I)),
    ("gpu-lost", re.compile(r"GPU is lost|fallen off the bus|Unable to determine the device handle", re.I)),
    ("nvml-unknown", re.compile(r"Failed to initialize NVML: Unknown Error", re.I)),
    ("no-permission", re.compile(r"Insufficient Permissions|Permission denied", re.I)),
    ("nvml-missing", re.compile(r"NVML Shared Library Not Found|libnvidia-ml\.so.*cannot open|"
                                r"couldn'?t find libnvidia-ml\.so", re.I)),
]


def smi_paths(system: System) -> list:
    paths = system.which_all("nvidia-smi")
    if not paths and system.is_executable(WSL_SMI):
        paths = [WSL_SMI]
    return paths


def parse_smi_banner(text: str) -> dict:
    out = {}
    m = RE_DRIVER.search(text)
    if m:
        out["driver_version"] = m.group(1)
    m = RE_CUDA.search(text)
    if m and m.group(1) not in ("ERR!", "N/A"):
        out["cuda_version"] = m.group(1)
    elif m:
        out["cuda_version_raw"] = m.group(1)
    out["banner_style"] = "kmd-umd" if "KMD Version" in text or "CUDA UMD Version" in text else (
        "classic" if "Driver Version" in text else "")
    m = RE_NVML_LIB.search(text)
    if m:
        out["nvml_library_version"] = m.group(1)
    return out


def smi_problem(text: str) -> str:
    for name, rx in SMI_PROBLEMS:
        if rx.search(text):
            return name
    return ""


def parse_smi_csv(text: str, with_cc: bool = True) -> list:
    gpus = []
    for line in text.splitlines():
        cols = [c.strip() for c in line.split(",")]
        want = 10 if with_cc else 9
        if len(cols) < want or not cols[0].isdigit():
            continue
        if not with_cc:
            cols.insert(4, "")
        mem = cols[5].split()[0] if cols[5] else ""
        gpus.append(GpuInfo(
            index=int(cols[0]), name=cols[1], uuid=cols[2], pci_bus_id=cols[3],
            compute_capability=cols[4] if re.fullmatch(r"\d+\.\d+", cols[4]) else "",
            memory_total_mib=int(mem) if mem.isdigit() else None,
            mig_mode=cols[7], persistence_mode=cols[8], compute_mode=cols[9]))
    return gpus


@gatherer("nvidia_smi", value_type=SmiInfo)
def gather_nvidia_smi(system: System, opts: Options, deps: dict) -> Fact:
    """Run nvidia-smi as a user would, then its CSV query for exact fields."""
    paths = smi_paths(system)
    if not paths:
        for d in (system.env.get("PATH") or "").split(os.pathsep):
            cand = os.path.join(d, "nvidia-smi") if d else ""
            if cand and system.exists(cand) and not system.is_dir(cand):
                return Fact.failed(cand, f"{cand} exists but is not executable (permission bits)",
                                   value=SmiInfo(path=cand, all_paths=[cand], problem="not-executable"))
        return Fact.not_found("PATH", "nvidia-smi is not on PATH")
    smi = paths[0]
    argv_csv = [smi, f"--query-gpu={SMI_QUERY}", "--format=csv,noheader,nounits"]
    with ThreadPoolExecutor(2) as pool:
        f_plain = pool.submit(system.run, [smi], opts.timeout_smi)
        f_csv = pool.submit(system.run, argv_csv, opts.timeout_smi)
        plain, csv = f_plain.result(), f_csv.result()
    info = SmiInfo(path=smi, all_paths=paths)
    if plain.timed_out:
        return Fact.timeout(smi, f"nvidia-smi gave no answer within {plain.timeout_s:g} s (killed)", value=info)
    if not plain.started:
        return Fact.failed(smi, plain.describe(), value=info)
    text = plain.output
    banner = parse_smi_banner(text)
    info.driver_version = banner.get("driver_version", "")
    info.cuda_version = banner.get("cuda_version", "")
    info.banner_style = banner.get("banner_style", "")
    info.nvml_library_version = banner.get("nvml_library_version", "")
    info.problem = smi_problem(text) if plain.returncode != 0 or not info.driver_version else ""
    if csv.ok:
        info.gpus = parse_smi_csv(csv.stdout)
    elif "compute_cap" in csv.output and not csv.timed_out:
        again = system.run([smi, f"--query-gpu={SMI_QUERY.replace('compute_cap,', '')}",
                            "--format=csv,noheader,nounits"], opts.timeout_smi)
        if again.ok:
            info.gpus = parse_smi_csv(again.stdout, with_cc=False)
    if info.problem or plain.returncode != 0:
        info.message = text[-2000:]
        if not info.problem:
            info.problem = "garbage" if not info.driver_version else "error"
        return Fact.failed(smi, f"{plain.describe()}: {text.strip()[:400]}", value=info)
    if not info.driver_version:
        info.problem = "garbage"
        info.message = text[-2000:]
        return Fact.failed(smi, "nvidia-smi printed no driver version (unrecognised output)", value=info)
    return Fact.found(info, f"{smi}; {' '.join(argv_csv)}", plain.elapsed_s)


NVML_SOURCE = "NVML (nvidia-ml-py)"


def nvml_child(system: System, opts: Options, module: str, src: str = NVML_SOURCE) -> tuple:
    """Run an NVML child (`python -m MODULE`, printing one JSON object) with the NVML timeout:
    (its object, None, seconds), or (None, the TIMEOUT or FAILED fact saying why, from `src`, seconds)."""
    res = system.run([system.own_python(), "-m", module], opts.timeout_nvml)
    if res.timed_out:
        return None, Fact.timeout(src, f"NVML gave no answer within {res.timeout_s:g} s (killed)"), res.elapsed_s
    if not res.ok:
        return None, Fact.failed(src, res.describe() + (": " + res.output[-400:] if res.output else "")), res.elapsed_s
    try:
        raw = json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None, Fact.failed(src, "the NVML child printed no JSON: " + res.output[-300:]), res.elapsed_s
    if not isinstance(raw, dict):
        return None, Fact.failed(src, "the NVML child printed JSON that is not an object"), res.elapsed_s
    if raw.get("error") == "import-failed":
        return None, Fact.failed(src, "nvidia-ml-py is not importable: " + str(raw.get("message", ""))), res.elapsed_s
    return raw, None, res.elapsed_s


@gatherer("nvml", value_type=NvmlInfo)
def gather_nvml(system: System, opts: Options, deps: dict) -> Fact:
    """NVML through nvidia-ml-py, in a child process with a timeout."""
    src = NVML_SOURCE
    raw, failed, elapsed = nvml_child(system, opts, "cudadoctor.system.nvml_probe")
    if failed is not None:
        return failed
    if raw.get("error"):
        info = NvmlInfo(error=raw["error"])
        return Fact.failed(src, f"{raw['error']}: {raw.get('message', '')}", value=info)
    gpus = [from_jsonable(NvmlGpu, g) for g in raw.get("gpus", [])]
    info = NvmlInfo(driver_version=raw.get("driver_version", ""), nvml_version=raw.get("nvml_version", ""),
                    cuda_driver_version=raw.get("cuda_driver_version", ""),
                    device_count=raw.get("device_count", 0), gpus=[g for g in gpus if isinstance(g, NvmlGpu)])
    return Fact.found(info, src, elapsed)


@gatherer("kernel_module", value_type=KernelModuleInfo)
def gather_kernel_module(system: System, opts: Options, deps: dict) -> Fact:
    """/proc/driver/nvidia/version and params: the loaded kernel module."""
    path = "/proc/driver/nvidia/version"
    text = system.read_text(path)
    if text is None:
        why = system.read_error(path)
        if "No such file" in why or not system.exists("/proc/driver/nvidia"):
            return Fact.not_found(path, "no NVIDIA kernel module is loaded (/proc/driver/nvidia/version is absent)")
        return Fact.failed(path, f"cannot read {path}: {why}")
    m = RE_MODULE.search(text)
    first = text.strip().splitlines()[0] if text.strip() else ""
    info = KernelModuleInfo(version=m.group(1) if m else "", text=first,
                            flavour="open" if "Open Kernel Module" in text else "proprietary")
    params = system.read_text("/proc/driver/nvidia/params")
    if params:
        for line in params.splitlines():
            k, _, v = line.partition(":")
            if k.strip():
                info.params[k.strip()] = v.strip().strip('"')
    if not info.version:
        return Fact.failed(path, f"unrecognised {path}: {first[:200]}", value=info)
    return Fact.found(info, path)


def parse_ldconfig(text: str) -> dict:
    libs: dict = {}
    for line in text.splitlines():
        line = line.strip()
        if "=>" not in line:
            continue
        left, _, path = line.partition("=>")
        name = left.split("(")[0].strip()
        libs.setdefault(name, []).append(path.strip())
    return libs


@gatherer("ldconfig", value_type=LdconfigInfo)
def gather_ldconfig(system: System, opts: Options, deps: dict) -> Fact:
    """The dynamic loader's cache (`ldconfig -p`)."""
    exe = system.which("ldconfig") or next((p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig")
                                            if system.is_executable(p)), None)
    if not exe:
        return Fact.not_found("ldconfig", "ldconfig not found")
    res = system.run([exe, "-p"], opts.timeout_tool)
    if not res.ok:
        return Fact.failed(exe, res.describe())
    return Fact.found(LdconfigInfo(libraries=parse_ldconfig(res.stdout)), f"{exe} -p", res.elapsed_s)


def lib_version(path: str) -> str:
    m = RE_LIBVER.search(path)
    return m.group(1) if m else ""


@gatherer("userspace_driver", value_type=UserspaceDriverInfo, needs=("ldconfig",))
def gather_userspace_driver(system: System, opts: Options, deps: dict) -> Fact:
    """Which libcuda.so.1 / libnvidia-ml.so.1 the loader would pick, and their versions."""
    ld = deps.get("ldconfig")
    cache = ld.value.libraries if ld is not None and ld.ok else {}
    info = UserspaceDriverInfo()

    def from_env(soname: str) -> tuple:
        """(realpath, the LD_LIBRARY_PATH folder) of the first copy there, or ("", "")."""
        for d in (system.env.get("LD_LIBRARY_PATH") or "").split(":"):
            if d and system.exists(os.path.join(d, soname)):
                return system.realpath(os.path.join(d, soname)), d
        return "", ""

    def from_system(soname: str) -> str:
        for p in cache.get(soname, []):
            if system.exists(p):
                return system.realpath(p)
        for d in ("/usr/lib/wsl/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/aarch64-linux-gnu"):
            if system.exists(os.path.join(d, soname)):
                return system.realpath(os.path.join(d, soname))
        return ""

    def resolve(soname: str) -> str:
        return from_env(soname)[0] or from_system(soname)

    info.libcuda = resolve("libcuda.so.1")
    info.libcuda_version = lib_version(info.libcuda)
    info.libcuda_is_stub = "/stubs/" in info.libcuda
    env_ml, info.libnvidia_ml_via = from_env("libnvidia-ml.so.1")
    info.libnvidia_ml_system = from_system("libnvidia-ml.so.1")
    info.libnvidia_ml_system_version = lib_version(info.libnvidia_ml_system)
    info.libnvidia_ml = env_ml or info.libnvidia_ml_system
    info.libnvidia_ml_version = lib_version(info.libnvidia_ml)
    if not info.libcuda and not info.libnvidia_ml:
        return Fact.not_found("loader search path", "neither libcuda.so.1 nor libnvidia-ml.so.1 can be found",
                              value=info)
    return Fact.found(info, "LD_LIBRARY_PATH, ldconfig -p")

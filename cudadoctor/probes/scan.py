"""Scan an interpreter's site-packages for CUDA binaries and judge each against a GPU.

Pure on the System port: the target interpreter is asked for its site-packages (a child with a
timeout), the tree is walked, and every shared object / cubin / fatbin is read with the fatbin
reader (section headers first, so files without CUDA code cost a few small reads).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Optional

from cudadoctor.compat import (
    NATIVE,
    NO_IMAGE,
    PTX_JIT,
    PTX_TOO_NEW,
    parse_cc,
    select_for_binary,
    select_image,
)
from cudadoctor.settings import env_seconds
from cudadoctor.probes import fatbin

SITE_TIMEOUT = env_seconds("CUDADOCTOR_TIMEOUT_TOOL", 30.0)
MAX_FILES = 400_000

_SITE_SNIPPET = (
    "import json, site, sys, sysconfig\n"
    "p = []\n"
    "try:\n    p += site.getsitepackages()\nexcept Exception:\n    pass\n"
    "try:\n    p.append(site.getusersitepackages())\nexcept Exception:\n    pass\n"
    "p += [sysconfig.get_paths().get(k) for k in ('purelib', 'platlib')]\n"
    "p += [x for x in sys.path if x.endswith(('site-packages', 'dist-packages'))]\n"
    "print(json.dumps({'python': sys.executable, 'paths': [x for x in p if x]}))\n"
)


@dataclass
class ScanFile:
    path: str = ""
    package: str = ""  # the top-level folder under site-packages (torch, flash_attn, ...)
    format: str = ""
    sass: list = field(default_factory=list)
    ptx: list = field(default_factory=list)
    ptx_isa: dict = field(default_factory=dict)
    error: str = ""  # unreadable or corrupt


@dataclass
class ScanInfo:
    python: str = ""
    site_packages: list = field(default_factory=list)
    files: list[ScanFile] = field(default_factory=list)  # only files with CUDA code, or unreadable ones
    candidates: int = 0  # shared objects / cubins / fatbins opened
    seconds: float = 0.0
    truncated: bool = False


def site_packages(system, python: str, timeout: float = SITE_TIMEOUT) -> tuple:
    """(sys.executable, [existing site-packages folders]) of `python`, or (python, []) and an error."""
    r = system.run([python, "-c", _SITE_SNIPPET], timeout=timeout)
    if r.timed_out:
        return python, [], f"{python} gave no answer within {timeout:g} s"
    if r.not_found or r.error:
        return python, [], f"{python} could not start: {r.error or 'not found'}"
    try:
        d = json.loads((r.stdout or "").strip().splitlines()[-1])
    except (ValueError, IndexError):
        return python, [], f"{python} did not say where its site-packages are: {r.describe()}"
    seen: list = []
    for p in d.get("paths") or []:
        rp = system.realpath(p)
        if system.is_dir(rp) and rp not in seen:
            seen.append(rp)
    return d.get("python") or python, seen, ""


def scan_dirs(system, dirs: list, max_files: int = MAX_FILES) -> ScanInfo:
    t0 = time.monotonic()
    info = ScanInfo(site_packages=list(dirs))
    seen: set = set()
    walked = 0
    for top in dirs:
        for path in system.walk(top, max_files=max_files):
            walked += 1
            if walked >= max_files:
                info.truncated = True
                break
            if not fatbin.is_candidate_name(os.path.basename(path)):
                continue
            real = system.realpath(path)
            if real in seen or system.is_symlink(path):
                continue
            seen.add(real)
            info.candidates += 1
            rel = os.path.relpath(path, top)
            pkg = rel.split(os.sep, 1)[0]
            try:
                b = fatbin.read_file(system, path)
            except fatbin.BinaryFormatError as e:
                if path.endswith((".cubin", ".fatbin")) or "truncated" in str(e) or "corrupt" in str(e):
                    info.files.append(ScanFile(path, pkg, error=str(e)))
                continue
            if b.has_cuda and (b.sass or b.ptx):
                info.files.append(ScanFile(path, pkg, b.format, b.sass, b.ptx, b.ptx_isa()))
    info.seconds = round(time.monotonic() - t0, 3)
    return info


def scan_python(system, python: str) -> tuple:
    """(ScanInfo, error)."""
    exe, dirs, err = site_packages(system, python)
    if err:
        return ScanInfo(python=exe), err
    if not dirs:
        return ScanInfo(python=exe), f"{exe} names no existing site-packages folder"
    info = scan_dirs(system, dirs)
    info.python = exe
    return info, ""


@dataclass
class Judged:
    file: ScanFile
    verdict: str
    image: str
    reason: str


VENDOR = "nvidia-library"
# NVIDIA's own CUDA libraries (pip nvidia-* wheels, toolkit copies). Their embedded fatbin is not their
# whole kernel set: cuFFT 12 (CUDA 13) carries a single sm_75 cubin in .nv_fatbin, which cuobjdump
# lists too (seen on the H200, 2026-11-29), yet runs on cc 9.0 because it loads its real kernels from
# its own data at run time. Judging such a file by its fatbin would be a false "no kernel image".
VENDOR_PREFIXES = ("libcufft", "libcublas", "libcudnn", "libcusparse", "libcusolver", "libcurand", "libnccl",
                   "libnvjitlink", "libcufile", "libcupti", "libnvrtc", "libnpp", "libnvjpeg", "libcudart",
                   "libnvshmem", "libcutensor", "libnvblas", "libcudss", "libnvperf", "libcheckpoint",
                   "libnvtx", "libcuda.", "libnvidia-")


def is_vendor_library(path: str, package: str = "") -> bool:
    base = path.rsplit("/", 1)[-1].lower()
    return package == "nvidia" or "/site-packages/nvidia/" in path or base.startswith(VENDOR_PREFIXES)


def judge(info: ScanInfo, cc: tuple, driver_cuda: Optional[str] = None) -> list:
    out = []
    for f in info.files:
        if f.error:
            out.append(Judged(f, "unreadable", "", f.error))
            continue
        s = select_for_binary(f.sass, f.ptx, cc, driver_cuda, f.ptx_isa)
        if s.verdict != NATIVE and is_vendor_library(f.path, f.package):
            out.append(Judged(f, VENDOR, s.image,
                              f"NVIDIA library: its embedded images ({', '.join(f.sass + f.ptx) or 'none'}) are not "
                              f"its whole kernel set; its GPU support follows its CUDA version (rule alone: "
                              f"{s.verdict})"))
            continue
        out.append(Judged(f, s.verdict, s.image, s.reason))
    return out


CANNOT_RUN = (NO_IMAGE, PTX_TOO_NEW)
JIT_ONLY = (PTX_JIT,)
RUNS = (NATIVE, PTX_JIT)


def arch_list_targets(value: str) -> Optional[tuple]:
    """TORCH_CUDA_ARCH_LIST ('8.0;8.6+PTX 9.0a', names as torch's cpp_extension reads them) -> (sass, ptx).

    None when an entry cannot be read. Named families (e.g. 'Ampere') are not expanded: None.
    """
    sass, ptx = [], []
    for tok in value.replace(",", ";").replace(" ", ";").split(";"):
        tok = tok.strip()
        if not tok:
            continue
        plus = tok.upper().endswith("+PTX")
        base = tok[:-4] if plus else tok
        cc = parse_cc(base)
        if cc is None:
            return None
        variant = base[-1].lower() if base[-1].lower() in "af" else ""
        sass.append(f"sm_{cc[0]}{cc[1]}{variant}")
        if plus:
            ptx.append(f"compute_{cc[0]}{cc[1]}{variant}")
    return (sass, ptx) if sass else None


def arch_list_verdict(value: str, cc: tuple):
    t = arch_list_targets(value)
    if t is None:
        return None
    return select_image(t[0], t[1], cc)

"""Scan everywhere an interpreter loads CUDA binaries from, and judge each, module by module.

Pure on the System port: the target interpreter says where it loads from (where.py: sys.path,
.pth files, editable installs, torch's JIT extension cache, LD_LIBRARY_PATH, LD_PRELOAD), each
root is walked within a budget (files per source tree, seconds for the whole scan; VCS and cache
folders skipped; symlink loops entered once), every shared object / cubin / fatbin is read with
the fatbin reader (ELF section headers first, so files without CUDA code cost a few small reads),
its owner comes from the installers' records (owners.py), and each module is judged on its own
(compat.judge_modules).
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from typing import Optional

from cudadoctor.compat import (
    NATIVE,
    NO_IMAGE,
    NO_KERNELS,
    PTX_JIT,
    PTX_TOO_NEW,
    FileVerdict,
    ModuleArchs,
    ModuleVerdict,
    judge_modules,
    parse_cc,
    select_for_binary,
    select_image,
    verdict_runs,
)
from cudadoctor.probes import elf_dynamic, fatbin
from cudadoctor.probes.owners import Owners
from cudadoctor.probes.where import Root, where
from cudadoctor.settings import env_seconds

SITE_TIMEOUT = env_seconds("CUDADOCTOR_TIMEOUT_TOOL", 30.0)
MAX_FILES = 400_000  # a site-packages folder
TREE_FILES = int(env_seconds("CUDADOCTOR_SCAN_MAX_FILES", 50_000))  # a source tree (editable, PYTHONPATH, .pth)
SCAN_SECONDS = env_seconds("CUDADOCTOR_TIMEOUT_SCAN", 60.0)  # the whole scan
SKIP_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", "__pycache__"})

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
    package: str = ""  # the top-level folder under its root (torch, flash_attn, ...), or the file's name
    format: str = ""
    sass: list = field(default_factory=list)  # what the loader can use (not the -rdc linker inputs)
    ptx: list = field(default_factory=list)
    ptx_isa: dict = field(default_factory=dict)
    error: str = ""  # unreadable or corrupt
    origin: str = ""  # where.ORIGINS, or "--path"
    root: str = ""  # the folder it was found under
    via: str = ""  # the .pth / finder / egg-link / variable that put that folder on the path
    dist: str = ""  # the distribution it belongs to, and its version
    version: str = ""
    install: str = ""  # "wheel", "editable", "develop" or ""
    source: str = ""  # an editable install's source folder
    project: str = ""  # no owner: the nearest folder above it with setup.py or pyproject.toml
    modules: list[ModuleArchs] = field(default_factory=list)  # the modules the loader registers
    relocatable: list[ModuleArchs] = field(default_factory=list)  # __nv_relfatbin (-rdc linker inputs)


@dataclass
class LinkedFile:
    """A shared object that links against torch's own libraries (an extension: torchvision's _C.so, flash-attn's
    flash_attn_2_cuda.so, a JIT build): torch_links.py checks it against the torch the interpreter imports."""

    path: str = ""
    package: str = ""
    needed: list = field(default_factory=list)  # DT_NEEDED, in order
    origin: str = ""
    root: str = ""
    via: str = ""
    dist: str = ""
    version: str = ""
    install: str = ""
    source: str = ""
    project: str = ""


@dataclass
class ScanRoot:
    path: str = ""
    origin: str = ""
    via: str = ""
    files: int = 0  # files looked at
    cut: str = ""  # why the walk stopped early ('' when it ended)
    loops: list = field(default_factory=list)  # symlinked folders not entered twice


@dataclass
class ScanInfo:
    python: str = ""
    site_packages: list = field(default_factory=list)
    files: list[ScanFile] = field(default_factory=list)  # only files with CUDA code, or unreadable ones
    candidates: int = 0  # shared objects / cubins / fatbins opened
    seconds: float = 0.0
    truncated: bool = False
    roots: list[ScanRoot] = field(default_factory=list)
    skipped: list = field(default_factory=list)  # entries not scanned and why
    cc: str = ""  # the compute capability failing modules were named for ('' when none was known)
    linked: list[LinkedFile] = field(default_factory=list)  # shared objects that link torch's libraries


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


def _prune_for(root: Root, nested: set):
    """Folders a walk never enters: VCS/cache folders, other roots (walked as themselves) and, in a
    source tree, folders whose names are not Python identifiers (no import can reach into them:
    build/lib.linux-x86_64-cpython-312, .venv, .tox; a stale copy there would be a false alarm)."""
    def prune(parent: str, name: str) -> bool:
        if name in SKIP_DIRS or os.path.join(parent, name) in nested:
            return True
        return root.source_tree and not name.isidentifier()
    return prune


def _paths_of(system, root: Root, nested: set, max_files: int):
    if root.files:
        for f in root.files:
            yield f, ""
        return
    if not root.recursive:
        for name in system.listdir(root.path):
            full = os.path.join(root.path, name)
            if not system.is_dir(full):
                yield full, ""
        return
    yield from system.walk_tree(root.path, _prune_for(root, nested), max_files)


def scan_roots(system, roots: list, owners: Optional[Owners] = None, cc: Optional[tuple] = None,
               max_files: Optional[int] = None, seconds: Optional[float] = None) -> ScanInfo:
    """Walk every root (most specific first), read each candidate once (by real path), and keep the
    files with CUDA code. With `cc`, the modules that cannot run there get their kernels named."""
    t0 = time.monotonic()
    deadline = t0 + (SCAN_SECONDS if seconds is None else seconds)
    info = ScanInfo(site_packages=[r.path for r in roots if r.origin == "site-packages"],
                    cc=f"{cc[0]}.{cc[1]}" if cc else "")
    seen: set = set()
    nested = {r.path for r in roots if r.path and r.recursive and not r.files}
    out_of_time = False
    for root in roots:
        sr = ScanRoot(root.path or " ".join(root.files), root.origin, root.via)
        info.roots.append(sr)
        if out_of_time:
            sr.cut = "not walked: the scan's time budget was spent"
            continue
        limit = max_files or (TREE_FILES if root.source_tree else MAX_FILES)
        for path, note in _paths_of(system, root, nested - {root.path}, limit):
            if note == "loop":
                sr.loops.append(path)
                continue
            if note == "cut":
                sr.cut = f"stopped after {limit:,} files (in {path})"
                info.truncated = True
                break
            sr.files += 1
            if sr.files % 512 == 0 and time.monotonic() > deadline:
                sr.cut = f"stopped after {sr.files:,} files: the scan's time budget ({deadline - t0:g} s) was spent"
                info.truncated = out_of_time = True
                break
            base = os.path.basename(path)
            if not (root.files or fatbin.is_candidate_name(base)):
                continue
            real = system.realpath(path)
            if real in seen or (system.is_symlink(path) and not root.files):
                continue
            seen.add(real)
            info.candidates += 1
            f, linked = _read_one(system, path, root, cc)
            if f is not None:
                if owners is not None and not f.error:
                    _own(system, f, owners, root)
                info.files.append(f)
            if linked is not None:
                if owners is not None:
                    _own(system, linked, owners, root)
                info.linked.append(linked)
    info.seconds = round(time.monotonic() - t0, 3)
    return info


def _place(path: str, root: Root) -> tuple:
    """(the top-level folder under its root, or the file's name; the fields every record of a file under `root` has)."""
    rel = os.path.relpath(path, root.path) if root.path else os.path.basename(path)
    return rel.split(os.sep, 1)[0], dict(origin=root.origin, root=root.path, via=root.via)


def linked_file(system, path: str, root: Root, owners: Optional[Owners] = None) -> Optional[LinkedFile]:
    """The LinkedFile of one file, as the scan records it (explain reads the extension a message names), or None when
    it is not a shared object that needs torch's libraries."""
    pkg, common = _place(path, root)
    try:
        src = fatbin.system_source(system, path)
        linked = _linked(src, path, pkg, fatbin.read_source(src, path), common)
    except fatbin.BinaryFormatError:
        return None
    if linked is not None and owners is not None:
        _own(system, linked, owners, root)
    return linked


def _read_one(system, path: str, root: Root, cc: Optional[tuple]) -> tuple:
    """(ScanFile of a file with CUDA code or an unreadable CUDA file, else None;
    LinkedFile of a shared object that needs torch's libraries, else None)."""
    pkg, common = _place(path, root)
    try:
        src = fatbin.system_source(system, path)
        b = fatbin.read_source(src, path)
    except fatbin.BinaryFormatError as e:
        if path.endswith((".cubin", ".fatbin")) or "truncated" in str(e) or "corrupt" in str(e):
            return ScanFile(path, pkg, error=str(e), **common), None
        return None, None
    linked = _linked(src, path, pkg, b, common)
    if not b.has_cuda:
        return None, linked
    if cc:
        name_failing(system, path, b, cc)
    loader, reloc = b.judged_modules()
    if not (b.sass or b.ptx or reloc):
        return None, linked
    return ScanFile(path, pkg, b.format, b.sass, b.ptx, b.ptx_isa(), modules=loader, relocatable=reloc,
                    **common), linked


def _linked(src, path: str, pkg: str, b, common: dict) -> Optional[LinkedFile]:
    """A LinkedFile when `path` is a shared object whose DT_NEEDED names one of torch's libraries; torch's own
    files (its package folder) are torch itself, not an extension of it."""
    if b.format != "elf" or b.elf_type != elf_dynamic.ET_DYN or pkg == "torch" or "/site-packages/torch/" in path:
        return None
    try:
        d = elf_dynamic.dynamic_of(src, path, b.sections, b.elf_type)  # the section table fatbin read
    except fatbin.BinaryFormatError:
        return None
    if is_torch_library(d.soname) or not any(is_torch_library(n) for n in d.needed):
        return None
    return LinkedFile(path, pkg, d.needed, **common)


# torch's own sonames (a closed list: out-of-tree backends name theirs alike, torch_npu's libtorch_npu.so, and ship
# them beside their extensions), optionally versioned as Debian and Fedora build them (libc10.so.1.7)
_TORCH_LIBRARY = re.compile(r"^lib(?:c10|c10_cuda|c10_hip|c10_xpu|torch|torch_cpu|torch_cuda|torch_cuda_linalg|torch_hip|"
                            r"torch_xpu|torch_python|torch_global_deps|torch_nvshmem)\.so(?:\.\d+)*$")


def is_torch_library(soname: str) -> bool:
    """libc10.so, libc10_cuda.so, libtorch.so, libtorch_cpu.so, libtorch_cuda.so, libtorch_python.so, ...:
    the libraries torch ships in torch/lib, which an extension finds already loaded by `import torch`."""
    return bool(_TORCH_LIBRARY.match(soname))


def name_failing(system, path: str, b, cc: tuple, driver_cuda: Optional[str] = None) -> tuple:
    """Judge `b` (read from `path`) for `cc` module by module and read the kernel names of the modules that
    cannot run there (at most 64 per file). (the verdict, judged before the names were read; whether any
    module was named): judged again, a named module may prove empty."""
    loader, reloc = b.judged_modules()
    fv = judge_modules(loader, reloc, cc, driver_cuda)
    want = [b.modules[v.module.index] for v in fv.modules if not verdict_runs(v.verdict)][:64]
    if want:
        fatbin.name_modules_in_file(system, path, want)
    return fv, bool(want)


def _own(system, f: ScanFile, owners: Owners, root: Root) -> None:
    o = owners.owner(f.path, root.via if root.origin == "editable" else "")
    f.dist, f.version, f.install, f.source = o.dist, o.version, o.kind, o.source
    if not f.dist and root.origin == "editable" and root.dist:
        f.dist, f.install = root.dist, "editable"
    if not f.dist and root.source_tree:
        f.project = _project_of(system, f.path, root.path)


def _project_of(system, path: str, top: str) -> str:
    d = os.path.dirname(path)
    while d.startswith(top.rstrip("/")) and len(d) >= len(top.rstrip("/")):
        if system.exists(os.path.join(d, "setup.py")) or system.exists(os.path.join(d, "pyproject.toml")):
            return d
        if d == top or d == os.path.dirname(d):
            break
        d = os.path.dirname(d)
    return ""


def scan_dirs(system, dirs: list, max_files: int = MAX_FILES, cc: Optional[tuple] = None) -> ScanInfo:
    """Scan explicit folders (`cudadoctor scan --path`): everything under them, VCS/cache folders aside."""
    roots = [Root(system.realpath(d), "--path", via="--path") for d in dirs]
    return scan_roots(system, roots, Owners(system, [r.path for r in roots]), cc=cc, max_files=max_files)


def label_editable(roots: list, owners: Owners) -> None:
    """A .pth that an editable install wrote under another name (hatchling's `_editable_impl_*.pth`): its
    dist-info's RECORD lists it and its direct_url.json says editable."""
    for r in roots:
        if r.origin == "pth" and r.via:
            o = owners.installed_by(r.via)
            if o.kind == "editable":
                r.origin, r.dist, r.source_tree = "editable", o.dist, True


def scan_python(system, python: str, cc: Optional[tuple] = None, max_files: Optional[int] = None) -> tuple:
    """(ScanInfo, error): everywhere `python` loads CUDA binaries from (where.py)."""
    w = where(system, python)
    if w.error:
        return ScanInfo(python=w.python or python), w.error
    if not w.roots:
        return ScanInfo(python=w.python), f"{w.python} names no existing folder to load from"
    owners = Owners(system, w.site_dirs)
    label_editable(w.roots, owners)
    info = scan_roots(system, w.roots, owners, cc=cc, max_files=max_files)
    info.python = w.python
    info.site_packages = w.site_dirs
    info.skipped = w.skipped
    return info, ""


@dataclass
class Judged:
    file: ScanFile
    verdict: str
    image: str
    reason: str
    modules: tuple = ()  # compat.ModuleVerdict of each loader module
    worst: Optional[ModuleVerdict] = None  # the module the verdict comes from


VENDOR = "nvidia-library"
# NVIDIA's own CUDA libraries (pip nvidia-* wheels, toolkit copies). Their embedded fatbin is not their
# whole kernel set: cuFFT 12 (CUDA 13) carries a single sm_75 cubin in .nv_fatbin, which cuobjdump
# lists too (seen on the H200, 2026-11-29), yet runs on cc 9.0 because it loads its real kernels from
# its own data at run time. Judging such a file by its fatbin would be a false "no kernel image".
VENDOR_PREFIXES = ("libcufft", "libcublas", "libcudnn", "libcusparse", "libcusolver", "libcurand", "libnccl",
                   "libnvjitlink", "libcufile", "libcupti", "libnvrtc", "libnpp", "libnvjpeg", "libcudart",
                   "libnvshmem", "libcutensor", "libnvblas", "libcudss", "libnvperf", "libcheckpoint",
                   "libnvtx", "libcuda.", "libnvidia-", "libnvoptix", "libnvcuvid", "libnvinfer",
                   "libnvtoolsext", "libnvonnxparser")


# The NVIDIA driver's own user-space libraries carry the driver's version in their file name
# (libnvoptix.so.580.159.04, libnvidia-ml.so.580.159.04, libcuda.so.580.159.04): part of the driver, they
# pick their kernels per GPU at run time. libnvoptix.so.580.159.04 in the H200's driver folder
# (LD_LIBRARY_PATH=/usr/local/nvidia/lib64) has 35 modules, one of them only sm_75/sm_80 SASS: judged by
# the rule alone it was a false "no kernel image" on a healthy machine (seen 2026-11-30), and the fix would
# have taken the driver's folder off LD_LIBRARY_PATH.
_DRIVER_VERSIONED = re.compile(r"\.so\.\d{3}\.\d{1,3}(\.\d{1,3})?$")


def is_vendor_library(path: str, package: str = "") -> bool:
    base = path.rsplit("/", 1)[-1].lower()
    return (package == "nvidia" or "/site-packages/nvidia/" in path or base.startswith(VENDOR_PREFIXES)
            or bool(_DRIVER_VERSIONED.search(base)))


def judge(info: ScanInfo, cc: tuple, driver_cuda: Optional[str] = None) -> list:
    out = []
    for f in info.files:
        if f.error:
            out.append(Judged(f, "unreadable", "", f.error))
            continue
        s = judge_file(f, cc, driver_cuda)
        if s.verdict not in (NATIVE, NO_KERNELS) and is_vendor_library(f.path, f.package):
            out.append(Judged(f, VENDOR, s.image,
                              f"NVIDIA library: its embedded images ({', '.join(f.sass + f.ptx) or 'none'}) are not "
                              f"its whole kernel set; its GPU support follows its CUDA version (rule alone: "
                              f"{s.verdict})", s.modules, s.worst))
            continue
        out.append(Judged(f, s.verdict, s.image, s.reason, s.modules, s.worst))
    return out


def judge_file(f: ScanFile, cc: tuple, driver_cuda: Optional[str] = None) -> FileVerdict:
    """Module by module; a file recorded without modules (an older report) by the union of its archs."""
    if f.modules or f.relocatable:
        return judge_modules(f.modules, f.relocatable, cc, driver_cuda)
    s = select_for_binary(f.sass, f.ptx, cc, driver_cuda, f.ptx_isa)
    return FileVerdict(s.verdict, s.image, s.reason)


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

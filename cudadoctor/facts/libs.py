"""CUDA libraries actually loaded (from the torch child's memory maps) or, without torch, resolved the
way the dynamic loader would (ldd on torch's libraries, LD_LIBRARY_PATH, the ldconfig cache).

Each library gets its path, version and origin: where the file lives (a pip nvidia-* wheel,
torch/lib, a toolkit under /usr/local/cuda-X, conda, WSL's /usr/lib/wsl/lib, the toolkit's stubs,
the system) and why the loader took it (an LD_LIBRARY_PATH entry, torch's RUNPATH, the ldconfig
cache). Every copy of the same library the loader could reach is listed too, so a check can say
"several copies, this one wins".
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Optional

from cudadoctor.facts.registry import Options, gatherer
from cudadoctor.model import Fact
from cudadoctor.system.base import System

#: CUDA libraries worth naming; the group is the family (libcudnn_graph is its own family)
RE_CUDA_LIB = re.compile(
    r"^(libcuda|libcudart|libcublasLt|libcublas|libcudnn(?:_[a-z_]+)?|libnccl|libnvrtc(?:-builtins)?|"
    r"libnvJitLink|libcusparseLt|libcusparse|libcufft|libcurand|libcusolver|libcupti|libnvToolsExt|"
    r"libnvshmem_host|libcufile|libnvidia-ml|libnvidia-ptxjitcompiler|libnvidia-nvvm)\.so(\.[0-9.]+)?$")
RE_SO_VERSION = re.compile(r"\.so\.([0-9]+(?:\.[0-9]+)*)$")
RE_MISSING = re.compile(r"(lib[\w.+-]+\.so[0-9.]*): cannot open shared object file")
RE_UNDEF = re.compile(r"undefined symbol: (\S+?)(?:,|$|\s)")
RE_WHEEL_DIR = re.compile(r"^(?P<name>[A-Za-z0-9_.]+?)-(?P<version>[^-]+)\.dist-info$")
SYSTEM_DIRS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib", "/usr/local/nvidia/lib",
               "/usr/local/nvidia/lib64")
DEFAULT_DIRS = ("/lib64", "/usr/lib64", "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
                "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib", "/usr/lib")
WSL_LIB = "/usr/lib/wsl/lib"

# origins (where the file lives)
PIP = "pip-wheel"
TORCH_LIB = "torch-lib"
TOOLKIT = "toolkit"
CONDA = "conda"
WSL = "wsl"
STUB = "stub"
SYSTEM = "system"
OTHER = "other"


@dataclass
class LibFile:
    """One copy of a CUDA library."""

    family: str = ""  # "libcudnn", "libcudart", ...
    soname: str = ""  # the name asked for ("libcudnn.so.9"), or the file name
    path: str = ""  # as mapped / resolved
    realpath: str = ""
    version: str = ""  # "9.19.0"
    version_source: str = ""  # "file name", "wheel nvidia-cudnn-cu13", "torch.backends.cudnn.version()"
    origin: str = ""  # PIP, TORCH_LIB, TOOLKIT, CONDA, WSL, STUB, SYSTEM, OTHER
    origin_detail: str = ""  # "nvidia-cudnn-cu13 9.19.0.56", "/usr/local/cuda-13.0", conda prefix
    via: str = ""  # why the loader took it: "LD_LIBRARY_PATH entry /x", "RUNPATH", "ldconfig cache", ...


@dataclass
class LibsInfo:
    method: str = ""  # "maps" (torch child after CUDA init), "ldd" or "loader-search"
    loaded: list[LibFile] = field(default_factory=list)
    copies: list[LibFile] = field(default_factory=list)  # every copy the loader could reach, one per realpath
    missing: list[str] = field(default_factory=list)  # sonames that cannot be found
    missing_from: str = ""  # where the missing names were seen (import error, ldd of X)
    undefined_symbols: list[str] = field(default_factory=list)  # from torch's import error
    ld_library_path: list[str] = field(default_factory=list)
    ld_library_path_missing: list[str] = field(default_factory=list)  # entries that are not folders
    ldd_targets: list[str] = field(default_factory=list)
    torch_cudnn: str = ""  # torch.backends.cudnn.version() as "9.19.0"
    errors: list[str] = field(default_factory=list)

    def by_family(self, family: str) -> list:
        return [x for x in self.loaded if x.family == family]

    def copies_of(self, family: str) -> list:
        return [x for x in self.copies if x.family == family]


def family_of(name: str) -> str:
    m = RE_CUDA_LIB.match(os.path.basename(name))
    return m.group(1) if m else ""


def file_version(path: str) -> str:
    """Version from a file name: libcudnn.so.9.14.0 -> 9.14.0, libcuda.so.580.159.04 -> 580.159.04.

    A bare major (libcudnn.so.9) is returned as is; callers prefer a better source for it.
    """
    m = RE_SO_VERSION.search(os.path.basename(path))
    return m.group(1) if m else ""


def cudnn_version_str(v) -> str:
    """torch.backends.cudnn.version(): 91900 -> 9.19.0 (cuDNN 9), 8902 -> 8.9.2 (cuDNN 8)."""
    try:
        n = int(v)
    except (TypeError, ValueError):
        return ""
    if n <= 0:
        return ""
    if n >= 90000:
        return f"{n // 10000}.{(n % 10000) // 100}.{n % 100}"
    return f"{n // 1000}.{(n % 1000) // 100}.{n % 100}"


def site_dir(path: str) -> str:
    for marker in ("/site-packages/", "/dist-packages/"):
        i = path.find(marker)
        if i >= 0:
            return path[: i + len(marker) - 1]
    return ""


class _Wheels:
    """Which installed wheel owns a file under site-packages (from the dist-info RECORD files)."""

    def __init__(self, system: System):
        self.system = system
        self.cache: dict = {}

    def records(self, site: str) -> list:
        if site not in self.cache:
            out = []
            for d in self.system.listdir(site):
                m = RE_WHEEL_DIR.match(d)
                if not m or not d.lower().startswith(("nvidia", "torch")):
                    continue
                text = self.system.read_text(os.path.join(site, d, "RECORD"), limit=2 * 1024 * 1024) or ""
                files = {line.split(",")[0] for line in text.splitlines() if line}
                name = m.group("name").replace("_", "-").lower()
                out.append((name, m.group("version"), files))
            self.cache[site] = out
        return self.cache[site]

    def owner(self, path: str) -> tuple:
        site = site_dir(path)
        if not site:
            return ("", "")
        rel = path[len(site) + 1:]
        for name, version, files in self.records(site):
            if rel in files:
                return (name, version)
        return ("", "")


class Classifier:
    def __init__(self, system: System, toolkit_roots: list, ld_dirs: list, ldconfig_paths: set):
        self.system = system
        self.wheels = _Wheels(system)
        self.toolkit_roots = [r for r in toolkit_roots if r]
        self.ld_dirs = ld_dirs
        self.ld_real = [(d, system.realpath(d)) for d in ld_dirs]
        self.ldconfig_real = {system.realpath(p) for p in ldconfig_paths}
        self.conda_prefix = system.env.get("CONDA_PREFIX", "")
        self._stub_sizes = None

    def stub_sizes(self) -> set:
        """Sizes of the toolkits' stub libcuda.so files (a copy of the stub elsewhere has the same size)."""
        if self._stub_sizes is None:
            self._stub_sizes = set()
            for root in self.toolkit_roots:
                dirs = [os.path.join(root, "lib64", "stubs")] + [
                    os.path.join(root, "targets", t, "lib", "stubs") for t in self.system.listdir(
                        os.path.join(root, "targets"))]
                for d in dirs:
                    n = self.system.file_size(os.path.join(d, "libcuda.so"))
                    if n:
                        self._stub_sizes.add(n)
        return self._stub_sizes

    def is_stub_copy(self, path: str, real: str) -> bool:
        if family_of(real) != "libcuda" and family_of(path) != "libcuda":
            return False
        if real.startswith(WSL_LIB + "/") or real.startswith("/usr/lib/wsl/"):
            return False
        n = self.system.file_size(real)
        return bool(n) and n in self.stub_sizes()

    def origin(self, path: str, real: str) -> tuple:
        for p in (real, path):
            if p.startswith(WSL_LIB + "/") or p.startswith("/usr/lib/wsl/drivers/"):
                return WSL, os.path.dirname(p)
        if "/stubs/" in real or "/stubs/" in path or self.is_stub_copy(path, real):
            return STUB, os.path.dirname(real)
        for p in (real, path):
            if site_dir(p):
                if "/torch/lib/" in p:
                    return TORCH_LIB, os.path.dirname(p)
                name, version = self.wheels.owner(p)
                if name or "/nvidia/" in p:
                    return PIP, (f"{name} {version}" if name else os.path.dirname(p))
        for p in (real, path):
            m = re.match(r"^(/usr/local/cuda(?:-[0-9.]+)?|/opt/cuda(?:-[0-9.]+)?)/", p)
            if m:
                return TOOLKIT, m.group(1)
            for root in self.toolkit_roots:
                if p.startswith(root.rstrip("/") + "/"):
                    return TOOLKIT, root
        for p in (real, path):
            if "/lib/" in p:
                prefix = p.split("/lib/")[0]
                if prefix and (prefix == self.conda_prefix or self.system.is_dir(prefix + "/conda-meta")):
                    return CONDA, prefix
        if os.path.dirname(real) in SYSTEM_DIRS or os.path.dirname(real).startswith(("/usr/lib/", "/lib/")):
            return SYSTEM, os.path.dirname(real)
        return OTHER, os.path.dirname(real)

    def via(self, path: str, real: str, origin: str) -> str:
        d, rd = os.path.dirname(path), os.path.dirname(real)
        for entry, entry_real in self.ld_real:
            if d == entry.rstrip("/") or rd == entry_real.rstrip("/") or d == entry_real.rstrip("/"):
                return f"LD_LIBRARY_PATH entry {entry}"
        if origin in (PIP, TORCH_LIB):
            return "torch's RUNPATH"
        if real in self.ldconfig_real or path in self.ldconfig_real:
            return "ldconfig cache"
        return ""

    def describe(self, path: str, soname: str = "", wheel_version_ok: bool = True) -> LibFile:
        real = self.system.realpath(path)
        fam = family_of(soname or path) or family_of(real)
        origin, detail = self.origin(path, real)
        lf = LibFile(family=fam, soname=soname or os.path.basename(path), path=path, realpath=real,
                     origin=origin, origin_detail=detail)
        v_real, v_path = file_version(real), file_version(path)
        best = max((v_real, v_path), key=lambda v: v.count("."))
        if best.count(".") >= 1:
            lf.version, lf.version_source = best, "file name"
        elif origin == PIP and detail and " " in detail and wheel_version_ok:
            lf.version, lf.version_source = detail.split(" ", 1)[1], f"wheel {detail.split(' ', 1)[0]}"
        elif best:
            lf.version, lf.version_source = best, "file name (major only)"
        lf.via = self.via(path, real, origin)
        return lf


def parse_ldd(text: str) -> tuple:
    """`ldd` output -> ([(soname, path)], [missing sonames])."""
    found, missing = [], []
    for line in text.splitlines():
        line = line.strip()
        if "=>" not in line:
            continue
        name, _, rest = line.partition("=>")
        name, rest = name.strip(), rest.strip()
        if rest.startswith("not found"):
            if name not in missing:
                missing.append(name)
            continue
        path = rest.split(" (")[0].strip()
        if path.startswith("/"):
            found.append((name, os.path.normpath(path)))
    return found, missing


def torch_lib_dirs(system: System, torch_value) -> list:
    """torch/lib folders of the target interpreter (from torch.__file__, or its prefix when import failed)."""
    out = []
    if torch_value is not None and getattr(torch_value, "file", ""):
        out.append(os.path.join(os.path.dirname(torch_value.file), "lib"))
    prefix = getattr(torch_value, "prefix", "") if torch_value is not None else ""
    if prefix and not out:
        for libdir in ("lib", "lib64"):
            base = os.path.join(prefix, libdir)
            for py in system.listdir(base):
                if py.startswith("python"):
                    for sp in ("site-packages", "dist-packages"):
                        d = os.path.join(base, py, sp, "torch", "lib")
                        if system.is_dir(d):
                            out.append(d)
    return out


def search_dirs(system: System, ld_dirs: list, cache: dict, soname: str) -> Optional[str]:
    for d in ld_dirs:
        p = os.path.join(d, soname)
        if system.exists(p):
            return p
    for p in cache.get(soname, []):
        if system.exists(p):
            return p
    for d in DEFAULT_DIRS:
        p = os.path.join(d, soname)
        if system.exists(p):
            return p
    return None


def all_copies(system: System, cls: Classifier, families: set, ld_dirs: list, cache: dict,
               extra_dirs: list) -> list:
    """Every copy of each family the loader could reach, one per realpath."""
    out: list = []
    seen: set = set()

    def add(path: str) -> None:
        name = os.path.basename(path)
        fam = family_of(name)
        if fam not in families or not RE_SO_VERSION.search(name):
            return
        real = system.realpath(path)
        if real in seen or not system.exists(path):
            return
        seen.add(real)
        out.append(cls.describe(path, name))

    for d in list(ld_dirs) + list(extra_dirs):
        for name in system.listdir(d):
            add(os.path.join(d, name))
    for name, paths in cache.items():
        for p in paths:
            add(p)
    return out


def pip_lib_dirs(system: System, sites: list) -> list:
    out = []
    for site in sites:
        nv = os.path.join(site, "nvidia")
        for sub in system.listdir(nv):
            for libdir in ("lib", "lib64"):
                d = os.path.join(nv, sub, libdir)
                if system.is_dir(d):
                    out.append(d)
    return out


@gatherer("libs", value_type=LibsInfo, needs=("torch", "ldconfig", "toolkit"))
def gather_libs(system: System, opts: Options, deps: dict) -> Fact:
    """CUDA libraries loaded by torch (memory maps) or resolved as the loader would, with origins."""
    torch_f, ld_f, tk_f = deps.get("torch"), deps.get("ldconfig"), deps.get("toolkit")
    tv = torch_f.value if torch_f is not None else None
    cache = ld_f.value.libraries if ld_f is not None and ld_f.ok else {}
    roots = [system.realpath(i.root) for i in tk_f.value.installs] if tk_f is not None and tk_f.value else []
    ld_dirs = [d for d in (system.env.get("LD_LIBRARY_PATH") or "").split(":") if d]
    ld_paths = {p for ps in cache.values() for p in ps}
    cls = Classifier(system, roots, ld_dirs, ld_paths)
    info = LibsInfo(ld_library_path=ld_dirs, ld_library_path_missing=[d for d in ld_dirs if not system.is_dir(d)])
    if tv is not None:
        info.torch_cudnn = cudnn_version_str(getattr(tv, "cudnn_version", None))
        cud = getattr(tv, "cudnn", None)
        if not info.torch_cudnn and cud is not None and cud.runtime:  # version() raised: the loaded cuDNN's own
            info.torch_cudnn = cud.runtime
        err = getattr(tv, "import_error", "") or ""
        for m in RE_MISSING.finditer(err):
            if m.group(1) not in info.missing:
                info.missing.append(m.group(1))
                info.missing_from = "import torch"
        info.undefined_symbols = [s for s in RE_UNDEF.findall(err)]
    libs = list(getattr(tv, "libraries", None) or []) if tv is not None else []
    tdirs = torch_lib_dirs(system, tv)
    sites = sorted({site_dir(d) for d in tdirs if site_dir(d)})
    src = ""
    if libs:
        seen = set()
        for p in libs:
            if family_of(p) and p not in seen:
                seen.add(p)
                info.loaded.append(cls.describe(p))
        if info.loaded:
            info.method = "maps"
            src = "memory maps of the torch child after CUDA initialisation"
    if not info.loaded:  # no torch, a CPU-only torch, or torch failed before loading CUDA libraries
        targets = [os.path.join(d, n) for d in tdirs for n in ("libtorch_cuda.so", "libtorch_global_deps.so")
                   if system.exists(os.path.join(d, n))]
        ldd = system.which("ldd")
        if targets and ldd:
            info.ldd_targets = targets
            seen = set()
            for t in targets:
                res = system.run([ldd, t], opts.timeout_tool)
                if res.timed_out or not res.started:
                    info.errors.append(f"ldd {t}: {res.describe()}")
                    continue
                found, missing = parse_ldd(res.stdout)
                for name in missing:
                    if family_of(name) and name not in info.missing:
                        info.missing.append(name)
                        info.missing_from = f"ldd {t}"
                for name, path in found:
                    if family_of(name) and path not in seen:
                        seen.add(path)
                        info.loaded.append(cls.describe(path, name))
            if info.loaded or info.missing:
                info.method, src = "ldd", "ldd " + " ".join(targets)
        if not info.loaded and not info.missing:
            info.method = "loader-search"
            names = ["libcuda.so.1", "libnvidia-ml.so.1"]
            for soname in sorted(cache):
                if family_of(soname) and RE_SO_VERSION.search(soname) and soname not in names:
                    names.append(soname)
            for d in ld_dirs:
                for n in system.listdir(d):
                    if family_of(n) and RE_SO_VERSION.search(n) and n not in names and \
                            file_version(n).count(".") == 0:
                        names.append(n)
            for soname in names:
                p = search_dirs(system, ld_dirs, cache, soname)
                if p:
                    info.loaded.append(cls.describe(p, soname))
            src = "LD_LIBRARY_PATH, ldconfig -p, " + ", ".join(DEFAULT_DIRS[:4])
    if info.torch_cudnn:
        for lf in info.loaded:
            if lf.family.startswith("libcudnn") and lf.version.count(".") == 0 and lf.origin != STUB:
                lf.version, lf.version_source = info.torch_cudnn, "torch.backends.cudnn.version()"
    families = {lf.family for lf in info.loaded} | {family_of(n) for n in info.missing} | {"libcuda"}
    families.discard("")
    extra = tdirs + pip_lib_dirs(system, sites) + [os.path.join(r, d) for r in roots
                                                   for d in ("lib64", "targets/x86_64-linux/lib",
                                                             "targets/sbsa-linux/lib")]
    info.copies = all_copies(system, cls, families, ld_dirs, cache, extra)
    if not info.loaded and not info.missing:
        return Fact.not_found(src, "no CUDA library is loaded or can be found", value=info)
    return Fact.found(info, src)

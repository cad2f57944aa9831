"""Whether each torch extension the interpreter can load links against the torch it imports.

An extension (torchvision's _C.so, flash-attn's flash_attn_2_cuda.so, a JIT build in ~/.cache/torch_extensions) calls
into torch's C++ libraries by mangled name. Built against one torch and loaded under another, a name it needs may not
exist any more: the import fails with "undefined symbol: _ZN3c10...". One built for a CUDA torch needs libc10_cuda.so
and libtorch_cuda.so, which a CPU-only or ROCm torch does not ship: "libc10_cuda.so: cannot open shared object file".

Read the way the dynamic loader resolves them: after `import torch`, torch's libraries are loaded by their sonames,
so an extension's DT_NEEDED libc10.so is torch/lib/libc10.so of the torch imported; its other libraries are searched
in LD_LIBRARY_PATH and its DT_RUNPATH (or DT_RPATH first, without a RUNPATH), $ORIGIN, $LIB and $PLATFORM expanded,
breadth first through their own dependencies. Its undefined global symbols must be exported by a library in that
scope. Python opens extension modules with RTLD_NOW, and torch.ops.load_library (ctypes) too, so one unresolved name
fails the load. Only names that are torch's (torch_names.py) are judged: a C library function is the system's
business, and a library this scope cannot find is not guessed at.

Not every torch-linked file is loaded: a second copy of a module later on sys.path, a package's builds for other
torch versions (DGL's libtensoradapter_pytorch_<version>.so, metatensor's torch-2.X/ folders) of which it opens the
one for the imported torch, and a module built for another Python (cpython-310 beside cpython-311 in a shared source
tree). Such a file that cannot load, beside a twin that can, is reported as not loaded, never as a failure.
"""

from __future__ import annotations

import os
import platform
import re
import time
from dataclasses import dataclass, field
from typing import Optional

from cudadoctor.probes import elf_dynamic
from cudadoctor.probes.fatbin import BinaryFormatError
from cudadoctor.probes.scan import is_torch_library
from cudadoctor.probes.torch_names import is_torch_name

MAX_FILES = 200  # extensions judged per run (a site-packages rarely has more than a few dozen)
MAX_SCOPE = 64  # an extension's own libraries (and theirs) read for the names they export
KEEP = 20  # missing names kept per file

CUDA_LIBS = ("libc10_cuda.so", "libtorch_cuda.so", "libtorch_cuda_linalg.so", "libtorch_nvshmem.so")
# the two spellings of std::string and std::list in mangled names: _GLIBCXX_USE_CXX11_ABI=1 and =0
_ABI_TWINS = (("NSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE", "Ss"), ("NSt7__cxx114listI", "St4listI"))
_VERSIONISH = re.compile(r"\d+(?:[._]\d+)+")
_PY_TAG = re.compile(r"\.cpython-(\d)(\d+)")


@dataclass
class ExtLink:
    path: str = ""
    package: str = ""
    origin: str = ""
    root: str = ""
    dist: str = ""
    version: str = ""
    install: str = ""
    source: str = ""
    project: str = ""
    via: str = ""  # the .pth, finder or variable that put its root on the path
    torch_libs: list = field(default_factory=list)  # the torch libraries it needs (DT_NEEDED)
    missing_libs: list = field(default_factory=list)  # of those, the ones the imported torch does not ship
    needs: int = 0  # torch names it needs
    missing: list = field(default_factory=list)  # torch names no library in its scope exports (first KEEP)
    missing_count: int = 0
    demangled: list = field(default_factory=list)  # the same names as c++filt reads them ('' when it could not)
    abi_mismatch: bool = False  # every missing name is in torch with the other std::string / std::list ABI
    built_for: str = ""  # the torch its distribution pins (METADATA: Requires-Dist: torch==X), '' when none
    not_loaded: str = ""  # why Python never loads this copy (a twin that loads, another Python): not a failure
    twin: str = ""  # a copy of the same module that loads, where which one Python imports first is not known
    error: str = ""  # why it could not be judged

    def __post_init__(self) -> None:  # a saved report may hold nulls
        for k in ("path", "package", "origin", "root", "dist", "version", "install", "source", "project", "via",
                  "built_for", "not_loaded", "twin", "error"):
            if getattr(self, k) is None:
                setattr(self, k, "")
        for k in ("torch_libs", "missing_libs", "missing", "demangled"):
            if getattr(self, k) is None:
                setattr(self, k, [])
        self.needs = self.needs or 0
        self.missing_count = self.missing_count or 0

    @property
    def broken(self) -> bool:
        return bool((self.missing_libs or self.missing_count) and not self.not_loaded and not self.error)


@dataclass
class TorchLinks:
    python: str = ""
    torch_version: str = ""
    torch_cuda: Optional[str] = None
    torch_lib: str = ""  # the imported torch's library folder
    exported: int = 0  # names torch's libraries export
    files: list[ExtLink] = field(default_factory=list)
    more: int = 0  # extensions past MAX_FILES, not judged
    seconds: float = 0.0
    torch_hip: Optional[str] = None  # torch.version.hip: a ROCm build
    truncated: bool = False  # the scan stopped early: extensions past its cut were not seen
    error: str = ""  # why no extension could be judged (torch's own libraries unreadable or not where expected)

    def __post_init__(self) -> None:
        self.files = [f for f in (self.files or []) if f is not None]
        for k in ("python", "torch_version", "torch_lib", "error"):
            if getattr(self, k) is None:
                setattr(self, k, "")

    @property
    def variant(self) -> str:
        """'cuda', 'rocm', 'xpu' or 'cpu': the build of the imported torch."""
        if self.torch_cuda:
            return "cuda"
        if self.torch_hip or "+rocm" in self.torch_version:
            return "rocm"
        if "+xpu" in self.torch_version:
            return "xpu"
        return "cpu"


class _Exports:
    """Each library's dynamic section and exported names, read once (libtorch_cpu.so's 74,000 once, not per
    extension), and the union over a scope, once per distinct scope."""

    def __init__(self, system):
        self.system = system
        self._names: dict = {}
        self._dyn: dict = {}
        self._unions: dict = {}

    def dynamic(self, path: str) -> Optional[elf_dynamic.Dynamic]:
        if path not in self._dyn:
            try:
                self._dyn[path] = elf_dynamic.read_dynamic(self.system, path)
            except BinaryFormatError:
                self._dyn[path] = None
        return self._dyn[path]

    def names(self, path: str) -> Optional[set]:
        """The exported names, or None when the library cannot be read (no section headers, corrupt, too large)."""
        if path not in self._names:
            d = self.dynamic(path)
            try:
                got = elf_dynamic.exported(d) if d is not None else None
            except BinaryFormatError:
                got = None
            self._names[path] = got or None  # a shared library that exports nothing is not one we can read
        return self._names[path]

    def union(self, paths: tuple) -> set:
        if paths not in self._unions:
            out: set = set()
            for p in paths:
                out |= self.names(p) or set()
            self._unions[paths] = out
        return self._unions[paths]


def _expand(entry: str, origin: str) -> list:
    """A RUNPATH/RPATH entry with $ORIGIN, $LIB and $PLATFORM expanded as glibc does (the candidates for $LIB)."""
    e = entry.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)
    e = e.replace("${PLATFORM}", platform.machine()).replace("$PLATFORM", platform.machine())
    if "$LIB" in e or "${LIB}" in e:
        return [e.replace("${LIB}", x).replace("$LIB", x) for x in ("lib64", "lib", f"lib/{platform.machine()}-linux-gnu")]
    return [e]


def _search_dirs(d: elf_dynamic.Dynamic, path: str, ld_library_path: list) -> list:
    here = os.path.dirname(path)
    run = [x for e in d.runpath for x in _expand(e, here)]
    rp = [x for e in d.rpath for x in _expand(e, here)] if not d.runpath else []
    return rp + ld_library_path + run


def torch_scope(system, lib_dir: str, needed: list, exports: _Exports) -> tuple:
    """(paths of the torch libraries in scope: those named and what they need in turn, [named ones torch lacks])."""
    scope, missing, todo = [], [], [n for n in needed if is_torch_library(n)]
    seen: set = set()
    while todo:
        n = todo.pop(0)
        if n in seen:
            continue
        seen.add(n)
        p = os.path.join(lib_dir, n)
        if not system.exists(p):
            if n in needed:
                missing.append(n)
            continue
        scope.append(p)
        d = exports.dynamic(p)
        todo += [x for x in (d.needed if d else []) if is_torch_library(x) and x not in seen]
    return scope, missing


def own_scope(system, d: elf_dynamic.Dynamic, path: str, exports: _Exports, ld_library_path: list) -> list:
    """The extension's other libraries the loader would find (not torch's, not the system's), breadth first through
    their own dependencies, each searched by the rules of the object that needs it."""
    out: list = []
    queue = [(d, path)]
    seen: set = set()
    while queue and len(out) < MAX_SCOPE:
        dd, pp = queue.pop(0)
        dirs = _search_dirs(dd, pp, ld_library_path)
        for n in dd.needed:
            if is_torch_library(n) or n in seen or "/" in n:
                continue
            seen.add(n)
            for folder in dirs:
                cand = os.path.normpath(os.path.join(folder, n))
                if system.exists(cand):
                    out.append(cand)
                    sub = exports.dynamic(cand)
                    if sub is not None:
                        queue.append((sub, cand))
                    break
    return out


def torch_pin(system, site_dirs: list, dist: str, version: str) -> str:
    """'2.13.0' from `Requires-Dist: torch==2.13.0` (or `torch (==2.13.0)`) in the distribution's METADATA."""
    if not dist or not version:
        return ""
    for sd in site_dirs:
        for name in (f"{dist}-{version}.dist-info", f"{dist.replace('-', '_')}-{version}.dist-info"):
            text = system.read_text(os.path.join(sd, name, "METADATA"))
            if text:
                m = re.search(r"^Requires-Dist:\s*torch\s*\(?\s*==\s*([0-9][0-9a-z.+]*)", text, re.M | re.I)
                return m.group(1) if m else ""
    return ""


def _abi_twin(name: str) -> str:
    for a, b in _ABI_TWINS:
        if a in name:
            return name.replace(a, b)
        if b in name:
            return name.replace(b, a)
    return ""


def _rel(e: ExtLink) -> str:
    root = (e.root or "").rstrip("/")
    return e.path[len(root) + 1:] if root and e.path.startswith(root + "/") else os.path.basename(e.path)


def _order(e: ExtLink, site_dirs: list) -> Optional[int]:
    """Where its root comes on sys.path, when that is known: PYTHONPATH before the site folders, those in their
    order, each followed by the folders its .pth lines add (site.addsitedir appends them); None for the roots whose
    place this reading does not know (editable finders, other sys.path entries)."""
    if e.origin == "PYTHONPATH":
        return 0
    if e.origin == "site-packages" and e.root in site_dirs:
        return 2 * (1 + site_dirs.index(e.root))
    if e.origin == "pth" and os.path.dirname(e.via) in site_dirs:  # a .pth line's folder comes right after its site
        return 2 * (1 + site_dirs.index(os.path.dirname(e.via))) + 1
    return None


def _mark_not_loaded(files: list, python_version: str, site_dirs: Optional[list] = None) -> None:
    """Files Python never loads that cannot load: a module built for another Python; one of a package's builds for
    several torch versions (the same name, versions aside) beside one that loads; a copy of a module shadowed by an
    earlier copy on sys.path that loads. Said so, not failed. A broken copy that comes first on sys.path stays a
    failure; where the order is not known, the twin that loads is only named."""
    site_dirs = site_dirs or []
    want = ".".join(python_version.split(".")[:2]) if python_version else ""
    broken = [e for e in files if (e.missing_libs or e.missing_count) and not e.error]
    good = [e for e in files if not (e.missing_libs or e.missing_count or e.error)]
    for e in broken:
        m = _PY_TAG.search(os.path.basename(e.path))
        if m and want and f"{m.group(1)}.{m.group(2)}" != want:
            e.not_loaded = f"a module for Python {m.group(1)}.{m.group(2)}; this interpreter is Python {want}"
            continue
        rel = _PY_TAG.sub(".cpython-*", _rel(e))
        same = [g for g in good if _PY_TAG.sub(".cpython-*", _rel(g)) == rel]
        key = _VERSIONISH.sub("#", rel)
        versions = [g for g in good if g not in same and _VERSIONISH.sub("#", _PY_TAG.sub(".cpython-*", _rel(g))) == key]
        if versions and _VERSIONISH.search(rel):
            e.not_loaded = (f"a build for another torch beside {versions[0].path}, which loads under this torch "
                            f"(the package opens the build for the torch it finds)")
            continue
        for g in same:
            mine, theirs = _order(e, site_dirs), _order(g, site_dirs)
            if mine is not None and theirs is not None and theirs < mine:
                e.not_loaded = f"shadowed: Python imports the copy in {g.root} first, which loads under this torch"
                break
            if mine is None or theirs is None:
                e.twin = g.path


def judge_links(system, linked: list, torch_file: str, site_dirs: list, torch_version: str = "",
                torch_cuda: Optional[str] = None, python: str = "", torch_hip: Optional[str] = None,
                python_version: str = "", truncated: bool = False) -> TorchLinks:
    """Judge every LinkedFile against the torch whose __init__.py is `torch_file`."""
    t0 = time.monotonic()
    torch_dir = os.path.dirname(torch_file)
    lib_dir = os.path.join(torch_dir, "lib")
    out = TorchLinks(python, torch_version, torch_cuda, lib_dir, torch_hip=torch_hip, truncated=truncated)
    exports = _Exports(system)
    real_torch = system.realpath(torch_dir).rstrip("/") + "/"
    core = os.path.join(lib_dir, "libc10.so")
    if not system.exists(core) or exports.names(core) is None:
        # Debian's python3-torch and other repackagings keep the libraries elsewhere: nothing to judge against here
        out.error = f"torch's libraries are not readable in {lib_dir} ({core} missing or unreadable)"
        out.seconds = round(time.monotonic() - t0, 3)
        return out
    ldlp = [x for x in (getattr(system, "env", {}) or {}).get("LD_LIBRARY_PATH", "").split(":") if x]
    for f in linked:
        if system.realpath(f.path).startswith(real_torch):
            continue  # torch's own files, reached through another root (LD_LIBRARY_PATH, an editable torch)
        if len(out.files) >= MAX_FILES:
            out.more += 1
            continue
        e = ExtLink(f.path, f.package, f.origin, f.root, f.dist, f.version, f.install, f.source, f.project, f.via,
                    torch_libs=[n for n in f.needed if is_torch_library(n)])
        out.files.append(e)
        e.built_for = torch_pin(system, site_dirs, f.dist, f.version)
        try:
            d = elf_dynamic.read_dynamic(system, f.path)
            wanted = [n for n in elf_dynamic.required(d) if is_torch_name(n)]
        except BinaryFormatError as err:
            e.error = str(err)
            continue
        e.needs = len(wanted)
        scope, lacking = torch_scope(system, lib_dir, f.needed, exports)
        own = own_scope(system, d, f.path, exports, ldlp)
        # a torch-named library the extension ships itself (torch_npu's libtorch_npu.so, found through its RUNPATH)
        # is its own, not one torch lacks
        own_names = {os.path.basename(p) for p in own}
        e.missing_libs = [n for n in lacking if not _found_own(system, d, f.path, n, ldlp, own_names)]
        if e.missing_libs or not scope:
            continue  # the load fails on the missing library first; names are not judged against a partial scope
        unread = [p for p in scope if exports.names(p) is None]
        if unread:
            e.error = f"cannot read the names {os.path.basename(unread[0])} exports"
            continue
        have = exports.union(tuple(scope + own))
        lost = [n for n in wanted if n not in have]
        e.missing, e.missing_count = lost[:KEEP], len(lost)
        e.abi_mismatch = bool(lost) and all(_abi_twin(n) and _abi_twin(n) in have for n in lost)
    _mark_not_loaded(out.files, python_version, list(site_dirs))
    _demangle(system, [e for e in out.files if e.missing])
    out.exported = len(exports.union(tuple(p for p in exports._names if p.startswith(lib_dir + os.sep))))
    out.seconds = round(time.monotonic() - t0, 3)
    return out


def _found_own(system, d, path: str, name: str, ldlp: list, own_names: set) -> bool:
    if name in own_names:
        return True
    for folder in _search_dirs(d, path, ldlp):
        if system.exists(os.path.join(folder, name)):
            return True
    return False


def _demangle(system, files: list, timeout: float = 5.0) -> None:
    """c++filt's reading of the missing names (binutils; absent or hung: the mangled names stay the evidence)."""
    names = [n for e in files for n in e.missing]
    tool = system.which("c++filt") if names else None
    if not tool:
        return
    r = system.run([tool], timeout=timeout, input_bytes="\n".join(names).encode() + b"\n")
    lines = (r.stdout or "").splitlines() if not (r.timed_out or r.error or r.not_found) else []
    if len(lines) != len(names):
        return
    it = iter(lines)
    for e in files:
        e.demangled = [next(it) for _ in e.missing]

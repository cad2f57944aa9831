"""Whether each torch extension the interpreter can load links against the torch it imports.

An extension (torchvision's _C.so, flash-attn's flash_attn_2_cuda.so, a JIT build in ~/.cache/torch_extensions) calls
into torch's C++ libraries by mangled name. Built against one torch and loaded under another, a name it needs may not
exist any more: the import fails with "undefined symbol: _ZN3c10...". One built for a CUDA torch needs libc10_cuda.so
and libtorch_cuda.so, which a CPU-only torch does not ship: "libc10_cuda.so: cannot open shared object file".

Read the way the dynamic loader resolves them: after `import torch`, torch's libraries are loaded by their sonames,
so an extension's DT_NEEDED libc10.so is torch/lib/libc10.so of the torch imported; its undefined global symbols must
be exported by a library in its dependency scope (torch's libraries it needs, theirs, and its own libraries found
through its RUNPATH). Python opens extension modules with RTLD_NOW, and torch.ops.load_library (ctypes) too, so one
unresolved name fails the load. Only torch's own names are judged (c10::, at::, torch::, caffe2::, the THP* Python
API, aoti_torch_*): a C library function is the system's business, and an unknown library is not guessed at.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from typing import Optional

from cudadoctor.probes import elf_dynamic
from cudadoctor.probes.fatbin import BinaryFormatError
from cudadoctor.probes.scan import LinkedFile, is_torch_library
from cudadoctor.probes.torch_names import is_torch_name

MAX_FILES = 200  # extensions judged per run (a site-packages rarely has more than a few dozen)
MAX_OWN_LIBS = 8  # an extension's own libraries (found through its RUNPATH) read for the names they export
KEEP = 20  # missing names kept per file

CUDA_LIBS = ("libc10_cuda.so", "libtorch_cuda.so", "libtorch_cuda_linalg.so", "libtorch_nvshmem.so")


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
    torch_libs: list = field(default_factory=list)  # the torch libraries it needs (DT_NEEDED)
    missing_libs: list = field(default_factory=list)  # of those, the ones the imported torch does not ship
    needs: int = 0  # torch names it needs
    missing: list = field(default_factory=list)  # torch names no library in its scope exports (first KEEP)
    missing_count: int = 0
    demangled: list = field(default_factory=list)  # the same names as c++filt reads them ('' when it could not)
    built_for: str = ""  # the torch its distribution pins (METADATA: Requires-Dist: torch==X), '' when none
    error: str = ""  # why it could not be judged


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


class _Exports:
    """Names each library exports, read once per library (libtorch_cpu.so's 74,000 once, not per extension)."""

    def __init__(self, system):
        self.system = system
        self._by_path: dict = {}
        self._dyn: dict = {}

    def dynamic(self, path: str) -> Optional[elf_dynamic.Dynamic]:
        if path not in self._dyn:
            try:
                self._dyn[path] = elf_dynamic.read_dynamic(self.system, path)
            except BinaryFormatError:
                self._dyn[path] = None
        return self._dyn[path]

    def names(self, path: str) -> set:
        if path not in self._by_path:
            d = self.dynamic(path)
            try:
                self._by_path[path] = elf_dynamic.exported(d) if d is not None else set()
            except BinaryFormatError:
                self._by_path[path] = set()
        return self._by_path[path]


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


def _own_libraries(system, f: LinkedFile) -> list:
    """The extension's non-torch libraries found where its RUNPATH (with $ORIGIN) or its own folder points."""
    here = os.path.dirname(f.path)
    dirs = [p.replace("$ORIGIN", here).replace("${ORIGIN}", here) for p in f.runpath] + [here]
    out = []
    for n in f.needed:
        if is_torch_library(n) or len(out) >= MAX_OWN_LIBS:
            continue
        for d in dirs:
            p = os.path.normpath(os.path.join(d, n))
            if system.exists(p):
                out.append(p)
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


def judge_links(system, linked: list, torch_file: str, site_dirs: list, torch_version: str = "",
                torch_cuda: Optional[str] = None, python: str = "") -> TorchLinks:
    """Judge every LinkedFile against the torch whose __init__.py is `torch_file`."""
    t0 = time.monotonic()
    lib_dir = os.path.join(os.path.dirname(torch_file), "lib")
    out = TorchLinks(python, torch_version, torch_cuda, lib_dir)
    exports = _Exports(system)
    for f in linked[:MAX_FILES]:
        e = ExtLink(f.path, f.package, f.origin, f.root, f.dist, f.version, f.install, f.source, f.project,
                    torch_libs=[n for n in f.needed if is_torch_library(n)])
        e.built_for = torch_pin(system, site_dirs, f.dist, f.version)
        out.files.append(e)
        scope, e.missing_libs = torch_scope(system, lib_dir, f.needed, exports)
        try:
            d = elf_dynamic.read_dynamic(system, f.path)
            wanted = [n for n in elf_dynamic.required(d) if is_torch_name(n)]
        except BinaryFormatError as err:
            e.error = str(err)
            continue
        e.needs = len(wanted)
        if e.missing_libs or not scope:
            continue  # the load fails on the missing library first; names are not judged against a partial scope
        have: set = set()
        for p in scope + _own_libraries(system, f):
            have |= exports.names(p)
        lost = [n for n in wanted if n not in have]
        e.missing, e.missing_count = lost[:KEEP], len(lost)
    _demangle(system, [e for e in out.files if e.missing])
    out.more = max(0, len(linked) - MAX_FILES)
    out.exported = sum(len(exports.names(p)) for p in exports._by_path if p.startswith(lib_dir + os.sep))
    out.seconds = round(time.monotonic() - t0, 3)
    return out


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

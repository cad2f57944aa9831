"""The compatibility rule: which image in a binary a GPU runs, if any. Pure and total.

Facts it encodes (CUDA C++ Programming Guide, "Binary Compatibility" and "PTX Compatibility";
nvcc docs on arch-specific `a` and family `f` targets; checked against real H200 results in
tests/data/h200/nokernelimage.txt):

- SASS `sm_XY` runs on a GPU of compute capability X.Z with Z >= Y (same major only).
- `sm_XYa` (arch-specific) runs only on exactly X.Y.
- `sm_XYf` (family, CUDA 12.9+) runs on the same major with minor >= Y.
- PTX `compute_XY` is JIT-compiled by the driver for any GPU with cc >= X.Y (any later major),
  provided the driver understands that PTX version (else CUDA error 222, unsupported toolchain).
- PTX `compute_XYa` only on exactly X.Y; `compute_XYf` within the family.
- The driver prefers a matching SASS image; it JIT-compiles PTX only when no SASS fits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Optional

NATIVE = "native"
PTX_JIT = "ptx-jit"
NO_IMAGE = "no-kernel-image"
PTX_TOO_NEW = "ptx-unsupported-by-driver"

_RE_ARCH = re.compile(r"^(sm|compute|lto)_?(\d)(\d+)([af]?)$")


@dataclass(frozen=True, order=True)
class Arch:
    major: int
    minor: int
    variant: str = ""  # "", "a" (arch-specific) or "f" (family)
    kind: str = "sm"  # "sm" (SASS), "compute" (PTX) or "lto" (LTO-IR)

    @property
    def cc(self) -> tuple:
        return (self.major, self.minor)

    @property
    def name(self) -> str:
        return f"{self.kind}_{self.major}{self.minor}{self.variant}"

    def __str__(self) -> str:
        return self.name


def parse_arch(text: str) -> Optional[Arch]:
    """'sm_90a', 'compute_80', 'lto_90' -> Arch; None when it is not an arch name."""
    t = (text or "").strip().lower()
    m = _RE_ARCH.match(t)
    if not m:
        return None
    kind, major, minor, var = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
    if len(m.group(2) + m.group(3)) == 3:  # sm_100, sm_120, sm_103a: two-digit major
        major, minor = int((m.group(2) + m.group(3))[:2]), int((m.group(2) + m.group(3))[2:])
    return Arch(major, minor, var, kind)


def parse_cc(text: str) -> Optional[tuple]:
    """'9.0', '90', 'sm_90', '12.0', '120', 'sm_120a' -> (major, minor); None if not a cc."""
    t = (text or "").strip().lower().replace("+ptx", "")
    m = re.match(r"^(?:sm_?|compute_?)?(\d+)\.(\d)[af]?$", t)
    if m:
        return (int(m.group(1)), int(m.group(2)))
    m = re.match(r"^(?:sm_?|compute_?)?(\d{2,3})[af]?$", t)
    if m:
        d = m.group(1)
        return (int(d[:-1]), int(d[-1]))
    return None


def cc_str(cc: tuple) -> str:
    return f"{cc[0]}.{cc[1]}"


def sass_runs_on(arch: Arch, cc: tuple) -> bool:
    if arch.variant == "a":
        return arch.cc == tuple(cc)
    return arch.major == cc[0] and arch.minor <= cc[1]


def ptx_jits_on(arch: Arch, cc: tuple) -> bool:
    if arch.variant == "a":
        return arch.cc == tuple(cc)
    if arch.variant == "f":
        return arch.major == cc[0] and arch.minor <= cc[1]
    return arch.cc <= tuple(cc)


@dataclass(frozen=True)
class Selection:
    verdict: str  # NATIVE, PTX_JIT, NO_IMAGE or PTX_TOO_NEW
    image: str = ""  # the image the driver would use
    reason: str = ""


def _ver(v: Optional[str]) -> Optional[tuple]:
    if not v:
        return None
    m = re.match(r"^(\d+)\.(\d+)", str(v))
    return (int(m.group(1)), int(m.group(2))) if m else None


def select_image(sass: Iterable[str], ptx: Iterable[str], cc: tuple,
                 driver_cuda: Optional[str] = None, ptx_cuda: Optional[dict] = None) -> Selection:
    """Which image the driver uses on a GPU of compute capability `cc`.

    `sass`/`ptx` are arch names ('sm_90a', 'compute_80'; bare numbers are read as sm_/compute_).
    `driver_cuda` is the driver's maximum CUDA version ('13.0'); `ptx_cuda` maps a PTX arch name to
    the CUDA version whose toolchain produced it. When both are known and the PTX is newer than
    the driver, JIT fails (error 222) and the verdict is PTX_TOO_NEW.
    """
    cc = tuple(cc)
    sass_arches = [a for a in (parse_arch(s if "_" in s else f"sm_{s}") for s in sass) if a]
    ptx_arches = [a for a in (parse_arch(p if "_" in p else f"compute_{p}") for p in ptx) if a]
    fits = sorted((a for a in sass_arches if sass_runs_on(a, cc)), key=lambda a: (a.minor, a.variant == "a"))
    if fits:
        best = fits[-1]
        return Selection(NATIVE, best.name, f"{best.name} SASS runs on cc {cc_str(cc)}")
    jits = sorted((a for a in ptx_arches if ptx_jits_on(a, cc)), key=lambda a: (a.cc, a.variant))
    if jits:
        best = jits[-1]
        made, drv = _ver((ptx_cuda or {}).get(best.name)), _ver(driver_cuda)
        if made and drv and made > drv:
            return Selection(PTX_TOO_NEW, best.name,
                             f"{best.name} PTX was made by CUDA {made[0]}.{made[1]}, newer than the driver's "
                             f"CUDA {drv[0]}.{drv[1]}: JIT fails (error 222)")
        return Selection(PTX_JIT, best.name, f"no SASS for cc {cc_str(cc)}; the driver JIT-compiles {best.name} PTX")
    have = ", ".join(a.name for a in sass_arches + ptx_arches) or "no images"
    return Selection(NO_IMAGE, "", f"no SASS for cc {cc_str(cc)} and no PTX at or below it ({have})")


# PTX ISA version -> the CUDA release that introduced it (PTX ISA release notes,
# https://docs.nvidia.com/cuda/parallel-thread-execution/#release-notes). A driver JIT-compiles
# PTX only up to the ISA of its own CUDA version; newer PTX fails with error 222.
PTX_ISA_CUDA = {
    "6.3": "10.0", "6.4": "10.1", "6.5": "10.2",
    "7.0": "11.0", "7.1": "11.1", "7.2": "11.2", "7.3": "11.3", "7.4": "11.4", "7.5": "11.5",
    "7.6": "11.6", "7.7": "11.7", "7.8": "11.8",
    "8.0": "12.0", "8.1": "12.1", "8.2": "12.2", "8.3": "12.3", "8.4": "12.4", "8.5": "12.5",
    "8.6": "12.7", "8.7": "12.8", "8.8": "12.9",
    "9.0": "13.0", "9.1": "13.1",
}

RUNS = (NATIVE, PTX_JIT)


def ptx_isa_cuda(isa: str) -> Optional[str]:
    """'9.0' -> '13.0'; None for an ISA the table does not know (never guessed)."""
    return PTX_ISA_CUDA.get((isa or "").strip())


def verdict_runs(verdict: str) -> bool:
    return verdict in RUNS


def select_for_binary(sass: Iterable[str], ptx: Iterable[str], cc: tuple, driver_cuda: Optional[str] = None,
                      ptx_isa: Optional[dict] = None) -> Selection:
    """select_image() for a binary whose PTX entries carry their PTX ISA versions (arch -> '9.0')."""
    made = {a: ptx_isa_cuda(v) for a, v in (ptx_isa or {}).items() if ptx_isa_cuda(v)}
    return select_image(list(sass), list(ptx), cc, driver_cuda=driver_cuda, ptx_cuda=made)


# ---------------------------------------------------------------- module by module (fatbin.py says why)

NO_KERNELS = "no-kernels"  # a module without kernels (nvcc's device-link stub): nothing to launch, no verdict
OTHER_GPUS = "other-gpus-only"  # a module built only for newer GPUs or another GPU's a/f target: dispatched there
_WORST = {PTX_TOO_NEW: 4, NO_IMAGE: 4, PTX_JIT: 2, NATIVE: 1}


@dataclass
class ModuleArchs:
    """One CUDA module of a binary as judged: the images of one fatbin container."""

    index: int = 0
    section: str = ""  # ".nv_fatbin", "__nv_relfatbin" or ""
    offset: int = 0
    sass: list = field(default_factory=list)
    ptx: list = field(default_factory=list)
    ptx_isa: dict = field(default_factory=dict)
    kernels: Optional[list] = None  # entry kernels; None when unknown (compressed)
    stub: bool = False  # no kernels (read so, or too small to hold one)

    def name(self) -> str:
        if self.kernels:
            k = list(self.kernels)
            shown = ", ".join(k[:4]) + (f" and {len(k) - 4} more" if len(k) > 4 else "")
            return f"module {self.index} (kernel{'s' if len(k) > 1 else ''} {shown})"
        return f"module {self.index} at byte {self.offset:#x}"


@dataclass(frozen=True)
class ModuleVerdict:
    module: ModuleArchs
    verdict: str
    image: str = ""
    reason: str = ""


@dataclass(frozen=True)
class FileVerdict:
    verdict: str
    image: str = ""
    reason: str = ""
    modules: tuple = ()  # ModuleVerdict of every loader module
    worst: Optional[ModuleVerdict] = None  # the module the file's verdict comes from


def _only_other_gpus(m: ModuleArchs, cc: tuple) -> bool:
    """Every target is for a newer GPU, or arch/family-specific to another one: code meant for those GPUs
    (vLLM's sm_90a kernels next to its generic ones), not a build that forgot this one."""
    archs = [a for a in (parse_arch(x) for x in list(m.sass) + list(m.ptx)) if a]
    return bool(archs) and all(a.cc > tuple(cc) or (a.variant in ("a", "f") and a.major != cc[0]) for a in archs)


def relocatable_rescue(relocatable: list, cc: tuple, driver_cuda: Optional[str] = None) -> Optional[str]:
    """When the device-linked image has nothing for this GPU, the CUDA runtime links the -rdc objects of
    __nv_relfatbin at load time: possible only if every object has PTX that JITs here (and that the driver
    reads) or SASS for exactly this SM. Returns the reason when it can, else None (fatbin.py: measured)."""
    objs = [m for m in relocatable if not m.stub and (m.sass or m.ptx)]
    if not objs:
        return None
    for m in objs:
        exact = [s for s in m.sass if (a := parse_arch(s)) and a.cc == tuple(cc) and a.variant in ("", "a")]
        if exact:
            continue
        sel = select_for_binary([], m.ptx, cc, driver_cuda, m.ptx_isa)
        if sel.verdict != PTX_JIT:
            return None
    return (f"no linked image for cc {cc_str(cc)}; the CUDA runtime links the relocatable (-rdc) objects at load "
            f"time from their PTX (JIT)")


def judge_modules(loader: list, relocatable: list, cc: tuple, driver_cuda: Optional[str] = None) -> FileVerdict:
    """Each loader module judged on its own; the file's verdict is its worst module's."""
    cc = tuple(cc)
    # the load-time link of the -rdc objects depends on them and the GPU only: the same for every module
    rescue = relocatable_rescue(relocatable, cc, driver_cuda) if relocatable else None
    out = []
    for m in loader:
        if m.stub or not (m.sass or m.ptx):
            if m.stub or not relocatable:
                out.append(ModuleVerdict(m, NO_KERNELS, "", "no kernels in this module (a device-link stub)"))
            elif rescue:
                out.append(ModuleVerdict(m, PTX_JIT, "", rescue))
            else:
                out.append(ModuleVerdict(m, NO_IMAGE, "", "an -rdc program whose relocatable objects have no PTX "
                                         f"this GPU can JIT and no SASS for exactly cc {cc_str(cc)} (CUDA error 500 "
                                         "'named symbol not found' or 209 at launch)"))
            continue
        sel = select_for_binary(m.sass, m.ptx, cc, driver_cuda, m.ptx_isa)
        if not verdict_runs(sel.verdict) and relocatable:
            if rescue:
                out.append(ModuleVerdict(m, PTX_JIT, "", rescue))
                continue
            sel = Selection(sel.verdict, sel.image, sel.reason + "; its relocatable (-rdc) objects cannot be linked "
                            "for it at load time either (CUDA error 500 'named symbol not found' at launch)")
        if sel.verdict == NO_IMAGE and _only_other_gpus(m, cc):
            out.append(ModuleVerdict(m, OTHER_GPUS, "", f"built only for other GPUs ({', '.join(m.sass + m.ptx)})"))
            continue
        out.append(ModuleVerdict(m, sel.verdict, sel.image, sel.reason))
    judged = [v for v in out if v.verdict in _WORST]
    if not judged:
        other = [v for v in out if v.verdict == OTHER_GPUS]
        if other:
            have = ", ".join(sorted({a for v in other for a in v.module.sass + v.module.ptx}))
            return FileVerdict(NO_IMAGE, "", f"no SASS for cc {cc_str(cc)} and no PTX at or below it ({have})",
                               tuple(out), other[0])
        return FileVerdict(NO_KERNELS, "", "no module with kernels", tuple(out), None)
    worst = max(judged, key=lambda v: (_WORST[v.verdict], -v.module.index))
    reason = worst.reason
    if len(loader) > 1 and not verdict_runs(worst.verdict):
        ok = sum(1 for v in judged if verdict_runs(v.verdict))
        reason = f"{worst.module.name()}: {worst.reason}" + (f" ({ok} other module(s) can run)" if ok else "")
    return FileVerdict(worst.verdict, worst.image, reason, tuple(out), worst)

"""Small pure helpers shared by checks: merged driver view, CUDA_VISIBLE_DEVICES, versions, commands."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Optional

from cudadoctor.compat import parse_cc


@dataclass
class GpuView:
    index: int
    name: str
    cc: Optional[tuple]
    uuid: str = ""
    memory_mib: Optional[int] = None


@dataclass
class DriverView:
    """The driver as the best available source tells it (nvidia-smi, then NVML, then /proc)."""

    version: str = ""
    cuda: str = ""  # the driver's maximum CUDA version
    gpus: list = field(default_factory=list)
    sources: list = field(default_factory=list)

    @property
    def present(self) -> bool:
        return bool(self.version)


def driver_view(ctx) -> DriverView:
    v = DriverView()
    smi, nvml, km = ctx.fact("nvidia_smi"), ctx.fact("nvml"), ctx.fact("kernel_module")
    if smi.value is not None and smi.value.driver_version:
        v.version, v.cuda = smi.value.driver_version, smi.value.cuda_version
        v.sources.append("nvidia-smi")
        v.gpus = [GpuView(g.index, g.name, parse_cc(g.compute_capability), g.uuid, g.memory_total_mib)
                  for g in smi.value.gpus]
    if nvml.ok:
        n = nvml.value
        v.version = v.version or n.driver_version
        v.cuda = v.cuda or n.cuda_driver_version
        v.sources.append("NVML")
        if not v.gpus or any(g.cc is None for g in v.gpus):
            v.gpus = [GpuView(g.index, g.name, parse_cc(g.compute_capability), g.uuid, g.memory_total_mib)
                      for g in n.gpus]
    if not v.version and km.ok:
        v.version = km.value.version
        v.sources.append("/proc/driver/nvidia/version")
    return v


def visible_ordinals(value: Optional[str], count: int, uuids: list) -> Optional[list]:
    """The physical GPUs CUDA_VISIBLE_DEVICES leaves visible (None when it is unset).

    The CUDA runtime reads the list left to right and stops at the first entry that is not a valid
    device (an ordinal out of range, a negative number, an unknown UUID).
    """
    if value is None:
        return None
    out: list = []
    for tok in value.split(","):
        tok = tok.strip()
        if not tok:
            break
        if re.fullmatch(r"-?\d+", tok):
            n = int(tok)
            if n < 0 or n >= count or n in out:
                break
            out.append(n)
            continue
        if tok.upper().startswith(("GPU-", "MIG-")):
            hits = [i for i, u in enumerate(uuids) if u and u.lower().startswith(tok.lower())]
            if tok.upper().startswith("MIG-"):
                out.append(-1)  # a MIG instance: visible, not a whole GPU ordinal
                continue
            if len(hits) != 1 or hits[0] in out:
                break
            out.append(hits[0])
            continue
        break
    return out


def major_minor(v: Optional[str]) -> Optional[tuple]:
    if not v:
        return None
    m = re.match(r"^\s*(\d+)\.(\d+)", str(v))
    return (int(m.group(1)), int(m.group(2))) if m else None


def torch_base_version(v: str) -> str:
    return (v or "").split("+")[0]


def cu_tag(cuda: str) -> str:
    mm = major_minor(cuda)
    return f"cu{mm[0]}{mm[1]}" if mm else ""


def q(s: str) -> str:
    """Quote a path for a shell command line the user will copy."""
    return shlex.quote(s)


def ld_without(entries: list, drop: set) -> str:
    """The command that sets LD_LIBRARY_PATH to `entries` without `drop` (or unsets it when none remain)."""
    keep = [e for e in entries if e not in drop]
    return f"export LD_LIBRARY_PATH={q(':'.join(keep))}" if keep else "unset LD_LIBRARY_PATH"

"""Views over gathered facts that several layers read: the driver as the best source tells it.

Pure: facts in, plain data out. Checks use it through checks.common.driver_view(ctx); facts that
depend on the local GPU (the probe launch, `archs`, `scan`) use driver_view_of(facts) directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from cudadoctor.compat import parse_cc
from cudadoctor.model import Fact, FactState


def _fact(facts: dict, name: str) -> Fact:
    return facts.get(name) or Fact(FactState.NOT_APPLICABLE, None, name, "not gathered")


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

    @property
    def gpus_unknown(self) -> bool:
        """The kernel module is loaded but neither nvidia-smi nor NVML can list the GPUs (a compute-only
        container, a broken NVML): how many GPUs there are is unknown here, not zero; CUDA may still see them."""
        return self.present and not self.gpus and not {"nvidia-smi", "NVML"} & set(self.sources)


def driver_view_of(facts: dict) -> DriverView:
    v = DriverView()
    smi, nvml, km = _fact(facts, "nvidia_smi"), _fact(facts, "nvml"), _fact(facts, "kernel_module")
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

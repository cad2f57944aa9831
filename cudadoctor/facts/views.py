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

    #: the kernel module is loaded and the GPU device files are here, but neither nvidia-smi nor NVML can list the
    #: GPUs because they are missing (a compute-only container, NVIDIA_DRIVER_CAPABILITIES=compute): how many GPUs
    #: there are is unknown, not zero, and CUDA may still see them (see unlisted())
    gpus_unknown: bool = False


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
    v.gpus_unknown = unlisted(v, smi, nvml, _fact(facts, "device_nodes"))
    return v


#: NVML errors that mean its library (or a function of it) is absent, not that the driver or a GPU failed
NVML_ABSENT = ("LIBRARY_NOT_FOUND", "LibraryNotFound", "FUNCTION_NOT_FOUND", "FunctionNotFound", "not importable")


def nvml_absent(nvml: Fact) -> bool:
    """NVML failed because its library is not there (NVML_ABSENT), not because the driver or a GPU did."""
    return nvml.state is FactState.FAILED and any(w in nvml.error for w in NVML_ABSENT)


def unlisted(v: DriverView, smi: Fact, nvml: Fact, nodes: Fact) -> bool:
    """GPUs that cannot be listed here, as opposed to none: the module is loaded (/proc), a GPU device file or
    nvidiactl is in /dev, nvidia-smi is absent (not on PATH, not executable, or without its libnvidia-ml) and NVML's
    library is absent. Never after a timeout or a failure of the driver itself (a wedged or lost GPU: the driver step
    says so, and a CUDA child there could hang too); never where no device file is given (a CPU-only container on a
    GPU node sees the host's /proc but has no GPU)."""
    if not v.present or v.gpus or {"nvidia-smi", "NVML"} & set(v.sources):
        return False
    if nodes.value is None or not (nodes.value.gpu_files() or "/dev/nvidiactl" in nodes.value.nodes):
        return False
    smi_absent = smi.state in (FactState.NOT_FOUND, FactState.NOT_APPLICABLE) or (
        smi.state is FactState.FAILED and ("not executable" in smi.error or
                                            getattr(smi.value, "problem", "") == "nvml-missing"))
    return smi_absent and nvml_absent(nvml)

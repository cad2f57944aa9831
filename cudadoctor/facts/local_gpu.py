"""The local GPU as the driver tells it (nvidia-smi, then NVML): compute capability and driver CUDA."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class LocalGpu:
    cc: Optional[tuple] = None
    name: str = ""
    driver_cuda: str = ""
    error: str = ""  # why no GPU could be named


def from_facts(facts: dict) -> LocalGpu:
    """From gathered nvidia_smi/nvml facts (the first GPU with a known compute capability)."""
    from cudadoctor.facts.views import driver_view_of

    dv = driver_view_of(facts)
    g = next((g for g in dv.gpus if g.cc), None)
    if g is None:
        why = "no NVIDIA driver answered" if not dv.present else "the driver names no GPU with a compute capability"
        return LocalGpu(driver_cuda=dv.cuda, error=why)
    return LocalGpu(g.cc, g.name, dv.cuda)


def local_gpu(system) -> LocalGpu:
    from cudadoctor.facts.registry import gather

    return from_facts(gather(system, ["nvidia_smi", "nvml"]))

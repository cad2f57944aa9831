"""The local GPU as the driver tells it (nvidia-smi, then NVML): compute capability and driver CUDA."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from cudadoctor.model import FactState


@dataclass
class LocalGpu:
    cc: Optional[tuple] = None
    name: str = ""
    driver_cuda: str = ""
    error: str = ""  # why no GPU could be named


def from_facts(facts: dict) -> LocalGpu:
    """From gathered nvidia_smi/nvml facts (the first GPU with a known compute capability); where neither can
    list the GPUs though the driver is loaded (a compute-only container), from CUDA's own list (`cuda_gpus`)."""
    from cudadoctor.compat import parse_cc
    from cudadoctor.facts.views import driver_view_of

    dv = driver_view_of(facts)
    g = next((g for g in dv.gpus if g.cc), None)
    if g is not None:
        return LocalGpu(g.cc, g.name, dv.cuda)
    listed = facts.get("cuda_gpus")
    if listed is not None and listed.state is not FactState.NOT_APPLICABLE:
        d = next((d for d in listed.value.devices if parse_cc(d.cc)), None) if listed.ok else None
        if d is not None:
            return LocalGpu(parse_cc(d.cc), d.name, dv.cuda or listed.value.driver_cuda)
        from cudadoctor.facts.gpu_links import CANNOT_LIST

        why = listed.error or "CUDA named no GPU"
        return LocalGpu(driver_cuda=dv.cuda, error=f"{CANNOT_LIST}, and CUDA: {why}")
    why = "no NVIDIA driver answered" if not dv.present else "the driver names no GPU with a compute capability"
    return LocalGpu(driver_cuda=dv.cuda, error=why)


def local_gpu(system) -> LocalGpu:
    from cudadoctor.facts.registry import gather

    # cuda_gpus runs a CUDA child only where nvidia-smi and NVML cannot list the GPUs
    return from_facts(gather(system, ["nvidia_smi", "nvml", "kernel_module", "cuda_gpus"]))

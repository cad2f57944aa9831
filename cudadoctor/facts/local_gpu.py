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
    """From gathered nvidia_smi/nvml facts (the first GPU with a known compute capability); where neither can
    list the GPUs though the driver is loaded (a compute-only container), from CUDA's own list (gpu_peers)."""
    from cudadoctor.compat import parse_cc
    from cudadoctor.facts.views import driver_view_of

    dv = driver_view_of(facts)
    g = next((g for g in dv.gpus if g.cc), None)
    if g is not None:
        return LocalGpu(g.cc, g.name, dv.cuda)
    if dv.gpus_unknown:
        peers = facts.get("gpu_peers")
        d = next((d for d in peers.value.devices if parse_cc(d.cc)), None) if peers is not None and peers.ok else None
        if d is not None:
            return LocalGpu(parse_cc(d.cc), d.name, dv.cuda or peers.value.driver_cuda)
        why = (peers.error if peers is not None else "") or "CUDA named no GPU"
        return LocalGpu(driver_cuda=dv.cuda, error=f"neither nvidia-smi nor NVML can list the GPUs, and CUDA: {why}")
    why = "no NVIDIA driver answered" if not dv.present else "the driver names no GPU with a compute capability"
    return LocalGpu(driver_cuda=dv.cuda, error=why)


def local_gpu(system) -> LocalGpu:
    from cudadoctor.facts.registry import gather

    from cudadoctor.facts.views import driver_view_of

    facts = gather(system, ["nvidia_smi", "nvml", "kernel_module"])
    if driver_view_of(facts).gpus_unknown:  # only then is CUDA's list asked for (a child with cuInit)
        facts = gather(system, ["gpu_peers"], given=facts)
    return from_facts(facts)

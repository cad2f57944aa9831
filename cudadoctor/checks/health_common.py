"""Small pure helpers shared by `cudadoctor health`'s steps (checks/health_*.py).

A finding about one GPU carries `evidence["gpu"]` = its NVML index: the Prometheus output labels the
per-GPU status of each step by it.
"""

from __future__ import annotations

import re
from typing import Optional

from cudadoctor.facts.health_types import HealthGpu

DOCS_NVML = "https://docs.nvidia.com/deploy/nvml-api/index.html"
DOCS_PERSISTENCE = "https://docs.nvidia.com/deploy/driver-persistence/index.html"
DOCS_MEMORY = "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html"
DOCS_FM = "https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html"
DOCS_MIG = "https://docs.nvidia.com/datacenter/tesla/mig-user-guide/"
DOCS_CLOCKS = "https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html"


def nvml_gpus(ctx) -> list:
    """The GPUs NVML answered for (a GPU whose handle failed is there too, with errors)."""
    f = ctx.fact("health_nvml")
    return list(f.value.gpus) if f.ok else []


def answering(ctx) -> list:
    """GPUs that NVML could ask (a handle, and not lost)."""
    return [g for g in nvml_gpus(ctx) if "handle" not in g.errors and not g.lost]


def gpu_evidence(g: HealthGpu, **more) -> dict:
    out = {"gpu": g.index}
    if g.uuid:
        out["uuid"] = g.uuid
    if g.pci_bus_id:
        out["pci_bus_id"] = g.pci_bus_id
    out.update(more)
    return out


def gpu_list(gs) -> str:
    """GPU 0 / GPUs 0, 2, 3."""
    idx = [str(g.index if isinstance(g, HealthGpu) else g) for g in gs]
    return ("GPU " if len(idx) == 1 else "GPUs ") + ", ".join(idx)


def models(gs) -> str:
    """'2× NVIDIA H200' or '1× NVIDIA H200, 1× NVIDIA H100 80GB HBM3'."""
    counts: dict = {}
    for g in gs:
        counts[g.name or "GPU"] = counts.get(g.name or "GPU", 0) + 1
    return ", ".join(f"{n}× {name}" for name, n in counts.items())


def pci_key(bus_id: str) -> Optional[tuple]:
    """(domain, bus, device) of a PCI address in any of the forms the driver prints: 00000000:3B:00.0 (NVML),
    0000:3b:00.0 (CUDA), 0000:3b:00 (an Xid line)."""
    m = re.search(r"(?:([0-9a-fA-F]+):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})(?:\.[0-7])?\s*$", bus_id or "")
    if not m:
        return None
    return (int(m.group(1) or "0", 16), int(m.group(2), 16), int(m.group(3), 16))


def gpu_by_pci(gs, bus_id: str) -> Optional[HealthGpu]:
    key = pci_key(bus_id)
    return next((g for g in gs if key is not None and pci_key(g.pci_bus_id) == key), None)


def version_matches(version: str, expected: str) -> bool:
    """580.159.04 matches 580, 580.159 and 580.159.04 (not 580.1)."""
    v, e = version.strip(), expected.strip()
    return bool(v) and (v == e or v.startswith(e + "."))

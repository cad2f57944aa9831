"""Who holds each GPU: the compute processes NVML lists, named from this machine's process table.

NVML knows no PID namespaces: it gives host PIDs. Inside a container with its own PID namespace such
a PID names no process here, or a different one; a process counts as seen here only when this
namespace has that PID and (where its memory maps can be read) it maps an NVIDIA device.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from cudadoctor.facts.registry import Options, gatherer
from cudadoctor.model import Fact
from cudadoctor.system.base import System


@dataclass
class GpuProcess:
    gpu_index: int = 0
    gpu_uuid: str = ""
    pid: int = 0
    used_mib: Optional[int] = None  # NVML's usedGpuMemory (None where NVML does not say: MIG, vGPU)
    visible: bool = False  # this PID namespace has a process with that id
    name: str = ""
    user: str = ""
    cmdline: str = ""  # its program and first argument only: later arguments can carry secrets
    uses_gpu: Optional[bool] = None  # that process maps /dev/nvidia*; None: its maps could not be read
    unknown: str = ""  # why it was not looked up in the process table ('' when it was): "not in saved report"

    @property
    def seen_here(self) -> bool:
        """The process NVML means is visible here (not a stranger that happens to have the same PID)."""
        return self.visible and self.uses_gpu is not False

    def label(self) -> str:
        """'PID 2662 python3 (root, 142892 MiB)' or 'PID 2662 (not in this PID namespace, 142892 MiB)'."""
        mem = f"{self.used_mib} MiB" if self.used_mib is not None else "memory unknown"
        if self.unknown:
            return f"PID {self.pid} ({mem}; name and user {self.unknown})"
        if not self.visible:
            return f"PID {self.pid} (not in this PID namespace: another container or the host; {mem})"
        if self.uses_gpu is False:
            return (f"PID {self.pid} (another PID namespace: here {self.pid} is {self.name or '?'}, which uses no "
                    f"GPU; {mem})")
        who = ", ".join(x for x in (self.user, mem) if x)
        return f"PID {self.pid} {self.name or '?'} ({who})"


@dataclass
class GpuProcessesInfo:
    processes: list[GpuProcess] = field(default_factory=list)
    own_pid: int = 0  # cudadoctor's own process

    def on(self, gpu_index: int) -> list:
        return [p for p in self.processes if p.gpu_index == gpu_index]


@gatherer("gpu_processes", value_type=GpuProcessesInfo, needs=("nvml",))
def gather_gpu_processes(system: System, opts: Options, deps: dict) -> Fact:
    """The compute processes on each GPU (NVML), with name and user from the process table."""
    import os

    nv = deps.get("nvml")
    src = "NVML compute processes; process table (psutil)"
    if nv is None or not nv.ok:
        return Fact.not_applicable(src, "NVML did not answer")
    info = GpuProcessesInfo(own_pid=os.getpid())
    for g in nv.value.gpus:
        if "processes" in g.errors:
            continue
        for raw in g.processes:
            pid = raw.get("pid") if isinstance(raw, dict) else None
            if not isinstance(pid, int):
                continue
            used = raw.get("used_mib")
            p = GpuProcess(gpu_index=g.index, gpu_uuid=g.uuid, pid=pid,
                           used_mib=used if isinstance(used, int) else None)
            seen = system.process(pid)
            if seen is not None:
                p.visible = True
                p.name, p.user = str(seen.get("name") or ""), str(seen.get("user") or "")
                p.cmdline = " ".join(str(seen.get("cmdline") or "").split()[:2])[:300]
                p.uses_gpu = seen.get("uses_gpu")
            info.processes.append(p)
    return Fact.found(info, src)

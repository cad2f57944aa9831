"""Who holds a GPU: the other processes on it (NVML, named from the process table) and the fix that frees it.

Pure helpers shared by the torch.op and container steps; no step here.
"""

from __future__ import annotations

from typing import Optional

from cudadoctor.checks.common import driver_view, visible_ordinals
from cudadoctor.facts.gpu_processes import GpuProcess
from cudadoctor.model import Fix

FULL = 0.90  # a GPU more than this full through other processes leaves too little for a program
DOCS_SMI = "https://docs.nvidia.com/deploy/nvidia-smi/index.html"


def nvml_gpu(ctx, index: int):
    nv = ctx.fact("nvml")
    if not nv.ok:
        return None
    return next((g for g in nv.value.gpus if g.index == index), None)


def op_gpu(ctx) -> Optional[int]:
    """The physical index (NVML's) of the GPU the torch probe's op ran on: its cuda:0."""
    t = ctx.fact("torch").value
    nv = ctx.fact("nvml")
    gpus = nv.value.gpus if nv.ok else []
    if t is not None and t.devices and t.devices[0].uuid:
        u = t.devices[0].uuid.lower().removeprefix("gpu-")
        hit = next((g.index for g in gpus if g.uuid.lower().removeprefix("gpu-") == u), None)
        if hit is not None:
            return hit
    dv = driver_view(ctx)
    vis = visible_ordinals(t.visible_devices if t is not None else None, len(dv.gpus), [g.uuid for g in dv.gpus])
    if vis:
        return vis[0] if vis[0] >= 0 else None
    return 0 if (gpus or dv.gpus) else None


def others_on(ctx, index: Optional[int]) -> list:
    """The processes on GPU `index` other than cudadoctor and its torch probe."""
    gp = ctx.fact("gpu_processes")
    if index is None:
        return []
    t = ctx.fact("torch").value
    if gp.value is None:  # not looked up (an older report): NVML's own list, without names
        g = nvml_gpu(ctx, index)
        return [GpuProcess(gpu_index=index, pid=p["pid"], used_mib=p.get("used_mib"),
                           unknown=gp.error or "not looked up")
                for p in (g.processes if g is not None else []) if isinstance(p, dict) and
                isinstance(p.get("pid"), int) and p["pid"] != getattr(t, "pid", None)]
    mine = {gp.value.own_pid, getattr(t, "pid", None)}
    return [p for p in gp.value.on(index) if p.pid not in mine]


def memory_line(g) -> str:
    """'142901 of 143771 MiB used (99%)' for an NvmlGpu, '' when NVML did not say."""
    if g is None or not g.memory_total_mib or g.memory_used_mib is None:
        return ""
    return f"{g.memory_used_mib} of {g.memory_total_mib} MiB used ({100 * g.memory_used_mib // g.memory_total_mib}%)"


def is_full(g) -> bool:
    return g is not None and bool(g.memory_total_mib) and g.memory_used_mib is not None and \
        g.memory_used_mib > FULL * g.memory_total_mib


def free_gpu(ctx, busy: int) -> Optional[int]:
    """Another GPU with no other process and the most free memory, to suggest through CUDA_VISIBLE_DEVICES."""
    nv = ctx.fact("nvml")
    if not nv.ok:
        return None
    cands = [g for g in nv.value.gpus if g.index != busy and not others_on(ctx, g.index) and not is_full(g)]
    if not cands:
        return None
    return max(cands, key=lambda g: (g.memory_total_mib or 0) - (g.memory_used_mib or 0)).index


def holders_fix(ctx, index: int, procs: list, run: str) -> Fix:
    """Free the GPU (kill the holders seen here), use another one, or wait; `run` is the command to re-run."""
    cmds = []
    seen = [p for p in procs if p.seen_here]
    if seen:
        cmds.append(f"kill {' '.join(str(p.pid) for p in seen)}  # " + ", ".join(
            f"{p.name or '?'} of {p.user or '?'}" for p in seen) + ": only if you own them and they can stop")
    other = free_gpu(ctx, index)
    if other is not None:
        cmds.append(f"CUDA_VISIBLE_DEVICES={other} {run}  # GPU {other} has no other process")
    cmds.append(f"nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv  # wait until GPU "
                f"{index} is free")
    unknown = [p for p in procs if p.unknown]
    if unknown:
        cmds.insert(0, f"ps -o pid,user,comm -p {','.join(str(p.pid) for p in unknown)}  # who they are")
    hidden = [p for p in procs if not p.seen_here and not p.unknown]
    text = "Free the GPU, use another one, or wait for it" + (
        f" ({', '.join(str(p.pid) for p in hidden)} run outside this PID namespace: ask whoever runs them)"
        if hidden else "") + ":"
    return Fix(text, tuple(cmds), DOCS_SMI)

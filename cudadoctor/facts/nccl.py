"""The `nccl` fact: a real all-reduce across every GPU CUDA shows, one process per GPU, through the
target interpreter's torch.distributed with the NCCL backend (probes/nccl_run.py runs it)."""

from __future__ import annotations

from cudadoctor.facts.registry import Options, gatherer
from cudadoctor.facts.torch import target_python
from cudadoctor.matrix.links import check_size
from cudadoctor.model import Fact
from cudadoctor.probes.nccl_run import NcclRun, run_collective
from cudadoctor.settings import env_seconds
from cudadoctor.system.base import System

NCCL_DEADLINE_S = 60.0  # the whole run: import torch in every rank, rendezvous, init, collective, measure


def deadline(opts: Options) -> float:
    """CUDADOCTOR_TIMEOUT_NCCL when set, else 60 s, never more than the torch probe's (check --timeout)."""
    return min(env_seconds("CUDADOCTOR_TIMEOUT_NCCL", NCCL_DEADLINE_S), opts.timeout_torch)


@gatherer("nccl", value_type=NcclRun, needs=("gpu_peers", "nvml"))
def gather_nccl(system: System, opts: Options, deps: dict) -> Fact:
    """An all-reduce over every visible GPU (torch.distributed, NCCL, one process per GPU), with NCCL's log."""
    py = target_python(system, opts)
    src = f"{py} cudadoctor/child/nccl_rank.py, one process per GPU (torch.distributed, NCCL)"
    peers, nvml = deps.get("gpu_peers"), deps.get("nvml")
    if not opts.gpu_ops:
        return Fact.not_applicable(src, "--no-gpu-ops: no collective was run")
    if peers is None or not peers.ok:
        why = (peers.error if peers is not None else "") or "fewer than two GPUs"
        return Fact.not_applicable(src, why)
    n = len(peers.value.devices)
    if n < 2:
        cvd = peers.value.visible_devices
        return Fact.not_applicable(src, f"CUDA shows {n} GPU{'s' if n != 1 else ''}"
                                        + (f" (CUDA_VISIBLE_DEVICES={cvd})" if cvd is not None else ""))
    if nvml is not None and nvml.ok and any(g.mig_mode for g in nvml.value.gpus):
        return Fact.not_applicable(src, "MIG is on: NCCL does not run collectives between MIG instances")
    limit = deadline(opts)
    args = ["--mode", "check", "--backend", "nccl", "--bytes", str(check_size()), "--timeout", f"{limit + 30:g}",
            "--nvlink"]
    run = run_collective(system, py, n, args, limit)
    if run.outcome == "not-started":
        return Fact.failed(src, run.error, value=run)
    return Fact.found(run, src, run.seconds)

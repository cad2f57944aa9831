"""Pure helpers shared by the topology and nccl steps and `bench --collectives`: the GPU pairs joined from
the NVML and driver-API facts, how a GPU is named to the user, and what the slowest pair should give."""

from __future__ import annotations

from typing import Optional

from cudadoctor.bench.peaks import pcie_gbps
from cudadoctor.facts.gpu_links import GpuLinksInfo, GpuPeersInfo, pairs
from cudadoctor.facts.host_links import norm_bus
from cudadoctor.matrix.links import Expectation, nvlink_expectation, pcie_expectation


def gpu_tag(links: GpuLinksInfo, index: int, peers: Optional[GpuPeersInfo] = None) -> str:
    """'GPU 1 (0000:00:07.0, CUDA 0)': nvidia-smi's index, the bus id, and CUDA's ordinal when it differs."""
    g = next((x for x in links.gpus if x.index == index), None)
    if g is None:
        return f"GPU {index}"
    cuda = peers.ordinal_of(g.bus) if peers is not None else None
    extra = f", CUDA {cuda}" if cuda is not None and cuda != index else ""
    return f"GPU {index} ({norm_bus(g.bus)}{extra})"


def joined_pairs(ctx) -> list:
    """Every pair of the gpu_links fact, with peer access from gpu_peers when it was gathered."""
    links, peers = ctx.fact("gpu_links"), ctx.fact("gpu_peers")
    if not links.ok:
        return []
    return pairs(links.value, peers.value if peers.ok else None)


def pair_expectation(pair, links: GpuLinksInfo) -> Optional[Expectation]:
    """What an all-reduce over this pair should reach (matrix/links.toml), or None when unknown."""
    ga = next((g for g in links.gpus if g.index == pair.a), None)
    gb = next((g for g in links.gpus if g.index == pair.b), None)
    if ga is None or gb is None:
        return None
    if pair.nvlinks:
        return nvlink_expectation(pair.nvlinks, pair.nvlink_version, [ga.name, gb.name])
    rates = [(pcie_gbps(g.pcie_gen_max, g.pcie_width_max), g.pcie_gen_max, g.pcie_width_max) for g in (ga, gb)]
    rates = [r for r in rates if r[0]]
    if not rates:
        return None
    raw, gen, width = min(rates)
    return pcie_expectation(raw, pair.access is not False, gen, width)


def slowest(pair_list: list, links: GpuLinksInfo, buses: Optional[set] = None) -> tuple:
    """(pair, Expectation) of the slowest pair among the GPUs at `buses` (all GPUs when None)."""
    best = (None, None)
    for p in pair_list:
        if buses is not None and not {norm_bus(p.bus_a), norm_bus(p.bus_b)} <= buses:
            continue
        e = pair_expectation(p, links)
        if e is not None and (best[1] is None or e.busbw_gbps < best[1].busbw_gbps):
            best = (p, e)
    return best

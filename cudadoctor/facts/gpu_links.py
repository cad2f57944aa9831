"""Between GPUs: NVLink and PCIe paths from NVML, peer access and ordinals from the CUDA driver API.

Two children, both with a timeout, gathered only where two or more GPUs are seen:
- `gpu_links`: python -m cudadoctor.system.nvml_links (NVML: links, remote ends, error counters,
  common PCIe ancestor and NVML's P2P status per pair);
- `gpu_peers`: python -m cudadoctor.probes.peer (the driver API under the user's environment: the
  CUDA ordinal -> PCI bus id map and cuDeviceCanAccessPeer per ordered pair).

`pairs()` joins them into one classification per GPU pair, the way `nvidia-smi topo -m` prints it
(see its docstring for the NVSwitch rule).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from cudadoctor.child.records import parse_marked
from cudadoctor.facts.driver import nvml_child
from cudadoctor.facts.host_links import norm_bus
from cudadoctor.facts.registry import Options, gatherer
from cudadoctor.facts.views import driver_view_of
from cudadoctor.model import Fact, FactState, from_jsonable
from cudadoctor.probes.peer import MARK as PEER_MARK
from cudadoctor.settings import env_seconds
from cudadoctor.system.base import System

PEER_TIMEOUT = min(30.0, env_seconds("CUDADOCTOR_TIMEOUT_PROBE", 120.0))
NVLINK_SWITCH = 2  # nvmlDeviceGetNvLinkRemoteDeviceType: NVML_NVLINK_DEVICE_TYPE_SWITCH
NVLINK_GPU = 0
UNSEEN_REMOTE = "ffffffff:ff:ff.0"  # the remote bus NVML gives when the far end is not visible (VMs)
#: nvmlDeviceGetTopologyCommonAncestor -> the label `nvidia-smi topo -m` prints (its legend)
ANCESTOR_LABEL = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
#: nvmlDeviceGetP2PStatus -> words
P2P_STATUS = {0: "ok", 1: "chipset not supported", 2: "GPU not supported", 3: "topology not supported",
              4: "disabled by a driver registry key", 5: "not supported", 6: "unknown"}


@dataclass
class NvLink:
    link: int = 0
    active: bool = False
    version: Optional[int] = None  # NVML enum: 4 = NVLink 3.0 (A100), 6 = 4.0 (H100/H200), 7 = 5.0 (B200)
    remote_bus: str = ""
    remote_type: Optional[int] = None  # 0 GPU, 1 IBM NPU, 2 NVSwitch, 255 unknown
    replay: Optional[int] = None
    recovery: Optional[int] = None
    crc_flit: Optional[int] = None
    crc_data: Optional[int] = None


@dataclass
class LinkGpu:
    index: int = 0  # NVML / nvidia-smi index
    name: str = ""
    uuid: str = ""
    bus: str = ""
    memory_total_mib: Optional[int] = None
    pcie_gen_max: Optional[int] = None
    pcie_width_max: Optional[int] = None
    compute_capability: str = ""
    links: list[NvLink] = field(default_factory=list)
    errors: dict = field(default_factory=dict)

    @property
    def active_links(self) -> list:
        return [x for x in self.links if x.active]

    def switch_links(self) -> int:
        """Active links whose far end is an NVSwitch, or not visible (NCCL assumes an NVSwitch then)."""
        return sum(1 for x in self.active_links
                   if x.remote_type == NVLINK_SWITCH or norm_bus(x.remote_bus) == UNSEEN_REMOTE)

    def links_to(self, bus: str) -> int:
        return sum(1 for x in self.active_links if x.remote_type in (NVLINK_GPU, None) and
                   norm_bus(x.remote_bus) == norm_bus(bus))


@dataclass
class NvmlPair:
    a: int = 0
    b: int = 0
    ancestor: Optional[int] = None
    p2p_read: Optional[int] = None
    p2p_write: Optional[int] = None
    p2p_nvlink: Optional[int] = None
    p2p_atomics: Optional[int] = None


@dataclass
class GpuLinksInfo:
    gpus: list[LinkGpu] = field(default_factory=list)
    pairs: list[NvmlPair] = field(default_factory=list)


@dataclass
class CudaDevice:
    ordinal: int = 0
    bus: str = ""
    uuid: str = ""
    name: str = ""
    cc: str = ""
    memory_bytes: Optional[int] = None


@dataclass
class CudaPeer:
    a: int = 0  # CUDA ordinals
    b: int = 0
    access: Optional[bool] = None
    rank: Optional[int] = None
    atomics: Optional[bool] = None
    error: str = ""


@dataclass
class GpuPeersInfo:
    visible_devices: Optional[str] = None  # CUDA_VISIBLE_DEVICES as the child saw it
    device_order: Optional[str] = None  # CUDA_DEVICE_ORDER as the child saw it
    driver_cuda: str = ""
    devices: list[CudaDevice] = field(default_factory=list)
    peers: list[CudaPeer] = field(default_factory=list)

    def ordinal_of(self, bus: str) -> Optional[int]:
        return next((d.ordinal for d in self.devices if norm_bus(d.bus) == norm_bus(bus)), None)

    def access(self, a: int, b: int) -> Optional[bool]:
        return next((p.access for p in self.peers if p.a == a and p.b == b), None)


@dataclass
class GpuPair:
    """One unordered GPU pair as nvidia-smi numbers them, with how they reach each other."""

    a: int = 0
    b: int = 0
    bus_a: str = ""
    bus_b: str = ""
    nvlinks: int = 0
    nvlink_version: Optional[int] = None
    via_switch: bool = False
    path: str = ""  # PCIe path label: PIX, PXB, PHB, NODE, SYS ("" unknown)
    access: Optional[bool] = None  # CUDA peer access both ways (None: not asked / not visible to CUDA)
    nvml_p2p: Optional[int] = None  # nvmlDeviceGetP2PStatus (read, else write): 0 ok, else why not

    @property
    def label(self) -> str:
        """What `nvidia-smi topo -m` prints for the pair."""
        return f"NV{self.nvlinks}" if self.nvlinks else (self.path or "?")

    @property
    def kind(self) -> str:
        return "nvlink" if self.nvlinks else "pcie"


def pairs(links: GpuLinksInfo, peers: Optional[GpuPeersInfo] = None) -> list:
    """Every GPU pair, classified as `nvidia-smi topo -m` does.

    NVLink: links counted from both ends. Links straight to the other GPU (remote bus = its bus) count
    as direct links. On NVSwitch systems every link goes to a switch, and the remote end NVML gives is
    the switch, or, inside a VM, an unseen device (bus FFFFFFFF:FF:FF.0, remote type 2): there GPUs
    that both have links into the switch fabric reach each other over all of them, so the pair counts
    min(switch links of a, switch links of b). On the H200 machine: 18 links per GPU to an unseen
    NVSwitch -> NV18, as nvidia-smi prints (and as NCCL's topology code assumes an NVSwitch behind
    an unseen remote). Without NVLink, the PCIe path is NVML's common ancestor (SINGLE -> PIX,
    MULTIPLE -> PXB, HOSTBRIDGE -> PHB, NODE -> NODE, SYSTEM -> SYS)."""
    by_index = {g.index: g for g in links.gpus}
    nv_pairs = {(p.a, p.b): p for p in links.pairs}
    out = []
    idx = sorted(by_index)
    for i, a in enumerate(idx):
        for b in idx[i + 1:]:
            ga, gb = by_index[a], by_index[b]
            direct = max(ga.links_to(gb.bus), gb.links_to(ga.bus))
            sa, sb = ga.switch_links(), gb.switch_links()
            through = min(sa, sb) if sa and sb else 0
            versions = [x.version for x in ga.active_links + gb.active_links if x.version]
            np_ = nv_pairs.get((a, b)) or nv_pairs.get((b, a))
            p = GpuPair(a=a, b=b, bus_a=ga.bus, bus_b=gb.bus, nvlinks=direct + through,
                        nvlink_version=min(versions) if versions else None, via_switch=bool(through),
                        path=ANCESTOR_LABEL.get(np_.ancestor, "") if np_ and np_.ancestor is not None else "")
            if np_ is not None:
                p.nvml_p2p = np_.p2p_read if np_.p2p_read is not None else np_.p2p_write
            if peers is not None:
                oa, ob = peers.ordinal_of(ga.bus), peers.ordinal_of(gb.bus)
                if oa is not None and ob is not None:
                    x, y = peers.access(oa, ob), peers.access(ob, oa)
                    p.access = None if x is None or y is None else (x and y)
            out.append(p)
    return out


# ------------------------------------------------------------------ gatherers


def _gpu_count(deps: dict) -> int:
    return len(driver_view_of(deps).gpus)


#: where the driver is loaded but NVML lists nothing (DriverView.gpus_unknown), and why gpu_links cannot be read there
CANNOT_LIST = "neither nvidia-smi nor NVML can list the GPUs here"
NVML_BLIND = CANNOT_LIST + ", so the links between them cannot be read"


@gatherer("gpu_links", value_type=GpuLinksInfo, needs=("nvidia_smi", "nvml", "kernel_module", "device_nodes"))
def gather_gpu_links(system: System, opts: Options, deps: dict) -> Fact:
    """NVLink state, remote ends and error counters per GPU; PCIe common ancestor and P2P status per pair."""
    src = "NVML (python -m cudadoctor.system.nvml_links)"
    if driver_view_of(deps).gpus_unknown:
        return Fact.not_applicable(src, NVML_BLIND)
    n = _gpu_count(deps)
    if n < 2:
        return Fact.not_applicable(src, f"{n} GPU{'s' if n != 1 else ''}: nothing between GPUs")
    raw, failed, elapsed = nvml_child(system, opts, "cudadoctor.system.nvml_links", src)
    if failed is not None:
        return failed
    if raw.get("error"):
        return Fact.failed(src, f"{raw['error']}: {raw.get('message', '')}")
    info = from_jsonable(GpuLinksInfo, raw)
    if not isinstance(info, GpuLinksInfo):
        return Fact.failed(src, "unreadable output of the NVML links child")
    return Fact.found(info, src, elapsed)


PEER_SOURCE = "CUDA driver API (python -m cudadoctor.probes.peer)"


def peer_probe(system: System) -> Fact:
    """CUDA's own GPU list and peer access: the driver-API child, with its timeout."""
    src = PEER_SOURCE
    res = system.run([system.own_python(), "-m", "cudadoctor.probes.peer"], PEER_TIMEOUT)
    recs = parse_marked(res.stdout, PEER_MARK)
    if res.timed_out:
        return Fact.timeout(src, f"the driver-API peer probe gave no answer within {res.timeout_s:g} s (killed)")
    if not recs:
        return Fact.failed(src, f"the driver-API peer probe ended without a report: {res.describe()} "
                                f"{(res.stderr or '')[-300:]}".strip())
    rec = recs[-1]
    if rec.get("error"):
        e = rec["error"]
        if e.get("name") == "no-libcuda":
            return Fact.not_found(src, e.get("message", "libcuda.so.1 cannot be loaded"))
        return Fact.failed(src, f"{rec.get('stage', '')}: {e.get('name', '')} {e.get('message', '')}".strip())
    info = from_jsonable(GpuPeersInfo, rec)
    if not isinstance(info, GpuPeersInfo):
        return Fact.failed(src, "unreadable output of the driver-API peer probe")
    return Fact.found(info, src, res.elapsed_s)


@gatherer("cuda_gpus", value_type=GpuPeersInfo, needs=("nvidia_smi", "nvml", "kernel_module", "device_nodes"))
def gather_cuda_gpus(system: System, opts: Options, deps: dict) -> Fact:
    """CUDA's own GPU list, asked only where nvidia-smi and NVML cannot list the GPUs (DriverView.gpus_unknown):
    elsewhere not applicable at once, so nothing waits for a CUDA child where the driver lists the GPUs."""
    if not driver_view_of(deps).gpus_unknown:
        return Fact.not_applicable(PEER_SOURCE, "the driver lists the GPUs (or there are none)")
    return peer_probe(system)


@gatherer("gpu_peers", value_type=GpuPeersInfo, needs=("nvidia_smi", "nvml", "kernel_module", "cuda_gpus"))
def gather_gpu_peers(system: System, opts: Options, deps: dict) -> Fact:
    """CUDA ordinals, their PCI bus ids and peer access (cuDeviceCanAccessPeer) under the user's environment."""
    listed = deps.get("cuda_gpus")
    if listed is not None and listed.state is not FactState.NOT_APPLICABLE:
        return listed  # nvidia-smi and NVML cannot list the GPUs: CUDA's list was asked for already
    n = _gpu_count(deps)
    if n < 2:
        return Fact.not_applicable(PEER_SOURCE, f"{n} GPU{'s' if n != 1 else ''}: nothing between GPUs")
    return peer_probe(system)


@gatherer("gpu_expect", value_type=dict)
def gather_gpu_expect(system: System, opts: Options, deps: dict) -> Fact:
    """How many GPUs the user says this node has (`check --expect-gpus N`)."""
    n = opts.extra.get("expect_gpus")
    if n is None:
        return Fact.not_applicable("--expect-gpus", "not given")
    return Fact.found({"gpus": int(n)}, "--expect-gpus")

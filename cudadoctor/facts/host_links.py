"""What the host puts between GPUs and between nodes: IOMMU, PCIe ACS on the bridges above each GPU,
/dev/shm, network interfaces and InfiniBand devices. Read from /sys and /proc only (no lspci, no ip:
both are often missing in containers; the GPU machine has no `ip`).

ACS is read from each bridge's PCI configuration space (/sys/bus/pci/devices/BDF/config) by hand:
no maintained Python library reads PCIe extended capabilities, and lspci is an optional package.
Only root can read past the first 64 bytes, so for other users ACS is "unknown", never "off".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from cudadoctor.facts.registry import Options, gatherer
from cudadoctor.model import Fact
from cudadoctor.system.base import System

RE_BDF = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$", re.I)
ACS_CAP_ID = 0x000D  # PCIe extended capability: Access Control Services
#: ACS Control register bits (PCIe base spec 7.7.8.3), named as lspci prints them
ACS_BITS = {0: "SrcValid", 1: "TransBlk", 2: "ReqRedir", 3: "CmpltRedir", 4: "UpstreamFwd", 5: "EgressCtrl",
            6: "DirectTrans"}
#: the bits that send peer-to-peer requests and completions up to the root complex
ACS_REDIRECT = ("ReqRedir", "CmpltRedir")
SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


PORT_TYPES = {0: "endpoint", 4: "root port", 5: "switch upstream port", 6: "switch downstream port",
              7: "PCIe-to-PCI bridge", 8: "PCI-to-PCIe bridge"}


@dataclass
class AcsBridge:
    bdf: str = ""
    port: str = ""  # PCIe Device/Port Type: "root port", "switch downstream port", ... ("" unknown)
    control: Optional[int] = None  # the ACS Control register; None when absent or unreadable
    enabled: list = field(default_factory=list)  # names of the bits set
    readable: bool = True  # False: config space past 64 bytes is root-only


@dataclass
class HostLinksInfo:
    iommu_units: list = field(default_factory=list)  # /sys/class/iommu entries (dmar0, ivhd0, ...)
    cmdline_iommu: list = field(default_factory=list)  # intel_iommu=on, iommu=pt, ... from /proc/cmdline
    acs: dict = field(default_factory=dict)  # GPU bus id -> [AcsBridge] above it (root port first)
    shm_bytes: Optional[int] = None  # size of /dev/shm (the last tmpfs mounted there)
    shm_source: str = ""
    net_interfaces: list = field(default_factory=list)  # /sys/class/net
    ib_devices: list = field(default_factory=list)  # /sys/class/infiniband

    @property
    def iommu_on(self) -> bool:
        """DMA translation is active for devices: an IOMMU is registered and not in pass-through mode."""
        if "iommu=pt" in self.cmdline_iommu or "iommu.passthrough=1" in self.cmdline_iommu:
            return False
        return bool(self.iommu_units)

    def redirecting(self, bus: str) -> list:
        """PCIe switch ports above the GPU at `bus` whose ACS sends peer-to-peer traffic up to the root
        complex (root ports are left out: traffic between root ports crosses the root complex anyway)."""
        return [b for b in self.acs.get(norm_bus(bus), [])
                if set(ACS_REDIRECT) & set(b.enabled) and b.port != "root port"]


def norm_bus(bus: str) -> str:
    """'00000000:00:06.0' (NVML), '0000:00:06.0' (CUDA, sysfs) -> '0000:00:06.0'."""
    parts = (bus or "").strip().lower().split(":")
    if len(parts) != 3:
        return (bus or "").strip().lower()
    try:
        dom = int(parts[0], 16)
    except ValueError:
        return (bus or "").strip().lower()
    return f"{dom:04x}:{parts[1]}:{parts[2]}"


def parse_size(text: str) -> Optional[int]:
    m = re.fullmatch(r"(\d+)([kmgt]?)", (text or "").strip().lower())
    return int(m.group(1)) * SIZE_UNITS[m.group(2)] if m else None


def shm_size(mounts: str, meminfo: str) -> tuple:
    """(bytes, source) of /dev/shm from /proc/mounts (the last mount there wins); a tmpfs without size=
    gets half of MemTotal (the kernel's default)."""
    last = None
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[1] == "/dev/shm":
            last = parts
    if last is None:
        return None, ""
    opts = dict(o.partition("=")[::2] for o in last[3].split(","))
    if "size" in opts:
        return parse_size(opts["size"]), f"/proc/mounts: {last[2]} size={opts['size']}"
    m = re.search(r"^MemTotal:\s+(\d+)\s*kB", meminfo, re.M)
    if last[2] == "tmpfs" and m:
        return int(m.group(1)) * 1024 // 2, "/proc/mounts: tmpfs without size= (half of MemTotal)"
    return None, f"/proc/mounts: {last[2]}"


def acs_control(config: bytes) -> Optional[int]:
    """The ACS Control register from a PCI configuration space dump, or None when the device has no
    ACS capability (or the dump stops at 64/256 bytes, as it does for non-root readers)."""
    if len(config) < 0x104:
        return None
    off, seen = 0x100, 0
    while 0x100 <= off <= len(config) - 8 and seen < 64:
        header = int.from_bytes(config[off:off + 4], "little")
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == ACS_CAP_ID:
            return int.from_bytes(config[off + 6:off + 8], "little")
        off = (header >> 20) & 0xFFC
        seen += 1
    return None


def port_type(config: bytes) -> str:
    """The PCIe Device/Port Type (PCI Express capability, ID 0x10, bits 7:4) from a config space dump."""
    if len(config) < 0x40:
        return ""
    off, seen = config[0x34] & 0xFC, 0
    while 0x40 <= off <= len(config) - 4 and seen < 48:
        if config[off] == 0x10:
            return PORT_TYPES.get((int.from_bytes(config[off + 2:off + 4], "little") >> 4) & 0xF, "")
        off, seen = config[off + 1] & 0xFC, seen + 1
    return ""


def bridges_above(system: System, bus: str) -> list:
    """The BDFs of the bridges between the root complex and the device (from its sysfs path)."""
    real = system.realpath(f"/sys/bus/pci/devices/{norm_bus(bus)}")
    parts = [p for p in real.split("/") if RE_BDF.match(p)]
    return parts[:-1]


def read_acs(system: System, bdf: str) -> AcsBridge:
    cfg = system.read_bytes(f"/sys/bus/pci/devices/{bdf}/config", 4096) or b""
    if len(cfg) <= 64:  # not root: the kernel shows only the standard header
        return AcsBridge(bdf=bdf, readable=False)
    ctl = acs_control(cfg)
    on = [name for bit, name in ACS_BITS.items() if ctl is not None and ctl & (1 << bit)]
    return AcsBridge(bdf=bdf, port=port_type(cfg), control=ctl, enabled=on)


@gatherer("host_links", value_type=HostLinksInfo, needs=("nvml",))
def gather_host_links(system: System, opts: Options, deps: dict) -> Fact:
    """IOMMU, ACS above each GPU, /dev/shm, network interfaces and InfiniBand devices."""
    info = HostLinksInfo()
    info.iommu_units = system.listdir("/sys/class/iommu")
    cmd = (system.read_text("/proc/cmdline") or "").split()
    info.cmdline_iommu = [t for t in cmd if re.match(r"^(intel_iommu|amd_iommu|iommu(\.\w+)?)=", t)]
    info.shm_bytes, info.shm_source = shm_size(system.read_text("/proc/mounts") or "",
                                               system.read_text("/proc/meminfo") or "")
    info.net_interfaces = system.listdir("/sys/class/net")
    info.ib_devices = system.listdir("/sys/class/infiniband")
    nv = deps.get("nvml")
    gpus = nv.value.gpus if nv is not None and nv.ok else []
    if len(gpus) >= 2:
        for g in gpus:
            if g.pci_bus_id:
                info.acs[norm_bus(g.pci_bus_id)] = [read_acs(system, b) for b in bridges_above(system, g.pci_bus_id)]
    return Fact.found(info, "/sys/class/iommu, /proc/cmdline, /sys/bus/pci/devices/*/config, /proc/mounts, "
                            "/sys/class/net, /sys/class/infiniband")

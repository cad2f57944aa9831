"""Containers and device health that NVML does not tell: device nodes, MPS, fabric manager, Xid events."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from cudadoctor.facts.health import process_names  # (`check` imports every facts module anyway)
from cudadoctor.facts.registry import Options, gatherer
from cudadoctor.model import Fact
from cudadoctor.system.base import System

RE_XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+),?\s*(.*)")
MPS_PIPE_DEFAULT = "/tmp/nvidia-mps"


@dataclass
class XidEvent:
    pci: str = ""
    code: int = 0
    text: str = ""


@dataclass
class ContainerInfo:
    kind: str = ""  # "docker", "podman", "kubernetes", "lxc", ... or "" (not in a container)
    evidence: str = ""
    nvidia_visible_devices: str = ""
    driver_capabilities: str = ""
    device_nodes: list[str] = field(default_factory=list)  # /dev/nvidia0, /dev/nvidiactl, ...
    nvswitch_nodes: int = 0  # /dev/nvidia-nvswitch*
    mps_pipe_dir: str = ""
    mps_pipe_exists: bool = False
    mps_daemon: bool = False
    fabricmanager: bool = False  # nv-fabricmanager process seen
    processes_scanned: bool = False
    xid_source: str = ""
    xid_error: str = ""  # why kernel messages could not be read
    xid_events: list[XidEvent] = field(default_factory=list)
    is_root: bool = False


def parse_xids(text: str) -> list:
    out = []
    for line in text.splitlines():
        m = RE_XID.search(line)
        if m:
            out.append(XidEvent(pci=m.group(1), code=int(m.group(2)), text=m.group(3).strip()[:200]))
    return out


@gatherer("container", value_type=ContainerInfo, needs=("platform",))
def gather_container(system: System, opts: Options, deps: dict) -> Fact:
    """Container detection, NVIDIA device nodes, MPS, fabric manager, recent Xid errors."""
    plat = deps.get("platform")
    info = ContainerInfo()
    if plat is not None and plat.value is not None:
        info.kind, info.evidence = plat.value.container, plat.value.container_evidence
    info.nvidia_visible_devices = system.env.get("NVIDIA_VISIBLE_DEVICES", "")
    info.driver_capabilities = system.env.get("NVIDIA_DRIVER_CAPABILITIES", "")
    for name in system.listdir("/dev"):
        if name.startswith("nvidia-nvswitch"):
            info.nvswitch_nodes += 1
        elif name.startswith("nvidia") or name == "dxg":
            info.device_nodes.append("/dev/" + name)
    info.mps_pipe_dir = system.env.get("CUDA_MPS_PIPE_DIRECTORY", "") or MPS_PIPE_DEFAULT
    info.mps_pipe_exists = system.exists(os.path.join(info.mps_pipe_dir, "control"))
    names = process_names(system)
    info.processes_scanned = bool(names)
    for comm in names:
        if comm.startswith("nvidia-cuda-mps"):
            info.mps_daemon = True
        elif comm.startswith("nv-fabricmanage"):
            info.fabricmanager = True
    info.is_root = system.username() == "root"
    dmesg = system.which("dmesg") or ("/bin/dmesg" if system.is_executable("/bin/dmesg") else "")
    if dmesg:
        res = system.run([dmesg], opts.timeout_tool)
        info.xid_source = dmesg
        if res.ok:
            info.xid_events = parse_xids(res.stdout)[-50:]
        else:
            info.xid_error = (res.output.strip().splitlines() or [res.describe()])[-1][:300]
    else:
        info.xid_error = "dmesg not found"
    return Fact.found(info, "/dev, /proc/*/comm, dmesg, NVIDIA_* variables")

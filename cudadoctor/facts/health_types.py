"""Typed values of `cudadoctor health`'s facts. Plain dataclasses; JSON through model.to_jsonable."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class HealthGpu:
    """One GPU as NVML answers health's questions (system/nvml_health.py). None: not answered (see errors)."""

    index: int = 0
    name: str = ""
    uuid: str = ""
    pci_bus_id: str = ""
    minor_number: Optional[int] = None
    persistence_mode: Optional[bool] = None
    compute_mode: str = ""
    mig_mode: list = field(default_factory=list)  # [current, pending]: 1 on, 0 off
    mig_devices: Optional[int] = None
    ecc_mode: list = field(default_factory=list)  # [current, pending]
    ecc_uncorrected_volatile: Optional[int] = None
    ecc_uncorrected_aggregate: Optional[int] = None
    retired_pages_pending: Optional[bool] = None
    retired_pages_dbe: Optional[int] = None
    retired_pages_sbe: Optional[int] = None
    remapped_rows: list = field(default_factory=list)  # [correctable, uncorrectable, pending, failure]
    temperature_c: Optional[int] = None
    temp_slowdown_c: Optional[int] = None
    temp_shutdown_c: Optional[int] = None
    temp_max_c: Optional[int] = None  # the maximum operating temperature (software slowdown above it)
    clock_events: list = field(default_factory=list)  # active clock event ("throttle") reasons
    memory_used_mib: Optional[int] = None
    memory_total_mib: Optional[int] = None
    processes: Optional[int] = None  # compute processes using the GPU now
    recovery_action: Optional[int] = None  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (R570+ drivers)
    nvlinks: list = field(default_factory=list)  # per link: 1 active, 0 inactive, -1 not reported
    fabric: dict = field(default_factory=dict)  # {"state", "status", "health_mask"}
    errors: dict = field(default_factory=dict)  # field -> NVML error name

    @property
    def lost(self) -> bool:
        return "NVML_ERROR_GPU_IS_LOST" in self.errors.values()

    @property
    def label(self) -> str:
        return f"GPU {self.index}" + (f" ({self.pci_bus_id})" if self.pci_bus_id else "")


@dataclass
class NvmlHealth:
    error: str = ""  # NVML error name when it could not be asked at all
    message: str = ""
    driver_version: str = ""
    device_count: int = 0
    gpus: list[HealthGpu] = field(default_factory=list)


@dataclass
class CudaCallError:
    call: str = ""
    code: int = 0
    name: str = ""
    message: str = ""


@dataclass
class LaunchDevice:
    """One GPU's kernel launch (probes/health_launch.py)."""

    ordinal: int = 0  # the CUDA ordinal (what CUDA_VISIBLE_DEVICES leaves)
    uuid: str = ""
    pci_bus_id: str = ""
    name: str = ""
    cc: str = ""
    ok: bool = False
    step: str = ""  # the last step reached: identify, context, load, alloc, launch, check, done
    wrong: Optional[int] = None  # values the kernel wrote wrong
    context_s: Optional[float] = None
    load_s: Optional[float] = None
    launch_s: Optional[float] = None  # launch + synchronise
    total_s: Optional[float] = None
    error: Optional[CudaCallError] = None


@dataclass
class LaunchInfo:
    ran: bool = True  # False with --no-launch
    error: Optional[CudaCallError] = None  # before any GPU: loading libcuda, cuInit, counting devices
    init_s: Optional[float] = None
    libcuda: str = ""  # the libcuda.so.X file the child mapped
    cuda_version: str = ""  # the driver's CUDA version (cuDriverGetVersion), "13.0"
    count: Optional[int] = None
    visible_devices: Optional[str] = None
    devices: list[LaunchDevice] = field(default_factory=list)
    total_s: Optional[float] = None
    stopped: str = ""  # why the child stopped before its end ("" when it finished)
    timed_out: bool = False


@dataclass
class XidEvent:
    code: int = 0
    pci: str = ""  # as the kernel prints it: 0000:3b:00
    text: str = ""
    ts: Optional[float] = None  # kernel time stamp: seconds since boot


@dataclass
class XidLog:
    source: str = ""  # the command read
    events: list[XidEvent] = field(default_factory=list)
    lines: int = 0  # kernel log lines read


@dataclass
class DeviceNodes:
    nodes: list[str] = field(default_factory=list)  # /dev/nvidia* present
    denied: list[str] = field(default_factory=list)  # of those, the ones this user's permissions may not open

    def gpu_files(self) -> list:
        """The per-GPU files (/dev/nvidia0, /dev/nvidia1, ...), in GPU order."""
        return sorted((n for n in self.nodes if n[len("/dev/nvidia"):].isdigit()), key=lambda n: int(n[len("/dev/nvidia"):]))


@dataclass
class NodeProcesses:
    persistenced: bool = False  # nvidia-persistenced running
    fabricmanager: bool = False  # nv-fabricmanager running
    scanned: int = 0  # processes looked at


@dataclass
class HealthExpect:
    """What the node should have (`--expect-gpus`, `--expect-driver`)."""

    gpus: Optional[int] = None
    driver: str = ""

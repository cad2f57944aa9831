"""Typed values of facts. Plain dataclasses; JSON through model.to_jsonable/from_jsonable."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class PlatformInfo:
    system: str = ""
    release: str = ""
    machine: str = ""
    distro: str = ""
    cudadoctor_python: str = ""
    is_wsl: bool = False
    wsl_version: Optional[int] = None  # 1 or 2 when is_wsl
    container: str = ""  # "docker", "podman", "kubernetes", "lxc", ... or ""
    container_evidence: str = ""


@dataclass
class GpuInfo:
    index: int = 0
    name: str = ""
    uuid: str = ""
    pci_bus_id: str = ""
    compute_capability: str = ""  # "9.0"
    memory_total_mib: Optional[int] = None
    mig_mode: str = ""
    persistence_mode: str = ""
    compute_mode: str = ""


@dataclass
class SmiInfo:
    """What `nvidia-smi` says, read as a user would see it."""

    path: str = ""
    all_paths: list[str] = field(default_factory=list)
    driver_version: str = ""
    cuda_version: str = ""  # the driver's maximum CUDA ("CUDA Version" / "CUDA UMD Version")
    banner_style: str = ""  # "classic" or "kmd-umd" (R610+)
    gpus: list[GpuInfo] = field(default_factory=list)
    problem: str = ""  # "", "no-driver", "nvml-mismatch", "no-devices", "nvml-unknown", "gpu-lost", "garbage"
    nvml_library_version: str = ""  # printed by newer drivers on a mismatch
    message: str = ""  # nvidia-smi's own error text, verbatim


@dataclass
class NvmlGpu:
    index: int = 0
    name: str = ""
    uuid: str = ""
    pci_bus_id: str = ""
    compute_capability: str = ""
    memory_total_mib: Optional[int] = None
    memory_used_mib: Optional[int] = None
    mig_mode: Optional[bool] = None
    mig_devices: list[dict] = field(default_factory=list)
    persistence_mode: Optional[bool] = None
    compute_mode: str = ""
    pcie_gen: Optional[int] = None
    pcie_gen_max: Optional[int] = None
    pcie_width: Optional[int] = None
    pcie_width_max: Optional[int] = None
    clock_sm_mhz: Optional[int] = None
    clock_sm_max_mhz: Optional[int] = None
    clock_mem_mhz: Optional[int] = None
    clock_mem_max_mhz: Optional[int] = None
    throttle_reasons: list[str] = field(default_factory=list)
    power_w: Optional[float] = None
    power_limit_w: Optional[float] = None
    temperature_c: Optional[int] = None
    ecc_enabled: Optional[bool] = None
    ecc_uncorrected_volatile: Optional[int] = None
    retired_pages_pending: Optional[bool] = None
    remapped_rows_pending: Optional[bool] = None
    remapped_rows_failure: Optional[bool] = None
    processes: list[dict] = field(default_factory=list)
    errors: dict = field(default_factory=dict)  # field -> NVML error text for fields that failed
    fabric_state: Optional[int] = None  # nvmlDeviceGetGpuFabricInfo().state: 0 n/a, 1 not started, 2 in progress, 3 done


@dataclass
class NvmlInfo:
    driver_version: str = ""
    nvml_version: str = ""
    cuda_driver_version: str = ""  # "13.0"
    device_count: int = 0
    gpus: list[NvmlGpu] = field(default_factory=list)
    error: str = ""  # NVML error name when init failed (e.g. NVML_ERROR_LIB_RM_VERSION_MISMATCH)
    fabric_manager: str = ""  # "", "not-applicable", "in-progress", "completed", "failure"


@dataclass
class KernelModuleInfo:
    version: str = ""
    flavour: str = ""  # "open" or "proprietary"
    text: str = ""  # /proc/driver/nvidia/version first line
    params: dict = field(default_factory=dict)  # /proc/driver/nvidia/params


@dataclass
class LdconfigInfo:
    libraries: dict = field(default_factory=dict)  # soname -> [paths] (ldconfig -p order)


@dataclass
class UserspaceDriverInfo:
    """The driver's user-space libraries as the loader would find them."""

    libcuda: str = ""  # realpath of libcuda.so.1
    libcuda_version: str = ""  # from the file name libcuda.so.580.159.04
    libnvidia_ml: str = ""
    libnvidia_ml_version: str = ""
    libcuda_is_stub: bool = False
    # the LD_LIBRARY_PATH folder libnvidia-ml.so.1 comes from ("" when the ldconfig cache or a default folder gives it),
    # and the copy the loader would pick without LD_LIBRARY_PATH (the driver's, normally) with its version
    libnvidia_ml_via: str = ""
    libnvidia_ml_system: str = ""
    libnvidia_ml_system_version: str = ""


@dataclass
class TorchDevice:
    index: int = 0
    name: str = ""
    capability: str = ""  # "9.0"
    total_memory_mib: Optional[int] = None
    multi_processor_count: Optional[int] = None
    uuid: str = ""


@dataclass
class OpResult:
    ok: bool = False
    seconds: Optional[float] = None
    error_type: str = ""
    error: str = ""  # verbatim
    checked: bool = False  # the result was verified on the CPU
    part: str = ""  # where it failed: "ones", "matmul", "check" ('' when it worked)
    skipped: str = ""  # why it was not run ('' when it ran)


@dataclass
class CudnnInfo:
    """cuDNN as torch sees it: compiled against, found at run time, and what torch.backends.cudnn.version() says."""

    available: Optional[bool] = None  # torch.backends.cudnn.is_available(): built with cuDNN
    compiled: str = ""  # torch._C._cudnn.getCompileVersion(): "9.19.0"
    runtime: str = ""  # torch._C._cudnn.getRuntimeVersion(): the cuDNN actually loaded
    version: Optional[int] = None  # torch.backends.cudnn.version()
    version_error: str = ""  # its exception, verbatim (torch raises it for cuDNN RNNs too)
    error: str = ""


@dataclass
class TorchInfo:
    python: str = ""  # the target interpreter (sys.executable of the child)
    python_version: str = ""
    prefix: str = ""
    installed: bool = False
    import_error: str = ""
    import_s: Optional[float] = None
    # where `import torch` failed: the installed nvidia-* pip packages, {name: version} (which one ships a library)
    nvidia_packages: dict = field(default_factory=dict)
    version: str = ""
    cuda: Optional[str] = None  # torch.version.cuda
    hip: Optional[str] = None
    git: str = ""
    file: str = ""
    debug: Optional[bool] = None
    arch_list: list[str] = field(default_factory=list)
    cudnn_version: Optional[int] = None
    nccl_version: str = ""
    available: Optional[bool] = None
    device_count: Optional[int] = None
    init_error: str = ""  # why CUDA did not initialise, verbatim
    devices: list[TorchDevice] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    op: Optional[OpResult] = None
    libraries: list[str] = field(default_factory=list)  # shared objects mapped after CUDA init
    stage: str = ""  # the last stage the child reached
    visible_devices: Optional[str] = None  # CUDA_VISIBLE_DEVICES as the child saw it
    pid: Optional[int] = None  # the probe child's process id (to tell it from other processes on the GPU)
    # the child's soft limits in bytes (None: unlimited or not known): ulimit -v (RLIMIT_AS) and ulimit -d (RLIMIT_DATA)
    address_space_limit: Optional[int] = None
    data_limit: Optional[int] = None
    # CUDA started again with the soft limits raised to the hard ones, after an 'out of memory' at initialisation:
    # True (it worked: the limit is the cause), False (the limit is not), None (not made or no answer)
    limit_retry_ok: Optional[bool] = None
    limit_retry: str = ""  # what was done: "raised RLIMIT_AS", or why no retry was made
    # torch.cuda.init() (torch's lazy CUDA initialisation, what a program's first CUDA call runs) raised this,
    # verbatim, although is_available() was True; the probe made no further CUDA call
    first_use_error: str = ""
    first_use_error_type: str = ""
    cudnn: Optional[CudnnInfo] = None
    conv: Optional[OpResult] = None  # a 3x3 convolution through cuDNN, after the op
    # why the probe ended early ('' when it finished), and what it was doing then
    stopped: str = ""
    stopped_kind: str = ""  # "timeout", "signal", "crash" (a Python error in the probe), "no-report"
    stopped_part: str = ""  # "python", "import", "cuda", "init", "devices", "cudnn", "op", "conv", "libs", "exit"
    stopped_doing: str = ""  # in words: "a 64x64 matmul on the GPU (cuBLAS)"

    @property
    def cpu_only(self) -> bool:
        return self.installed and not self.cuda and not self.hip


@dataclass
class NvccInstall:
    nvcc: str = ""
    realpath: str = ""
    root: str = ""  # toolkit folder (parent of bin/)
    version: str = ""  # "13.0"
    build: str = ""  # "V13.0.88"
    found_via: list[str] = field(default_factory=list)  # "PATH", "CUDA_HOME", "/usr/local/cuda-13.0", ...
    error: str = ""
    is_toolkit: Optional[bool] = None  # root holds a toolkit (include/cuda_runtime.h); False for a lone nvcc

    @property
    def where(self) -> str:
        """The toolkit folder, or the nvcc itself when it is not inside a toolkit folder."""
        return self.root if self.is_toolkit is not False else self.nvcc


@dataclass
class ToolkitInfo:
    installs: list[NvccInstall] = field(default_factory=list)
    path_nvcc: str = ""  # the nvcc a shell would run
    home_var: str = ""  # CUDA_HOME, CUDA_PATH or CUDA_ROOT (the first set)
    home: str = ""
    home_exists: Optional[bool] = None
    home_nvcc: str = ""  # $CUDA_HOME/bin/nvcc when it exists


@dataclass
class EnvInfo:
    vars: dict = field(default_factory=dict)  # allow-listed name -> value (secret-looking values redacted)
    # allow-listed names whose raw value holds a carriage return (a .env file saved with Windows line endings, docker
    # --env-file): `vars` shows them without it, CUDA reads them with it (CUDA_DEVICE_ORDER then stops CUDA)
    carriage_returns: list = field(default_factory=list)

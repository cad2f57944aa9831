"""What the Triton probe found: the installed triton, what its build step needs, and a kernel's run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class CacheFolder:
    """A folder Triton writes compiled kernels to and loads them from (the user's, only inspected)."""

    path: str = ""
    exists: bool = False
    checked: str = ""  # the folder, or its nearest existing parent, that was tested
    writable: Optional[bool] = None
    noexec: Optional[bool] = None  # on a file system mounted noexec: compiled kernels cannot be loaded
    relative: bool = False  # given as a relative path: it depends on the working directory
    env: str = ""  # its variable (TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR): "set", "empty" (set to ''), or ''
    user_error: str = ""  # the default Inductor folder is named after the user: getpass.getuser() raised this


@dataclass
class TritonRun:
    ok: bool = False
    checked: bool = False  # the kernel's output was compared with the expected values
    seconds: Optional[float] = None
    device: str = ""
    capability: str = ""
    error_type: str = ""
    error: str = ""  # verbatim
    where: str = ""  # the traceback's last frames
    skipped: str = ""
    work: str = ""  # the probe's own cache folder for this run (under cudadoctor's cache)


@dataclass
class TritonInfo:
    python: str = ""
    installed: bool = False
    import_error: str = ""
    version: str = ""
    file: str = ""
    torch_version: str = ""
    wants: str = ""  # torch's requirement that applies here: "triton==3.6.0" ('' when none does)
    torch_requires: list[str] = field(default_factory=list)  # torch's triton requirements, verbatim, with markers
    dists: dict = field(default_factory=dict)  # {"triton": "3.6.0", "pytorch-triton": ""}: installed versions
    wants_have: str = ""  # the installed version of the distribution torch names ('' when it is not installed)
    python_version: str = ""
    cc: str = ""  # the C compiler triton's build step would use
    cc_from: str = ""  # "CC" or "PATH"
    cc_found: bool = False
    python_include: str = ""
    python_h: Optional[bool] = None
    libcuda_env: str = ""  # TRITON_LIBCUDA_PATH
    libcuda_ldconfig: list[str] = field(default_factory=list)  # libcuda.so.1 entries in `ldconfig -p`
    libcuda_ld_library_path: list[str] = field(default_factory=list)
    ldconfig_error: str = ""
    triton_cache: Optional[CacheFolder] = None
    inductor_cache: Optional[CacheFolder] = None
    usable: list[str] = field(default_factory=list)  # folders where a cache would work (writable, exec allowed)
    run_requested: bool = True  # False with --no-gpu-ops
    run: Optional[TritonRun] = None
    stderr: str = ""  # the child's stderr, last part: what a failed C build printed (triton hides only stdout)
    stage: str = ""
    stopped_doing: str = ""  # what the child was doing when it hung or died ('' when it finished)

"""Typed values for the Python environments of a machine (`cudadoctor envs`, `check --kernel`).

Plain dataclasses like facts/types.py (kept apart so that file stays about the checklist's facts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from cudadoctor.facts.types import TorchInfo


@dataclass
class KernelSpecInfo:
    """One Jupyter kernelspec (a folder holding kernel.json) and the interpreter it really starts."""

    name: str = ""  # the folder name, lower-cased as jupyter_client does
    resource_dir: str = ""
    display_name: str = ""
    language: str = ""
    argv: list[str] = field(default_factory=list)
    env: dict = field(default_factory=dict)  # kernel.json "env" as written
    env_applied: dict = field(default_factory=dict)  # after jupyter_client's ${VAR} substitution from this environment
    interpreter: str = ""  # the Python the kernel runs ('' when it is not a Python kernel or unknown)
    interpreter_how: str = ""  # how argv was read: "argv[0]", "'python' = the Jupyter server's interpreter", ...
    source: str = ""  # which search folder: "JUPYTER_PATH", "user", "env <prefix>", "system", "ipython", "ipykernel"
    order: int = 0  # position of its folder in the search
    shadowed_by: str = ""  # the resource dir of a same-named kernel that Jupyter takes instead
    error: str = ""  # kernel.json unreadable or not JSON

    @property
    def kernel_json(self) -> str:
        return self.resource_dir.rstrip("/") + "/kernel.json" if self.resource_dir else ""


@dataclass
class KernelsInfo:
    dirs: list[str] = field(default_factory=list)  # kernel folders searched, in Jupyter's order
    kernels: list[KernelSpecInfo] = field(default_factory=list)
    method: str = ""  # "jupyter_client 8.6.3 (/env/bin/python)" or "jupyter_core 5.9.1 paths, mirrored"
    jupyter_python: str = ""  # the interpreter of the `jupyter` on PATH, when there is one
    error: str = ""  # why jupyter_client could not be asked (the mirror was used)


@dataclass
class PythonEnv:
    """One Python environment found on the machine, and (once probed) what its torch sees."""

    python: str = ""  # the interpreter to run
    kind: str = ""  # venv, conda, pyenv, uv, system, kernel, other
    name: str = ""  # conda env name, pyenv version, kernel name, ...
    prefix: str = ""  # the environment's folder ('' for a bare interpreter)
    key: str = ""  # identity: symlinks to one interpreter of one environment share it
    found_as: list[str] = field(default_factory=list)  # "PATH", "VIRTUAL_ENV", "kernel torch", ...
    aliases: list[str] = field(default_factory=list)  # other paths that run the same environment
    env: dict = field(default_factory=dict)  # variables set on top when it runs (kernel.json env, conda env vars)
    env_source: str = ""  # where `env` comes from
    kernel: Optional[KernelSpecInfo] = None
    system_site_packages: Optional[bool] = None  # a venv made with --system-site-packages
    base_python: str = ""  # a venv's `home` interpreter folder (pyvenv.cfg)
    has_ipykernel: Optional[bool] = None  # ipykernel installed (it can be registered as a kernel)
    note: str = ""  # why it could not be probed (a kernel that starts through a wrapper, ...)
    # filled by the probe
    probed: bool = False
    torch_state: str = ""  # FactState value of the torch probe
    torch_error: str = ""
    torch: Optional[TorchInfo] = None
    probe_s: Optional[float] = None

    @property
    def where(self) -> str:
        return self.prefix or self.python

    @property
    def label(self) -> str:
        """'conda env ml', 'venv', 'kernel torch', ... for sentences."""
        if self.kind == "conda":
            return f"conda env {self.name}" if self.name else "conda env"
        if self.kind in ("kernel", "pyenv", "uv"):
            return f"{self.kind} {self.name}".strip()
        return self.kind


@dataclass
class PythonEnvs:
    envs: list[PythonEnv] = field(default_factory=list)
    kernels: Optional[KernelsInfo] = None
    target: str = ""  # the interpreter `check` inspected (excluded from `envs` for the pointer)
    target_kernel: str = ""  # `check --kernel NAME`
    workers: int = 0  # probes run at once
    seconds: float = 0.0  # wall time of all the probes

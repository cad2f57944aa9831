"""Real Python environments on disk for the `envs` tests: venvs made with `python -m venv`, conda- and
pyenv-shaped folders holding real interpreters, kernelspec folders, a hung interpreter.

The torch of the test extras (CPU-only 2.13.0) is made visible in a fresh venv with a .pth file naming
this venv's site-packages (a venv made with --system-site-packages from inside a venv would see the
*base* interpreter's packages, not this venv's).
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
from pathlib import Path

PY = sys.executable
SITE = next(p for p in site.getsitepackages() if p.endswith("site-packages"))
MINOR = f"python{sys.version_info[0]}.{sys.version_info[1]}"


def make_venv(path: Path, torch: bool = False, system_site: bool = False) -> Path:
    """A real venv (no pip: fast); with `torch`, this venv's torch is importable there. Returns its python."""
    argv = [PY, "-m", "venv", "--without-pip"] + (["--system-site-packages"] if system_site else []) + [str(path)]
    subprocess.run(argv, check=True, capture_output=True, timeout=120)
    if torch:
        sp = path / "lib" / MINOR / "site-packages"
        sp.mkdir(parents=True, exist_ok=True)
        (sp / "_cudadoctor_test_torch.pth").write_text(SITE + "\n")
    return path / "bin" / "python"


def wrapper_python(path: Path, target: str = PY) -> Path:
    """An executable `path` that runs `target` (a conda env's python in a conda-shaped folder)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\nexec "{target}" "$@"\n')
    path.chmod(0o755)
    return path


def base_python() -> str:
    """The real interpreter behind this venv (no torch, no venv)."""
    return os.path.realpath(getattr(sys, "_base_executable", "") or PY)


def conda_layout(root: Path, envs: dict) -> Path:
    """<root> as a conda base (conda-meta/, bin/python) with envs/<name> for each name -> None (the base
    interpreter: no torch) or an interpreter to run (e.g. this venv's, for a torch).

    Each bin/python is a small script that execs a real interpreter: a real conda env holds its own
    copy of python, and a copy (or a symlink, which Python resolves to find its prefix) of another
    install cannot stand in for one."""
    (root / "conda-meta").mkdir(parents=True)
    (root / "conda-meta" / "history").write_text("")
    wrapper_python(root / "bin" / "python", base_python())
    for name, target in envs.items():
        pre = root / "envs" / name
        (pre / "conda-meta").mkdir(parents=True)
        wrapper_python(pre / "bin" / "python", target or base_python())
    return root


def pyenv_layout(root: Path, versions: list) -> Path:
    """~/.pyenv shaped: versions/<v>/bin/python (running the base interpreter) and shims/ with a python3
    shim and a python3.X shim of a version that is not selected."""
    for v in versions:
        wrapper_python(root / "versions" / v / "bin" / "python", base_python())
    shims = root / "shims"
    shims.mkdir(parents=True)
    wrapper_python(shims / "python3", str(root / "versions" / versions[0] / "bin" / "python"))
    (shims / "python3.99").write_text("#!/bin/sh\necho 'pyenv: python3.99: command not found' >&2\nexit 127\n")
    (shims / "python3.99").chmod(0o755)
    return root


def hung_python(folder: Path) -> Path:
    """A script named python that never answers (a wedged interpreter, an NFS mount that hangs)."""
    p = folder / "bin" / "python"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("#!/bin/sh\nexec /bin/sleep 300\n")
    p.chmod(0o755)
    return p


def kernel(folder: Path, name: str, argv: list, env: dict = None, language: str = "python") -> Path:
    """<folder>/kernels/<name>/kernel.json; returns the kernel's folder."""
    d = folder / "kernels" / name
    d.mkdir(parents=True, exist_ok=True)
    spec = {"argv": argv + ["-m", "ipykernel_launcher", "-f", "{connection_file}"] if argv else [],
            "display_name": name, "language": language}
    if env is not None:
        spec["env"] = env
    (d / "kernel.json").write_text(json.dumps(spec))
    return d


def host_env(tmp: Path, path_dirs=(), **extra) -> dict:
    """An environment for HostSystem / the CLI: HOME in tmp, PATH = path_dirs + /usr/bin:/bin."""
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    env = {"HOME": str(home), "PATH": os.pathsep.join([str(d) for d in path_dirs] + ["/usr/bin", "/bin"]),
           "LC_ALL": "C", "CUDADOCTOR_CACHE_DIR": str(tmp / "cache"), "NO_COLOR": "1", "COLUMNS": "200"}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_cli(args: list, env: dict, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    """The real CLI (this checkout, installed in this venv) in a subprocess with exactly `env`."""
    return subprocess.run([PY, "-m", "cudadoctor", *args], capture_output=True, text=True, env=dict(env),
                          cwd=str(cwd), timeout=timeout)

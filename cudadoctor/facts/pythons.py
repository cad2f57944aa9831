"""Finding the Python environments of a machine (before any of them is run).

Sources, in the order rows are listed: the active venv or conda env (VIRTUAL_ENV, CONDA_PREFIX), the
interpreters on PATH, the current project's .venv / venv, conda and mamba environments, pyenv
versions, uv-managed Pythons, then Jupyter kernels (facts/kernelspecs.py) and interpreters the user
names (`envs --add`). Symlinks and copies of the path that run one environment are merged into one row.

Identity: a venv is its folder (the one holding pyvenv.cfg, next to the interpreter or one level up,
as Python itself decides); any other interpreter is its real path. So /bin/python3 and
/usr/bin/python3.12 are one row, while a venv whose bin/python links to /usr/bin/python3.12 is another.
"""

from __future__ import annotations

import os
import re

from cudadoctor.facts import conda_envs
from cudadoctor.facts.python_types import PythonEnv
from cudadoctor.system.base import System

PY_NAME = re.compile(r"^python(3(\.\d+)?)?$")
PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
MAX_PROJECT_DEPTH = 12


def python_in(system: System, prefix: str) -> str:
    """The interpreter of an environment folder ('' when it has none)."""
    for name in ("bin/python", "bin/python3"):
        p = os.path.join(prefix, name)
        if system.is_executable(p):
            return p
    return ""


def venv_dir(system: System, python: str) -> str:
    """The venv an interpreter path belongs to: where pyvenv.cfg is (next to it or one level up), or ''."""
    d = os.path.dirname(python)
    for cand in (d, os.path.dirname(d)):
        if system.exists(os.path.join(cand, "pyvenv.cfg")):
            return cand
    return ""


def pyvenv_cfg(system: System, prefix: str) -> dict:
    out = {}
    for line in (system.read_text(os.path.join(prefix, "pyvenv.cfg"), limit=64 * 1024) or "").splitlines():
        k, sep, v = line.partition("=")
        if sep:
            out[k.strip().lower()] = v.strip()
    return out


class Finder:
    """Collects environments by identity, keeping the first row's place and every way it was found."""

    def __init__(self, system: System):
        self.system = system
        self.envs: list = []
        self.by_key: dict = {}
        self.conda_roots = conda_envs.roots(system)
        home = system.home()
        self.pyenv_root = system.env.get("PYENV_ROOT") or (os.path.join(home, ".pyenv") if home else "")
        data = system.env.get("XDG_DATA_HOME") or (os.path.join(home, ".local", "share") if home else "")
        self.uv_dir = system.env.get("UV_PYTHON_INSTALL_DIR") or (os.path.join(data, "uv", "python") if data else "")

    # ---- identity and kind
    def describe(self, python: str) -> PythonEnv:
        s = self.system
        e = PythonEnv(python=python)
        vdir = venv_dir(s, python)
        if vdir:
            e.prefix = vdir
            e.key = "venv:" + s.realpath(vdir)
            cfg = pyvenv_cfg(s, vdir)
            e.kind = "venv"
            e.system_site_packages = cfg.get("include-system-site-packages", "").lower() == "true"
            e.base_python = cfg.get("home", "")
        else:
            real = s.realpath(python)
            e.key = "exe:" + real
            prefix = os.path.dirname(os.path.dirname(real))
            if conda_envs.is_conda_prefix(s, prefix):
                e.kind, e.prefix = "conda", prefix
                e.name = conda_envs.env_name(prefix, self.conda_roots)
                e.env = conda_envs.env_vars(s, prefix)
                e.env_source = f"{prefix}/conda-meta/state (conda env config vars)" if e.env else ""
            elif real.startswith(("/usr/bin/", "/usr/local/bin/", "/bin/", "/usr/libexec/")):
                e.kind = "system"
            else:
                e.kind = "other"
        where = s.realpath(e.prefix or python)
        for base, kind in ((os.path.join(self.pyenv_root, "versions") if self.pyenv_root else "", "pyenv"),
                           (self.uv_dir, "uv")):
            base = s.realpath(base) if base else ""
            if base and where.startswith(base + "/"):
                e.kind, e.name = kind, where[len(base) + 1:].split("/bin/")[0]
                e.prefix = e.prefix or os.path.join(base, e.name)
        e.has_ipykernel = self.has_module(e, "ipykernel")
        return e

    def has_module(self, e: PythonEnv, module: str):
        """Whether the environment's own site-packages hold `module` (None when they cannot be found)."""
        s = self.system
        prefix = e.prefix or os.path.dirname(os.path.dirname(s.realpath(e.python)))
        libdir = os.path.join(prefix, "lib")
        sites = [os.path.join(libdir, d, "site-packages") for d in s.listdir(libdir) if d.startswith("python")]
        sites = [d for d in sites if s.is_dir(d)]
        if not sites:
            return None
        return any(s.exists(os.path.join(d, module)) for d in sites)

    # ---- adding
    def add(self, python: str, found_as: str, name: str = ""):
        s = self.system
        if not python or not s.is_executable(python):
            return None
        e = self.describe(python)
        if name and not e.name:
            e.name = name
        old = self.by_key.get(e.key)
        if old is not None:
            if found_as not in old.found_as:
                old.found_as.append(found_as)
            if python != old.python and python not in old.aliases:
                old.aliases.append(python)
            if name and not old.name:
                old.name = name
            return old
        e.found_as.append(found_as)
        self.by_key[e.key] = e
        self.envs.append(e)
        return e

    def add_prefix(self, prefix: str, found_as: str, name: str = ""):
        return self.add(python_in(self.system, prefix), found_as, name)

    # ---- sources
    def active(self) -> None:
        env = self.system.env
        if env.get("VIRTUAL_ENV"):
            self.add_prefix(env["VIRTUAL_ENV"], "VIRTUAL_ENV (active venv)")
        if env.get("CONDA_PREFIX"):
            self.add_prefix(env["CONDA_PREFIX"], "CONDA_PREFIX (active conda env)", env.get("CONDA_DEFAULT_ENV") or "")

    def path(self) -> None:
        shims = self.system.realpath(os.path.join(self.pyenv_root, "shims")) if self.pyenv_root else ""
        for d in (self.system.env.get("PATH") or "").split(os.pathsep):
            if not d:
                continue
            names = sorted((n for n in self.system.listdir(d) if PY_NAME.match(n)),
                           key=lambda n: (n != "python3", n != "python", n))
            if shims and self.system.realpath(d) == shims:
                # pyenv has a python3.X shim for every installed version, but only the selected version's
                # work; the versions themselves are listed from $PYENV_ROOT/versions
                names = [n for n in names if n in ("python", "python3")]
            for n in names:
                self.add(os.path.join(d, n), "PATH")

    def project(self) -> None:
        """.venv / venv in the working folder and its parents, up to the project's root."""
        s = self.system
        d = s.cwd()
        home = s.home()
        for _ in range(MAX_PROJECT_DEPTH):
            if not d:
                break
            for n in (".venv", "venv"):
                self.add_prefix(os.path.join(d, n), f"project {n} ({d})")
            if any(s.exists(os.path.join(d, m)) for m in PROJECT_MARKERS) or d in (home, "/"):
                break
            parent = os.path.dirname(d)
            if parent == d:
                break
            d = parent

    def conda(self) -> None:
        for prefix, name, why in conda_envs.prefixes(self.system):
            self.add_prefix(prefix, f"conda ({why})", name)

    def pyenv(self) -> None:
        versions = os.path.join(self.pyenv_root, "versions") if self.pyenv_root else ""
        for v in self.system.listdir(versions) if versions else []:
            self.add_prefix(os.path.join(versions, v), "pyenv versions")
            envs = os.path.join(versions, v, "envs")
            for n in self.system.listdir(envs):
                self.add_prefix(os.path.join(envs, n), "pyenv-virtualenv")

    def uv(self) -> None:
        for n in self.system.listdir(self.uv_dir) if self.uv_dir else []:
            if not n.startswith("."):
                self.add_prefix(os.path.join(self.uv_dir, n), "uv python dir")

    def extra(self, paths) -> None:
        for p in paths:
            p = p.rstrip("/") or p
            if self.system.is_dir(p):
                self.add_prefix(p, "--add")
            else:
                self.add(p, "--add")


def discover(system: System, extra=()) -> Finder:
    """Every Python environment found from the machine's files and environment (not run yet); Jupyter
    kernels are added by facts/python_envs.py, which also needs the environments' folders."""
    f = Finder(system)
    f.active()
    f.path()
    f.project()
    f.conda()
    f.pyenv()
    f.uv()
    f.extra(extra)
    return f

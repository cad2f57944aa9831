"""Where conda and mamba keep environments: the roots, `envs_dirs` from every .condarc conda reads,
CONDA_ENVS_PATH / CONDA_ENVS_DIRS, and ~/.conda/environments.txt (what `conda env list` shows).

Read from files only (no `conda` process: it takes a second or more to start and may not be on PATH).
"""

from __future__ import annotations

import json
import os
import re

from cudadoctor.system.base import System

# conda's own search path for its configuration files (conda/base/constants.py SEARCH_PATH, conda 23-25,
# POSIX), followed by the .mambarc files mamba and micromamba also read. Later files win for single
# values; lists such as envs_dirs are merged, which is all we read.
CONDARC_SEARCH = (
    "/etc/conda/.condarc", "/etc/conda/condarc", "/etc/conda/condarc.d/",
    "/var/lib/conda/.condarc", "/var/lib/conda/condarc", "/var/lib/conda/condarc.d/",
    "$CONDA_ROOT/.condarc", "$CONDA_ROOT/condarc", "$CONDA_ROOT/condarc.d/",
    "$XDG_CONFIG_HOME/conda/.condarc", "$XDG_CONFIG_HOME/conda/condarc", "$XDG_CONFIG_HOME/conda/condarc.d/",
    "~/.config/conda/.condarc", "~/.config/conda/condarc", "~/.config/conda/condarc.d/",
    "~/.conda/.condarc", "~/.conda/condarc", "~/.conda/condarc.d/",
    "~/.condarc",
    "$CONDA_PREFIX/.condarc", "$CONDA_PREFIX/condarc", "$CONDA_PREFIX/condarc.d/",
    "$CONDARC",
    "$MAMBA_ROOT_PREFIX/.mambarc", "~/.mambarc", "$MAMBARC",
)

# Install folders conda, miniforge and micromamba installers propose by default: a root found here is
# listed even when no environment variable names it (a shell where `conda activate` never ran).
DEFAULT_ROOTS = ("~/miniconda3", "~/anaconda3", "~/miniforge3", "~/mambaforge", "~/micromamba",
                 "~/.local/share/mamba", "/opt/conda", "/opt/miniconda3", "/opt/anaconda3", "/opt/miniforge3")


def expand(system: System, path: str) -> str:
    """~ and $VAR in a conda path, from the environment cudadoctor was given ('' when a variable is unset)."""
    env = system.env
    home = system.home()
    if path.startswith("~"):
        path = home + path[1:] if home else ""
    for var in re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", path):
        if not env.get(var):
            if var == "XDG_CONFIG_HOME" and home:
                path = re.sub(r"\$\{?XDG_CONFIG_HOME\}?", home + "/.config", path)
                continue
            return ""
        path = re.sub(r"\$\{?" + var + r"\}?", env[var], path)
    return path


def is_conda_prefix(system: System, prefix: str) -> bool:
    return bool(prefix) and system.is_dir(os.path.join(prefix, "conda-meta"))


def roots(system: System) -> list:
    """conda/mamba installations (base environments), the named ones first."""
    env = system.env
    named = []
    exe = env.get("CONDA_EXE") or ""
    if exe:
        named.append(os.path.dirname(os.path.dirname(exe)))  # <root>/bin/conda
    named += [env.get("CONDA_ROOT") or "", env.get("MAMBA_ROOT_PREFIX") or ""]
    active = env.get("CONDA_PREFIX") or ""
    if active:
        parent = os.path.dirname(active)
        named.append(os.path.dirname(parent) if os.path.basename(parent) == "envs" else active)
    out = []
    for r in named + [expand(system, d) for d in DEFAULT_ROOTS]:
        r = r.rstrip("/")
        if r and r not in out and is_conda_prefix(system, r):
            out.append(r)
    return out


def condarc_files(system: System) -> list:
    out = []
    for entry in CONDARC_SEARCH:
        p = expand(system, entry)
        if not p:
            continue
        if entry.endswith("/"):
            out += [os.path.join(p, n) for n in system.listdir(p) if n.endswith((".yml", ".yaml"))]
        elif system.exists(p) and p not in out:
            out.append(p)
    return out


def envs_dirs_in(text: str) -> list:
    """The `envs_dirs` list of a .condarc: block (`- /a` lines) or flow (`[/a, /b]`) YAML.

    Written by hand: only this one key of conda's YAML is needed, and cudadoctor does not take a YAML
    parser as a dependency for it. Other keys, comments and quotes are handled; anything fancier
    (anchors, multi-line scalars) is not used for this key in practice."""
    out: list = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^envs_dirs\s*:\s*(.*)$", line)
        if not m:
            continue
        rest = m.group(1).split(" #")[0].strip()
        if rest.startswith("["):
            out += [_unquote(x) for x in rest.strip("[]").split(",") if x.strip()]
            continue
        for nxt in lines[i + 1:]:
            if not nxt.strip() or nxt.lstrip().startswith("#"):
                continue
            item = re.match(r"^\s*-\s*(.+?)\s*$", nxt)
            if not item:
                break
            out.append(_unquote(item.group(1).split(" #")[0]))
    return [x for x in out if x]


def _unquote(s: str) -> str:
    s = s.strip()
    return s[1:-1] if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"" else s


def envs_dirs(system: System, conda_roots: list) -> list:
    """(folder, where it came from) for every folder conda creates named environments in."""
    out: list = []

    def add(d: str, why: str) -> None:
        d = expand(system, d).rstrip("/")
        if d and d not in [x for x, _ in out]:
            out.append((d, why))

    for var in ("CONDA_ENVS_PATH", "CONDA_ENVS_DIRS"):
        for d in (system.env.get(var) or "").split(os.pathsep):
            if d:
                add(d, var)
    for f in condarc_files(system):
        for d in envs_dirs_in(system.read_text(f, limit=256 * 1024) or ""):
            add(d, f"envs_dirs in {f}")
    for r in conda_roots:
        add(os.path.join(r, "envs"), f"conda root {r}")
    add("~/.conda/envs", "conda's per-user default")
    return out


def environments_txt(system: System) -> list:
    """Prefixes listed in ~/.conda/environments.txt (conda records every env it creates there)."""
    home = system.home()
    if not home:
        return []
    text = system.read_text(os.path.join(home, ".conda", "environments.txt"), limit=1024 * 1024) or ""
    return [ln.strip().rstrip("/") for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def env_name(prefix: str, conda_roots: list) -> str:
    if prefix in conda_roots:
        return "base" if prefix == (conda_roots[0] if conda_roots else "") else os.path.basename(prefix)
    if os.path.basename(os.path.dirname(prefix)) == "envs":
        return os.path.basename(prefix)
    return prefix


def env_vars(system: System, prefix: str) -> dict:
    """`conda env config vars set` values (conda-meta/state): set by `conda activate`, not when the
    interpreter is run directly (a Jupyter kernel's argv does not activate)."""
    raw = system.read_text(os.path.join(prefix, "conda-meta", "state"), limit=256 * 1024)
    if not raw:
        return {}
    try:
        d = json.loads(raw)
    except ValueError:
        return {}
    v = d.get("env_vars") if isinstance(d, dict) else None
    return {str(k): str(x) for k, x in v.items()} if isinstance(v, dict) else {}


def prefixes(system: System) -> list:
    """(prefix, name, found as) of every conda/mamba environment found in files, roots first."""
    rs = roots(system)
    out: list = []
    seen: set = set()

    def add(p: str, why: str) -> None:
        p = p.rstrip("/")
        if p and p not in seen and is_conda_prefix(system, p):
            seen.add(p)
            out.append((p, env_name(p, rs), why))

    for r in rs:
        add(r, "conda root")
    for p in environments_txt(system):
        add(p, "~/.conda/environments.txt")
    for d, why in envs_dirs(system, rs):
        for n in system.listdir(d):
            add(os.path.join(d, n), why)
    return out

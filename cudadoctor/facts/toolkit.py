"""CUDA toolkits: every nvcc that PATH, CUDA_HOME/CUDA_PATH/CUDA_ROOT and the usual folders offer."""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor

from cudadoctor.facts.registry import Options, gatherer
from cudadoctor.facts.types import NvccInstall, ToolkitInfo
from cudadoctor.model import Fact
from cudadoctor.system.base import System

RE_RELEASE = re.compile(r"release\s+(\d+\.\d+)\s*,\s*(V[\w.]+)")
HOME_VARS = ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT")
FIXED_DIRS = ("/usr/local/cuda", "/opt/cuda", "/usr/lib/nvidia-cuda-toolkit")


def parse_nvcc_version(text: str) -> tuple:
    m = RE_RELEASE.search(text)
    return (m.group(1), m.group(2)) if m else ("", "")


def candidates(system: System) -> list:
    """(nvcc path, how it was found) in the order a user would meet them."""
    out = []
    for p in system.which_all("nvcc"):
        out.append((p, "PATH"))
    for var in HOME_VARS:
        home = system.env.get(var)
        if home:
            out.append((os.path.join(home, "bin", "nvcc"), var))
    roots = list(FIXED_DIRS)
    for name in system.listdir("/usr/local"):
        if name.startswith("cuda-"):
            roots.append(f"/usr/local/{name}")
    for r in roots:
        out.append((os.path.join(r, "bin", "nvcc"), r))
    return [(p, how) for p, how in out if system.is_executable(p)]


def is_toolkit_root(system: System, root: str) -> bool:
    return system.exists(os.path.join(root, "include", "cuda_runtime.h")) or system.exists(
        os.path.join(root, "version.json"))


def merge_same_toolkit(system: System, installs: list) -> list:
    """nvcc wrappers and symlinked folders that report the same build are one toolkit: keep the entry
    whose folder is a real toolkit, with every way it was found."""
    out: list = []
    for inst in installs:
        twin = next((o for o in out if inst.build and o.build == inst.build and o.version == inst.version), None)
        if twin is None:
            out.append(inst)
            continue
        keep, drop = (inst, twin) if is_toolkit_root(system, inst.root) and not is_toolkit_root(system, twin.root) else (twin, inst)
        for how in drop.found_via:
            if how not in keep.found_via:
                keep.found_via.append(how)
        if drop.nvcc == system.which("nvcc"):
            keep.nvcc = drop.nvcc  # the one a shell runs stays the visible path
        out[out.index(twin)] = keep
    return out


@gatherer("toolkit", value_type=ToolkitInfo)
def gather_toolkit(system: System, opts: Options, deps: dict) -> Fact:
    """Every nvcc found, with `nvcc --version` run on each distinct one."""
    info = ToolkitInfo()
    for var in HOME_VARS:
        if system.env.get(var):
            info.home_var, info.home = var, system.env[var]
            info.home_exists = system.is_dir(info.home)
            hn = os.path.join(info.home, "bin", "nvcc")
            info.home_nvcc = hn if system.is_executable(hn) else ""
            break
    path_nvcc = system.which("nvcc")
    info.path_nvcc = path_nvcc or ""
    by_real: dict = {}
    for p, how in candidates(system):
        real = system.realpath(p)
        inst = by_real.get(real)
        if inst is None:
            root = os.path.dirname(os.path.dirname(real))
            inst = by_real[real] = NvccInstall(nvcc=p, realpath=real, root=root)
        if how not in inst.found_via:
            inst.found_via.append(how)
    installs = list(by_real.values())
    if installs:
        with ThreadPoolExecutor(min(8, len(installs))) as pool:
            results = list(pool.map(lambda i: system.run([i.nvcc, "--version"], opts.timeout_tool), installs))
        for inst, res in zip(installs, results):
            if res.timed_out or not res.started:
                inst.error = res.describe()
                continue
            inst.version, inst.build = parse_nvcc_version(res.output)
            if not inst.version:
                inst.error = f"unrecognised `nvcc --version` output: {res.output.strip()[:200]!r}"
    info.installs = merge_same_toolkit(system, installs)
    for inst in info.installs:
        inst.is_toolkit = is_toolkit_root(system, inst.root)
    if not info.installs:
        return Fact.not_found("PATH, " + ", ".join(HOME_VARS) + ", /usr/local/cuda*", "no nvcc found", value=info)
    return Fact.found(info, "nvcc --version")

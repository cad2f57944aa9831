"""The CUDA-relevant environment variables (allow-listed, secrets scrubbed) and the platform."""

from __future__ import annotations

import re

from cudadoctor.facts.registry import Options, gatherer
from cudadoctor.facts.types import EnvInfo, PlatformInfo
from cudadoctor.model import Fact
from cudadoctor.redact import allowed_env
from cudadoctor.system.base import System


@gatherer("env", value_type=EnvInfo)
def gather_env(system: System, opts: Options, deps: dict) -> Fact:
    """Allow-listed environment variables, and which of them hold a carriage return (shown without it)."""
    shown = allowed_env(system.env)
    return Fact.found(EnvInfo(vars=shown, carriage_returns=sorted(k for k in shown if "\r" in (system.env.get(k) or ""))),
                      "environment")


def detect_container(system: System) -> tuple:
    if system.exists("/.dockerenv"):
        return "docker", "/.dockerenv exists"
    if system.exists("/run/.containerenv"):
        return "podman", "/run/.containerenv exists"
    if system.env.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes", "KUBERNETES_SERVICE_HOST is set"
    cg = system.read_text("/proc/1/cgroup") or ""
    for word in ("docker", "kubepods", "containerd", "lxc", "podman"):
        if word in cg:
            return ("kubernetes" if word == "kubepods" else word), f"/proc/1/cgroup mentions {word}"
    if system.env.get("container"):
        return system.env["container"], "$container is set"
    return "", ""


@gatherer("platform", value_type=PlatformInfo)
def gather_platform(system: System, opts: Options, deps: dict) -> Fact:
    """Operating system, WSL and container."""
    u = system.uname()
    info = PlatformInfo(system=u.get("system", ""), release=u.get("release", ""), machine=u.get("machine", ""),
                        cudadoctor_python=system.own_python())
    osr = system.read_text("/etc/os-release") or ""
    m = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', osr, re.M)
    info.distro = m.group(1) if m else ""
    proc_version = (system.read_text("/proc/version") or "") + " " + info.release
    if re.search(r"microsoft", proc_version, re.I):
        info.is_wsl = True
        info.wsl_version = 2 if re.search(r"WSL2|microsoft-standard", proc_version, re.I) or system.exists(
            "/dev/dxg") else 1
    info.container, info.container_evidence = detect_container(system)
    return Fact.found(info, "uname, /etc/os-release, /proc/version")

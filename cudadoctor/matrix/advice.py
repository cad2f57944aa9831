"""Concrete fixes built from the matrix and the user's own facts (driver, GPUs, torch, toolkits)."""

from __future__ import annotations

from typing import Iterable, Optional

from cudadoctor.matrix.versions import major_minor, parse_version

DRIVER_DOCS = "https://docs.nvidia.com/deploy/cuda-compatibility/"
TORCH_DOCS = "https://pytorch.org/get-started/locally/"


def driver_upgrade_commands(linux_min: str) -> list:
    """Commands to get a driver >= linux_min (its branch), for Ubuntu/Debian-style systems."""
    branch = (linux_min or "").split(".")[0]
    if not branch.isdigit():
        return []
    return [f"sudo apt install nvidia-driver-{branch}", "sudo reboot"]


def torch_candidates(m, ccs: Iterable[tuple], driver: Optional[str], driver_cuda: Optional[str]) -> list:
    """recommend_torch for every GPU at once (a wheel must run on all of them), newest first."""
    ccs = [c for c in ccs if c]
    lists = [m.recommend_torch(c, driver, driver_cuda) for c in ccs] or [m.recommend_torch(None, driver, driver_cuda)]
    keys = set.intersection(*({(r["torch"], r["cu"]) for r in lst} for lst in lists))
    return [r for r in lists[0] if (r["torch"], r["cu"]) in keys]


def pick_torch(recs: list, current: str) -> list:
    """The wheels to suggest: the user's own torch release if it has a working variant, else the
    nearest newer release; then the newest overall. Prefers full driver compatibility."""
    if not recs:
        return []
    full = [r for r in recs if r["driver"] in ("full", "unknown")] or recs
    cur = major_minor((current or "").split("+")[0])
    chosen = []
    if cur is not None:
        same = ([r for r in full if major_minor(r["torch"]) == cur]
                or [r for r in recs if major_minor(r["torch"]) == cur])
        newer = [r for r in full if major_minor(r["torch"]) > cur]
        if same:
            chosen.append(same[0])
        elif newer:
            oldest_newer = min(major_minor(r["torch"]) for r in newer)
            chosen.append(next(r for r in newer if major_minor(r["torch"]) == oldest_newer))
    if not chosen or chosen[0] is not full[0]:
        chosen.append(full[0])
    return chosen


def torch_fix_commands(m, ccs, driver, driver_cuda, current: str) -> tuple:
    """(text, commands) installing a torch wheel that supports the GPUs and the driver."""
    recs = torch_candidates(m, ccs, driver, driver_cuda)
    picks = pick_torch(recs, current)
    if picks:
        names = " or ".join(f"torch {p['torch']} {p['cu']}" for p in picks)
        return (f"Install {names}, built for this GPU and runnable by driver {driver or '(unknown)'}",
                [p["pip"] for p in picks])
    any_driver = torch_candidates(m, ccs, None, None)
    if any_driver:
        p = any_driver[0]
        need = m.min_driver(p["cuda"]) or {}
        floor = (need.get("minor_compat") or need.get("full") or {}).get("linux", "")
        return (f"No official wheel runs on this GPU with driver {driver}: upgrade the driver to >= {floor}, "
                f"then install torch {p['torch']} {p['cu']}",
                driver_upgrade_commands(floor) + [p["pip"]])
    return ("No official torch wheel in cudadoctor's data supports this GPU; build torch from source "
            "with TORCH_CUDA_ARCH_LIST set to its compute capability", [])


def toolkit_for(m, cc: tuple, driver: Optional[str], driver_cuda: Optional[str]) -> Optional[str]:
    """The newest CUDA toolkit (major.minor) that targets `cc` and that the driver fully runs."""
    row = m.arch_for_cc(cc)
    if row is None:
        return None
    lo, hi = major_minor(row["nvcc_first"]), major_minor(row.get("nvcc_last") or m.cuda_data_stops_at)
    minors = sorted({major_minor(r["cuda"]) for r in m.toolkits}, reverse=True)
    for mm in minors:
        if not (lo <= mm <= hi):
            continue
        cuda = f"{mm[0]}.{mm[1]}"
        if driver or driver_cuda:
            if m.driver_runs_cuda(driver, cuda, driver_cuda) != "full":
                continue
        return cuda
    return None


def toolkit_install_commands(cuda: str) -> list:
    dashed = cuda.replace(".", "-")
    return [f"sudo apt install cuda-toolkit-{dashed}",
            f"export PATH=/usr/local/cuda-{cuda}/bin:$PATH CUDA_HOME=/usr/local/cuda-{cuda}"]


def sm_flag(cc: tuple) -> str:
    return f"-arch=sm_{cc[0]}{cc[1]}"


def newer(a: str, b: str) -> bool:
    va, vb = parse_version(a), parse_version(b)
    return va is not None and vb is not None and va > vb

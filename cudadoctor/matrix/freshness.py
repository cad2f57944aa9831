"""Is the version matrix older than what this machine has? And the nearest row when it is.

Pure: versions in (plain strings), plain data out. The `matrix.freshness` step says once what is
newer than the data; the other matrix steps use `nearest_*` and `unverified` to say, in their own
findings, that they judged from the nearest row.
"""

from __future__ import annotations

from typing import Iterable, Optional

from cudadoctor.matrix.versions import cc_key, cc_text, major_minor, parse_version

TORCH_DOCS = "https://github.com/pytorch/pytorch/blob/main/RELEASE.md"
CUDA_DOCS = "https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/"
CUDNN_DOCS = "https://docs.nvidia.com/deeplearning/cudnn/backend/latest/reference/support-matrix.html"
GPU_DOCS = "https://developer.nvidia.com/cuda-gpus"


def _newer(have: Optional[str], stops: str) -> bool:
    a, b = major_minor(have or ""), major_minor(stops)
    return a is not None and b is not None and a > b


def _item(what: str, have: str, stops: str, affects: list, docs: str) -> dict:
    return {"what": what, "have": have, "data_stops_at": stops, "affects": affects, "docs": docs}


def newer_than_data(m, torch: str = "", torch_cuda: str = "", driver: str = "", driver_cuda: str = "",
                    nvccs: Iterable[str] = (), cudnn: str = "", ccs: Iterable[tuple] = ()) -> list:
    """What this machine has that is newer than the data, each with the matrix steps it affects.

    An item with no `affects` changes no verdict: a driver newer than the data whose own CUDA version
    is known (drivers are backward compatible, and the checks read its CUDA version from it).
    """
    s = m.data_stops_at()
    out = []
    base = (torch or "").split("+")[0]
    if _newer(base, s["torch"]):
        out.append(_item("torch", base, s["torch"], ["matrix.torch-gpu", "matrix.cudnn"], TORCH_DOCS))
    if _newer(torch_cuda, s["cuda"]):
        out.append(_item("torch's CUDA", torch_cuda, s["cuda"], ["matrix.driver-torch", "matrix.cudnn"], CUDA_DOCS))
    if driver and driver_cuda and _newer(driver_cuda, s["driver_cuda"]):
        out.append(_item("driver", f"{driver} (CUDA {driver_cuda})", f"{s['driver_branch']} (CUDA {s['driver_cuda']})",
                         [], CUDA_DOCS))
    elif driver and not driver_cuda and m.driver_beyond_data(driver):
        out.append(_item("driver", driver, f"{s['driver_branch']} (CUDA {s['driver_cuda']})",
                         ["matrix.driver-toolkit", "matrix.driver-torch"], CUDA_DOCS))
    stops_nvcc = min((s["cuda"], s["host_compilers"]), key=parse_version)
    for v in sorted({v for v in nvccs if _newer(v, stops_nvcc)}, key=parse_version):
        out.append(_item("nvcc", v, stops_nvcc, ["matrix.driver-toolkit", "matrix.nvcc-gpu", "matrix.host-compiler"],
                         CUDA_DOCS))
    if _newer(cudnn, s["cudnn"]):
        out.append(_item("cuDNN", cudnn, s["cudnn"], ["matrix.cudnn"], CUDNN_DOCS))
    top = max((cc_key(a["cc"]) for a in m.archs), default=None)
    for cc in sorted({tuple(c) for c in ccs if c}):  # a compute capability the data does not know
        if top is not None and m.arch_for_cc(cc) is None:
            out.append(_item("GPU", f"cc {cc_text(cc)}", f"cc {cc_text(top)} (the newest it knows)", ["matrix.nvcc-gpu", "matrix.torch-gpu"],
                             GPU_DOCS))
    return out


def unverified(have: str, row: str, stops: str) -> dict:
    """Evidence for a verdict judged from the nearest row of the data."""
    return {"unverified": True, "judged_from": row, "newer_than_data": have, "data_stops_at": stops}


def suffix(have: str, row: str) -> str:
    """The words a summary gets when its verdict came from the nearest row."""
    return f" (unverified: {have} is newer than the data; judged from {row})"


def nearest_toolkit(m, cuda: str) -> Optional[dict]:
    """The newest toolkit row at or below `cuda`: its Linux driver is a lower bound for a newer CUDA."""
    mm = major_minor(cuda)
    rows = [r for r in m.toolkits if mm is not None and major_minor(r["cuda"]) <= mm]
    if not rows:
        return None
    row = max(rows, key=lambda r: max(parse_version(x) for x in r["versions"]))
    return {"row": f"CUDA {row['cuda']} {row['release']}", "cuda": row["cuda"], "linux": row["linux"]}


def beyond_cuda(m, cuda: str) -> bool:
    """Is this CUDA (major.minor) newer than the driver table?"""
    return _newer(cuda, m.cuda_data_stops_at)


def nearest_variant(m, torch_version: str, cuda: str) -> Optional[dict]:
    """For a torch newer than the data: the last release's variant for the same CUDA (else the newest
    one built for an older CUDA), as the best guess of its arch list and pins. None otherwise."""
    base = (torch_version or "").split("+")[0]
    if not _newer(base, m.torch_data_stops_at):
        return None
    want = major_minor(cuda or "")
    vs = [v for v in m.torch_variants(m.torch_data_stops_at)
          if want is None or major_minor(v["cuda"]) <= want]
    same = [v for v in vs if major_minor(v["cuda"]) == want]
    pick = same[0] if same else (max(vs, key=lambda v: parse_version(v["cuda"])) if vs else None)
    return None if pick is None else dict(pick, row=f"torch {pick['torch']} {pick['cu']}'s row")


def beyond_nvcc(m, nvcc: str) -> bool:
    """An nvcc newer than the data's targets and host-compiler rows (same major: still judged)."""
    return _newer(nvcc, m.nvcc_data_stops_at)


def nearest_cudnn(m, version: str) -> Optional[dict]:
    """For a cuDNN newer than the data: its last row, labelled. None otherwise."""
    if not _newer(version, m.cudnn_data_stops_at):
        return None
    row = m.nearest_cudnn_row(version)
    return None if row is None else dict(row, label=f"cuDNN {row['first']}-{row['last']}'s row")


def cudnn_major_ok(row: dict, cuda: str) -> bool:
    """From a row older than the cuDNN: only the CUDA major can be judged (a build for that major)."""
    mm = major_minor(cuda)
    return mm is not None and any(major_minor(c.split("-")[0])[0] == mm[0] for c in row.get("cuda", []))


def nearest_compilers(m, nvcc: str) -> Optional[dict]:
    """For an nvcc newer than the host-compiler rows: the last row's bounds. None otherwise."""
    if not _newer(nvcc, m.compilers_data_stops_at):
        return None
    return m.nearest_compiler_bounds(nvcc)

"""What a GPU-to-GPU path should give a collective (matrix/links.toml): NVLink generations, and the
fraction of the raw link speed an all-reduce reaches, per kind of path."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Optional

from cudadoctor.matrix import read_table


@dataclass(frozen=True)
class Expectation:
    """The busbw a path should give, and why."""

    busbw_gbps: float
    raw_gbps: float
    efficiency: float
    kind: str  # "nvlink", "pcie-p2p", "pcie-shm"
    text: str  # "18 NVLink 4.0 links (450 GB/s)"
    confidence: str = ""
    sources: tuple = ()


@functools.lru_cache(maxsize=1)
def table() -> dict:
    return read_table("links")


def check_size(tbl: Optional[dict] = None) -> int:
    return int((tbl or table()).get("check", {}).get("size_bytes", 64 << 20))


def warn_below(tbl: Optional[dict] = None) -> float:
    return float((tbl or table()).get("check", {}).get("warn_below", 0.4))


def link_gbps(nvml_version: Optional[int], gpu_names: list, tbl: Optional[dict] = None) -> tuple:
    """(GB/s per link and direction, generation name) for an NVLink, or (None, "") when unknown."""
    tbl = tbl or table()
    for row in tbl.get("nvlink_by_name", []):
        if any(re.search(p, n or "", re.I) for p in row.get("match", []) for n in gpu_names):
            return float(row["link_gbps"]), row.get("note", "").split(":")[0]
    for row in tbl.get("nvlink", []):
        if row.get("nvml_version") == nvml_version:
            return float(row["link_gbps"]), row.get("generation", "")
    return None, ""


def _path(kind: str, tbl: dict) -> dict:
    return next((r for r in tbl.get("path", []) if r.get("kind") == kind), {})


def nvlink_expectation(links: int, nvml_version: Optional[int], gpu_names: list,
                       tbl: Optional[dict] = None) -> Optional[Expectation]:
    tbl = tbl or table()
    per, gen = link_gbps(nvml_version, gpu_names, tbl)
    row = _path("nvlink", tbl)
    if not per or not links or not row:
        return None
    raw = per * links
    return Expectation(round(raw * row["efficiency"], 1), raw, row["efficiency"], "nvlink",
                       f"{links} {gen or 'NVLink'} link{'s' if links != 1 else ''}, {raw:g} GB/s each way",
                       row.get("confidence", ""), tuple(row.get("source", [])))


def pcie_expectation(raw_gbps: Optional[float], peer_access: bool, gen: Optional[int] = None,
                     width: Optional[int] = None, tbl: Optional[dict] = None) -> Optional[Expectation]:
    tbl = tbl or table()
    kind = "pcie-p2p" if peer_access else "pcie-shm"
    row = _path(kind, tbl)
    if not raw_gbps or not row:
        return None
    link = f"PCIe {gen}.0 x{width}" if gen and width else "PCIe"
    how = "peer to peer" if peer_access else "through host memory (no peer access)"
    return Expectation(round(raw_gbps * row["efficiency"], 1), raw_gbps, row["efficiency"], kind,
                       f"{link} {how}, {raw_gbps:.0f} GB/s each way", row.get("confidence", ""),
                       tuple(row.get("source", [])))


def source_titles(keys: tuple, tbl: Optional[dict] = None) -> list:
    srcs = (tbl or table()).get("sources", {})
    return [f"{srcs[k]['title']} ({srcs[k]['url']})" for k in keys if k in srcs]

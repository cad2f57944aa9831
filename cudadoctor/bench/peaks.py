"""Datasheet peaks per GPU model (matrix/gpu_peaks.toml) and the PCIe link's raw rate."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Optional

from cudadoctor.matrix import read_table

#: GB/s per lane and direction after line encoding: gen 1-2 8b/10b, gen 3-5 128b/130b, gen 6 FLIT.
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


@dataclass(frozen=True)
class GpuPeaks:
    model: str
    mem_bw_gbps: Optional[float] = None
    fp32: Optional[float] = None  # dense TFLOP/s
    tf32: Optional[float] = None
    bf16: Optional[float] = None
    pcie: str = ""  # "5x16"
    tdp_w: Optional[float] = None
    memory: str = ""  # "HBM3e", "GDDR6", ...
    source: str = ""
    confidence: str = ""
    note: str = ""

    @property
    def pcie_link(self) -> tuple:
        return parse_pcie(self.pcie)

    @property
    def gddr(self) -> bool:
        return self.memory.upper().startswith("GDDR")


def parse_pcie(text: str) -> tuple:
    """'5x16' -> (5, 16); anything else -> (None, None)."""
    m = re.fullmatch(r"\s*(\d+)\s*x\s*(\d+)\s*", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


def pcie_gbps(gen: Optional[int], width: Optional[int]) -> Optional[float]:
    """The link's raw rate per direction in GB/s, or None when gen/width are unknown."""
    if not gen or not width or gen not in PCIE_LANE_GBPS:
        return None
    return PCIE_LANE_GBPS[gen] * width


@functools.lru_cache(maxsize=1)
def table() -> dict:
    return read_table("gpu_peaks")


def rows(tbl: Optional[dict] = None) -> list:
    tbl = table() if tbl is None else tbl
    out = []
    for r in tbl.get("gpu", []):
        out.append((list(r.get("match", [])), GpuPeaks(
            model=r["model"], mem_bw_gbps=r.get("mem_bw_gbps"), fp32=r.get("fp32"), tf32=r.get("tf32"),
            bf16=r.get("bf16"), pcie=r.get("pcie", ""), tdp_w=r.get("tdp_w"), memory=r.get("memory", ""),
            source=r.get("source", ""), confidence=r.get("confidence", ""), note=r.get("note", ""))))
    return out


def find_peaks(name: str, tbl: Optional[dict] = None) -> Optional[GpuPeaks]:
    """The first row whose `match` patterns match the GPU name NVML or torch reports."""
    name = (name or "").strip()
    if not name:
        return None
    for patterns, peaks in rows(tbl):
        if any(re.search(p, name, re.I) for p in patterns):
            return peaks
    return None


def expectations(tbl: Optional[dict] = None) -> dict:
    """kind -> {typical, warn_below, ...} from the table's [expect.*] sections."""
    tbl = table() if tbl is None else tbl
    return dict(tbl.get("expect", {}))

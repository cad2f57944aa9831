"""Running the bench: the NVML fact, the measurement child(ren) through the System port, the judgement.

The torch child (torch_bench.py) runs in the TARGET interpreter; when that interpreter has no
usable torch, or to measure cudadoctor's probe GEMMs, the driver-API child (driver_bench.py) runs in
cudadoctor's own interpreter. Both print marked records; whatever a child printed before a
timeout or a crash is kept and judged, and the step it died in says so.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from cudadoctor.bench import judge
from cudadoctor.bench.peaks import GpuPeaks, expectations, find_peaks
from cudadoctor.bench.records import BenchRun
from cudadoctor.bench.child_run import run_child, stop_reason
from cudadoctor.facts.types import NvmlGpu
from cudadoctor.model import Fact, Status
from cudadoctor.system.base import System

TORCH_SCRIPT = os.path.join(os.path.dirname(__file__), "torch_bench.py")
GOVERNOR = "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"


@dataclass
class BenchOptions:
    quick: bool = False
    python: Optional[str] = None  # target interpreter; None: cudadoctor's own
    device: int = 0
    timeout_s: Optional[float] = None  # per child; None: 90 s quick, 240 s full
    progress: Optional[Callable[[dict], None]] = None  # called with each record as the child prints it
    progress_dir: Optional[str] = None  # where the child may append its records for `progress`

    @property
    def timeout(self) -> float:
        return self.timeout_s if self.timeout_s else (90.0 if self.quick else 240.0)


@dataclass
class BenchResult:
    backend: str = ""  # "torch" or "driver"
    python: str = ""
    device_name: str = ""
    capability: str = ""
    peaks: Optional[GpuPeaks] = None
    gpu: Optional[NvmlGpu] = None
    nvml_error: str = ""
    figures: list = field(default_factory=list)
    stop_reason: str = ""  # why a child stopped early ('' when it finished)
    notes: list = field(default_factory=list)
    run: Optional[BenchRun] = None
    elapsed_s: float = 0.0
    quick: bool = False

    @property
    def status(self) -> Status:
        st = judge.overall(self.figures)
        if self.stop_reason:
            st = Status.FAIL if st.rank < Status.FAIL.rank else st
        return st

    def to_dict(self) -> dict:
        p = self.peaks
        return {
            "tool": "cudadoctor", "command": "bench", "quick": self.quick, "backend": self.backend,
            "python": self.python, "status": self.status.value,
            "device": {"name": self.device_name, "capability": self.capability,
                       **({k: v for k, v in (self.run.device if self.run else {}).items()
                           if k in ("total_bytes", "l2_bytes", "sm_count", "plan", "index")})},
            "datasheet": None if p is None else {
                "model": p.model, "mem_bw_gbps": p.mem_bw_gbps, "fp32": p.fp32, "tf32": p.tf32, "bf16": p.bf16,
                "pcie": p.pcie, "tdp_w": p.tdp_w, "source": p.source, "confidence": p.confidence},
            "nvml": None if self.gpu is None else {
                "pcie_gen": self.gpu.pcie_gen, "pcie_gen_max": self.gpu.pcie_gen_max,
                "pcie_width": self.gpu.pcie_width, "pcie_width_max": self.gpu.pcie_width_max,
                "clock_sm_max_mhz": self.gpu.clock_sm_max_mhz, "power_limit_w": self.gpu.power_limit_w,
                "ecc_enabled": self.gpu.ecc_enabled, "persistence_mode": self.gpu.persistence_mode,
                "mig_mode": self.gpu.mig_mode, "processes": self.gpu.processes},
            "nvml_error": self.nvml_error,
            "figures": [f.to_dict() for f in self.figures],
            "stop_reason": self.stop_reason,
            "notes": self.notes,
            "elapsed_s": round(self.elapsed_s, 3),
        }


# ---------------------------------------------------------------- pure helpers (tested without a GPU)


def pick_gpu(nvml_fact: Optional[Fact], uuid: str, index: int) -> Optional[NvmlGpu]:
    """The NVML record of the GPU the child measured: by UUID (CUDA_VISIBLE_DEVICES renumbers), else index."""
    if nvml_fact is None or not nvml_fact.ok:
        return None
    gpus = list(nvml_fact.value.gpus)
    u = (uuid or "").lower()
    if u:
        for g in gpus:
            if g.uuid.lower() in (u, "gpu-" + u) or g.uuid.lower().endswith(u):
                return g
    return gpus[index] if 0 <= index < len(gpus) else None


def torch_usable(run: BenchRun) -> bool:
    return bool(run.torch_installed) and bool(run.device) and "cuda" not in run.errors


def torch_unusable_reason(run: BenchRun) -> str:
    if run.errors.get("cuda", "").startswith("the target interpreter"):
        return run.errors["cuda"]
    if run.torch_installed is False:
        return f"torch is not installed in {run.python or 'the target interpreter'}"
    if run.import_error:
        return f"import torch failed: {run.import_error}"
    if "cuda" in run.errors:
        return f"torch cannot use CUDA: {run.errors['cuda']}"
    return "the torch child reported no device"


def run_bench(system: System, opts: BenchOptions, nvml_fact: Optional[Fact] = None) -> BenchResult:
    """Gather NVML, run the torch child (driver-API child as fallback and for the probe GEMMs), judge."""
    t0 = time.monotonic()
    from cudadoctor.bench import driver_runner
    from cudadoctor.facts.registry import Options, gather

    out = BenchResult(quick=opts.quick)
    if nvml_fact is None:
        nvml_fact = gather(system, ["nvml"], Options(python=opts.python)).get("nvml")
    if nvml_fact is not None and not nvml_fact.ok:
        out.nvml_error = nvml_fact.error or nvml_fact.state.value
    host = {"cpu_governor": (system.read_text(GOVERNOR) or "").strip()}
    py = opts.python or system.own_python()
    out.python = py
    argv = [py, TORCH_SCRIPT, "--device", str(opts.device)] + (["--quick"] if opts.quick else [])
    res, run = run_child(system, argv, opts, "torch")
    if res.not_found or res.error:
        run.python = py
        run.errors["cuda"] = f"the target interpreter {py} " + ("does not exist" if res.not_found else
                                                                 f"could not start: {res.error}")
    measures, errors, skipped = dict(run.measures), dict(run.errors), {}
    unfinished, reason = "", ""
    if torch_usable(run):
        out.backend = "torch"
        reason = stop_reason(res, run, "the torch bench")
        unfinished = run.unfinished
        host["torch_debug"] = bool(run.torch_debug)
        out.device_name = run.device.get("name", "")
        out.capability = run.device.get("capability", "")
        probe = driver_runner.run_probe_gemms(system, opts, out.capability, nvml_fact)
        measures.update(probe.measures)
        errors.update(probe.errors)
        skipped.update(probe.skipped)
        out.notes.extend(probe.notes)
    else:
        # a child that hung or died says so first ("gave no answer within 60 s while import torch")
        why = (stop_reason(res, run, "the torch bench child") if not run.errors.get("cuda", "").startswith(
            "the target interpreter") else "") or torch_unusable_reason(run)
        out.notes.append(f"{why}; measuring through the CUDA driver API instead (no torch)")
        drv = driver_runner.run_driver_bench(system, opts, nvml_fact)
        out.backend = "driver"
        measures, errors, skipped = drv.measures, drv.errors, drv.skipped
        unfinished, reason = drv.unfinished, drv.stop_reason
        out.device_name, out.capability = drv.device_name, drv.capability
        out.notes.extend(drv.notes)
        for fid in ("matmul_fp32", "matmul_tf32", "matmul_bf16"):
            skipped.setdefault(fid, "needs torch (cuBLAS) in the target interpreter")
        run = drv.run or run
    out.run = run
    out.stop_reason = reason
    out.gpu = pick_gpu(nvml_fact, str(run.device.get("uuid", "")), opts.device)
    if not out.device_name and out.gpu is not None:
        out.device_name = out.gpu.name
    out.peaks = find_peaks(out.device_name)
    if out.peaks is None and out.device_name:
        out.notes.append(f"no datasheet figures for '{out.device_name}' in matrix/gpu_peaks.toml: "
                         "figures are shown without a ratio")
    out.figures = judge.judge_run(measures, errors, out.peaks, expectations(), out.gpu, run.env, host,
                                  unfinished=unfinished, stop_reason=reason, skipped=skipped)
    out.elapsed_s = time.monotonic() - t0
    return out

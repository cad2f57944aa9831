"""Pure judgements: measured figures against datasheet peaks, and the likely causes of a shortfall.

No I/O. Inputs: the bench child's records (records.BenchRun), the GPU's peaks (peaks.GpuPeaks),
the expectations table ([expect.*] of matrix/gpu_peaks.toml), the NVML fact (facts.types.NvmlGpu)
and a few host facts. Output: Figures, each with a value, a unit, the expected peak, the ratio, a
status and, when it is far below, the likely causes in order of how strongly the facts point at them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Optional

from cudadoctor.bench.peaks import GpuPeaks, parse_pcie, pcie_gbps
from cudadoctor.facts.types import NvmlGpu
from cudadoctor.model import Status

# id -> (label, unit, group). Groups decide which causes apply.
FIGURES = {
    "launch": ("kernel launch (eager)", "µs", "launch"),
    "d2d": ("device→device copy", "GB/s", "memory"),
    "h2d_pinned": ("host→device, pinned", "GB/s", "pcie"),
    "d2h_pinned": ("device→host, pinned", "GB/s", "pcie"),
    "h2d_pageable": ("host→device, pageable", "GB/s", "pcie"),
    "d2h_pageable": ("device→host, pageable", "GB/s", "pcie"),
    "matmul_fp32": ("FP32 matmul (cuBLAS)", "TFLOP/s", "compute"),
    "matmul_tf32": ("TF32 matmul (cuBLAS)", "TFLOP/s", "compute"),
    "matmul_bf16": ("BF16 matmul (cuBLAS)", "TFLOP/s", "compute"),
    "probe_gemm_naive": ("probe GEMM, naive (FP32)", "TFLOP/s", "compute"),
    "probe_gemm_tiled": ("probe GEMM, tiled (FP32)", "TFLOP/s", "compute"),
}
ORDER = list(FIGURES)
#: which child step produces which figures (for "the child died while measuring X")
STEP_FIGURES = {"launch": ["launch"], "d2d": ["d2d"],
                "host": ["h2d_pinned", "d2h_pinned", "h2d_pageable", "d2h_pageable"],
                "matmul_fp32": ["matmul_fp32"], "matmul_tf32": ["matmul_tf32"], "matmul_bf16": ["matmul_bf16"],
                "probe_gemm": ["probe_gemm_naive", "probe_gemm_tiled"],
                "copies": ["d2d", "h2d_pinned", "d2h_pinned", "h2d_pageable", "d2h_pageable"]}
IGNORED_THROTTLE = {"gpu_idle", "sync_boost", "display_clock_setting"}


@dataclass
class Cause:
    id: str
    text: str
    commands: tuple = ()
    strength: int = 2  # 3 strong (a fact says so), 2 likely, 1 possible

    def to_dict(self) -> dict:
        return {"id": self.id, "text": self.text, "commands": list(self.commands), "strength": self.strength}


@dataclass
class Figure:
    id: str
    label: str
    unit: str
    value: Optional[float] = None
    expected: Optional[float] = None  # the peak this figure is compared with, in `unit`
    expected_from: str = ""  # "datasheet H200 SXM (source URL)", "PCIe 5.0 x16 link", ...
    ratio: Optional[float] = None  # value / expected
    typical: Optional[float] = None  # the ratio a healthy GPU reaches
    warn_below: Optional[float] = None
    status: Status = Status.OK
    summary: str = ""
    checked: Optional[bool] = None
    causes: list = field(default_factory=list)
    advice: str = ""
    extra: dict = field(default_factory=dict)
    error: str = ""

    def to_dict(self) -> dict:
        return {"id": self.id, "label": self.label, "unit": self.unit, "value": _r(self.value),
                "expected": _r(self.expected), "expected_from": self.expected_from, "ratio": _r(self.ratio, 4),
                "typical": self.typical, "warn_below": self.warn_below, "status": self.status.value,
                "summary": self.summary, "checked": self.checked, "causes": [c.to_dict() for c in self.causes],
                "advice": self.advice, "extra": self.extra, "error": self.error}


def _r(v, nd=3):
    return None if v is None else round(float(v), nd)


# ---------------------------------------------------------------- maths and units


def median(xs) -> Optional[float]:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def bandwidth_gbps(nbytes: float, seconds: float) -> Optional[float]:
    """GB/s (10^9 bytes per second) for `nbytes` moved in `seconds`."""
    return nbytes / seconds / 1e9 if seconds and seconds > 0 else None


def matmul_tflops(m: int, n: int, k: int, seconds: float) -> Optional[float]:
    """TFLOP/s of an (m x k) @ (k x n) product: 2*m*n*k floating-point operations."""
    return 2.0 * m * n * k / seconds / 1e12 if seconds and seconds > 0 else None


def ratio(value: Optional[float], expected: Optional[float]) -> Optional[float]:
    if value is None or not expected:
        return None
    return value / expected


def fmt_value(value: Optional[float], unit: str) -> str:
    """4310 GB/s -> '4.31 TB/s'; 0.85 TFLOP/s -> '850 GFLOP/s'; 10.8 µs -> '10.8 µs'."""
    if value is None:
        return "—"
    if unit == "GB/s":
        return f"{value / 1000:.2f} TB/s" if value >= 1000 else f"{value:.3g} GB/s" if value >= 10 else \
            f"{value:.2f} GB/s"
    if unit == "TFLOP/s":
        return f"{value:.0f} TFLOP/s" if value >= 100 else f"{value:.1f} TFLOP/s" if value >= 1 else \
            f"{value * 1000:.0f} GFLOP/s"
    if unit == "µs":
        return f"{value:.2f} µs" if value < 10 else f"{value:.1f} µs"
    return f"{value:g} {unit}"


def fmt_ratio(r: Optional[float]) -> str:
    return "—" if r is None else f"{r * 100:.0f}%"


# ---------------------------------------------------------------- expectations


def expected_for(fig_id: str, peaks: Optional[GpuPeaks], gpu: Optional[NvmlGpu]) -> tuple:
    """(expected value, where it comes from) for a figure; (None, why) when unknown."""
    if fig_id.startswith(("h2d", "d2h")):
        gen = gpu.pcie_gen_max if gpu is not None else None
        width = gpu.pcie_width_max if gpu is not None else None
        how = "NVML's maximum link"
        if not (gen and width) and peaks is not None:
            gen, width = parse_pcie(peaks.pcie)
            how = f"the {peaks.model} datasheet's link"
        bw = pcie_gbps(gen, width)
        if bw is None:
            return None, "the PCIe link is unknown"
        return bw, f"PCIe {gen}.0 x{width} ({how})"
    if peaks is None:
        return None, "no datasheet figures for this GPU in matrix/gpu_peaks.toml"
    ds = f"{peaks.model} datasheet"
    if fig_id == "d2d":
        return peaks.mem_bw_gbps, ds
    if fig_id in ("matmul_fp32", "probe_gemm_naive", "probe_gemm_tiled"):
        return peaks.fp32, ds + " FP32"
    if fig_id == "matmul_tf32":
        if peaks.tf32 is None:
            return peaks.fp32, ds + " FP32 (no TF32 on this GPU: TF32 requests run in FP32)"
        return peaks.tf32, ds + " TF32 dense"
    if fig_id == "matmul_bf16":
        if peaks.bf16 is None:
            return None, f"the {peaks.model} has no BF16 tensor cores"
        return peaks.bf16, ds + " BF16 dense"
    return None, ""


# ---------------------------------------------------------------- causes


def likely_causes(fig_id: str, gpu: Optional[NvmlGpu], under_load: Optional[dict], env: dict,
                  peaks: Optional[GpuPeaks] = None, host: Optional[dict] = None) -> list:
    """Why a figure may be far below what this GPU should reach, strongest first.

    `under_load` is the NVML sample the child took while the GPU was busy (clocks, throttle
    reasons, PCIe link); `gpu` the NVML fact read around the run (limits, ECC, MIG, processes);
    `host` holds host facts (`cpu_governor`, `torch_debug`).
    """
    group = FIGURES.get(fig_id, ("", "", ""))[2]
    host = host or {}
    under = under_load or {}
    idx = gpu.index if gpu is not None else 0
    out: list = []

    if gpu is not None and gpu.mig_mode and group != "launch":
        out.append(Cause("mig", "MIG mode is on: this process runs in one GPU instance, with a fraction of "
                         "the SMs and memory bandwidth of the whole GPU.",
                         (f"nvidia-smi -i {idx} -q -d MIG", f"sudo nvidia-smi -i {idx} -mig 0"), 3))
    inj = env.get("CUDA_INJECTION64_PATH")
    if inj:
        out.append(Cause("profiler-injected", f"a profiler or sanitizer is injected into CUDA "
                         f"(CUDA_INJECTION64_PATH={inj}); it intercepts every launch and copy.",
                         ("unset CUDA_INJECTION64_PATH",), 3))
    if str(env.get("CUDA_LAUNCH_BLOCKING", "")).strip() not in ("", "0"):
        out.append(Cause("launch-blocking", "CUDA_LAUNCH_BLOCKING is set: every launch waits for the kernel "
                         "to finish, so the host and GPU never overlap (a debugging setting).",
                         ("unset CUDA_LAUNCH_BLOCKING",), 3))
    if fig_id == "matmul_tf32" and str(env.get("NVIDIA_TF32_OVERRIDE", "")).strip() == "0":
        out.append(Cause("tf32-override", "NVIDIA_TF32_OVERRIDE=0 turns TF32 off inside cuBLAS: TF32 "
                         "matmuls run at the FP32 rate.", ("unset NVIDIA_TF32_OVERRIDE",), 3))

    if group == "pcie" and gpu is not None:
        out.extend(_pcie_causes(gpu, under, idx))

    if group in ("memory", "compute", "pcie") and (gpu is not None or under):
        out.extend(_clock_causes(group, gpu, under, idx, peaks))

    if group == "memory" and gpu is not None:
        if gpu.remapped_rows_pending or gpu.retired_pages_pending or gpu.remapped_rows_failure:
            out.append(Cause("memory-repair-pending", "memory rows or pages wait for remapping or retirement "
                             "(NVML): the GPU needs a reset before it runs normally.",
                             (f"nvidia-smi -i {idx} -q -d ROW_REMAPPER,PAGE_RETIREMENT",
                              f"sudo nvidia-smi -i {idx} -r"), 3))
        if gpu.ecc_enabled and peaks is not None and peaks.gddr:
            out.append(Cause("ecc-gddr", f"ECC is on and this GPU has {peaks.memory} memory: on GDDR, ECC "
                             "costs some bandwidth (a few percent up to about 10%).",
                             (f"sudo nvidia-smi -i {idx} -e 0   # takes effect after a reboot",), 1))

    if group == "launch":
        if host.get("torch_debug"):
            out.append(Cause("torch-debug-build", "this torch is a debug build (torch.version.debug): "
                             "every op runs slower on the host.", ("pip install --force-reinstall torch",), 3))
        gov = host.get("cpu_governor") or ""
        if gov and gov not in ("performance",):
            out.append(Cause("cpu-governor", f"the CPU frequency governor is '{gov}': launches are host work, "
                             "and a power-saving governor slows them.",
                             ("sudo cpupower frequency-set -g performance",), 2 if gov == "powersave" else 1))

    if gpu is not None and gpu.processes:
        procs = ", ".join(f"pid {p.get('pid')} ({p.get('used_mib', '?')} MiB)" for p in gpu.processes[:5])
        out.append(Cause("other-processes", f"other processes use this GPU: {procs}; they share its SMs, "
                         "memory bandwidth and copy engines.",
                         ("nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv",), 2))
    if gpu is not None and gpu.persistence_mode is False and group != "pcie":
        out.append(Cause("persistence-off", "persistence mode is off: the driver tears the GPU's state down "
                         "between processes, so each run starts cold (lower clocks, slower first launches).",
                         (f"sudo nvidia-smi -i {idx} -pm 1",), 1))
    if not out:
        out.append(Cause("none-visible", "NVML shows no reason (link, clocks, throttling, power, MIG, ECC and "
                         "other processes look normal). Look for load NVML cannot see (another container or VM "
                         "on this GPU), cooling, or a different board variant than the name suggests.",
                         (f"nvidia-smi -i {idx} -q -d PERFORMANCE,CLOCK,POWER,TEMPERATURE",), 1))
    out.sort(key=lambda c: -c.strength)
    return out


def _pcie_causes(gpu: NvmlGpu, under: dict, idx: int) -> list:
    out = []
    width = under.get("pcie_width") or gpu.pcie_width
    gen = under.get("pcie_gen") or gpu.pcie_gen
    loaded = bool(under.get("pcie_gen"))
    if width and gpu.pcie_width_max and width < gpu.pcie_width_max:
        out.append(Cause("pcie-width", f"the PCIe link runs at x{width} of x{gpu.pcie_width_max}: the card "
                         "sits in a narrower slot, a riser or cable limits it, or the slot shares lanes "
                         "(M.2, another slot); reseat it or move it to a full x16 slot.",
                         (f"nvidia-smi -i {idx} -q -d PCIE", "sudo lspci -vv | grep -E 'LnkCap|LnkSta'"), 3))
    if gen and gpu.pcie_gen_max and gen < gpu.pcie_gen_max:
        if loaded:
            out.append(Cause("pcie-gen", f"the PCIe link runs at generation {gen} of {gpu.pcie_gen_max} "
                             "under load: a BIOS slot setting, a riser or retimer, or signal problems "
                             "trained it down.", (f"nvidia-smi -i {idx} -q -d PCIE",
                                                  "sudo lspci -vv | grep -E 'LnkCap|LnkSta'"), 3))
        else:
            out.append(Cause("pcie-gen", f"NVML reads PCIe generation {gen} of {gpu.pcie_gen_max} (read at "
                             "idle: links drop their generation to save power, so this is only a cause if it "
                             "stays low under load).", (f"nvidia-smi -i {idx} -q -d PCIE",), 1))
    if not out:
        out.append(Cause("pcie-host", "the link itself is at its maximum: the host side limits it (IOMMU, "
                         "a virtual machine, NUMA distance from the GPU's CPU socket, or memory bandwidth "
                         "for pageable copies).", ("nvidia-smi topo -m",), 1))
    return out


THROTTLE_TEXT = {
    "sw_power_cap": ("power-cap", "clocks are held down by the power limit (SW power cap)"),
    "hw_slowdown": ("hw-slowdown", "hardware slowdown is active (overheating, a power-supply brake or an "
                    "external signal)"),
    "hw_thermal_slowdown": ("thermal", "the GPU is too hot: hardware thermal slowdown"),
    "sw_thermal_slowdown": ("thermal", "the GPU is too hot: the driver slows the clocks (SW thermal slowdown)"),
    "hw_power_brake_slowdown": ("power-brake", "the system asserted the power brake (power supply or "
                                "chassis limit)"),
    "applications_clocks_setting": ("app-clocks", "application clocks are set below the maximum"),
}


def _clock_causes(group: str, gpu: Optional[NvmlGpu], under: dict, idx: int, peaks: Optional[GpuPeaks]) -> list:
    out = []
    reasons = under.get("throttle_reasons")
    if reasons is None and gpu is not None:
        reasons = gpu.throttle_reasons
    temp = under.get("temperature_c") or (gpu.temperature_c if gpu is not None else None)
    seen = set()
    for r in reasons or []:
        if r in IGNORED_THROTTLE or r not in THROTTLE_TEXT:
            continue
        cid, text = THROTTLE_TEXT[r]
        if cid in seen:
            continue
        seen.add(cid)
        if cid == "thermal" and temp:
            text += f" ({temp} °C)"
        if cid == "power-cap" and gpu is not None and gpu.power_limit_w:
            text += f" ({under.get('power_w') or gpu.power_w or '?'} W drawn, limit {gpu.power_limit_w:g} W)"
        cmds = {"power-cap": (f"nvidia-smi -i {idx} -q -d POWER,PERFORMANCE",),
                "app-clocks": (f"sudo nvidia-smi -i {idx} -rac", f"sudo nvidia-smi -i {idx} -rgc"),
                "thermal": (f"nvidia-smi -i {idx} -q -d TEMPERATURE,PERFORMANCE",)}.get(
            cid, (f"nvidia-smi -i {idx} -q -d PERFORMANCE",))
        out.append(Cause(cid, text + ".", cmds, 3 if group != "pcie" else 2))
    if gpu is not None and group != "pcie":
        sm = under.get("clock_sm_mhz")
        if group == "compute" and sm and gpu.clock_sm_max_mhz and sm < 0.85 * gpu.clock_sm_max_mhz:
            out.append(Cause("sm-clock-low", f"the SM clock was {sm} MHz under load, max {gpu.clock_sm_max_mhz} "
                             "MHz (locked clocks, or one of the limits above).",
                             (f"nvidia-smi -i {idx} -q -d CLOCK", f"sudo nvidia-smi -i {idx} -rgc"), 2))
        mem = under.get("clock_mem_mhz")
        if group == "memory" and mem and gpu.clock_mem_max_mhz and mem < 0.9 * gpu.clock_mem_max_mhz:
            out.append(Cause("mem-clock-low", f"the memory clock was {mem} MHz under load, max "
                             f"{gpu.clock_mem_max_mhz} MHz.",
                             (f"nvidia-smi -i {idx} -q -d CLOCK", f"sudo nvidia-smi -i {idx} -rmc"), 2))
        if group == "compute" and gpu.power_limit_w and peaks is not None and peaks.tdp_w and \
                gpu.power_limit_w < 0.9 * peaks.tdp_w:
            out.append(Cause("power-limit-low", f"the power limit is {gpu.power_limit_w:g} W, below the "
                             f"{peaks.model}'s {peaks.tdp_w:g} W.",
                             (f"nvidia-smi -i {idx} -q -d POWER", f"sudo nvidia-smi -i {idx} -pl {peaks.tdp_w:g}"),
                             3 if "power-cap" in seen else 2))
    return out


# ---------------------------------------------------------------- figures


def value_of(fig_id: str, rec: dict) -> Optional[float]:
    if fig_id == "launch":
        return rec.get("eager_us")
    if fig_id.startswith("matmul") or fig_id.startswith("probe_gemm"):
        v = rec.get("tflops")
        if v is None and rec.get("median_s") and rec.get("n"):
            v = matmul_tflops(rec["n"], rec["n"], rec["n"], rec["median_s"])
        return v
    v = rec.get("gbps")
    if v is None and rec.get("median_s") and rec.get("traffic_bytes"):
        v = bandwidth_gbps(rec["traffic_bytes"], rec["median_s"])
    return v


def judge_launch(rec: dict, expect: dict, gpu, env, host) -> Figure:
    label, unit, _ = FIGURES["launch"]
    f = Figure("launch", label, unit, value=rec.get("eager_us"), checked=rec.get("checked"))
    graph = rec.get("graph_us")
    exp = expect.get("launch", {})
    bound_at = float(exp.get("launch_bound_ratio", 3.0))
    warn_us = float(exp.get("eager_warn_us", 30.0))
    f.extra = {"graph_us": _r(graph, 4), "eager_over_graph": _r(ratio(f.value, graph), 2),
               "kernels": rec.get("kernels"), "op": rec.get("op", "")}
    f.ratio = None
    if f.checked is False:
        f.status, f.error = Status.FAIL, rec.get("check_error") or "wrong result"
        f.summary = f"the launch test computed a wrong result: {f.error}"
        return f
    if f.value is None:
        f.status, f.summary = Status.ERROR, "no launch figure"
        return f
    r = ratio(f.value, graph)
    bound = r is not None and r >= bound_at
    f.extra["launch_bound"] = bound
    f.summary = f"{fmt_value(f.value, 'µs')} per eager launch, {fmt_value(graph, 'µs')} per kernel from a CUDA graph"
    if r is not None:
        f.summary += f" ({r:.1f}×)"
    if bound:
        f.advice = (f"Workloads made of many small kernels are launch-bound here: each eager launch costs "
                    f"{fmt_value(f.value, 'µs')} of host time, a kernel replayed from a CUDA graph "
                    f"{fmt_value(graph, 'µs')}. What helps: CUDA graphs (torch.cuda.graphs, "
                    "torch.compile(mode=\"reduce-overhead\")), fusing small ops (torch.compile, fused "
                    "optimizers), fewer host syncs in the loop (.item(), .cpu(), printing tensors), bigger batches.")
    if f.value > warn_us:
        f.status = Status.WARN
        f.summary += f"; eager launches are slow (> {warn_us:g} µs)"
        f.causes = likely_causes("launch", gpu, rec.get("under_load"), env, None, host)
    return f


def judge_figure(fig_id: str, rec: Optional[dict], error: str, peaks: Optional[GpuPeaks], expect: dict,
                 gpu: Optional[NvmlGpu] = None, env: Optional[dict] = None, host: Optional[dict] = None) -> Figure:
    """One figure from its child record (or its error), compared with what this GPU should reach."""
    env = env or {}
    label, unit, _ = FIGURES[fig_id]
    if rec is None:
        return Figure(fig_id, label, unit, status=Status.FAIL if error else Status.SKIP,
                      summary=error or "not measured", error=error)
    if fig_id == "launch":
        return judge_launch(rec, expect, gpu, env, host)
    f = Figure(fig_id, label, unit, value=value_of(fig_id, rec), checked=rec.get("checked"))
    f.extra = {k: rec[k] for k in ("bytes", "n", "reps", "median_s", "min_s", "max_s", "rel_error", "host_pinned")
               if k in rec}
    f.expected, f.expected_from = expected_for(fig_id, peaks, gpu)
    e = expect.get(fig_id, {})
    f.typical, f.warn_below = e.get("typical"), e.get("warn_below")
    f.ratio = ratio(f.value, f.expected)
    if f.checked is False:
        f.status = Status.FAIL
        f.error = "the result differs from the reference" + (
            f" (relative error {rec['rel_error']:.2g} > {rec.get('rel_error_bound')})" if rec.get("rel_error") else "")
        f.summary = f"{fmt_value(f.value, unit)}, but the GPU computed a wrong result: {f.error}"
        return f
    if f.value is None:
        f.status, f.summary = Status.ERROR, "the child reported no value"
        return f
    f.summary = fmt_value(f.value, unit)
    if f.ratio is None:
        f.summary += f" (no expectation: {f.expected_from})" if f.expected_from else ""
        return f
    f.summary += f" = {fmt_ratio(f.ratio)} of {fmt_value(f.expected, unit)} ({f.expected_from})"
    if f.warn_below is not None and f.ratio < f.warn_below:
        f.status = Status.WARN
        f.summary += f"; far below the {fmt_ratio(f.typical)} a healthy GPU reaches"
        f.causes = likely_causes(fig_id, gpu, rec.get("under_load"), env, peaks, host)
    return f


def steps_of(fig_id: str) -> list:
    """The child steps that produce a figure (errors may be reported per step)."""
    return [step for step, figs in STEP_FIGURES.items() if fig_id in figs] or [fig_id]


def judge_run(measures: dict, errors: dict, peaks: Optional[GpuPeaks], expect: dict, gpu: Optional[NvmlGpu] = None,
              env: Optional[dict] = None, host: Optional[dict] = None, unfinished: str = "",
              stop_reason: str = "", skipped: Optional[dict] = None) -> list:
    """Every figure in display order.

    `errors` and `skipped` are keyed by figure id or by child step (`host`, `probe_gemm`): an error
    makes the figure FAIL, a skip reason makes it SKIP. The step the child was in when it stopped
    (`unfinished`) fails with `stop_reason` (a timeout, a signal); figures never reached are SKIP.
    """
    skipped = skipped or {}
    out = []
    for fid in ORDER:
        steps = steps_of(fid)
        rec = measures.get(fid)
        err = errors.get(fid) or next((errors[s] for s in steps if errors.get(s)), "")
        if rec is None and not err and stop_reason and unfinished in steps:
            err = stop_reason
        f = judge_figure(fid, rec, err, peaks, expect, gpu, env, host)
        if rec is None and not err:
            f.summary = skipped.get(fid) or next((skipped[s] for s in steps if skipped.get(s)), "") or (
                "not reached: the child stopped before it" if stop_reason else "not measured")
        out.append(f)
    return out


def overall(figures: list) -> Status:
    from cudadoctor.model import worst

    return worst((f.status for f in figures if f.status is not Status.SKIP), Status.OK)

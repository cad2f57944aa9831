"""The driver-API side of the bench: build the probe kernels (cudadoctor.probes.build) for this GPU
and run driver_bench.py in cudadoctor's own interpreter. Used for the probe GEMMs (naive vs tiled)
always, and for launch cost and copies when the target interpreter has no usable torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from cudadoctor.bench.records import BenchRun
from cudadoctor.model import Fact
from cudadoctor.system.base import System

BUILD_TIMEOUT = 120.0


@dataclass
class DriverOutcome:
    measures: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    device_name: str = ""
    capability: str = ""
    unfinished: str = ""
    stop_reason: str = ""
    run: Optional[BenchRun] = None


def _cc_from(capability: str, nvml_fact: Optional[Fact], device: int) -> Optional[tuple]:
    cap = capability
    if not cap and nvml_fact is not None and nvml_fact.ok and 0 <= device < len(nvml_fact.value.gpus):
        cap = nvml_fact.value.gpus[device].compute_capability
    try:
        major, minor = cap.split(".")
        return int(major), int(minor)
    except (ValueError, AttributeError):
        return None


def build_images(system: System, cc: tuple) -> tuple:
    """({'gemm': path, 'minimal': path}, why-not text) from the probe builder, cached."""
    from cudadoctor.paths import data_dir
    from cudadoctor.probes import build as pb

    compiler, why = pb.pick_compiler(system)
    if compiler is None:
        return {}, f"no compiler for the probe kernels ({why})"
    kernels = str(data_dir("probe_kernels"))
    specs = {"gemm": next(s for s in pb.kernel_specs(cc) if s.name == "gemm"),
             "minimal": pb.plan(cc, compiler, quick=True)[0]}
    out, errs = {}, []
    for key, spec in specs.items():
        built = pb.build(system, compiler, spec, kernels, timeout=BUILD_TIMEOUT)
        if built.ok:
            out[key] = built.path
        else:
            errs.append(f"{spec.source}: {built.error.strip()[-300:]}")
    return out, "; ".join(errs)


def _run(system: System, opts, images: dict, only: str) -> tuple:
    from cudadoctor.bench.child_run import run_child

    argv = [system.own_python(), "-m", "cudadoctor.bench.driver_bench", "--device", str(opts.device)]
    argv += ["--quick"] if opts.quick else []
    argv += ["--only", only] if only else []
    for key in ("gemm", "minimal"):
        if images.get(key):
            argv += [f"--{key}", images[key]]
    return run_child(system, argv, opts, "driver")


def run_probe_gemms(system: System, opts, capability: str, nvml_fact: Optional[Fact]) -> DriverOutcome:
    """The probe GEMMs only (torch measured the rest)."""
    from cudadoctor.bench.child_run import stop_reason

    out = DriverOutcome()
    cc = _cc_from(capability, nvml_fact, opts.device)
    if cc is None:
        out.skipped["probe_gemm"] = "the compute capability is unknown"
        return out
    try:
        images, why = build_images(system, cc)
    except Exception as e:  # noqa: BLE001 - the builder is another module: never let it stop the bench
        images, why = {}, f"the probe builder failed: {type(e).__name__}: {e}"
    if not images.get("gemm"):
        out.skipped["probe_gemm"] = f"probe GEMMs not built: {why}"
        return out
    res, run = _run(system, opts, images, "probe_gemm")
    out.measures, out.errors = dict(run.measures), dict(run.errors)
    reason = stop_reason(res, run, "the probe GEMM child")
    if reason and not any(k.startswith("probe_gemm") for k in out.measures):
        out.errors.setdefault("probe_gemm", reason)
    return out


def run_driver_bench(system: System, opts, nvml_fact: Optional[Fact]) -> DriverOutcome:
    """Everything the driver API can measure without torch: launch cost, copies, probe GEMMs."""
    from cudadoctor.bench.child_run import stop_reason

    out = DriverOutcome()
    cc = _cc_from("", nvml_fact, opts.device)
    images, why = {}, "the compute capability is unknown (NVML gave none)"
    if cc is not None:
        try:
            images, why = build_images(system, cc)
        except Exception as e:  # noqa: BLE001
            images, why = {}, f"the probe builder failed: {type(e).__name__}: {e}"
    if why:
        out.notes.append(why)
    if not images.get("gemm"):
        out.skipped["probe_gemm"] = f"probe GEMMs not built: {why}"
    if not images.get("minimal"):
        out.skipped["launch"] = f"the minimal kernel was not built: {why}"
    res, run = _run(system, opts, images, "")
    out.run = run
    out.measures, out.errors = dict(run.measures), dict(run.errors)
    for k in ("launch", "probe_gemm"):
        if k in out.skipped:
            out.errors.pop(k, None)
    out.device_name = run.device.get("name", "")
    out.capability = run.device.get("capability", "")
    out.unfinished = run.unfinished
    out.stop_reason = stop_reason(res, run, "the driver-API bench")
    return out

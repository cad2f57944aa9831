"""Probe facts: CUDA binaries in the target's site-packages (`probe_scan`) and the quick driver-API
probe (`probe_launch`: the minimal kernel, native and one foreign build, launched in a child)."""

from __future__ import annotations

from cudadoctor.facts.registry import Options, gatherer
from cudadoctor.model import Fact, FactState
from cudadoctor.probes.run import LaunchInfo
from cudadoctor.probes.scan import ScanInfo
from cudadoctor.probes.torch_links import TorchLinks
from cudadoctor.system.base import System


@gatherer("probe_scan", value_type=ScanInfo, needs=("nvidia_smi", "nvml", "kernel_module", "cuda_gpus"))
def gather_probe_scan(system: System, opts: Options, deps: dict) -> Fact:
    """Every CUDA binary where the target interpreter loads from (sys.path, .pth, editable installs, torch's
    JIT cache, LD_LIBRARY_PATH, LD_PRELOAD), module by module; kernels named for this GPU's failures."""
    from cudadoctor.facts.local_gpu import from_facts
    from cudadoctor.probes.scan import scan_python

    py = opts.python or system.own_python()
    info, err = scan_python(system, py, cc=from_facts(deps).cc)
    src = f"{py}: where it loads from"
    if err:
        return Fact.failed(src, err, value=info)
    return Fact.found(info, src, info.seconds)


@gatherer("probe_launch", value_type=LaunchInfo, needs=("nvidia_smi", "nvml", "kernel_module", "cuda_gpus"))
def gather_probe_launch(system: System, opts: Options, deps: dict) -> Fact:
    """Build the minimal kernel natively and for a foreign arch; launch both through the driver API."""
    from cudadoctor.facts.local_gpu import from_facts
    from cudadoctor.probes.run import run_probes

    src = "cudadoctor.probes.launch (CUDA driver API)"
    gpu = from_facts(deps)
    listed = deps.get("cuda_gpus")
    if gpu.cc is None and listed is not None and listed.state is FactState.TIMEOUT:
        # nvidia-smi and NVML cannot list the GPUs, and CUDA's own list hung (cuInit or the device count never
        # returned): a launch would hang the same way, so that is this probe's verdict, not "no GPU"
        return Fact.timeout(src, f"CUDA hung as it started: {listed.error}")
    if gpu.cc is None:
        return Fact.not_applicable(src, gpu.error)
    if opts.extra.get("no_probe_launch"):
        return Fact.not_applicable(src, "the driver-API probe was not asked for")
    res = run_probes(system, None, quick=True, kernels=False, runtime=False)
    info = LaunchInfo.from_result(res)
    if res.launch_kind in ("no-libcuda", "no-report") and not any(r.driver_api for r in res.rows):
        # libcuda is missing (the libraries step says so) or the child said nothing of ours: no verdict here
        return Fact.not_applicable(src, res.launch_error)
    if res.launch_kind == "timeout":
        return Fact.timeout(src, res.launch_error, value=info)
    if res.launch_error and not any(r.driver_api for r in res.rows):
        return Fact.failed(src, res.launch_error, value=info)  # cuInit/device errors, a crash
    if res.compiler_error:
        return Fact.not_found(src, f"no compiler for the probe kernels: {res.compiler_error}", value=info)
    return Fact.found(info, src)


@gatherer("torch_links", value_type=TorchLinks, needs=("probe_scan", "torch"))
def gather_torch_links(system: System, opts: Options, deps: dict) -> Fact:
    """Each torch extension the scan found (a shared object that needs torch's libraries) against the torch the
    interpreter imports: the torch libraries it needs exist there, and every torch name it calls is exported."""
    from cudadoctor.probes.torch_links import judge_links

    scan, torch = deps.get("probe_scan"), deps.get("torch")
    src = "the torch extensions' dynamic symbols against torch's libraries"
    info = scan.value if scan is not None else None
    t = torch.value if torch is not None else None
    if info is None:
        return Fact.not_applicable(src, "the interpreter's folders were not scanned")
    if t is None or not getattr(t, "installed", False) or not getattr(t, "file", ""):
        return Fact.not_applicable(src, "no torch to check extensions against")
    links = judge_links(system, list(getattr(info, "linked", []) or []), t.file, list(info.site_packages or []),
                        t.version, t.cuda, info.python, torch_hip=t.hip, python_version=t.python_version,
                        truncated=bool(info.truncated))
    return Fact.found(links, src, links.seconds)

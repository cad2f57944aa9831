"""`health` step `launch`: the kernel every GPU ran through the driver API (probes/health_launch.py)."""

from __future__ import annotations

from cudadoctor.checks.driver import DOCS_CONTAINER, DOCS_DRIVER, HANG_FIX
from cudadoctor.checks.health_common import DOCS_FM, gpu_by_pci, gpu_evidence, nvml_gpus
from cudadoctor.checks.registry import Context, Outcome
from cudadoctor.facts.health import missing_ordinals
from cudadoctor.model import FactState, Finding, Fix, Status

CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_DEVICE_UNAVAILABLE = 46
CUDA_ERROR_NO_DEVICE = 100
CUDA_ERROR_SYSTEM_NOT_READY = 802
BUSY = {CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_DEVICE_UNAVAILABLE}
FULL_MIB = 1024  # less free memory than this: no room for a CUDA context


def _busy(g, code: int) -> bool:
    """Another job holds the GPU, so a failed launch says nothing about its health: the GPU is exclusive
    and in use, or another process holds it and the error is the busy/out-of-memory one, or its memory is
    nearly full (then CUDA's error for it varies with where the launch ran out)."""
    used = g.processes is not None and g.processes > 0
    exclusive = g.compute_mode in ("Exclusive_Process", "Exclusive_Thread")
    full = g.memory_total_mib is not None and g.memory_used_mib is not None and (
        g.memory_total_mib - g.memory_used_mib < FULL_MIB)
    return (code in BUSY and (used or exclusive)) or (used and full)


def _err(e) -> str:
    return f"{e.call}: {e.name} ({e.message})" if e is not None else "unknown error"


def _init_failure(info) -> Finding:
    """The child stopped before any GPU: libcuda, cuInit, or a hang there."""
    e = info.error
    if e is None:
        return Finding("probe.launch.timeout" if info.timed_out else "probe.launch.failed", Status.FAIL,
                       info.stopped or "the launch child ended without a report",
                       ("CUDA's initialisation hangs: the driver or a GPU is wedged (look for Xid events), or a stuck "
                        "process holds a GPU. Every CUDA program will hang the same way." if info.timed_out else
                        "CUDA's initialisation crashed the process: every CUDA program will fail the same way."),
                       HANG_FIX,
                       {"stopped": info.stopped}, "every CUDA program")
    if e.name == "LIBCUDA_NOT_LOADABLE":
        return Finding("probe.launch.failed", Status.FAIL, "libcuda.so.1 cannot be loaded",
                       "The driver's CUDA library is missing: in a container the runtime was not asked for the "
                       "compute capability; on a host the driver install is incomplete.",
                       Fix("Give the container the compute capability, or reinstall the driver's libraries:",
                           ("docker run --gpus all -e NVIDIA_DRIVER_CAPABILITIES=compute,utility ...",
                            "ldconfig -p | grep libcuda"), DOCS_CONTAINER), {"error": e.message}, "every CUDA program")
    if e.code == CUDA_ERROR_SYSTEM_NOT_READY:
        return Finding("health.fabric-manager", Status.FAIL, f"cuInit: {e.name} ({e.message})",
                       "On NVSwitch systems CUDA refuses to start until the fabric manager has set up the fabric.",
                       Fix("Start the fabric manager (its version must match the driver):",
                           ("sudo systemctl enable --now nvidia-fabricmanager", "systemctl status nvidia-fabricmanager"),
                           DOCS_FM), {"cuInit": _err(e)}, "every CUDA program")
    return Finding("probe.launch.failed", Status.FAIL, f"CUDA cannot start: {_err(e)}",
                   "The driver API failed before any GPU could be used: every CUDA program fails the same way.",
                   Fix("Read the driver log; a reboot usually clears a driver in this state:",
                       ("sudo dmesg | grep -iE 'nvrm|xid' | tail -20", "sudo reboot"), DOCS_DRIVER),
                   {"error": _err(e), "libcuda": info.libcuda}, "every CUDA program")


def check_launch(ctx: Context) -> Outcome:
    """A kernel on every GPU through the driver API, each result checked; busy GPUs are not judged."""
    f = ctx.fact("health_launch")
    if f.state is FactState.NOT_APPLICABLE:
        return Outcome("not run (--no-launch)", [Finding("probe.launch.skipped", Status.SKIP,
                                                         "the kernel launch was not asked for (--no-launch)")])
    if not f.ok:
        return Outcome(f"could not run the launch child: {f.error[:100]}", [Finding(
            "probe.launch.unavailable", Status.SKIP, f"the launch child could not run: {f.error}",
            "cudadoctor could not start its own helper: health cannot tell whether the GPUs run kernels (exit 2).",
            Fix("Check the interpreter cudadoctor runs in:", ("cudadoctor --version", "python3 -I -S -c pass")))])
    info = f.value
    if info.error is not None or info.count is None:
        if info.error is not None and info.error.code == CUDA_ERROR_NO_DEVICE and info.visible_devices is not None:
            s = f"CUDA_VISIBLE_DEVICES={info.visible_devices!r} hides every GPU: no kernel launched"
            return Outcome(s, [Finding("probe.launch.hidden", Status.SKIP, s,
                                       evidence={"CUDA_VISIBLE_DEVICES": info.visible_devices})])
        fd = _init_failure(info)
        return Outcome(fd.summary, [fd])
    gs = nvml_gpus(ctx)
    by_gpu: dict = {}
    findings, ran = [], []
    for d in info.devices:
        g = next((g for g in gs if g.uuid and g.uuid == d.uuid), None) or gpu_by_pci(gs, d.pci_bus_id)
        if g is not None:
            by_gpu[g.index] = d
        ev = gpu_evidence(g) if g is not None else {"cuda_ordinal": d.ordinal, "uuid": d.uuid}
        ev.update({k: getattr(d, k) for k in ("context_s", "load_s", "launch_s", "step") if getattr(d, k) is not None})
        tag = f"GPU {g.index}" if g is not None else f"CUDA device {d.ordinal}"
        if d.ok:
            ran.append(d)
            continue
        if d.error is not None and g is not None and _busy(g, d.error.code):
            findings.append(Finding(
                "probe.launch.busy", Status.SKIP,
                f"{tag} is busy ({g.processes or 0} process(es), compute mode {g.compute_mode or '?'}): not tested",
                f"{_err(d.error)}: the GPU is held by another job, which says nothing about its health.",
                evidence=dict(ev, error=_err(d.error), processes=g.processes)))
        elif d.error is not None:
            findings.append(Finding(
                "probe.launch.failed", Status.FAIL, f"{tag}: the kernel launch failed at {d.step}: {_err(d.error)}",
                "The GPU did not run cudadoctor's one-line kernel through the driver API (no torch involved): "
                "jobs on it will fail the same way.",
                Fix("Read the driver log for this GPU; a reset (or reboot) usually clears it; if it recurs, the GPU "
                    "needs service:", ("sudo dmesg -T | grep -iE 'nvrm|xid' | tail -20",
                                       f"sudo nvidia-smi -r -i {g.index if g is not None else d.ordinal}")),
                dict(ev, error=_err(d.error)), "every job on this GPU"))
        else:
            findings.append(Finding(
                "probe.launch.wrong-result", Status.FAIL, f"{tag}: the kernel ran but wrote {d.wrong} wrong value(s) of 256",
                "The GPU computed wrong results for a trivial kernel: silent data corruption.",
                Fix("Drain the GPU and run NVIDIA's diagnostics; replace it if they fail:",
                    ("dcgmi diag -r 2", "sudo nvidia-bug-report.sh")), ev, "every job on this GPU"))
    # GPUs the child never reported: it was killed while they ran, or CUDA did not enumerate them
    stuck = missing_ordinals(info)
    if stuck:
        findings.append(Finding(
            "probe.launch.timeout", Status.FAIL,
            f"CUDA device(s) {', '.join(map(str, stuck))} did not finish: {info.stopped or 'no record'}",
            "A kernel launch that never returns means a wedged GPU or driver.", HANG_FIX,
            {"stopped": info.stopped}, "every job on this GPU"))
    for g in gs:
        if g.index in by_gpu or "handle" in g.errors or g.lost or (stuck and info.visible_devices is None):
            continue  # not asked, or among the stuck ones (the child died before saying which is which)
        if info.visible_devices is not None or g.mig_mode[:1] == [1]:
            why = (f"hidden by CUDA_VISIBLE_DEVICES={info.visible_devices}" if info.visible_devices is not None else
                   "MIG is on: CUDA runs on its MIG instances (CUDA_VISIBLE_DEVICES=MIG-<uuid>)")
            findings.append(Finding("probe.launch.not-tested", Status.SKIP, f"GPU {g.index}: no kernel launched ({why})",
                                    evidence=gpu_evidence(g)))
        else:
            findings.append(Finding(
                "probe.launch.not-enumerated", Status.FAIL, f"GPU {g.index}: NVML lists it but CUDA does not offer it",
                "The CUDA driver did not enumerate this GPU, so no job can use it.",
                Fix("Compare what NVML and CUDA see, and read the driver log:",
                    ("nvidia-smi -L", "sudo dmesg | grep -iE 'nvrm|xid' | tail -20")), gpu_evidence(g),
                "every job on this GPU"))
    slowest = max((d.total_s or 0 for d in ran), default=0)
    s = f"kernel ran on {len(ran)} of {max(len(gs), info.count or 0)} GPU(s)" + (
        f"; cuInit {info.init_s:.2f} s, slowest GPU {slowest:.2f} s" if ran and info.init_s is not None else "")
    if not any(fd.status is Status.FAIL for fd in findings) and ran:
        findings.insert(0, Finding("probe.launch.ok", Status.OK, s, evidence={
            f"CUDA device {d.ordinal}": {"context_s": d.context_s, "load_s": d.load_s, "launch_s": d.launch_s}
            for d in ran}))
    bad = [fd for fd in findings if fd.status is Status.FAIL]
    return Outcome(bad[0].summary if bad else s, findings or [Finding("probe.launch.none", Status.SKIP, s)])

"""`health` steps of the lowest layers: the driver, the GPUs NVML sees, their device files, persistence."""

from __future__ import annotations

from cudadoctor.checks.driver import DOCS_CONTAINER, DOCS_DRIVER, HANG_FIX, MISMATCH_DETAIL, mismatch_fix, nvml_shadowed
from cudadoctor.checks.health_common import (
    DOCS_NVML,
    DOCS_PERSISTENCE,
    answering,
    gpu_evidence,
    gpu_list,
    models,
    nvml_gpus,
    version_matches,
)
from cudadoctor.checks.registry import Context, Outcome
from cudadoctor.facts.driver import lib_version
from cudadoctor.facts.health import nvml_disagrees
from cudadoctor.facts.health_types import DeviceNodes
from cudadoctor.model import FactState, Finding, Fix, Status

CUDA_SYSTEM_DRIVER_MISMATCH = 803
# NVML errors that say nothing about the node's health: cudadoctor could not ask
CANNOT_ASK = {"NVML_ERROR_NO_PERMISSION", "NVML_ERROR_INSUFFICIENT_PERMISSIONS"}
# nvmlGpuRecoveryAction_t (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION): what the driver says the GPU needs now
RECOVERY = {1: ("a GPU reset", Status.FAIL), 2: ("a node reboot", Status.FAIL), 3: ("peer-to-peer traffic drained",
                                                                                   Status.WARN),
            4: ("peer-to-peer drained and a GPU reset", Status.FAIL), 5: ("its IMEX domain recovered", Status.WARN),
            6: ("a PCIe bus reset", Status.FAIL), 7: ("a system reboot", Status.FAIL)}


def check_driver(ctx: Context) -> Outcome:
    """Kernel module vs user-space driver (NVML, libcuda), NVML answers, --expect-driver."""
    km, nv, la = ctx.fact("kernel_module"), ctx.fact("health_nvml"), ctx.fact("health_launch")
    expect = ctx.fact("health_expect").value
    km_ver = km.value.version if km.ok else ""
    nvml_err = nv.value.error if nv.value is not None else ""
    nvml_ver = nv.value.driver_version if nv.value is not None else ""
    launch = la.value if la.ok else None
    cuda_ver = lib_version(launch.libcuda) if launch is not None else ""
    evidence = {k: v for k, v in (("kernel module", km.value.text if km.ok else km.error),
                                  ("NVML", nvml_ver or nv.error), ("libcuda", launch.libcuda if launch else ""))
                if v}
    if nv.state is FactState.TIMEOUT:
        return Outcome("NVML hangs", [Finding(
            "driver.nvml-hang", Status.FAIL, nv.error,
            "NVML (libnvidia-ml, what nvidia-smi uses) did not answer: the driver or a GPU is wedged, or a stuck "
            "process holds the device. CUDA programs will hang the same way.", HANG_FIX, evidence,
            "every CUDA program")])
    init_err = launch.error if launch is not None else None
    user_ver = nvml_ver or cuda_ver
    mismatch = nvml_disagrees(nv.value, km_ver) or (
        init_err is not None and init_err.code == CUDA_SYSTEM_DRIVER_MISMATCH) or bool(
        km_ver and cuda_ver and cuda_ver != km_ver)
    shadow = nvml_shadowed(ctx, km_ver, evidence) if mismatch else None  # its facts are gathered only then
    if shadow is not None:
        return Outcome(f"libnvidia-ml from LD_LIBRARY_PATH is not the driver's {km_ver}", [shadow])
    if mismatch:
        versions = f"kernel module {km_ver or '?'}, NVML {nvml_ver or '?'}, libcuda {cuda_ver or '?'}"
        return Outcome(f"driver/library version mismatch ({versions})", [Finding(
            "driver.version-mismatch", Status.FAIL, f"Driver/library version mismatch: {versions}", MISMATCH_DETAIL,
            mismatch_fix(user_ver if user_ver != km_ver else ""), evidence, "every CUDA program")])
    if km.state is FactState.NOT_FOUND or nvml_err == "NVML_ERROR_DRIVER_NOT_LOADED":
        nothing = nvml_err in ("NVML_ERROR_LIBRARY_NOT_FOUND", "") and not nvml_ver and (
            launch is None or init_err is not None)
        if km.state is FactState.NOT_FOUND and nothing:
            return Outcome("no NVIDIA driver", [Finding(
                "driver.none", Status.FAIL, "No NVIDIA driver: no kernel module is loaded and NVML cannot be used",
                "This node cannot run CUDA work.",
                Fix("Install the NVIDIA driver for this GPU, then reboot (inside a container: start it with the "
                    "GPUs passed through):", ("lspci -nn | grep -i nvidia  # is there an NVIDIA GPU at all?",
                                              "sudo ubuntu-drivers install  # Ubuntu; other distributions: see the link",
                                              "sudo reboot"), DOCS_DRIVER), evidence, "every CUDA program")])
        return Outcome("the NVIDIA kernel module is not loaded", [Finding(
            "driver.not-loaded", Status.FAIL, "The NVIDIA kernel module is not loaded",
            "The user-space driver is installed but the kernel module is not loaded: the module was not built for "
            "the running kernel (a kernel update without DKMS), Secure Boot refused it, or nouveau holds the GPU.",
            Fix("Find why the module is not loaded, then load it (or reinstall the driver for this kernel):",
                ("sudo dmesg | grep -iE 'nvrm|nvidia' | tail -20", "dkms status", "mokutil --sb-state",
                 "sudo modprobe nvidia"), DOCS_DRIVER), evidence, "every CUDA program")])
    if nvml_err == "NVML_ERROR_UNKNOWN":
        return Outcome("NVML: Unknown Error", [Finding(
            "driver.nvml-unknown-error", Status.FAIL, "NVML: Unknown Error",
            "Inside containers this usually means the container lost access to the GPU device files after "
            "`systemctl daemon-reload` on the host (runc with systemd cgroups).",
            Fix("Restart the container; on the host, let the NVIDIA container toolkit create /dev/char links:",
                ("docker restart <container>", "sudo nvidia-ctk system create-dev-char-symlinks --create-all"),
                DOCS_CONTAINER), evidence, "every CUDA program")])
    if nv.value is None or nvml_err in CANNOT_ASK or nvml_err == "NVML_ERROR_LIBRARY_NOT_FOUND":
        # cudadoctor could not ask (no nvidia-ml-py, no permission, no libnvidia-ml in this container): it
        # says so and exits 2 ("cannot tell") rather than judge the node on half the facts
        fix = (Fix("Install NVIDIA's NVML bindings next to cudadoctor:", ("pip install nvidia-ml-py",))
               if nv.value is None else
               Fix("Run as a user that may open the GPU device files (root, or the video group):",
                   ("ls -l /dev/nvidia*", "id"), DOCS_NVML) if nvml_err in CANNOT_ASK else
               Fix("libnvidia-ml.so.1 is missing: inside a container, ask the runtime for the utility capability:",
                   ("docker run --gpus all -e NVIDIA_DRIVER_CAPABILITIES=compute,utility ...",
                    "ldconfig -p | grep libnvidia-ml"), DOCS_CONTAINER))
        return Outcome(f"NVML could not be asked: {nv.error[:120]}", [Finding(
            "health.nvml-unavailable", Status.SKIP, f"NVML could not be asked: {nv.error}",
            "Without NVML health cannot tell the GPUs' state; it says so (exit code 2) instead of guessing.",
            fix, evidence)])
    if nvml_err:
        return Outcome(f"NVML: {nvml_err}", [Finding(
            "driver.nvml-error", Status.FAIL, f"NVML failed: {nv.error}",
            "The driver does not answer NVML queries.",
            Fix("Read the driver log; a reboot usually clears a driver in this state:",
                ("sudo dmesg | grep -iE 'nvrm|xid' | tail -20", "sudo reboot"), DOCS_NVML),
            evidence, "every CUDA program")])
    version = nvml_ver or km_ver
    findings = []
    if expect is not None and expect.driver and not version_matches(version, expect.driver):
        findings.append(Finding(
            "health.driver-unexpected", Status.FAIL, f"driver {version}, expected {expect.driver}",
            "This node runs another driver than the fleet expects (--expect-driver): jobs built or validated "
            "for the expected one may behave differently here.",
            Fix(f"Install driver {expect.driver} on this node (or change --expect-driver):",
                ("cat /proc/driver/nvidia/version", f"sudo apt install nvidia-driver-{expect.driver.split('.')[0]}  "
                 "# or your image's driver package")), dict(evidence, expected=expect.driver)))
    flavour = f" ({km.value.flavour} kernel module)" if km.ok and km.value.flavour else ""
    same = " = user-space libraries" if km_ver and (nvml_ver or cuda_ver) else ""
    summary = f"{version}{flavour}" + (f" · kernel module{same}" if same else "")
    findings.insert(0, Finding("driver.ok", Status.OK, summary, evidence=evidence))
    return Outcome(summary, findings)


def check_devices(ctx: Context) -> Outcome:
    """Every GPU present and answering NVML; the count against --expect-gpus; compute mode; recovery action."""
    nv = ctx.fact("health_nvml")
    expect = ctx.fact("health_expect").value
    gs = nvml_gpus(ctx)
    count = nv.value.device_count if nv.value is not None else 0
    findings = []
    want = expect.gpus if expect is not None else None
    if want is not None and count != want:
        fewer = count < want
        findings.append(Finding(
            "health.gpu-count", Status.FAIL if fewer else Status.WARN,
            f"{count} GPU{'s' if count != 1 else ''}, expected {want}",
            ("A GPU is missing: it fell off the bus, failed to initialise, or is excluded from the driver "
             "(NVreg_ExcludedGpus)." if fewer else "More GPUs than expected (--expect-gpus)."),
            Fix("Compare the PCI bus with what the driver sees, and read the driver log:",
                ("lspci -nn -d 10de:  # NVIDIA devices on the PCI bus", "nvidia-smi -L",
                 "sudo dmesg | grep -iE 'nvrm|xid|fallen off' | tail -20")),
            {"NVML device count": count, "expected": want}, "every job that asks for all GPUs"))
    elif count == 0 and nv.ok:
        findings.append(Finding(
            "driver.no-devices", Status.FAIL, "The driver is loaded but NVML sees no GPU",
            "No GPU is visible to the driver (not passed through, excluded, or failed to initialise).",
            Fix("Check the PCI bus and the driver log:", ("lspci -nn -d 10de:",
                                                          "sudo dmesg | grep -iE 'nvrm|xid' | tail -20")),
            {"NVML device count": 0}, "every CUDA program"))
    for g in gs:
        if g.lost:
            findings.append(Finding(
                "driver.gpu-lost", Status.FAIL, f"GPU {g.index} is lost (NVML: GPU is lost)",
                "The GPU stopped responding on the PCIe bus (power, thermal or hardware fault; Xid 79 in dmesg).",
                Fix("Read the Xid errors and reboot; if it recurs, check power and seating of the card:",
                    ("sudo dmesg -T | grep -iE 'xid|fallen off' | tail -20", "sudo reboot")),
                gpu_evidence(g, errors=g.errors), "every CUDA program"))
        elif "handle" in g.errors:
            findings.append(Finding(
                "health.gpu-unanswered", Status.FAIL, f"GPU {g.index} does not answer NVML ({g.errors['handle']})",
                "NVML lists the GPU but cannot open it.",
                Fix("Read the driver log; a reset or reboot usually brings it back:",
                    ("sudo dmesg -T | grep -iE 'nvrm|xid' | tail -20", f"nvidia-smi -q -i {g.index}", "sudo reboot")),
                gpu_evidence(g, errors=g.errors), "every CUDA program"))
    for g in answering(ctx):
        if g.compute_mode == "Prohibited":
            findings.append(Finding(
                "health.compute-mode-prohibited", Status.FAIL, f"GPU {g.index}: compute mode is Prohibited",
                "No CUDA context can be created on this GPU ('all CUDA-capable devices are busy or unavailable').",
                Fix("Set the default compute mode:", (f"sudo nvidia-smi -i {g.index} -c DEFAULT",)),
                gpu_evidence(g, compute_mode=g.compute_mode)))
        need = RECOVERY.get(g.recovery_action or 0)
        if need is not None:
            findings.append(Finding(
                "health.recovery-action", need[1], f"GPU {g.index}: the driver says it needs {need[0]}",
                "After an error (see the Xid step) the driver sets the action the GPU needs before it can be "
                "trusted again (NVML field GPU_RECOVERY_ACTION).",
                Fix("Drain the GPU's work, then do what the driver asks:",
                    (f"nvidia-smi --query-compute-apps=pid,process_name --format=csv -i {g.index}",
                     f"sudo nvidia-smi -r -i {g.index}" if "reset" in need[0] else "sudo reboot")),
                gpu_evidence(g, recovery_action=g.recovery_action)))
    ok = answering(ctx)
    summary = (f"{models(ok)} answer NVML" if ok else "no GPU answers NVML") + (
        f" ({len(gs) - len(ok)} of {len(gs)} do not)" if len(ok) < len(gs) else "")
    if want is not None:
        summary += f" · expected {want}"
    if not any(f.status in (Status.FAIL, Status.WARN) for f in findings):
        findings.insert(0, Finding("health.gpus", Status.OK, summary,
                                   evidence={g.label: g.name for g in gs}))
    else:
        summary = next(f.summary for f in findings if f.status in (Status.FAIL, Status.WARN))
    return Outcome(summary, findings)


def check_device_files(ctx: Context) -> Outcome:
    """/dev/nvidiactl, /dev/nvidia-uvm and /dev/nvidiaN for every GPU."""
    dn = ctx.fact("device_nodes").value if ctx.fact("device_nodes").ok else DeviceNodes()
    nodes = set(dn.nodes)
    plat = ctx.fact("platform").value
    container = plat.container if plat is not None else ""
    la = ctx.fact("health_launch")
    launched = la.ok and any(d.ok for d in la.value.devices)
    missing = [n for n in ("/dev/nvidiactl",) if n not in nodes]
    per_gpu = [(g, f"/dev/nvidia{g.minor_number}") for g in answering(ctx) if g.minor_number is not None]
    missing += [n for _, n in per_gpu if n not in nodes]
    findings = []
    if missing:
        fix = Fix(f"Inside a {container} container the runtime must pass the GPU device files:",
                  ("docker run --gpus all ...  # or the device plugin's nvidia.com/gpu request on Kubernetes",),
                  DOCS_CONTAINER) if container else Fix(
            "Create the device files (nvidia-modprobe does it as CUDA would), or reload the driver:",
            tuple(f"sudo nvidia-modprobe -c={g.minor_number}" for g, n in per_gpu if n in missing) or (
                "sudo nvidia-modprobe -c=0",), DOCS_DRIVER)
        findings.append(Finding(
            "health.device-file-missing", Status.FAIL, f"missing: {', '.join(missing)}",
            "CUDA opens these files to reach the driver and each GPU; without them it fails with "
            "'no CUDA-capable device' or an unknown error.", fix, {"/dev": sorted(nodes)}, "every CUDA program"))
    if "/dev/nvidia-uvm" not in nodes and not launched:
        # created by nvidia-modprobe at the first CUDA use on bare metal; a container only has what it was given
        st = Status.FAIL if container or la.ok else Status.WARN
        findings.append(Finding(
            "health.uvm-missing", st, "/dev/nvidia-uvm is missing (the nvidia_uvm module is not loaded)",
            "CUDA needs the unified-memory module and its device file: cuInit fails without them.",
            Fix("Load the module and create its device file:", ("sudo modprobe nvidia-uvm", "sudo nvidia-modprobe -u -c=0"),
                DOCS_DRIVER), {"/dev": sorted(nodes)}, "every CUDA program"))
    gpu_files = dn.gpu_files()
    summary = f"{len(gpu_files)} GPU device file{'s' if len(gpu_files) != 1 else ''}" + (
        ", nvidiactl" if "/dev/nvidiactl" in nodes else "") + (", nvidia-uvm" if "/dev/nvidia-uvm" in nodes else "")
    if findings:
        return Outcome(findings[0].summary, findings)
    return Outcome(summary, [Finding("health.device-files", Status.OK, summary, evidence={"/dev": sorted(nodes)})])


def check_persistence(ctx: Context) -> Outcome:
    """Persistence mode, or nvidia-persistenced, keeps the driver initialised between jobs."""
    gs = answering(ctx)
    procs = ctx.fact("node_processes")
    plat = ctx.fact("platform").value
    off = [g for g in gs if g.persistence_mode is False]
    daemon = procs.ok and procs.value.persistenced
    if not gs or all(g.persistence_mode is None for g in gs):
        return Outcome("not reported", [Finding("health.persistence-unknown", Status.SKIP,
                                                "NVML did not report persistence mode")])
    if not off:
        s = "on for every GPU" + (" (nvidia-persistenced running)" if daemon else "")
        return Outcome(s, [Finding("health.persistence", Status.OK, s)])
    if daemon:
        s = f"off on {gpu_list(off)}, but nvidia-persistenced keeps the driver loaded"
        return Outcome(s, [Finding("health.persistence", Status.OK, s)])
    if plat is not None and plat.container:
        s = f"off on {gpu_list(off)} (the host's nvidia-persistenced cannot be seen from this {plat.container} container)"
        return Outcome(s, [Finding("health.persistence-off", Status.OK, s)])
    who = "" if procs.ok else " (the process list could not be read)"
    return Outcome(f"off on {gpu_list(off)}, no nvidia-persistenced{who}", [Finding(
        "health.persistence-off", Status.WARN,
        f"persistence mode is off on {gpu_list(off)} and nvidia-persistenced is not running{who}",
        "Without it the driver tears the GPUs down whenever no process uses them: every job start waits for "
        "them to be initialised again (seconds per GPU), and health's own kernel launch pays it too. NVIDIA "
        "deprecates `nvidia-smi -pm 1` in favour of the nvidia-persistenced daemon.",
        Fix("Run the persistence daemon (it ships with the driver):",
            ("sudo systemctl enable --now nvidia-persistenced", "nvidia-smi -q | grep -i 'persistence mode'"),
            DOCS_PERSISTENCE), {g.label: "persistence mode off" for g in off}, "job start-up time")])

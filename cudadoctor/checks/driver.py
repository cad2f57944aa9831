"""Step 1, `driver`: nvidia-smi and the driver, lowest layer first."""

from __future__ import annotations

from typing import Optional

from cudadoctor.checks.common import driver_view, env_vars, ld_without, q, runtime_fix
from cudadoctor.checks.registry import Context, Outcome, step
from cudadoctor.facts.health_types import DeviceNodes
from cudadoctor.facts.views import nvml_absent
from cudadoctor.model import FactState, Finding, Fix, Status

DOCS_DRIVER = "https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/"
DOCS_CONTAINER = "https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html"


HANG_FIX = Fix("Look for Xid errors and stuck processes; a reset or reboot is usually needed:",
               ("sudo dmesg | grep -iE 'xid|nvrm' | tail -20", "ps -eo pid,stat,cmd | grep -E ' D ' | grep -v grep",
                "sudo reboot"), DOCS_DRIVER)

# driver.version-mismatch, in `check` and in `health`
MISMATCH_DETAIL = ("The user-space driver libraries were upgraded (often by unattended-upgrades or apt) while the old "
                   "kernel module is still loaded. Nothing using CUDA or NVML works until they match.")


def mismatch_fix(user_ver: str) -> Fix:
    """Load the kernel module of the user-space libraries (version `user_ver`, '' when not known)."""
    return Fix("Reboot to load the new kernel module (or unload and reload it when no process uses the GPU):",
               ("sudo reboot",
                "sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia  # instead of a reboot",
                "cat /proc/driver/nvidia/version  # must then show " + (user_ver or "the new version")), DOCS_DRIVER)


def userspace_missing(km_ver: str, plat, s, usd, evidence: dict) -> Finding:
    """The kernel module answers in /proc, but neither libcuda.so.1 nor libnvidia-ml.so.1 can be loaded: every CUDA
    program fails ("Found no NVIDIA driver on your system"), nvidia-smi too. Reproduced on the H200 by hiding the
    libraries' folder from one process tree (tests/data/h200/s32_nolibs_check.txt)."""
    major = km_ver.split(".")[0]
    said = f"; nvidia-smi: {s.message.strip().splitlines()[0][:120]}" if s is not None and s.message else ""
    ev = dict(evidence, **{"kernel module": km_ver, "libcuda.so.1": "not found", "libnvidia-ml.so.1": "not found"})
    if plat is not None and plat.container:
        return Finding(
            "driver.userspace-missing", Status.FAIL,
            f"this {plat.container} container sees the NVIDIA kernel module {km_ver} but not its libraries "
            f"(libcuda, libnvidia-ml){said}",
            "The GPU device files are here but the driver's user-space libraries were not mounted: the container was "
            "started without the NVIDIA runtime (GPUs passed with --device, or a runtime that is not nvidia), or the "
            "container toolkit failed to mount them. Every CUDA program fails with 'Found no NVIDIA driver'.",
            Fix("Start it through the NVIDIA runtime, so the toolkit mounts the driver's libraries:",
                runtime_fix(plat.container) + ("sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl "
                                               "restart docker  # on the host, once",), DOCS_CONTAINER),
            ev, "every CUDA program")
    return Finding(
        "driver.userspace-missing", Status.FAIL,
        f"the NVIDIA kernel module {km_ver} is loaded but its user-space libraries (libcuda, libnvidia-ml) are "
        f"missing{said}",
        "The driver's user-space half is not installed, or not where the loader looks (a removed or partial driver "
        "package, an ldconfig cache not refreshed). Every CUDA program fails with 'Found no NVIDIA driver'.",
        Fix(f"Install the user-space libraries of the {km_ver} driver and refresh the loader's cache:",
            (f"sudo apt install --reinstall libnvidia-compute-{major} nvidia-utils-{major}  # Ubuntu/Debian",
             "sudo ldconfig && ldconfig -p | grep -E 'libcuda.so.1|libnvidia-ml.so.1'"), DOCS_DRIVER),
        ev, "every CUDA program")


def nvml_shadowed(ctx: Context, km_ver: str, evidence: dict) -> Optional[Finding]:
    """A libnvidia-ml.so.1 of another version (or none) first on LD_LIBRARY_PATH, in front of the driver's own copy:
    nvidia-smi and every NVML user load it ("Driver/library version mismatch", "Function Not Found"). Reloading the
    kernel module would not help; leaving that folder out of LD_LIBRARY_PATH does."""
    usd = ctx.fact("userspace_driver").value
    if usd is None or not usd.libnvidia_ml_via or not km_ver or usd.libnvidia_ml == usd.libnvidia_ml_system or \
            usd.libnvidia_ml_version == km_ver or usd.libnvidia_ml_system_version != km_ver:
        return None
    ldp = env_vars(ctx).get("LD_LIBRARY_PATH", "")
    ev = dict(evidence, **{"libnvidia-ml.so.1 loaded": usd.libnvidia_ml, "from LD_LIBRARY_PATH folder": usd.libnvidia_ml_via,
                           "the driver's copy": usd.libnvidia_ml_system, "kernel module": km_ver})
    other = f"version {usd.libnvidia_ml_version}" if usd.libnvidia_ml_version else "no version in its name"
    return Finding(
        "driver.nvml-shadowed", Status.FAIL,
        f"nvidia-smi and NVML load {usd.libnvidia_ml} ({other}) from LD_LIBRARY_PATH, not the driver's "
        f"libnvidia-ml {km_ver}",
        f"{usd.libnvidia_ml_via} comes first on LD_LIBRARY_PATH and holds a libnvidia-ml.so.1 that does not belong to "
        f"the loaded driver ({km_ver}, whose copy is {usd.libnvidia_ml_system}). Every NVML user (nvidia-smi, "
        "monitoring, NCCL's topology queries) loads it and fails; rebooting or reloading the driver would not help.",
        Fix(f"Leave {usd.libnvidia_ml_via} out of LD_LIBRARY_PATH (and out of the shell profile or module that sets it):",
            (ld_without([d for d in ldp.split(":") if d], {usd.libnvidia_ml_via}),
             "nvidia-smi  # now loads the driver's copy", "ldconfig -p | grep libnvidia-ml  # the driver's copy")),
        ev, "nvidia-smi and NVML")


def _gpu_summary(view) -> str:
    n = len(view.gpus)
    if not n:
        return "GPUs not listable without nvidia-smi or NVML" if view.gpus_unknown else "no GPU listed"
    names = sorted({g.name for g in view.gpus if g.name})
    return f"{n} GPU{'s' if n != 1 else ''}" + (f" ({', '.join(names)})" if names else "")


def _not_loaded(smi_path: str, smi_text: str, platform) -> Finding:
    cmds = ["lsmod | grep -i nvidia", "sudo dmesg | grep -iE 'nvrm|nvidia' | tail -20",
            "dkms status", "sudo modprobe nvidia"]
    detail = ("nvidia-smi is installed but cannot reach the kernel module. Usual causes, most likely first: "
              "the module was not built for the running kernel (a kernel update without DKMS), Secure Boot "
              "refused the unsigned module, nouveau holds the GPU, or the driver install did not finish.")
    fix = Fix("Find why the kernel module is not loaded, then load it (or reinstall the driver for this kernel):",
              tuple(cmds + ["mokutil --sb-state", "sudo apt install linux-headers-$(uname -r)  # then reinstall the driver"]),
              DOCS_DRIVER)
    if platform is not None and platform.container:
        fix = Fix(f"This runs inside a {platform.container} container: the host must expose its GPUs.",
                  ("docker run --gpus all ...  # or --runtime=nvidia / the device plugin on Kubernetes",
                   "nvidia-smi  # on the host: it must work there first"), DOCS_CONTAINER)
    return Finding("driver.not-loaded", Status.FAIL, "nvidia-smi cannot communicate with the NVIDIA driver",
                   detail, fix, {smi_path: smi_text.strip()[:500]}, affects="every CUDA program")


def _no_gpu(ctx: Context, headline: str, generic: Finding) -> Finding:
    """The driver answers and lists no GPU (or refuses NVML), yet /dev/nvidiaN is there: why this process may not
    open it. Elsewhere (no GPU file, a host) the generic finding stands."""
    nf = ctx.fact("device_nodes")
    dn = nf.value if nf.ok and nf.value is not None else DeviceNodes()
    nodes, denied, gpu_files = dn.nodes, dn.denied, dn.gpu_files()
    if not gpu_files:
        return generic
    env = env_vars(ctx)
    var = (lambda k: env.get(k, "") or "")
    job = var("SLURM_JOB_ID")
    given = var("SLURM_STEP_GPUS") or var("SLURM_JOB_GPUS")
    plat = ctx.fact("platform").value
    container = plat.container if plat is not None else ""
    ev = dict(generic.evidence, **{"/dev": sorted(nodes)})
    # NVML never opens /dev/nvidia-uvm; one refused GPU file does not hide the others
    blocking = sorted(n for n in denied if n == "/dev/nvidiactl" or n in gpu_files)
    if "/dev/nvidiactl" in blocking or (blocking and set(gpu_files) <= set(blocking)):
        if container:
            fix = Fix(f"This {container} container's user may not open them (a rootless runtime drops the "
                      "supplementary groups that open them on the host): keep the groups, or run as a user in that group:",
                      ("ls -ln /dev/nvidia*  # here: owner and group as numbers", "ls -l /dev/nvidia*  # on the host",
                       "podman run --group-add keep-groups ...  # rootless podman with crun",
                       "docker run --group-add <gid ls -ln shows> ..."), DOCS_CONTAINER)
        else:
            fix = Fix("See who may open them, then join that group (and log in again), or have the administrator set "
                      "the driver's NVreg_DeviceFileMode / NVreg_DeviceFileGID:",
                      ("ls -l /dev/nvidia*", "sudo usermod -aG <the group ls shows> $USER",
                       "id  # after logging in again"), DOCS_DRIVER)
        return Finding(
            "driver.device-permission", Status.FAIL,
            f"{headline}: this user may not open {', '.join(blocking)} (their permissions leave it out)",
            "CUDA and NVML open the GPU's device files; where their owner and group leave the user out (some "
            "distributions and cluster images make them 0660 for a group such as video), the driver shows this "
            "process no GPU.", fix, dict(ev, denied=blocking), "every CUDA program")
    if job and given:
        return Finding(
            "driver.slurm-gpu-failed", Status.FAIL,
            f"{headline}: Slurm job {job} was given GPU {given}, and it does not answer",
            "The job's device cgroup lets it open only the GPUs Slurm gave it, and the driver lists none of them: the "
            "GPU assigned to this job failed to initialise or fell off the bus (an Xid error). This node needs its "
            "administrator; another node will run the job.",
            Fix("Tell the administrators (the node should be drained) and run the job elsewhere:",
                (f"scontrol show job {q(job)} | grep -iE 'nodelist|tres|gres'",
                 "sbatch --exclude=$SLURMD_NODENAME ...  # the same job, on another node"),
                "https://slurm.schedmd.com/gres.html"),
            dict(ev, SLURM_JOB_ID=job, SLURM_GPUS=given), "every CUDA program")
    if job:
        return Finding(
            "driver.slurm-no-gpu", Status.FAIL, f"{headline}: Slurm job {job} was given no GPU (no SLURM_JOB_GPUS)",
            "Under Slurm with ConstrainDevices, a job sees the GPU device files but its device cgroup lets it open "
            "only the GPUs it requested; a job or step that asked for none gets none. (In an salloc shell on the "
            "login node, run the command through srun.)",
            Fix("Request GPUs for the job and for each step:",
                ("#SBATCH --gpus=1  # or --gres=gpu:1", "srun --gpus=1 nvidia-smi",
                 f"scontrol show job {q(job)} | grep -iE 'tres|gres'"),
                "https://slurm.schedmd.com/gres.html"), dict(ev, SLURM_JOB_ID=job), "every CUDA program")
    if container:
        return Finding(
            "driver.container-no-gpu-access", Status.FAIL,
            f"{headline}: this {container} container has /dev/nvidia* but may not use them",
            "The device files are mounted, yet the container's device cgroup refuses them: it was started without "
            "the GPU. If nvidia-smi on the host also finds no GPU, the GPU itself failed to initialise there.",
            Fix("Start the container with the GPU:", runtime_fix(container) + ("nvidia-smi  # on the host",),
                DOCS_CONTAINER), ev, "every CUDA program")
    return generic


@step("driver", "NVIDIA driver", 10, facts=("nvidia_smi", "nvml", "kernel_module", "userspace_driver", "platform",
                                            "device_nodes", "env"))
def check_driver(ctx: Context) -> Outcome:
    """nvidia-smi and the driver: version, maximum CUDA, GPUs, and the ways this layer breaks."""
    smi, nvml, km, usd = ctx.fact("nvidia_smi"), ctx.fact("nvml"), ctx.fact("kernel_module"), ctx.fact("userspace_driver")
    plat = ctx.fact("platform").value
    view = driver_view(ctx)
    s = smi.value
    evidence = {}
    if s is not None and s.path:
        evidence["nvidia-smi"] = s.path
    if km.ok:
        evidence["/proc/driver/nvidia/version"] = km.value.text

    # 1. a hung nvidia-smi: the GPU or driver is wedged
    if smi.state is FactState.TIMEOUT:
        return Outcome("nvidia-smi hangs", [Finding(
            "driver.smi-hang", Status.FAIL, smi.error,
            "A hung nvidia-smi means the driver or a GPU is wedged (often after an Xid error, a GPU that fell "
            "off the bus, or a stuck process holding the device). CUDA programs will hang the same way.",
            HANG_FIX, evidence, "every CUDA program")])

    # 1b. NVML hangs and nvidia-smi gives no working answer to set against it: same meaning, named for NVML
    if nvml.state is FactState.TIMEOUT and smi.state is not FactState.FOUND:
        return Outcome("NVML hangs", [Finding(
            "driver.nvml-hang", Status.FAIL, nvml.error,
            "NVML (libnvidia-ml, what nvidia-smi itself uses) did not answer: the driver or a GPU is wedged, "
            "or a stuck process holds the device. CUDA programs will hang the same way.",
            HANG_FIX, dict(evidence, NVML=nvml.error), "every CUDA program")])

    # 2. kernel module vs user-space libraries
    km_ver = km.value.version if km.ok else ""
    user_ver = (nvml.value.driver_version if nvml.ok else "") or (s.nvml_library_version if s else "") or (
        usd.value.libnvidia_ml_version if usd.value is not None else "")
    nvml_err = nvml.value.error if nvml.value is not None else ""
    mismatch = (s is not None and s.problem == "nvml-mismatch") or nvml_err == "NVML_ERROR_LIB_RM_VERSION_MISMATCH" or (
        km_ver and user_ver and km_ver != user_ver)
    shadow = nvml_shadowed(ctx, km_ver, evidence) if (mismatch or smi.state is not FactState.FOUND) else None
    if shadow is not None:
        return Outcome(f"libnvidia-ml from LD_LIBRARY_PATH is not the driver's {km_ver}", [shadow])
    if mismatch:
        if km_ver:
            evidence["kernel module"] = km_ver
        if user_ver:
            evidence["user-space NVML library"] = user_ver
        versions = f" (kernel module {km_ver or '?'}, user-space libraries {user_ver or '?'})"
        return Outcome(f"driver/library version mismatch{versions}", [Finding(
            "driver.version-mismatch", Status.FAIL, "NVML: Driver/library version mismatch" + versions,
            MISMATCH_DETAIL, mismatch_fix(user_ver), evidence, "every CUDA program")])

    # 2b. the kernel module is loaded but the driver's user-space libraries are not there (neither libcuda nor
    # libnvidia-ml): a container given /dev/nvidia* by hand, without the NVIDIA runtime; a partial driver install
    smi_without_nvml = s is not None and s.problem == "nvml-missing"  # nvidia-smi is there, its libnvidia-ml not
    smi_gone = smi.state is FactState.NOT_FOUND or smi_without_nvml
    no_libcuda = usd.value is None or not usd.value.libcuda
    if km.ok and smi_gone and nvml_absent(nvml) and no_libcuda:
        return Outcome(f"kernel module {km_ver} loaded, its user-space libraries missing",
                       [userspace_missing(km_ver, plat, s, usd, evidence)])

    # 3. nvidia-smi present but failing (not for want of its libnvidia-ml while the driver answers and libcuda is
    # there: a compute-only container, warned about below)
    compute_only = smi_without_nvml and view.present
    if s is not None and s.problem and s.problem != "not-executable" and smi.state is not FactState.FOUND \
            and not compute_only:
        if s.problem == "no-driver":
            return Outcome("the NVIDIA driver is not loaded", [_not_loaded(s.path, s.message, plat)])
        if s.problem == "no-devices":
            return Outcome("driver loaded, no GPU found", [_no_gpu(ctx, "nvidia-smi: No devices were found", Finding(
                "driver.no-devices", Status.FAIL, "nvidia-smi: No devices were found",
                "The driver is loaded but sees no GPU: the GPU is not passed through (VM/container), it is "
                "excluded (NVreg_ExcludedGpus), or it failed to initialise.",
                Fix("Check that the GPU is on the PCI bus and what the driver logged:",
                    ("lspci -nn | grep -i nvidia", "sudo dmesg | grep -iE 'nvrm|xid' | tail -20")),
                evidence, "every CUDA program"))])
        if s.problem == "no-permission":
            return Outcome("NVML: insufficient permissions", [_no_gpu(ctx, "nvidia-smi: Insufficient Permissions", Finding(
                "driver.smi-error", Status.FAIL, f"nvidia-smi failed: {smi.error[:200]}",
                "NVML may not open the driver's device files.",
                Fix("See the files' owner and group:", ("ls -l /dev/nvidia*", "id")),
                dict(evidence, **{"nvidia-smi output": s.message.strip()[:500]}), "every CUDA program"))])
        if s.problem == "nvml-unknown":
            return Outcome("NVML: Unknown Error", [Finding(
                "driver.nvml-unknown-error", Status.FAIL, "nvidia-smi: Failed to initialize NVML: Unknown Error",
                "Inside containers this usually means the container lost access to the GPU device nodes after "
                "`systemctl daemon-reload` on the host (runc with systemd cgroups).",
                Fix("Restart the container; on the host, configure the NVIDIA container toolkit to create /dev/char "
                    "symlinks so this does not recur:",
                    ("docker restart <container>", "sudo nvidia-ctk system create-dev-char-symlinks --create-all"),
                    "https://github.com/NVIDIA/nvidia-container-toolkit/issues/48"), evidence, "every CUDA program")])
        if s.problem == "gpu-lost":
            return Outcome("a GPU is lost", [Finding(
                "driver.gpu-lost", Status.FAIL, "nvidia-smi reports a lost GPU (fallen off the bus)",
                "The GPU stopped responding on the PCIe bus (power, thermal or hardware fault, or a driver Xid 79).",
                Fix("Read the Xid errors and reboot; if it recurs, check power and seating of the card:",
                    ("sudo dmesg | grep -iE 'xid|fallen off' | tail -20", "sudo reboot")), evidence,
                "every CUDA program")])
        evidence["nvidia-smi output"] = s.message.strip()[:500]
        return Outcome("nvidia-smi fails", [Finding(
            "driver.smi-error", Status.FAIL, f"nvidia-smi failed: {smi.error[:200]}",
            "nvidia-smi did not print the expected report; its own words are in the evidence.",
            Fix("Run it yourself and read the message; check the driver log:",
                (f"{s.path}", "sudo dmesg | grep -iE 'nvrm|xid' | tail -20")), evidence, "every CUDA program")])
    if smi.state is FactState.FAILED and s is not None and s.path and not s.driver_version and (
            s.problem != "not-executable" or not view.present) and not compute_only:
        # could not even start it (not executable, exec format error)
        evidence["error"] = smi.error
        return Outcome("nvidia-smi cannot run", [Finding(
            "driver.smi-error", Status.FAIL, smi.error,
            "nvidia-smi exists on PATH but could not be run.",
            Fix("Check the file and reinstall the driver's utilities if it is damaged:",
                (f"ls -l {s.path}", f"file {s.path}")), evidence, "nvidia-smi")])

    # 4. nothing at all
    if not view.present:
        if nvml_err == "NVML_ERROR_DRIVER_NOT_LOADED" or (km.state is FactState.NOT_FOUND and usd.ok):
            return Outcome("the NVIDIA driver is not loaded", [_not_loaded(s.path if s else "nvidia-smi",
                                                                            smi.error, plat)])
        on_wsl = plat is not None and plat.is_wsl
        fix = Fix("Install the NVIDIA driver for this GPU, then reboot:",
                  ("lspci -nn | grep -i nvidia  # is there an NVIDIA GPU at all?",
                   "sudo ubuntu-drivers install  # Ubuntu; other distributions: see the link", "sudo reboot"),
                  DOCS_DRIVER)
        if on_wsl:
            fix = Fix("Under WSL2 the driver comes from Windows: install the current NVIDIA Windows driver, then "
                      "restart WSL. Do not install a Linux driver inside WSL.",
                      ("wsl.exe --update", "wsl.exe --shutdown", "ls /usr/lib/wsl/lib/libcuda.so*"),
                      "https://docs.nvidia.com/cuda/wsl-user-guide/index.html")
        elif plat is not None and plat.container:
            fix = Fix(f"Inside a {plat.container} container the GPU must be passed through by the runtime:",
                      ("docker run --gpus all ...", "nvidia-smi  # on the host"), DOCS_CONTAINER)
        return Outcome("no NVIDIA driver or GPU", [Finding(
            "driver.none", Status.FAIL, "No NVIDIA driver or GPU found: CUDA cannot work on this machine",
            "nvidia-smi is not on PATH, no NVIDIA kernel module is loaded and NVML cannot be used. Steps that "
            "need no GPU (nvcc, environment) still run.",
            fix, {"nvidia-smi": smi.error or smi.state.value, "kernel module": km.error or km.state.value,
                  "NVML": nvml.error or nvml.state.value}, "every CUDA program")])

    summary = f"{view.version}" + (f" (max CUDA {view.cuda})" if view.cuda else "") + f" · {_gpu_summary(view)}"
    findings = []
    if s is not None and s.problem == "not-executable":
        summary += " · nvidia-smi not executable"
        findings.append(Finding(
            "driver.smi-not-executable", Status.WARN, smi.error,
            "The driver answers through NVML, but the nvidia-smi on PATH has lost its execute bit (a damaged "
            "install or a copy made without permissions); scripts and monitoring that call it fail.",
            Fix("Restore it from the driver's package:", (f"ls -l {s.path}", f"sudo chmod 755 {s.path}  # or "
                                                          "reinstall the driver's utilities package")),
            {"nvidia-smi": s.path}))
    elif smi_gone:
        summary += " · nvidia-smi not on PATH" if smi.state is FactState.NOT_FOUND else " · nvidia-smi without NVML"
        findings.append(Finding(
            "driver.smi-missing", Status.WARN, ("nvidia-smi is not on PATH" if smi.state is FactState.NOT_FOUND else
                                                f"{s.path} cannot load libnvidia-ml") + " (the driver itself answers through "
            + ("NVML)" if nvml.ok else "its kernel module; NVML cannot be used either)"),
            "Containers started without the `utility` driver capability lack nvidia-smi"
            + (" and NVML (libnvidia-ml)" if not nvml.ok else "") + "; elsewhere the driver's utilities package is "
            "missing. CUDA itself needs neither.",
            Fix("Add the utility capability to the container, or install the driver utilities:",
                ("docker run --gpus all -e NVIDIA_DRIVER_CAPABILITIES=compute,utility ...",
                 f"sudo apt install nvidia-utils-{view.version.split('.')[0]}"), DOCS_CONTAINER),
            {"sources": ", ".join(view.sources)}))
    else:
        summary += " · nvidia-smi ok"
    if not view.gpus and (nvml.ok and nvml.value.device_count == 0):
        return Outcome(f"{view.version} · no GPU", [_no_gpu(ctx, "The driver is loaded but NVML sees no GPU", Finding(
            "driver.no-devices", Status.FAIL, "The driver is loaded but NVML sees no GPU",
            "No GPU is visible to the driver (not passed through, excluded, or failed to initialise).",
            Fix("Check the PCI bus and the driver log:", ("lspci -nn | grep -i nvidia",
                                                         "sudo dmesg | grep -iE 'nvrm|xid' | tail -20")),
            evidence, "every CUDA program"))])
    evidence.update({"driver": view.version, "max CUDA": view.cuda, "sources": ", ".join(view.sources)})
    findings.insert(0, Finding("driver.ok", Status.OK, summary, evidence=evidence))
    return Outcome(summary, findings)

"""Step 100: CUDA under WSL2 (automatic under WSL, SKIP elsewhere)."""

from __future__ import annotations

from cudadoctor.checks.common import q
from cudadoctor.checks.registry import Context, Outcome, step
from cudadoctor.facts.libs import WSL_LIB
from cudadoctor.model import Finding, Fix, Status

DOCS_WSL = "https://docs.nvidia.com/cuda/wsl-user-guide/index.html"


@step("wsl", "WSL2", order=100, facts=("platform", "wsl", "torch"))
def check_wsl(ctx: Context) -> Outcome:
    """WSL1 vs WSL2, /dev/dxg, the Windows driver's libcuda, no Linux driver inside WSL."""
    plat, wf = ctx.fact("platform"), ctx.fact("wsl")
    if plat.value is None or not plat.value.is_wsl or wf.state.value == "not_applicable":
        return Outcome("not WSL", [Finding("wsl.not-wsl", Status.SKIP, "not WSL")], Status.SKIP)
    if wf.value is None:
        return Outcome(f"cannot inspect WSL: {wf.error}",
                       [Finding("wsl.unknown", Status.WARN, f"cannot inspect WSL: {wf.error or wf.state.value}")])
    w = wf.value
    distro = w.distro or "<distro>"
    findings: list = []
    if w.version == 1:
        findings.append(Finding(
            "wsl.wsl1", Status.FAIL, "this distribution runs under WSL 1: CUDA needs WSL 2",
            fix=Fix("Convert the distribution to WSL 2 (in Windows PowerShell).",
                    (f"wsl --set-version {distro} 2", "wsl --shutdown"), DOCS_WSL),
            evidence={"/proc/version": w.kernel}, affects="every CUDA program"))
    else:
        findings.append(Finding("wsl.version", Status.OK, f"WSL 2 ({w.kernel.split(' (')[0][:80]})",
                                evidence={"/proc/version": w.kernel}))
    if w.version != 1 and not w.dev_dxg:
        findings.append(Finding(
            "wsl.no-dxg", Status.FAIL, "/dev/dxg is missing: the GPU is not passed into WSL",
            detail="WSL 2 exposes the GPU through /dev/dxg (GPU paravirtualisation). Without it no CUDA "
                   "library can reach the Windows driver.",
            fix=Fix("Update WSL and the Windows NVIDIA driver, then restart WSL (in Windows PowerShell).",
                    ("wsl --update", "wsl --shutdown"), DOCS_WSL),
            evidence={"/dev/dxg": "absent"}, affects="every CUDA program"))
    if not w.libcuda:
        findings.append(Finding(
            "wsl.no-libcuda", Status.FAIL, f"{WSL_LIB}/libcuda.so.1 is missing",
            detail="The Windows NVIDIA driver puts libcuda and nvidia-smi into /usr/lib/wsl/lib. It is missing when "
                   "the Windows driver is too old, not an NVIDIA driver, or WSL has not been restarted since.",
            fix=Fix("Install the current NVIDIA driver on Windows (not inside WSL), then restart WSL.",
                    ("wsl --shutdown",), DOCS_WSL),
            evidence={WSL_LIB: ", ".join(w.lib_files) or "absent"}, affects="every CUDA program"))
    if w.linux_driver_packages:
        names = [p.split()[0] for p in w.linux_driver_packages]
        cmd = (f"sudo apt-get remove --purge {' '.join(names)}" if w.package_tool == "dpkg"
               else f"sudo dnf remove {' '.join(names)}")
        findings.append(Finding(
            "wsl.linux-driver-installed", Status.FAIL,
            f"Linux NVIDIA driver packages are installed inside WSL: {', '.join(names)}",
            detail="Under WSL the driver is the Windows one; a Linux driver's libcuda/libnvidia-ml replace the WSL "
                   "copies and break CUDA and nvidia-smi.",
            fix=Fix("Remove them, then install only the toolkit (cuda-toolkit-X-Y).", (cmd, "sudo ldconfig"), DOCS_WSL),
            evidence={"packages": w.linux_driver_packages}, affects="every CUDA program"))
    if w.cuda_meta_packages:
        names = [p.split()[0] for p in w.cuda_meta_packages]
        findings.append(Finding(
            "wsl.cuda-meta-package", Status.WARN,
            f"the '{names[0]}' meta-package is installed: it pulls in cuda-drivers (a Linux driver)",
            fix=Fix("Under WSL install the toolkit package only.",
                    (f"sudo apt-get remove {' '.join(names)} cuda-drivers",
                     "sudo apt-get install cuda-toolkit-12-8  # the version you need"), DOCS_WSL),
            evidence={"packages": w.cuda_meta_packages}))
    if w.libcuda and w.libcuda_resolved and not w.libcuda_resolved.startswith(("/usr/lib/wsl/", "/mnt/")):
        findings.append(Finding(
            "wsl.libcuda-not-wsl", Status.FAIL,
            f"libcuda.so.1 resolves to {w.libcuda_resolved}, not the WSL copy in {WSL_LIB}",
            detail=f"The loader takes it via {w.libcuda_resolved_via or 'its search order'}; a Linux driver's "
                   "libcuda cannot talk to /dev/dxg ('CUDA driver version is insufficient' or no device).",
            fix=Fix("Remove the Linux driver's libcuda (or the LD_LIBRARY_PATH entry that finds it) and refresh "
                    "the loader cache.", (f"ls -l {q(w.libcuda_resolved)}", "sudo ldconfig"), DOCS_WSL),
            evidence={"resolved": w.libcuda_resolved, "via": w.libcuda_resolved_via,
                      "Linux libcuda files": w.linux_libcuda}, affects="every CUDA program"))
    elif w.libcuda:
        findings.append(Finding("wsl.libcuda", Status.OK, f"libcuda.so.1 is the WSL copy ({WSL_LIB})",
                                evidence={"resolved": w.libcuda_resolved or w.libcuda}))
    if w.libcuda and not w.libcuda_is_symlink:
        findings.append(Finding(
            "wsl.ldconfig-not-symlink", Status.OK,
            "'ldconfig: /usr/lib/wsl/lib/libcuda.so.1 is not a symbolic link' is expected and harmless",
            detail="Windows ships libcuda.so, libcuda.so.1 and libcuda.so.1.1 as three copies of one file, so "
                   "ldconfig (run by apt) prints this on every install. It does not stop CUDA from working.",
            evidence={"libcuda.so.1": "regular file"}))
    if w.smi and w.smi_on_path and not w.smi_on_path.startswith("/usr/lib/wsl/"):
        findings.append(Finding(
            "wsl.nvidia-smi-not-wsl", Status.WARN,
            f"PATH runs {w.smi_on_path}, not the WSL nvidia-smi ({w.smi})",
            detail="A Linux nvidia-smi cannot talk to the Windows driver ('couldn't communicate with the NVIDIA "
                   "driver').", fix=Fix("Remove the Linux nvidia-utils package or put /usr/lib/wsl/lib first on PATH.",
                                        ("export PATH=/usr/lib/wsl/lib:$PATH",), DOCS_WSL),
            evidence={"PATH nvidia-smi": w.smi_on_path}))
    elif w.smi and not w.smi_on_path:
        findings.append(Finding(
            "wsl.nvidia-smi-not-on-path", Status.WARN, f"nvidia-smi is not on PATH (it is at {w.smi})",
            fix=Fix("Add the WSL folder to PATH.", ("export PATH=$PATH:/usr/lib/wsl/lib",), DOCS_WSL)))
    t = ctx.fact("torch")
    if t.value is not None and t.value.cpu_only:
        findings.append(Finding(
            "wsl.cpu-only-torch", Status.WARN, f"torch {t.value.version} is a CPU-only build",
            fix=Fix("Install a CUDA build of torch.",
                    (f"{q(t.value.python or 'python')} -m pip install --force-reinstall torch "
                     "--index-url https://download.pytorch.org/whl/cu128",), "https://pytorch.org/get-started/locally/")))
    bad = [f for f in findings if f.status in (Status.FAIL, Status.WARN)]
    return Outcome(bad[0].summary if bad else f"WSL 2 set up for CUDA ({WSL_LIB})", findings)

"""Step `probe.launch` (order 92): cudadoctor's own minimal kernel through the CUDA driver API, without
torch: native SASS must run, SASS for a foreign arch must fail with "no kernel image"."""

from __future__ import annotations

import os

from cudadoctor.checks.common import env_vars, first_line, is_stubs_dir, ld_entries, ld_without
from cudadoctor.checks.driver import HANG_FIX
from cudadoctor.checks.env_cuda_driver import (
    FORCE_PTX_JIT_FIX,
    FORCED_JIT_ERRORS,
    device_order_fix,
    device_order_invalid,
    env_with_crs,
    forced_ptx_jit,
)
from cudadoctor.checks.registry import Context, Outcome, step
from cudadoctor.compat import NATIVE
from cudadoctor.model import FactState, Finding, Fix, Status


def _first(text: str) -> str:
    return first_line(text, "no output")


def build_failed(ctx: Context, path: str, error: str, fell_back: str) -> Finding:
    """The toolkit layer: an nvcc that answers --version but cannot build (the GPU was not at fault)."""
    tk = ctx.fact("toolkit").value
    installs = tk.installs if tk is not None else []
    good = [i for i in installs if i.version and i.nvcc != path and i.realpath != path and not i.error and
            i.is_toolkit is not False]
    cmds = [f"which -a nvcc  # {path} comes first"]
    me = next((i for i in installs if i.nvcc == path), None)
    link_to = me.realpath if me is not None and me.realpath and me.realpath != path and me.is_toolkit else ""
    if link_to:
        # nvcc finds its toolkit (nvcc.profile, include/) beside the path it was called by, not beside the file a link
        # points to: a link to it in another folder fails on every header (seen on the H200 in session 33: a link in a
        # PATH folder, "cuda_runtime.h: No such file or directory")
        cmds.append(f"export PATH={os.path.dirname(link_to)}:$PATH CUDA_HOME={me.root}  # {path} is a link to "
                    f"{link_to}: call nvcc from its own folder")
    if good:
        cmds.append(f"export PATH={os.path.dirname(good[0].nvcc)}:$PATH CUDA_HOME={good[0].root}  "
                    f"# nvcc {good[0].version} found there")
    cmds.append(f"{path} --version; {path} -fatbin -arch=sm_90 -x cu /dev/null -o /tmp/nvcc-check.fatbin")
    return Finding(
        "probe.launch.build-failed", Status.FAIL,
        f"{path} cannot build cudadoctor's minimal kernel: {_first(error)}",
        detail=("It answers --version, but compiling fails: every CUDA build that picks it up (torch extensions, "
                "pip installs that compile CUDA, nvcc in your own builds) fails the same way. This is the toolkit, "
                "not the GPU or the driver" + (f"; the launch was tested with {fell_back} instead." if fell_back else
                                                 "; the launch could not be tested without a compiler.")
                + (f" {path} is a link to {link_to}: nvcc looks for its toolkit's files beside the path it is called "
                   "by, so through a link in another folder it finds no headers." if link_to else "")),
        fix=Fix("Put a working toolkit first, or repair this one:", tuple(cmds),
                "https://docs.nvidia.com/cuda/cuda-installation-guide-linux/"),
        evidence={"nvcc": path, "error": error}, affects="nvcc")


def start_failure_fix(ctx: Context, error: str) -> Fix:
    """The probe's fix when CUDA did not start: the variable or library named where this machine's facts show it (seen
    on the H200, session 35: a stub libcuda first on LD_LIBRARY_PATH, an invalid CUDA_DEVICE_ORDER), else the probe."""
    env = env_vars(ctx)
    ldp = ld_entries(env)
    stubs = {e for e in ldp if is_stubs_dir(e)}
    if ("STUB_LIBRARY" in error or "CUDA_ERROR_34" in error) and stubs:  # the second: the stub's own unnamed code
        return Fix("CUDA loaded the toolkit's stub libcuda: take the stubs folder out of LD_LIBRARY_PATH:",
                   (ld_without(ldp, stubs), "cudadoctor probe"))
    order_env = env_with_crs(ctx)
    if "INVALID_DEVICE" in error and device_order_invalid(order_env):
        f = device_order_fix(order_env["CUDA_DEVICE_ORDER"])
        return Fix(f.text, f.commands + ("cudadoctor probe",), f.docs)
    return Fix("Run the full probe to see each stage:", ("cudadoctor probe",))


@step("probe.launch", "driver-API kernel probe", 92, facts=("probe_launch", "toolkit", "env"), requires=("driver",))
def check_probe_launch(ctx: Context) -> Outcome:
    """Build and launch the minimal kernel natively and for a foreign arch through the driver API."""
    fact = ctx.fact("probe_launch")
    info = fact.value
    if fact.state == FactState.NOT_APPLICABLE:
        return Outcome("not run", [Finding("probe.launch.skipped", Status.SKIP,
                                           f"The driver-API probe did not run: {fact.error or 'no GPU'}")])
    if fact.state == FactState.NOT_FOUND:
        return Outcome("no compiler", [Finding(
            "probe.launch.no-compiler", Status.SKIP,
            "No nvcc or libnvrtc to build the probe kernel with", detail=fact.error,
            fix=Fix("Any of these gives cudadoctor a compiler for its probes:",
                    ("pip install nvidia-cuda-nvrtc", "cudadoctor probe --compiler nvrtc")))])
    if fact.state == FactState.TIMEOUT:
        return Outcome("CUDA hung", [Finding(
            "probe.launch.timeout", Status.FAIL, f"The driver-API probe could not launch a kernel: {fact.error}",
            detail="CUDA did not answer within the probe's time limit: GPU work started here (torch, any CUDA "
                   "program) hangs the same way. A GPU that stopped answering, or a driver stuck after an error, "
                   "is the usual cause; the kernel log says which.",
            fix=HANG_FIX, evidence={"source": fact.source})])  # the driver step's words for a hung nvidia-smi/NVML
    if info is None or fact.state == FactState.FAILED:
        return Outcome("probe failed", [Finding(
            "probe.launch.failed", Status.WARN, f"The driver-API probe could not launch a kernel: {fact.error}",
            fix=start_failure_fix(ctx, fact.error or ""),
            evidence={"source": fact.source})])
    rows = {r.get("name"): r for r in info.rows}
    native = rows.get("native")
    findings = []
    if info.nvcc_failure:
        findings.append(build_failed(ctx, info.nvcc_failure_path, info.nvcc_failure,
                                     info.compiler if not info.compiler.startswith("nvcc") else ""))
    if native is not None and native.get("build_error") and not native.get("driver_api"):
        if not info.nvcc_failure:  # built with nothing else: the compiler failed, nothing was launched
            findings.append(build_failed(ctx, info.compiler_path or info.compiler, native["build_error"], ""))
        return Outcome(f"build failed: {_first(native['build_error'])[:80]}; launch not tested", findings)
    forced = forced_ptx_jit(env_vars(ctx))  # (session 35, H200) the driver ignores SASS: the predictions do not hold
    if native is None or native.get("driver_api") != NATIVE:
        err = (native or {}).get("driver_error") or (native or {}).get("build_error") or info.launch_error
        if forced and FORCED_JIT_ERRORS.search(err or ""):  # expected: the probe's native build has no PTX
            findings.append(Finding(
                "probe.launch.forced-ptx-jit", Status.SKIP,
                f"cudadoctor's own sm_{info.cc.replace('.', '')} kernel (SASS only) was not judged: CUDA_FORCE_PTX_JIT=1 "
                f"makes CUDA ignore SASS ({err})",
                detail="A kernel with no PTX cannot run while the variable is set: expected, not a driver fault (the "
                       "environment step names the variable).",
                fix=FORCE_PTX_JIT_FIX, evidence={"row": native, "CUDA_FORCE_PTX_JIT": "1"}))
        else:
            findings.append(Finding(
                "probe.launch.native-failed", Status.FAIL,
                f"cudadoctor's own sm_{info.cc.replace('.', '')} kernel did not run through the CUDA driver API: {err}",
                detail="The driver or the GPU cannot run a kernel built for it, independently of torch.",
                fix=Fix("Look at the driver layer first:", ("nvidia-smi", "cudadoctor probe")),
                evidence={"row": native}))
    for r in info.rows:
        if r.get("match") is False and not forced:
            findings.append(Finding(
                "probe.launch.mismatch", Status.WARN,
                f"build {r.get('name')} ({' '.join(r.get('sass', []) + r.get('ptx', []))}): the rule predicted "
                f"{r.get('predicted')}, the GPU gave {r.get('driver_api')}",
                detail=r.get("driver_error", ""), evidence={"row": r},
                fix=Fix("Please report it with the output of:", ("cudadoctor probe --json",))))
    if not [f for f in findings if f.id != "probe.launch.build-failed"]:
        foreign = rows.get("sass-foreign") or {}
        findings.append(Finding(
            "probe.launch.ok", Status.OK,
            f"driver API: native {' '.join(native.get('sass', []))} kernel ran on {info.device} (cc {info.cc}); "
            f"{' '.join(foreign.get('sass', [])) or 'foreign'} build gave {foreign.get('driver_api') or '-'} as predicted",
            evidence={"compiler": info.compiler, "driver_cuda": info.driver_cuda}))
    if any(f.id == "probe.launch.native-failed" for f in findings):
        worst = "native kernel failed"
    elif any(f.id == "probe.launch.forced-ptx-jit" for f in findings):
        worst = "not judged under CUDA_FORCE_PTX_JIT=1"
    elif info.nvcc_failure and not any(f.id == "probe.launch.mismatch" for f in findings):
        worst = f"{info.nvcc_failure_path} cannot build; built with {info.compiler}, kernels behave as predicted"
    else:
        worst = "kernels behave as predicted"
    return Outcome(worst, findings)

"""Step `probe.launch` (order 92): cudadoctor's own minimal kernel through the CUDA driver API, without
torch: native SASS must run, SASS for a foreign arch must fail with "no kernel image"."""

from __future__ import annotations

from cudadoctor.checks.registry import Context, Outcome, step
from cudadoctor.compat import NATIVE
from cudadoctor.model import FactState, Finding, Fix, Status


@step("probe.launch", "driver-API kernel probe", 92, facts=("probe_launch",), requires=("driver",))
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
    if info is None or fact.state in (FactState.FAILED, FactState.TIMEOUT):
        st = Status.FAIL if fact.state == FactState.TIMEOUT else Status.WARN
        return Outcome("probe failed", [Finding(
            "probe.launch.failed" if fact.state != FactState.TIMEOUT else "probe.launch.timeout", st,
            f"The driver-API probe could not launch a kernel: {fact.error}",
            fix=Fix("Run the full probe to see each stage:", ("cudadoctor probe",)),
            evidence={"source": fact.source})])
    rows = {r.get("name"): r for r in info.rows}
    native = rows.get("native")
    findings = []
    if native is None or native.get("driver_api") != NATIVE:
        err = (native or {}).get("driver_error") or (native or {}).get("build_error") or info.launch_error
        findings.append(Finding(
            "probe.launch.native-failed", Status.FAIL,
            f"cudadoctor's own sm_{info.cc.replace('.', '')} kernel did not run through the CUDA driver API: {err}",
            detail="The driver or the GPU cannot run a kernel built for it, independently of torch.",
            fix=Fix("Look at the driver layer first:", ("nvidia-smi", "cudadoctor probe")),
            evidence={"row": native}))
    for r in info.rows:
        if r.get("match") is False:
            findings.append(Finding(
                "probe.launch.mismatch", Status.WARN,
                f"build {r.get('name')} ({' '.join(r.get('sass', []) + r.get('ptx', []))}): the rule predicted "
                f"{r.get('predicted')}, the GPU gave {r.get('driver_api')}",
                detail=r.get("driver_error", ""), evidence={"row": r},
                fix=Fix("Please report it with the output of:", ("cudadoctor probe --json",))))
    if not findings:
        foreign = rows.get("sass-foreign") or {}
        findings.append(Finding(
            "probe.launch.ok", Status.OK,
            f"driver API: native {' '.join(native.get('sass', []))} kernel ran on {info.device} (cc {info.cc}); "
            f"{' '.join(foreign.get('sass', [])) or 'foreign'} build gave {foreign.get('driver_api') or '-'} as predicted",
            evidence={"compiler": info.compiler, "driver_cuda": info.driver_cuda}))
    worst = "native kernel failed" if any(f.status == Status.FAIL for f in findings) else "kernels behave as predicted"
    return Outcome(worst, findings)

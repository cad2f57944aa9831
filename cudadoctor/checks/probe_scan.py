"""Step `probe.scan` (order 90): CUDA binaries in the target's site-packages that cannot run on this GPU,
and a TORCH_CUDA_ARCH_LIST that would build extensions this GPU cannot run."""

from __future__ import annotations

from cudadoctor.checks.common import driver_view, q
from cudadoctor.checks.registry import Context, Outcome, step
from cudadoctor.compat import NATIVE, NO_IMAGE, PTX_JIT, PTX_TOO_NEW, cc_str
from cudadoctor.model import Finding, Fix, Status

DOCS = "https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#binary-compatibility"
EXT_DOCS = "https://pytorch.org/docs/stable/cpp_extension.html"


def _gpu(ctx: Context):
    dv = driver_view(ctx)
    g = next((g for g in dv.gpus if g.cc), None)
    return (g.cc, g.name, dv.cuda) if g else (None, "", dv.cuda)


def _dist(pkg: str) -> str:
    return pkg.replace("_", "-")


@step("probe.scan", "CUDA binaries vs this GPU", 90, facts=("probe_scan", "nvidia_smi", "nvml", "env"))
def check_probe_scan(ctx: Context) -> Outcome:
    """Every CUDA binary in the target's site-packages judged against this GPU's compute capability."""
    from cudadoctor.probes.scan import arch_list_verdict, judge

    cc, name, driver_cuda = _gpu(ctx)
    if cc is None:
        return Outcome("no GPU to judge binaries against",
                       [Finding("probe.scan.no-gpu", Status.SKIP, "No GPU with a known compute capability; "
                                "nothing to judge the installed CUDA binaries against.")])
    findings = []
    env = ctx.fact("env").value
    arch_list = (env.vars.get("TORCH_CUDA_ARCH_LIST") if env is not None else None) or ""
    if arch_list:
        sel = arch_list_verdict(arch_list, cc)
        ok_list = f"{cc[0]}.{cc[1]}"
        if sel is not None and sel.verdict not in (NATIVE, PTX_JIT):
            findings.append(Finding(
                "probe.arch-list.cannot-run", Status.WARN,
                f"TORCH_CUDA_ARCH_LIST={arch_list} builds extensions this GPU ({name}, cc {cc_str(cc)}) cannot run",
                detail=sel.reason,
                fix=Fix(f"Build extensions for cc {cc_str(cc)}:", (f"export TORCH_CUDA_ARCH_LIST=\"{ok_list}\"",),
                        EXT_DOCS),
                evidence={"TORCH_CUDA_ARCH_LIST": arch_list, "cc": cc_str(cc)}))
    fact = ctx.fact("probe_scan")
    info = fact.value
    if info is None or not fact.ok:
        # not a diagnosis: a target interpreter that cannot start is the torch step's finding
        findings.append(Finding("probe.scan.failed", Status.SKIP,
                                f"Could not scan the target's site-packages: {fact.error or fact.state.value}",
                                evidence={"source": fact.source}))
        return Outcome("site-packages not scanned", findings)
    judged = judge(info, tuple(cc), driver_cuda or None)
    py = info.python or "python"
    bad = [j for j in judged if j.verdict in (NO_IMAGE, PTX_TOO_NEW)]
    jit = [j for j in judged if j.verdict == PTX_JIT]
    unreadable = [j for j in judged if j.verdict == "unreadable"]
    by_pkg: dict = {}
    for j in bad:
        by_pkg.setdefault(j.file.package, []).append(j)
    for pkg, js in sorted(by_pkg.items()):
        first = js[0]
        too_new = any(j.verdict == PTX_TOO_NEW for j in js)
        summary = (f"{pkg}: {len(js)} CUDA binar{'y' if len(js) == 1 else 'ies'} cannot run on {name} "
                   f"(cc {cc_str(cc)}): " + ("PTX newer than the driver (error 222)" if too_new else
                                             "no kernel image for this GPU"))
        detail = "; ".join(f"{j.file.path}: SASS {', '.join(j.file.sass) or '-'}, PTX {', '.join(j.file.ptx) or '-'}"
                           for j in js[:5]) + (f"; and {len(js) - 5} more" if len(js) > 5 else "")
        cmds = (f"cudadoctor archs {q(first.file.path)} --cc {cc_str(cc)}",
                f"TORCH_CUDA_ARCH_LIST=\"{cc[0]}.{cc[1]}\" {q(py)} -m pip install --force-reinstall --no-cache-dir "
                f"--no-build-isolation --no-binary {_dist(pkg)} {_dist(pkg)}")
        text = (f"Install a {pkg} build that includes sm_{cc[0]}{cc[1]} (check the package's wheels for your CUDA), "
                f"or rebuild it from source for this GPU:")
        if too_new:
            text = f"Update the NVIDIA driver (it runs CUDA {driver_cuda}), or install a {pkg} build made with it:"
        findings.append(Finding("probe.scan.no-kernel-image" if not too_new else "probe.scan.ptx-too-new",
                                Status.FAIL, summary, detail=detail, fix=Fix(text, cmds, DOCS),
                                evidence={"files": [{"path": j.file.path, "sass": j.file.sass, "ptx": j.file.ptx,
                                                     "verdict": j.verdict} for j in js]},
                                affects=pkg))
    for pkg in sorted({j.file.package for j in jit} - set(by_pkg)):
        js = [j for j in jit if j.file.package == pkg]
        findings.append(Finding(
            "probe.scan.ptx-jit-only", Status.WARN,
            f"{pkg}: {len(js)} CUDA binar{'y' if len(js) == 1 else 'ies'} carry no SASS for cc {cc_str(cc)} and run "
            f"only through the driver's PTX JIT (slow first launch, JIT cache in ~/.nv/ComputeCache)",
            detail="; ".join(f"{j.file.path}: PTX {j.image}" for j in js[:5]),
            fix=Fix(f"Prefer a {pkg} build with SASS for sm_{cc[0]}{cc[1]}:",
                    (f"cudadoctor archs {q(js[0].file.path)} --cc {cc_str(cc)}",), DOCS),
            evidence={"files": [j.file.path for j in js]}, affects=pkg))
    if unreadable:
        findings.append(Finding("probe.scan.unreadable", Status.WARN,
                                f"{len(unreadable)} CUDA file(s) could not be read (truncated or corrupt)",
                                detail="; ".join(j.reason for j in unreadable[:5]),
                                fix=Fix("Reinstall the packages these files belong to:",
                                        tuple(f"{q(py)} -m pip install --force-reinstall --no-deps "
                                              f"{_dist(p)}" for p in sorted({j.file.package for j in unreadable}))),
                                evidence={"files": [j.file.path for j in unreadable]}))
    n = len(judged)
    if not any(f.status in (Status.FAIL, Status.WARN) for f in findings if f.id.startswith("probe.scan")):
        findings.append(Finding("probe.scan.ok", Status.OK,
                                f"{n} CUDA binar{'y' if n == 1 else 'ies'} in {len(info.site_packages)} site-packages "
                                f"folder(s): all can run on {name} (cc {cc_str(cc)})",
                                evidence={"files": n, "candidates": info.candidates, "seconds": info.seconds}))
    summary = (f"{len(bad)} of {n} CUDA binaries cannot run on cc {cc_str(cc)}" if bad else
               f"{n} CUDA binaries can run on cc {cc_str(cc)}")
    return Outcome(summary, findings)

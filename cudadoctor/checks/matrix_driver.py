"""Matrix checks: the driver against the installed toolkits (nvcc) and against torch's CUDA."""

from __future__ import annotations

from cudadoctor.checks.common import driver_view
from cudadoctor.checks.registry import Context, Outcome, step
from cudadoctor.matrix.advice import (
    DRIVER_DOCS,
    driver_upgrade_commands,
    sm_flag,
    torch_fix_commands,
)
from cudadoctor.checks.matrix_nearest import mark
from cudadoctor.facts.types import NvccInstall, ToolkitInfo, TorchInfo
from cudadoctor.matrix.freshness import beyond_cuda, nearest_toolkit
from cudadoctor.model import Fact, Finding, Fix, Status

DRIVER_FACTS = ("nvidia_smi", "nvml", "kernel_module")


def _typed(fact, tp):
    """The fact, or a not-applicable one when its value is not a `tp` (a hand-edited facts file)."""
    if fact.value is not None and not isinstance(fact.value, tp):
        return Fact.failed(fact.source, f"value is not a {tp.__name__}")
    return fact


def _gpu_ccs(dv, ctx) -> list:
    ccs = [g.cc for g in dv.gpus if g.cc]
    if not ccs:
        t = _typed(ctx.fact("torch"), TorchInfo)
        if t.ok:
            from cudadoctor.compat import parse_cc

            ccs = [c for c in (parse_cc(d.capability) for d in t.value.devices) if c]
    return sorted(set(ccs))


def _need(m, cuda: str) -> dict:
    r = m.min_driver(cuda) or {}
    out = {"full": (r.get("full") or {}).get("linux"), "floor": (r.get("minor_compat") or {}).get("linux"),
           "nearest": None}
    if out["full"] is None and beyond_cuda(m, cuda):  # a CUDA newer than the data: its last row's driver
        out["nearest"] = nearest_toolkit(m, cuda)
        out["full"] = (out["nearest"] or {}).get("linux")
    return out


def _nearest(f: Finding, m, cuda: str, need: dict) -> Finding:
    """The finding, marked 'unverified' when its minimum driver came from the nearest row. The verdict
    itself compares the driver's own CUDA version with this CUDA (a rule, not data): it stands."""
    if not need["nearest"]:
        return f
    return mark(f, f"CUDA {cuda}", need["nearest"]["row"], f"CUDA {m.cuda_data_stops_at}", soften=False)


@step("matrix.driver-toolkit", "driver vs CUDA toolkit", 80, facts=DRIVER_FACTS + ("toolkit",))
def check_driver_toolkit(ctx: Context) -> Outcome:
    """Can the driver run what each installed nvcc builds (full, minor-version compatibility, or not)?"""
    dv = driver_view(ctx)
    tk = _typed(ctx.fact("toolkit"), ToolkitInfo)
    if not dv.present:
        return Outcome("no driver found to compare with",
                       [Finding("matrix.driver-toolkit.no-driver", Status.SKIP, "no NVIDIA driver found")])
    installs = [i for i in (tk.value.installs if tk.value else []) if isinstance(i, NvccInstall) and i.version]
    if not installs:
        return Outcome("no nvcc found", [Finding("matrix.driver-toolkit.no-nvcc", Status.SKIP, "no nvcc found")])
    m = ctx.matrix
    dcuda = dv.cuda or m.max_cuda_for_driver(dv.version) or "?"
    ccs = _gpu_ccs(dv, ctx)
    findings = []
    for inst in installs:
        verdict = m.driver_runs_cuda(dv.version, inst.version, dv.cuda or None)
        need = _need(m, inst.version)
        ev = {"driver": dv.version, "driver_cuda": dcuda, "nvcc": inst.nvcc, "nvcc_version": inst.version,
              "min_driver_full": need["full"], "min_driver_minor_compat": need["floor"]}
        if verdict == "full":
            f = Finding("matrix.driver-toolkit.ok", Status.OK,
                        f"driver {dv.version} (CUDA {dcuda}) fully runs nvcc {inst.version}",
                        evidence=ev, affects=inst.nvcc)
        elif verdict == "minor-version":
            arch = " ".join(sm_flag(c) for c in ccs) or "-arch=sm_XY"
            f = Finding(
                "matrix.driver-toolkit.minor-compat", Status.WARN,
                f"nvcc {inst.version} is newer than driver {dv.version} (CUDA {dcuda}): runs under minor-version compatibility",
                detail=(f"Programs built by nvcc {inst.version} run on this driver through CUDA minor-version "
                        f"compatibility, with limits: PTX that nvcc {inst.version} emits cannot be JIT-compiled by a "
                        f"CUDA {dcuda} driver (error 222, 'the provided PTX was compiled with an unsupported "
                        f"toolchain'), and APIs that need a newer driver fail with error 36. Build SASS for your GPU "
                        f"({arch}) rather than PTX only, or upgrade the driver to >= {need['full']} for full "
                        f"compatibility."),
                fix=Fix(f"Compile real GPU code ({arch}) or upgrade the driver to >= {need['full']}",
                        tuple(driver_upgrade_commands(need["full"] or "")), DRIVER_DOCS),
                evidence=ev, affects=inst.nvcc)
        elif verdict == "too-old":
            f = Finding(
                "matrix.driver-toolkit.driver-too-old", Status.FAIL,
                f"driver {dv.version} (CUDA {dcuda}) is too old for nvcc {inst.version}",
                detail=(f"CUDA {inst.version} needs driver >= {need['floor'] or need['full']} "
                        f"(>= {need['full']} for full compatibility). Programs built by this nvcc fail at start-up "
                        f"with error 35 (CUDA driver version is insufficient for CUDA runtime version)."),
                fix=Fix(f"Upgrade the driver to >= {need['full']}, or use a CUDA toolkit <= {dcuda}",
                        tuple(driver_upgrade_commands(need["full"] or "")), DRIVER_DOCS),
                evidence=ev, affects=inst.nvcc)
        else:
            f = Finding("matrix.driver-toolkit.unknown", Status.SKIP,
                        f"cannot compare driver {dv.version} with nvcc {inst.version}: not in the data",
                        evidence=ev, affects=inst.nvcc)
        findings.append(_nearest(f, m, inst.version, need))
    worst = [f for f in findings if f.status is not Status.OK]
    return Outcome(worst[0].summary if worst else f"driver {dv.version} runs every installed nvcc", findings)


@step("matrix.driver-torch", "driver vs torch's CUDA", 81, facts=DRIVER_FACTS + ("torch",))
def check_driver_torch(ctx: Context) -> Outcome:
    """Can the driver run the CUDA that the torch wheel was built with?"""
    dv = driver_view(ctx)
    t = _typed(ctx.fact("torch"), TorchInfo)
    if not dv.present:
        return Outcome("no driver found to compare with",
                       [Finding("matrix.driver-torch.no-driver", Status.SKIP, "no NVIDIA driver found")])
    if not t.ok or not t.value.installed or not t.value.cuda:
        return Outcome("no CUDA build of torch to compare with",
                       [Finding("matrix.driver-torch.no-torch-cuda", Status.SKIP, "torch with CUDA is not installed")])
    m = ctx.matrix
    tv = t.value
    dcuda = dv.cuda or m.max_cuda_for_driver(dv.version) or "?"
    verdict = m.driver_runs_cuda(dv.version, tv.cuda, dv.cuda or None)
    need = _need(m, tv.cuda)
    ev = {"driver": dv.version, "driver_cuda": dcuda, "torch": tv.version, "torch_cuda": tv.cuda,
          "min_driver_full": need["full"], "min_driver_minor_compat": need["floor"]}
    ccs = _gpu_ccs(dv, ctx)
    if verdict == "full":
        f = Finding("matrix.driver-torch.ok", Status.OK,
                    f"driver {dv.version} (CUDA {dcuda}) fully runs torch {tv.version} (CUDA {tv.cuda})", evidence=ev)
    elif verdict == "minor-version":
        text, cmds = torch_fix_commands(ctx.matrix, ccs, dv.version, dcuda if dv.cuda else None, tv.version)
        f = Finding(
            "matrix.driver-torch.minor-compat", Status.WARN,
            f"torch {tv.version} (CUDA {tv.cuda}) runs on driver {dv.version} (CUDA {dcuda}) under minor-version compatibility",
            detail=(f"The wheel's own kernels are SASS and run, but anything JIT-compiled from PTX newer than CUDA "
                    f"{dcuda} fails with error 222, and APIs that need a newer driver fail with error 36. "
                    f"Full compatibility needs driver >= {need['full']}."),
            fix=Fix(f"Upgrade the driver to >= {need['full']}, or: {text}",
                    tuple(driver_upgrade_commands(need["full"] or "") + cmds), DRIVER_DOCS),
            evidence=ev)
    elif verdict == "too-old":
        text, cmds = torch_fix_commands(ctx.matrix, ccs, dv.version, dcuda if dv.cuda else None, tv.version)
        f = Finding(
            "matrix.driver-torch.driver-too-old", Status.FAIL,
            f"driver {dv.version} (CUDA {dcuda}) is too old for torch {tv.version} (CUDA {tv.cuda})",
            detail=(f"CUDA {tv.cuda} needs driver >= {need['floor'] or need['full']}; torch fails at CUDA "
                    f"initialisation ('The NVIDIA driver on your system is too old')."),
            fix=Fix(f"Upgrade the driver to >= {need['floor'] or need['full']}, or: {text}",
                    tuple(cmds + driver_upgrade_commands(need["full"] or "")), DRIVER_DOCS),
            evidence=ev)
    else:
        f = Finding("matrix.driver-torch.unknown", Status.SKIP,
                    f"cannot compare driver {dv.version} with torch CUDA {tv.cuda}: not in the data", evidence=ev)
    f = _nearest(f, m, tv.cuda, need)
    return Outcome(f.summary, [f])

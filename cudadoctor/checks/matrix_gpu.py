"""Matrix checks: the GPU against the nvcc found, and against the torch wheel's architectures."""

from __future__ import annotations

from cudadoctor.checks.common import driver_view
from cudadoctor.checks.matrix_driver import DRIVER_FACTS, _gpu_ccs, _typed
from cudadoctor.checks.registry import Context, Outcome, step
from cudadoctor.compat import NATIVE, NO_IMAGE, PTX_JIT, cc_str, select_image
from cudadoctor.checks.matrix_nearest import mark, mark_all
from cudadoctor.matrix.advice import TORCH_DOCS, toolkit_for, toolkit_install_commands, torch_fix_commands
from cudadoctor.matrix.freshness import beyond_nvcc, nearest_variant
from cudadoctor.matrix.versions import major_minor
from cudadoctor.facts.types import NvccInstall, ToolkitInfo, TorchInfo
from cudadoctor.model import Finding, Fix, Status


def _gpu_names(dv) -> dict:
    out: dict = {}
    for g in dv.gpus:
        if g.cc and g.cc not in out:
            out[g.cc] = g.name
    return out


def _active(inst, tk) -> bool:
    """The nvcc a build would use: first on PATH, or $CUDA_HOME's."""
    return bool((tk.path_nvcc and tk.path_nvcc == inst.nvcc) or "PATH" in inst.found_via
                or (tk.home_var and tk.home_var in inst.found_via))


@step("matrix.nvcc-gpu", "nvcc vs GPU architecture", 82, facts=DRIVER_FACTS + ("toolkit", "torch"))
def check_nvcc_gpu(ctx: Context) -> Outcome:
    """Can each nvcc found build code (sm_XY) for each GPU?"""
    dv = driver_view(ctx)
    ccs = _gpu_ccs(dv, ctx)
    tk = _typed(ctx.fact("toolkit"), ToolkitInfo)
    installs = [i for i in (tk.value.installs if tk.value else []) if isinstance(i, NvccInstall) and i.version]
    if not ccs:
        return Outcome("no GPU to compare with", [Finding("matrix.nvcc-gpu.no-gpu", Status.SKIP, "no GPU found")])
    if not installs:
        return Outcome("no nvcc found", [Finding("matrix.nvcc-gpu.no-nvcc", Status.SKIP, "no nvcc found")])
    m = ctx.matrix
    names = _gpu_names(dv)
    findings = []
    for cc in ccs:
        gpu = f"{names.get(cc) or 'GPU'} (cc {cc_str(cc)})"
        rng = m.nvcc_for_cc(cc)
        for inst in installs:
            ok = m.nvcc_supports_cc(inst.version, cc)
            ev = {"gpu": gpu, "nvcc": inst.nvcc, "nvcc_version": inst.version,
                  "nvcc_range": None if rng is None else {"first": rng["first"], "last": rng["last"]}}
            if ok is None:
                findings.append(Finding("matrix.nvcc-gpu.unknown", Status.SKIP,
                                        f"no data on nvcc {inst.version} for cc {cc_str(cc)}", evidence=ev,
                                        affects=inst.nvcc))
                continue
            if ok:
                findings.append(Finding("matrix.nvcc-gpu.ok", Status.OK,
                                        f"nvcc {inst.version} can build sm_{cc[0]}{cc[1]} for {gpu}",
                                        evidence=ev, affects=inst.nvcc))
                continue
            too_new = rng["last"] is not None and major_minor(inst.version) > major_minor(rng["last"])
            why = (f"CUDA {rng['last']} was the last toolkit with sm_{cc[0]}{cc[1]}" if too_new
                   else f"sm_{cc[0]}{cc[1]} needs CUDA >= {rng['first']}")
            want = toolkit_for(m, cc, dv.version or None, dv.cuda or None)
            cmds = tuple(toolkit_install_commands(want)) if want else ()
            fix_text = (f"Use CUDA {want}, the newest toolkit that targets cc {cc_str(cc)} and that this driver runs"
                        if want else f"Use a CUDA toolkit between {rng['first']} and {rng['last'] or 'now'} "
                                     f"(and a driver that runs it)")
            status = Status.FAIL if _active(inst, tk.value) else Status.WARN
            findings.append(Finding(
                "matrix.nvcc-gpu.cannot-target", status,
                f"nvcc {inst.version} cannot build for {gpu}: {why}",
                detail=(f"nvcc {inst.version} stops with \"nvcc fatal : Unsupported gpu architecture "
                        f"'compute_{cc[0]}{cc[1]}'\" for this GPU; CUDA extensions (torch cpp_extension, "
                        f"TORCH_CUDA_ARCH_LIST) cannot be built for it with this toolkit."),
                fix=Fix(fix_text, cmds, "https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/"),
                evidence=ev, affects=inst.nvcc))
    findings = [mark(f, f"nvcc {f.evidence['nvcc_version']}", f"CUDA {m.nvcc_data_stops_at}'s rows",
                     f"nvcc {m.nvcc_data_stops_at}")
                if f.id == "matrix.nvcc-gpu.ok" and beyond_nvcc(m, f.evidence["nvcc_version"]) else f for f in findings]
    bad = [f for f in findings if f.status in (Status.FAIL, Status.WARN)]
    return Outcome(bad[0].summary if bad else "every nvcc found can build for every GPU", findings)


@step("matrix.torch-gpu", "torch wheel vs GPU architecture", 83, facts=DRIVER_FACTS + ("torch",))
def check_torch_gpu(ctx: Context) -> Outcome:
    """Does the torch wheel carry kernels (SASS or PTX) for each GPU?"""
    dv = driver_view(ctx)
    t = _typed(ctx.fact("torch"), TorchInfo)
    if not t.ok or not t.value.installed or not t.value.cuda:
        return Outcome("no CUDA build of torch", [Finding("matrix.torch-gpu.no-torch-cuda", Status.SKIP,
                                                          "torch with CUDA is not installed")])
    tv = t.value
    m = ctx.matrix
    arch_list = list(tv.arch_list)
    source = "torch.cuda.get_arch_list()"
    near = None
    if not arch_list:
        var = m.variant_for(tv.version, tv.cuda)
        if var:
            arch_list, source = var["arch_list"], f"cudadoctor's matrix for torch {var['torch']} {var['cu']}"
        near = None if var else nearest_variant(m, tv.version, tv.cuda)
        if near:
            arch_list, source = near["arch_list"], f"cudadoctor's matrix, nearest row ({near['row']})"
    ccs = _gpu_ccs(dv, ctx)
    if not ccs:
        return Outcome("no GPU to compare with", [Finding("matrix.torch-gpu.no-gpu", Status.SKIP, "no GPU found")])
    if not arch_list:
        return Outcome("torch's arch list is unknown", [Finding("matrix.torch-gpu.no-arch-list", Status.SKIP,
                                                                "torch reported no arch list")])
    sass = [a for a in arch_list if a.startswith("sm_")]
    ptx = [a for a in arch_list if a.startswith("compute_")]
    names = _gpu_names(dv)
    findings = []
    for cc in ccs:
        gpu = f"{names.get(cc) or 'GPU'} (cc {cc_str(cc)})"
        sel = select_image(sass, ptx, cc)
        ev = {"gpu": gpu, "torch": tv.version, "torch_cuda": tv.cuda, "arch_list": arch_list,
              "arch_list_source": source, "image": sel.image}
        if sel.verdict == NATIVE:
            findings.append(Finding("matrix.torch-gpu.ok", Status.OK,
                                    f"torch {tv.version} has {sel.image} kernels for {gpu}", evidence=ev))
        elif sel.verdict == PTX_JIT:
            findings.append(Finding(
                "matrix.torch-gpu.ptx-jit", Status.WARN,
                f"torch {tv.version} has no SASS for {gpu}; the driver JIT-compiles {sel.image} PTX",
                detail="It works, but the first start compiles every kernel (minutes) and some kernels may be slower.",
                fix=Fix(*torch_fix_commands(m, [cc], dv.version or None, dv.cuda or None, tv.version), TORCH_DOCS)
                if m.recommend_torch(cc, dv.version or None, dv.cuda or None) else None,
                evidence=ev))
        else:
            text, cmds = torch_fix_commands(m, ccs, dv.version or None, dv.cuda or None, tv.version)
            findings.append(Finding(
                "matrix.torch-gpu.no-kernel-image", Status.FAIL,
                f"torch {tv.version} has no kernels for {gpu} (built for {', '.join(arch_list)})",
                detail=("CUDA ops fail with 'no kernel image is available for execution on the device' (error 209); "
                        "torch warns that the GPU 'is not compatible with the current PyTorch installation'."),
                fix=Fix(text, tuple(cmds), TORCH_DOCS), evidence=ev))
    if near:
        findings = mark_all(findings, f"torch {tv.version}", near["row"], f"torch {m.torch_data_stops_at}")
    bad = [f for f in findings if f.status is not Status.OK]
    return Outcome(bad[0].summary if bad else f"torch {tv.version} has kernels for every GPU", findings)


__all__ = ["check_nvcc_gpu", "check_torch_gpu", "NO_IMAGE"]

"""Step `probe.scan` (order 90): CUDA binaries wherever the target interpreter loads from (site-packages,
editable installs, PYTHONPATH, .pth, torch's JIT cache, LD_LIBRARY_PATH, LD_PRELOAD) that cannot run on
this GPU, judged module by module, each with the rebuild its owner needs; and a TORCH_CUDA_ARCH_LIST
that would build extensions this GPU cannot run."""

from __future__ import annotations

import re
from typing import Optional

from cudadoctor.checks.common import env_vars, ld_without, q
from cudadoctor.checks.env_cuda_driver import jit_disabled
from cudadoctor.checks.registry import Context, Outcome, step
from cudadoctor.compat import NATIVE, NO_IMAGE, PTX_JIT, PTX_TOO_NEW, cc_str
from cudadoctor.model import Finding, Fix, Status

DOCS = "https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#binary-compatibility"
EXT_DOCS = "https://pytorch.org/docs/stable/cpp_extension.html"


def _gpu(ctx: Context):
    """The GPU the scan fact judged against (nvidia-smi/NVML, else CUDA's list where neither can list GPUs)."""
    from cudadoctor.facts.local_gpu import from_facts

    g = from_facts(ctx.facts)
    return g.cc, g.name, g.driver_cuda


def _dist(pkg: str) -> str:
    return pkg.replace("_", "-")


def _owner_key(f) -> str:
    """What a finding is about: the distribution, else the JIT extension, else the folder it came from."""
    if f.dist:
        return f.dist
    if f.origin == "jit-cache":
        return f"torch JIT extension {_jit_folder(f).rsplit('/', 1)[-1]}"
    if f.origin in ("LD_LIBRARY_PATH", "LD_PRELOAD"):
        return f"{f.origin} {f.root or f.path}"
    return f.project or f.package


def _jit_folder(f) -> str:
    """The extension's own build folder: the first folder under the JIT cache root."""
    rel = f.path[len(f.root.rstrip("/")) + 1:] if f.root and f.path.startswith(f.root) else ""
    first = rel.split("/", 1)[0] if "/" in rel else ""
    return f"{f.root.rstrip('/')}/{first}" if first else (f.path.rsplit("/", 1)[0])


def _where(f) -> str:
    owner = f" {f.install} install of {f.dist}{' ' + f.version if f.version else ''}" if f.dist else ""
    return f"{f.origin}{':' if owner else ''}{owner}"


def _file_evidence(j) -> dict:
    f = j.file
    return {"path": f.path, "origin": f.origin, "dist": f.dist or None, "version": f.version or None,
            "sass": f.sass, "ptx": f.ptx, "verdict": j.verdict,
            "module": j.worst.module.name() if j.worst is not None else None}


def rebuild_fix(f, cc: tuple, py: str, text: str, env_vars: Optional[dict] = None) -> Fix:
    """The exact rebuild for where the binary came from (its owner's own folder, the JIT cache, a wheel)."""
    arch = f"{cc[0]}.{cc[1]}"
    check = f"cudadoctor archs {q(f.path)} --cc {arch}"
    if f.install in ("editable", "develop") and f.source:
        return Fix(text + f" {f.dist} is installed in editable mode from {f.source}; rebuild it there:",
                   (f"cd {q(f.source)} && TORCH_CUDA_ARCH_LIST=\"{arch}\" {q(py)} -m pip install -e . "
                    f"--no-build-isolation --no-deps", check), EXT_DOCS)
    if f.origin == "jit-cache":
        folder = _jit_folder(f)
        return Fix(text + f" torch.utils.cpp_extension.load() reuses this build from {folder} (its cache key is the "
                          f"sources and flags, not the GPU); remove it and build for this GPU:",
                   (f"rm -rf {q(folder)}", f"export TORCH_CUDA_ARCH_LIST=\"{arch}\"", check), EXT_DOCS)
    if f.dist or f.origin == "site-packages":  # no RECORD names it: its folder is the best guess
        dist = f.dist or _dist(f.package)
        pin = f"{dist}=={f.version}" if f.version else dist
        return Fix(text + f" install a {dist} wheel that includes sm_{cc[0]}{cc[1]} (check the package's wheel "
                          f"variants for your CUDA), or rebuild it from source for this GPU:",
                   (f"TORCH_CUDA_ARCH_LIST=\"{arch}\" {q(py)} -m pip install --force-reinstall --no-cache-dir "
                    f"--no-build-isolation --no-deps --no-binary {_dist(dist)} {pin}", check), DOCS)
    if f.project:
        return Fix(text + f" it was built in place in {f.project} ({f.origin}); rebuild it there:",
                   (f"cd {q(f.project)} && TORCH_CUDA_ARCH_LIST=\"{arch}\" {q(py)} setup.py build_ext --inplace",
                    check), EXT_DOCS)
    cmds = [check]
    env_vars = env_vars or {}
    if f.origin == "LD_PRELOAD":
        keep = [x for x in re.split(r"[\s:]+", env_vars.get("LD_PRELOAD", "")) if x and x != f.path]
        cmds.insert(0, f"export LD_PRELOAD={q(' '.join(keep))}" if keep else "unset LD_PRELOAD")
    elif f.origin == "LD_LIBRARY_PATH":
        entries = [x for x in env_vars.get("LD_LIBRARY_PATH", "").split(":") if x]
        cmds.insert(0, ld_without(entries or [f.root], {f.root}))
    return Fix(text + f" {f.path} ({f.origin}) belongs to no installed package; rebuild it with "
                      f"`nvcc -gencode arch=compute_{cc[0]}{cc[1]},code=sm_{cc[0]}{cc[1]}` (or "
                      f"TORCH_CUDA_ARCH_LIST=\"{arch}\" for a torch extension):", tuple(cmds), DOCS)


def _cannot_run(ctx: Context, key: str, js: list, cc: tuple, name: str, driver_cuda: str, py: str) -> Finding:
    first = js[0]
    too_new = any(j.verdict == PTX_TOO_NEW for j in js)
    summary = (f"{key}: {len(js)} CUDA binar{'y' if len(js) == 1 else 'ies'} cannot run on {name} "
               f"(cc {cc_str(cc)}): " + ("PTX newer than the driver (CUDA_ERROR_UNSUPPORTED_PTX_VERSION, 222)" if too_new else
                                         "no kernel image for this GPU"))
    detail = "; ".join(f"{j.file.path} ({_where(j.file)}): {j.reason}" for j in js[:5]) + (
        f"; and {len(js) - 5} more" if len(js) > 5 else "")
    if too_new:
        fix = _too_new_fix(ctx, first, key, driver_cuda, py)
    else:
        fix = rebuild_fix(first.file, cc, py, f"Build {key} for cc {cc_str(cc)}:", env_vars(ctx))
    return Finding("probe.scan.ptx-too-new" if too_new else "probe.scan.no-kernel-image", Status.FAIL, summary,
                   detail=detail, fix=fix, evidence={"files": [_file_evidence(j) for j in js]}, affects=key)


def _too_new_fix(ctx: Context, j, key: str, driver_cuda: str, py: str) -> Fix:
    from cudadoctor.compat import ptx_isa_cuda

    isas = [v for m in j.file.modules for v in m.ptx_isa.values()] + list(j.file.ptx_isa.values())
    isa = max(isas, default="",
              key=lambda v: tuple(int(x) for x in v.split(".")) if v.replace(".", "").isdigit() else (0,))
    made = ptx_isa_cuda(isa) or ""
    need = ""
    if made and getattr(ctx, "matrix", None) is not None:
        try:
            row = ctx.matrix.min_driver(made) or {}
            need = row.get("driver") or ""
        except Exception:  # noqa: BLE001 - the driver row is a refinement of the fix text
            need = ""
    text = (f"Update the NVIDIA driver to one for CUDA {made or 'the PTX version'}" +
            (f" (Linux driver >= {need})" if need else "") + f" (this one runs CUDA {driver_cuda}), "
            f"or build {key} with a toolkit no newer than the driver's CUDA:")
    return Fix(text, (f"cudadoctor archs {q(j.file.path)}", "nvidia-smi --query-gpu=driver_version --format=csv"),
               DOCS)


@step("probe.scan", "CUDA binaries vs this GPU", 90,
      facts=("probe_scan", "nvidia_smi", "nvml", "kernel_module", "cuda_gpus", "env"))
def check_probe_scan(ctx: Context) -> Outcome:
    """Every CUDA binary in the target's site-packages judged against this GPU's compute capability."""
    from cudadoctor.probes.scan import arch_list_verdict, judge

    cc, name, driver_cuda = _gpu(ctx)
    if cc is None:
        return Outcome("no GPU to judge binaries against",
                       [Finding("probe.scan.no-gpu", Status.SKIP, "No GPU with a known compute capability; "
                                "nothing to judge the installed CUDA binaries against.")])
    findings = []
    env = env_vars(ctx)
    arch_list = env.get("TORCH_CUDA_ARCH_LIST") or ""
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
    groups: dict = {}
    for j in bad:
        groups.setdefault(_owner_key(j.file), []).append(j)
    for key, js in sorted(groups.items()):
        findings.append(_cannot_run(ctx, key, js, cc, name, driver_cuda, py))
    jit_groups: dict = {}
    for j in jit:
        if _owner_key(j.file) not in groups:
            jit_groups.setdefault(_owner_key(j.file), []).append(j)
    no_jit = jit_disabled(env)
    for key, js in sorted(jit_groups.items()):
        fix = rebuild_fix(js[0].file, cc, py, f"Rebuild {key} with SASS for sm_{cc[0]}{cc[1]} (no JIT at start-up):",
                          env)
        if no_jit:  # (session 35, H200) a PTX-only kernel failed cold under it, and ran from a warm JIT cache
            fix = Fix("Unset CUDA_DISABLE_PTX_JIT (a kernel JIT-compiled before may still run from the JIT cache), or "
                      + fix.text[:1].lower() + fix.text[1:], ("unset CUDA_DISABLE_PTX_JIT",) + fix.commands, fix.docs)
        findings.append(Finding(
            "probe.scan.ptx-jit-only", Status.FAIL if no_jit else Status.WARN,
            f"{key}: {len(js)} CUDA binar{'y' if len(js) == 1 else 'ies'} carry no SASS for cc {cc_str(cc)} and run "
            + ("only through the driver's PTX JIT, which CUDA_DISABLE_PTX_JIT=1 forbids here ('PTX JIT compilation "
               "was disabled')" if no_jit else
               "only through the driver's PTX JIT (slow first launch; needs a writable JIT cache, ~/.nv/ComputeCache)"),
            detail="; ".join(f"{j.file.path} ({_where(j.file)}): {j.reason}" for j in js[:5]),
            fix=fix, evidence=dict({"files": [_file_evidence(j) for j in js]},
                                   **({"CUDA_DISABLE_PTX_JIT": "1"} if no_jit else {})), affects=key))
    if unreadable:
        findings.append(Finding("probe.scan.unreadable", Status.WARN,
                                f"{len(unreadable)} CUDA file(s) could not be read (truncated or corrupt)",
                                detail="; ".join(j.reason for j in unreadable[:5]),
                                fix=Fix("Reinstall the packages these files belong to:",
                                        tuple(f"{q(py)} -m pip install --force-reinstall --no-deps "
                                              f"{_dist(p)}" for p in sorted({j.file.dist or j.file.package
                                                                              for j in unreadable}))),
                                evidence={"files": [j.file.path for j in unreadable]}))
    cut = [r for r in getattr(info, "roots", []) if r.cut]
    if cut:
        first = cut[0]
        findings.append(Finding(
            "probe.scan.cut", Status.WARN,
            f"scan cut short in {len(cut)} folder(s): CUDA binaries past the cut were not judged",
            detail="; ".join(f"{r.path} ({r.origin}): {r.cut}" for r in cut[:5]),
            fix=Fix("Scan that folder on its own, with a larger budget:",
                    (f"cudadoctor scan --path {q(first.path)} --max-files 1000000",
                     "export CUDADOCTOR_SCAN_MAX_FILES=200000 CUDADOCTOR_TIMEOUT_SCAN=300")),
            evidence={"roots": [{"path": r.path, "origin": r.origin, "files": r.files, "cut": r.cut} for r in cut]}))
    n = len(judged)
    if not any(f.status in (Status.FAIL, Status.WARN) for f in findings if f.id.startswith("probe.scan")):
        origins = sorted({r.origin for r in getattr(info, "roots", [])}) or ["site-packages"]
        findings.append(Finding("probe.scan.ok", Status.OK,
                                f"{n} CUDA binar{'y' if n == 1 else 'ies'} where {py} loads from "
                                f"({', '.join(origins)}): all can run on {name} (cc {cc_str(cc)})",
                                evidence={"files": n, "candidates": info.candidates, "seconds": info.seconds,
                                          "roots": len(getattr(info, "roots", []))}))
    summary = (f"{len(bad)} of {n} CUDA binaries cannot run on cc {cc_str(cc)}" if bad else
               f"{n} CUDA binaries can run on cc {cc_str(cc)}")
    if no_jit and jit:  # the PTX-only ones cannot run here either: the JIT they need is forbidden
        summary += f"; {len(jit)} only through the PTX JIT, which CUDA_DISABLE_PTX_JIT=1 forbids"
    return Outcome(summary, findings)

"""Matrix checks: the cuDNN torch loaded vs torch's CUDA and the GPU; the host gcc vs each nvcc."""

from __future__ import annotations

from cudadoctor.checks.common import driver_view, first_line, q
from cudadoctor.checks.libraries import cudnn_error, shadow_fix, shadows
from cudadoctor.checks.matrix_driver import DRIVER_FACTS, _gpu_ccs, _typed
from cudadoctor.checks.registry import Context, Outcome, step
from cudadoctor.compat import cc_str
from cudadoctor.facts.compiler import CompilerInfo
from cudadoctor.checks.matrix_nearest import mark, mark_all, refix
from cudadoctor.matrix.advice import TORCH_DOCS, torch_fix_commands
from cudadoctor.matrix.freshness import cudnn_major_ok, nearest_compilers, nearest_cudnn, nearest_variant
from cudadoctor.matrix.versions import cc_key, cudnn_from_int, major_minor
from cudadoctor.facts.types import NvccInstall, ToolkitInfo, TorchInfo
from cudadoctor.model import Finding, Fix, Status


def cudnn_in_use(ctx: Context, tv) -> tuple:
    """(version, where it was read) of the cuDNN torch runs with: torch's runtime version, else
    torch.backends.cudnn.version(), else the loaded libcudnn* files (the oldest: cuDNN's version is its graph
    library's, and a mix is itself broken). ('', why not) when unknown."""
    cud = tv.cudnn
    if cud is not None and cud.runtime:
        return cud.runtime, "torch._C._cudnn.getRuntimeVersion()"
    v = cudnn_from_int(tv.cudnn_version)
    if v:
        return v, "torch.backends.cudnn.version()"
    libs = ctx.fact("libs").value
    loaded = [x for x in (libs.loaded if libs is not None else []) if x.family.startswith("libcudnn")
              and x.version.count(".") >= 1]
    if loaded:
        oldest = min(loaded, key=lambda x: cc_key(".".join(x.version.split(".")[:2])))
        return ".".join(oldest.version.split(".")[:3]), f"{oldest.realpath} (loaded by torch)"
    return "", ""


def cudnn_built_for(ctx: Context, tv) -> tuple:
    """(version, source) of the cuDNN torch was compiled against: torch's own word, else its wheel's pin."""
    if tv.cudnn is not None and tv.cudnn.compiled:
        return tv.cudnn.compiled, "torch._C._cudnn.getCompileVersion()"
    var = ctx.matrix.variant_for(tv.version, tv.cuda)
    if var and var.get("cudnn"):
        return str(var["cudnn"]), f"the cuDNN torch {tv.version}'s wheel pins (cudadoctor's matrix)"
    return "", ""


def older_than_built(have: str, built: str) -> bool:
    """torch's own rule (torch/backends/cudnn/__init__.py): another major, or an older minor, is incompatible."""
    h, b = major_minor(have), major_minor(built)
    return bool(h and b) and (h[0] != b[0] or h[1] < b[1])


@step("matrix.cudnn", "cuDNN vs torch's CUDA and the GPU", 84, facts=DRIVER_FACTS + ("torch", "libs"))
def check_cudnn(ctx: Context) -> Outcome:
    """Is the cuDNN torch runs with the one it was built against, built for torch's CUDA, with kernels for the GPU?"""
    t = _typed(ctx.fact("torch"), TorchInfo)
    if not t.ok or not t.value.installed or not t.value.cuda:
        return Outcome("no CUDA build of torch", [Finding("matrix.cudnn.no-torch-cuda", Status.SKIP,
                                                          "torch with CUDA is not installed")])
    tv = t.value
    if tv.cudnn is not None and tv.cudnn.available is False:
        return Outcome(f"torch {tv.version} is built without cuDNN", [Finding(
            "matrix.cudnn.not-built", Status.SKIP, f"torch {tv.version} is built without cuDNN")])
    loaded, read_from = cudnn_in_use(ctx, tv)
    if not loaded:
        why = tv.stopped or "torch did not report it and no libcudnn is loaded"
        return Outcome("cuDNN version unknown", [Finding("matrix.cudnn.not-loaded", Status.SKIP,
                                                         f"the cuDNN version is unknown: {why}")])
    m = ctx.matrix
    dv = driver_view(ctx)
    built, built_from = cudnn_built_for(ctx, tv)
    ev = {"cudnn": loaded, "read from": read_from, "torch": tv.version, "torch_cuda": tv.cuda}
    if built:
        ev["built against"] = f"{built} ({built_from})"
    findings = []
    if built and older_than_built(loaded, built):
        err = cudnn_error(tv, built, loaded)
        findings.append(Finding(
            "matrix.cudnn.older-than-torch", Status.FAIL,
            f"cuDNN {loaded} is loaded but torch {tv.version} was built against {built}: torch gives {_first(err)}",
            detail="torch refuses a cuDNN of another major or an older minor than it was built against, whenever it "
                   "checks cuDNN's version (torch.backends.cudnn.version(), cuDNN RNNs). Usually an older system or "
                   "conda cuDNN found through LD_LIBRARY_PATH ahead of the wheel's, or the wheel's own cuDNN gone (a "
                   "broken or half-removed nvidia-cudnn package), so the loader found the system's (see the libraries "
                   "step; on the H200, hiding the wheel's cuDNN loaded the system's 9.14 this way).",
            fix=_older_fix(ctx, tv, built), evidence=dict(ev, error=err)))
    row = m.cudnn_row(loaded)
    near = None if row else nearest_cudnn(m, loaded)  # a cuDNN newer than the data: its last row
    row = row or near
    if row is None:
        findings.append(Finding("matrix.cudnn.unknown", Status.SKIP, f"cuDNN {loaded} is not in cudadoctor's data",
                                evidence=ev))
        return Outcome(findings[0].summary, findings)
    if not (cudnn_major_ok(row, tv.cuda) if near else m.cudnn_supports_cuda(loaded, tv.cuda)):
        findings.append(Finding(
            "matrix.cudnn.cuda-mismatch", Status.FAIL,
            f"cuDNN {loaded} has no build for CUDA {tv.cuda} (it supports {', '.join(row['cuda'])})",
            detail="torch loaded a cuDNN built for another CUDA major, usually a system or conda copy found "
                   "through LD_LIBRARY_PATH instead of the wheel's nvidia-cudnn package.",
            fix=Fix("Let torch load the cuDNN its wheel pins: remove foreign cuDNN folders from LD_LIBRARY_PATH "
                    "and reinstall torch's dependencies",
                    (f"pip install --force-reinstall --no-deps 'torch=={tv.version}' "
                     f"--index-url https://download.pytorch.org/whl/{_cu(tv.cuda)}",), TORCH_DOCS),
            evidence=ev))
    var = m.variant_for(tv.version, tv.cuda)
    tnear = None if var else nearest_variant(m, tv.version, tv.cuda)  # a torch newer than the data
    var = var or tnear
    if var and var.get("cudnn") and not findings:
        want, have = major_minor(var["cudnn"]), major_minor(loaded)
        ev["wheel_cudnn"] = var["cudnn"]
        # another major; or, when torch did not say what it was built against (a torch newer than the data,
        # judged from the nearest row), an older minor than that row pins
        if have[0] != want[0] or (not built and have < want):
            findings.append(Finding(
                "matrix.cudnn.not-the-wheels", Status.WARN,
                f"torch {tv.version} loaded cuDNN {loaded}, but its wheel pins {var['cudnn']}",
                detail="Another major cuDNN shadows the one the wheel installed (LD_LIBRARY_PATH, /etc/ld.so.conf, "
                       "or a pinned nvidia-cudnn package); cuDNN ops may fail or run slowly.",
                fix=Fix(f"Install the cuDNN the wheel expects ({var['cudnn']}) and keep other cuDNN folders off "
                        "LD_LIBRARY_PATH",
                        (f"pip install 'nvidia-cudnn-cu{tv.cuda.split('.')[0]}=={var['cudnn']}'",), TORCH_DOCS),
                evidence=ev))
    for cc in _gpu_ccs(dv, ctx):
        if cc < cc_key(row["cc_min"]):
            text, cmds = torch_fix_commands(m, [cc], dv.version or None, dv.cuda or None, tv.version)
            findings.append(Finding(
                "matrix.cudnn.gpu-unsupported", Status.FAIL,
                f"cuDNN {loaded} has no kernels for cc {cc_str(cc)} (it needs cc >= {row['cc_min']})",
                detail="Convolutions, RNNs and attention through cuDNN fail on this GPU "
                       "(CUDNN_STATUS_ARCH_MISMATCH or 'no kernel image').",
                fix=Fix(text, tuple(cmds), TORCH_DOCS), evidence=dict(ev, gpu_cc=cc_str(cc))))
    if not findings:
        findings.append(Finding("matrix.cudnn.ok", Status.OK,
                                f"cuDNN {loaded} matches torch {tv.version} (CUDA {tv.cuda}) and the GPU",
                                evidence=ev))
    # Verdicts drawn from an older row of the data are marked; torch's own refusal of an older cuDNN
    # (matrix.cudnn.older-than-torch) comes from torch's versions, not from a row, and stays as it is.
    not_from_rows = ("matrix.cudnn.older-than-torch",)
    if near:
        findings = mark_all(findings, f"cuDNN {loaded}", near["label"], f"cuDNN {m.cudnn_data_stops_at}",
                            keep=not_from_rows)
    elif tnear:
        findings = mark_all(findings, f"torch {tv.version}", tnear["row"], f"torch {m.torch_data_stops_at}",
                            keep=not_from_rows)
        findings = [refix(f, f"Reinstall torch {tv.version} with the cuDNN its wheel pins (at least "
                             f"{tnear['cudnn']}, the pin of torch {tnear['torch']}) and keep other cuDNN folders off "
                             f"LD_LIBRARY_PATH",
                          (f"pip install --force-reinstall 'torch=={tv.version}' "
                           f"--index-url https://download.pytorch.org/whl/{_cu(tv.cuda)}",))
                    if f.id == "matrix.cudnn.not-the-wheels" else f for f in findings]
    bad = sorted((f for f in findings if f.status is not Status.OK), key=lambda f: -f.status.rank)
    return Outcome(bad[0].summary if bad else findings[0].summary, findings)


def _older_fix(ctx: Context, tv, built: str) -> Fix:
    """The copy that shadows torch's cuDNN off the search path; without one, torch's own cuDNN reinstalled."""
    libs = ctx.fact("libs").value
    found = [x for x in shadows(ctx, libs) if x[0].family.startswith("libcudnn")] if libs is not None else []
    if found:
        return shadow_fix(libs, found)
    py = tv.python or "python"
    return Fix(f"Reinstall the cuDNN torch was built against ({built}):",
               (f"{q(py)} -m pip install --force-reinstall 'nvidia-cudnn-cu{tv.cuda.split('.')[0]}=={built}.*'",),
               TORCH_DOCS)


def _first(text: str) -> str:
    return first_line(text)  # (was an IndexError on an error text of only whitespace)


def _cu(cuda: str) -> str:
    mm = major_minor(cuda)
    return f"cu{mm[0]}{mm[1]}" if mm else ""


def _uses_ccbin(flags: str) -> bool:
    return any(x in (flags or "") for x in ("-ccbin", "--compiler-bindir"))


@step("matrix.host-compiler", "host compiler vs nvcc", 85, facts=("toolkit", "compiler"))
def check_host_compiler(ctx: Context) -> Outcome:
    """Does each nvcc accept the host gcc (or clang) it would use?"""
    tk = _typed(ctx.fact("toolkit"), ToolkitInfo)
    cf = _typed(ctx.fact("compiler"), CompilerInfo)
    installs = [i for i in (tk.value.installs if tk.value else []) if isinstance(i, NvccInstall) and i.version]
    if not installs:
        return Outcome("no nvcc found", [Finding("matrix.host-compiler.no-nvcc", Status.SKIP, "no nvcc found")])
    if not cf.ok:
        return Outcome("no host compiler found", [Finding("matrix.host-compiler.no-compiler", Status.SKIP,
                                                          "no gcc or clang found on PATH")])
    info = cf.value
    if _uses_ccbin(info.nvcc_prepend_flags) or _uses_ccbin(info.nvcc_append_flags):
        return Outcome("nvcc's host compiler is chosen by NVCC_PREPEND_FLAGS/NVCC_APPEND_FLAGS", [Finding(
            "matrix.host-compiler.ccbin-set", Status.OK,
            "nvcc's host compiler is set with -ccbin in NVCC_PREPEND_FLAGS/NVCC_APPEND_FLAGS",
            evidence={"NVCC_PREPEND_FLAGS": info.nvcc_prepend_flags, "NVCC_APPEND_FLAGS": info.nvcc_append_flags})])
    gcc = next((c for c in info.compilers if c.name == "g++" and c.family == "gcc" and c.version), None) \
        or info.first("gcc")
    m = ctx.matrix
    findings = []
    judged_near: dict = {}  # nvcc path -> version, for those judged from the nearest row
    for inst in installs:
        b = m.compiler_bounds(inst.version)
        near = None if b else nearest_compilers(m, inst.version)  # an nvcc newer than the rows
        b = b or near
        if near:
            judged_near[inst.nvcc] = inst.version
        active = bool("PATH" in inst.found_via or (tk.value.home_var and tk.value.home_var in inst.found_via))
        if b is None:
            findings.append(Finding("matrix.host-compiler.unknown", Status.SKIP,
                                    f"no host-compiler data for CUDA {inst.version}", affects=inst.nvcc))
            continue
        if gcc is None or gcc.major is None:
            clang = info.first("clang")
            if clang and b.get("clang_max") and clang.major and clang.major > b["clang_max"]:
                findings.append(Finding(
                    "matrix.host-compiler.clang-too-new", Status.FAIL if active else Status.WARN,
                    f"clang {clang.version} is newer than nvcc {inst.version} accepts (clang <= {b['clang_max']})",
                    fix=Fix(f"Install clang {b['clang_max']} and pass it to nvcc with -ccbin",
                            (f"export NVCC_PREPEND_FLAGS='-ccbin clang++-{b['clang_max']}'",)),
                    evidence={"clang": clang.version, "clang_path": clang.path, "nvcc_version": inst.version},
                    affects=inst.nvcc))
            else:
                findings.append(Finding("matrix.host-compiler.no-gcc", Status.SKIP,
                                        "no gcc/g++ version known", affects=inst.nvcc))
            continue
        ev = {"gcc": gcc.version, "gcc_path": gcc.path, "nvcc": inst.nvcc, "nvcc_version": inst.version,
              "gcc_max": b["gcc_max"], "gcc_min": b["gcc_min"], "source": b["source"]}
        mx = b["gcc_max"]
        if mx is not None and gcc.major > mx:
            newer = m.first_cuda_for_gcc(gcc.major)
            cmds = (f"sudo apt install gcc-{mx} g++-{mx}",
                    f"export NVCC_PREPEND_FLAGS='-ccbin /usr/bin/g++-{mx}'",
                    f"export CUDAHOSTCXX=/usr/bin/g++-{mx} CC=gcc-{mx} CXX=g++-{mx}")
            findings.append(Finding(
                "matrix.host-compiler.gcc-too-new", Status.FAIL if active else Status.WARN,
                f"gcc {gcc.version} is newer than nvcc {inst.version} accepts (gcc <= {mx})",
                detail=(f"nvcc stops with '#error -- unsupported GNU version! gcc versions later than {mx} are not "
                        f"supported!'; torch extension builds refuse it too."
                        + (f" CUDA {newer} and later accept gcc {gcc.major}." if newer else "")),
                fix=Fix(f"Install gcc {mx} and point nvcc at it (or use CUDA {newer or 'a newer toolkit'})", cmds,
                        "https://docs.nvidia.com/cuda/cuda-installation-guide-linux/"),
                evidence=ev, affects=inst.nvcc))
        elif b["gcc_min"] is not None and gcc.major < b["gcc_min"]:
            findings.append(Finding(
                "matrix.host-compiler.gcc-too-old", Status.WARN,
                f"gcc {gcc.version} is older than torch extension builds accept with CUDA {inst.version} "
                f"(gcc >= {b['gcc_min']})",
                fix=Fix(f"Install gcc {b['gcc_min']} or newer (<= {mx})",
                        (f"sudo apt install gcc-{mx} g++-{mx}",)),
                evidence=ev, affects=inst.nvcc))
        else:
            findings.append(Finding("matrix.host-compiler.ok", Status.OK,
                                    f"nvcc {inst.version} accepts gcc {gcc.version} (gcc <= {mx})",
                                    evidence=ev, affects=inst.nvcc))
    findings = [mark(f, f"nvcc {judged_near[f.affects]}", f"CUDA {m.compilers_data_stops_at}'s row",
                     f"CUDA {m.compilers_data_stops_at}") if f.affects in judged_near else f for f in findings]
    bad = [f for f in findings if f.status in (Status.FAIL, Status.WARN)]
    return Outcome(bad[0].summary if bad else "every nvcc accepts the host compiler", findings)

"""Step 60: which copy of each CUDA library is really loaded, from where, and why."""

from __future__ import annotations

from cudadoctor.checks.common import earlier_findings, is_stubs_dir, ld_without, q
from cudadoctor.checks.registry import Context, Outcome, step
from cudadoctor.facts import libs as L
from cudadoctor.model import Finding, Fix, Status

NAMES = {"libcuda": "libcuda (driver)", "libcudart": "CUDA runtime", "libcublas": "cuBLAS", "libcublasLt": "cuBLASLt",
         "libcudnn": "cuDNN", "libnccl": "NCCL", "libnvrtc": "NVRTC", "libnvJitLink": "nvJitLink",
         "libcusparse": "cuSPARSE", "libcufft": "cuFFT", "libcurand": "cuRAND", "libcusolver": "cuSOLVER",
         "libcupti": "CUPTI", "libnvidia-ml": "NVML"}
#: soname prefix -> the pip wheel that ships it, per CUDA major (cu12 wheels carry a -cu12 suffix)
WHEELS = {"libcudart": "nvidia-cuda-runtime", "libcublas": "nvidia-cublas", "libcublasLt": "nvidia-cublas",
          "libcudnn": "nvidia-cudnn", "libnccl": "nvidia-nccl", "libnvrtc": "nvidia-cuda-nvrtc",
          "libnvJitLink": "nvidia-nvjitlink", "libcusparse": "nvidia-cusparse", "libcufft": "nvidia-cufft",
          "libcurand": "nvidia-curand", "libcusolver": "nvidia-cusolver", "libcupti": "nvidia-cuda-cupti"}
DOCS_LOADER = "https://man7.org/linux/man-pages/man8/ld.so.8.html"
ENV_VIA = "LD_LIBRARY_PATH entry "  # how facts/libs.py says the loader took a copy from LD_LIBRARY_PATH


def wheel_for(soname: str, cuda_major: str) -> str:
    """The pip wheel that ships `soname` for torch's CUDA major (cu13 wheels dropped the -cu suffix)."""
    fam = L.family_of(soname)
    base = WHEELS.get(fam)
    if not base:
        return ""
    major = cuda_major or L.file_version(soname).split(".")[0]
    if fam in ("libcudnn", "libnccl"):
        return f"{base}-cu{major or '12'}"
    return f"{base}-cu{major}" if major and major.isdigit() and int(major) <= 12 else base


def _where(lf) -> str:
    detail = f" ({lf.origin_detail})" if lf.origin_detail and lf.origin == L.PIP else ""
    return f"{lf.realpath or lf.path} [{lf.origin}{detail}]"


def _vkey(v: str) -> tuple:
    return tuple(int(x) for x in v.split(".") if x.isdigit())



def _python(ctx: Context) -> str:
    t = ctx.fact("torch")
    return (t.value.python if t.value is not None and t.value.python else "python")


def loaded_stub(info):
    """The toolkit's stub libcuda among the loaded libraries, or None."""
    return next((x for x in info.loaded if x.family == "libcuda" and x.origin == L.STUB), None)


def stub_fix(info, s) -> tuple:
    """(where it came from, fix text, commands) that take the stub libcuda `s` out of the loader's way, from how it was
    found: the LD_LIBRARY_PATH folder that gave it (and any other stubs folder there: a link in a folder of one's own
    is loaded by its real path, so no folder is named for it), or the linker cache that lists it, else where it lies."""
    drop = {e for e in info.ld_library_path if is_stubs_dir(e) or s.via == f"LD_LIBRARY_PATH entry {e}"}
    if drop and (s.via.startswith("LD_LIBRARY_PATH") or not s.via):
        return (f"LD_LIBRARY_PATH ({', '.join(sorted(drop))})", "Take the stubs folder out of LD_LIBRARY_PATH so the "
                "driver's libcuda.so.1 is found:", (ld_without(info.ld_library_path, drop),))
    if s.via == "ldconfig cache":
        return ("the linker cache (ldconfig)", "Take the stubs folder out of the linker cache so the driver's libcuda.so.1 "
                "is found:", ("grep -rn stubs /etc/ld.so.conf /etc/ld.so.conf.d/  # the file that adds the stubs folder: "
                              "remove that line", "sudo ldconfig && ldconfig -p | grep libcuda.so.1  # then only the driver's copy"))
    return (s.via or "the loader", "Find how it came to be loaded:", (f"ls -l {q(s.path)}",))


def driver_named_nvml_shadow(ctx: Context) -> bool:
    """True when the driver step (earlier in the checklist) already failed on a libnvidia-ml from LD_LIBRARY_PATH
    that is not the loaded driver's (driver.nvml-shadowed)."""
    return any(f.id == "driver.nvml-shadowed" for f in earlier_findings(ctx, "driver"))


@step("libraries", "libraries loaded", order=60,
      facts=("libs", "torch", "kernel_module", "userspace_driver", "platform", "ldconfig"))
def check_libraries(ctx: Context) -> Outcome:
    """Which copy of libcudart, cuBLAS, cuDNN, NCCL ... is really loaded, from where, and why."""
    f = ctx.fact("libs")
    findings: list = []
    if f.value is None:
        st = Status.SKIP if f.state.value in ("not_found", "not_applicable") else Status.WARN
        return Outcome(f"cannot list libraries: {f.error or f.state.value}",
                       [Finding("libs.unknown", st, f"cannot list the CUDA libraries: {f.error or f.state.value}",
                                evidence={f.source or "libs": f.state.value})])
    info = f.value
    tf = ctx.fact("torch")
    stopped = tf.value.stopped if tf.value is not None and hasattr(tf.value, "stopped") else ""
    if (tf.state.value in ("timeout", "failed") or stopped) and info.method != "maps":
        # the torch probe hung or died: what is listed was found without it, and that must be said
        findings.append(Finding(
            "libs.torch-probe-failed", Status.WARN,
            f"the libraries torch loads are unknown: {stopped or tf.error or tf.state.value}",
            "Listed instead: what the loader would find (ldd, LD_LIBRARY_PATH, ldconfig), which may not be what "
            "torch really loads. The torch.cuda and torch.op steps say why the probe failed.",
            Fix("Find why the torch probe did not finish:", ("cudadoctor check --only torch.cuda --only torch.op -v",)),
            {"torch probe": tf.error or tf.state.value}))
    if not info.loaded and not info.missing and not info.undefined_symbols:
        if findings:
            return Outcome("the torch probe did not finish; no CUDA library found", findings)
        return Outcome("no CUDA library found", [Finding(
            "libs.none", Status.SKIP, "no CUDA library is loaded or can be found (no driver, no CUDA build of torch)",
            evidence={f.source or "libs": f.error or "nothing found"})], Status.SKIP)
    method = {"maps": "loaded by torch (memory maps after CUDA init)",
              "ldd": "resolved by ldd on torch's libraries (torch did not initialise CUDA)",
              "loader-search": "resolved as the loader would (torch loaded none)"}.get(info.method, info.method)

    # 1. the toolkit's stub libcuda
    s = loaded_stub(info)
    if s is not None:
        _, fix_text, cmds = stub_fix(info, s)
        findings.append(Finding(
            "libs.stub-libcuda", Status.FAIL, f"the CUDA toolkit's stub libcuda is loaded: {s.realpath}",
            detail="The stub in lib64/stubs exists only for linking; loaded at run time every CUDA call fails "
                   "with CUDA error 34 (cudaErrorStubLibrary: 'CUDA driver is a stub library'). "
                   + (f"It comes from {s.via}." if s.via else ""),
            fix=Fix(fix_text, tuple(cmds), DOCS_LOADER),
            evidence={"loaded": s.realpath, "via": s.via, "LD_LIBRARY_PATH": ":".join(info.ld_library_path)},
            affects="every CUDA program"))

    # 2. missing libraries / undefined symbols
    if info.missing:
        py = _python(ctx)
        wheels = sorted({w for w in (wheel_for(so, _cuda_major(ctx)) for so in info.missing) if w})
        cmds = [f"{q(py)} -m pip install --force-reinstall --no-deps {' '.join(sorted(set(wheels)))}"] if wheels else []
        cmds.append(f"{q(py)} -m pip install --force-reinstall torch  # or reinstall the same build of torch")
        findings.append(Finding(
            "libs.missing", Status.FAIL, f"cannot be found: {', '.join(info.missing)}",
            detail=f"Seen in {info.missing_from or 'the loader'}: the loader finds no file with that name in "
                   "LD_LIBRARY_PATH, torch's RUNPATH (the pip nvidia-* wheels), or the ldconfig cache.",
            fix=Fix("Install the pip wheel that ships it (torch's own dependency), or reinstall torch with its "
                    "dependencies.", tuple(cmds), DOCS_LOADER),
            evidence={"missing": info.missing, "seen in": info.missing_from}, affects="import torch"))
    if info.undefined_symbols:
        drop = {e for e in info.ld_library_path}
        findings.append(Finding(
            "libs.undefined-symbol", Status.FAIL,
            f"undefined symbol {info.undefined_symbols[0]} when importing torch",
            detail="A library was found, but an older or different copy than the one torch was built with: "
                   "usually an LD_LIBRARY_PATH entry shadows the pip nvidia-* wheels (e.g. an older "
                   "libnvJitLink next to a newer libcusparse).",
            fix=Fix("Run once without LD_LIBRARY_PATH; if that works, remove the toolkit folder from it.",
                    (f"env -u LD_LIBRARY_PATH {q(_python(ctx))} -c 'import torch; print(torch.cuda.is_available())'",
                     ld_without(info.ld_library_path, drop)), DOCS_LOADER),
            evidence={"symbols": info.undefined_symbols, "LD_LIBRARY_PATH": ":".join(info.ld_library_path)},
            affects="import torch"))

    # 3. loaded twice (two different files of one library mapped in the same process)
    if info.method == "maps":
        by_family: dict = {}
        for lf in info.loaded:
            by_family.setdefault(lf.family, []).append(lf)
        for fam, lst in sorted(by_family.items()):
            reals = {x.realpath for x in lst}
            majors = {x.version.split(".")[0] for x in lst if x.version}
            if len(reals) > 1 and len(majors) <= 1 and fam != "libcuda":
                findings.append(Finding(
                    "libs.loaded-twice", Status.WARN,
                    f"two copies of {NAMES.get(fam, fam)} are loaded at once: "
                    + ", ".join(f"{x.version or '?'} from {x.realpath}" for x in lst),
                    detail="Two files of the same library in one process: symbols resolve to whichever loaded "
                           "first, so calls can mix versions (crashes, CUBLAS_STATUS_NOT_INITIALIZED, wrong cuDNN).",
                    fix=Fix("Let torch load its own copies: remove the other folder from LD_LIBRARY_PATH "
                            "(or stop preloading it).",
                            (ld_without(info.ld_library_path,
                                        {e for e in info.ld_library_path
                                         if any(x.realpath.startswith(e.rstrip('/') + '/') for x in lst)}),),
                            DOCS_LOADER),
                    evidence={x.realpath: x.version for x in lst}, affects="torch"))

    # 4. another copy wins over the one torch ships with (its nvidia-* wheel or torch/lib), judged by version
    findings.extend(shadow_findings(ctx, info))

    # 5. kernel module vs user-space driver
    km, ud, plat = ctx.fact("kernel_module"), ctx.fact("userspace_driver"), ctx.fact("platform")
    is_wsl = plat.value is not None and plat.value.is_wsl
    if km.ok and km.value.version and not is_wsl:
        libcuda = next((x for x in info.loaded if x.family == "libcuda" and x.origin != L.STUB), None)
        user_v = (libcuda.version if libcuda and libcuda.version.count(".") >= 1 else "") or (
            ud.value.libcuda_version if ud.value is not None else "")
        nvml_v = ud.value.libnvidia_ml_version if ud.value is not None else ""
        bad = [(n, v) for n, v in (("libcuda", user_v), ("libnvidia-ml", nvml_v))
               if v and v.count(".") >= 1 and v != km.value.version]
        if driver_named_nvml_shadow(ctx):  # one fault, one problem: the driver step names it, with the same fix
            bad = [(n, v) for n, v in bad if n != "libnvidia-ml"]
        # (session 33) the mismatched copies may come from LD_LIBRARY_PATH folders (an old driver's files kept with a
        # project): a reboot does not help there, leaving the folders out does
        via_env = {n: d for n, d in (
            ("libnvidia-ml", ud.value.libnvidia_ml_via if ud.value is not None else ""),
            ("libcuda", libcuda.via[len(ENV_VIA):] if libcuda and libcuda.via.startswith(ENV_VIA) else ""))
            if d and any(n == b for b, _ in bad)}  # only the mismatched ones' folders (the driver's own may be there too)
        from_env = bool(bad) and all(n in via_env for n, _ in bad)
        if bad:
            findings.append(Finding(
                "libs.driver-mismatch", Status.FAIL,
                f"kernel module {km.value.version} ≠ user-space " + ", ".join(f"{n} {v}" for n, v in bad),
                detail=("The loaded kernel module and the driver's user-space libraries come from different driver "
                        "installs (usually an upgrade without a reboot): NVML says 'Driver/library version "
                        "mismatch' and cuInit fails." if not from_env else
                        "The mismatched copies come from LD_LIBRARY_PATH (" + ", ".join(sorted(set(via_env.values())))
                        + "), in front of the loaded driver's own: every process with this LD_LIBRARY_PATH loads them. "
                        "A reboot would not help."),
                fix=(Fix("Reboot so the new kernel module loads (or reinstall the driver so both match).",
                         ("cat /proc/driver/nvidia/version", "sudo reboot"),
                         "https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/") if not from_env else
                     Fix("Leave those folders out of LD_LIBRARY_PATH:",
                         (ld_without(info.ld_library_path, set(via_env.values())),), DOCS_LOADER)),
                evidence={"/proc/driver/nvidia/version": km.value.version, **{n: v for n, v in bad}},
                affects="every CUDA program"))

    # 6. the OK picture: what is loaded, and the system copies that are not used
    key = [x for x in info.loaded if x.family in ("libcudart", "libcublas", "libcudnn", "libnccl", "libcuda",
                                                    "libnvJitLink", "libnvrtc")]
    parts = [f"{NAMES.get(x.family, x.family)} {x.version or '?'} ({x.origin})" for x in key]
    findings.append(Finding(
        "libs.loaded", Status.OK, f"{len(info.loaded)} CUDA libraries {method}",
        detail="; ".join(parts),
        evidence={x.path: f"{x.version} {x.origin} {x.origin_detail} via {x.via or 'default'}".strip()
                  for x in info.loaded}))
    for fam in ("libcudnn", "libcudart", "libcublas", "libnccl"):
        used = [x for x in info.loaded if x.family == fam and x.origin != L.STUB]
        if not used:
            continue
        u = used[0]
        others = [c for c in info.copies_of(fam) if c.realpath != u.realpath and c.version.count(".") >= 1
                  and u.version.count(".") >= 1 and _vkey(c.version)[:2] != _vkey(u.version)[:2]]
        if others:
            findings.append(Finding(
                f"libs.copies.{fam[3:].lower()}", Status.OK,
                f"{NAMES.get(fam, fam)} {u.version} is the one in use ({u.origin}"
                + (f" {u.origin_detail}" if u.origin == L.PIP else "") + "); not used: "
                + ", ".join(f"{c.version} at {c.realpath}" for c in others),
                detail="Tools that scan the disk (collect_env's 'Probably one of the following', ldconfig -p) "
                       "name the unused copies; this is the copy the process actually maps.",
                evidence={"in use": _where(u), **{c.realpath: c.version for c in others}}))
    bad = sorted((x for x in findings if x.status in (Status.FAIL, Status.WARN)), key=lambda x: -x.status.rank)
    if bad:
        summary = bad[0].summary
    else:
        cud = next((x for x in info.loaded if x.family == "libcudnn"), None)
        summary = f"{len(info.loaded)} CUDA libraries" + (
            f"; cuDNN {cud.version} from {cud.origin_detail or cud.origin}" if cud else "")
    return Outcome(summary, findings)


def _cuda_major(ctx: Context) -> str:
    t = ctx.fact("torch")
    c = t.value.cuda if t.value is not None else ""
    return (c or "").split(".")[0]


#: families that are the driver's (they come with the driver, never with torch)
DRIVER_FAMILIES = ("libcuda", "libnvidia-ml", "libnvidia-ptxjitcompiler", "libnvidia-nvvm")
CUDNN_ERROR = ("RuntimeError: cuDNN version incompatibility: PyTorch was compiled  against {c} but found runtime "
               "version {r}.")  # torch/backends/cudnn/__init__.py (two spaces, as torch prints it)


def _mmp(v: str) -> tuple:
    return (_vkey(v) + (0, 0, 0))[:3]


def _tuple_text(v: str) -> str:
    return "(" + ", ".join(str(x) for x in _mmp(v)) + ")"


def shadows(ctx: Context, info) -> list:
    """(loaded copy, torch's copy, torch's version, how) for every loaded library that is not torch's own while
    torch ships one. torch's version is what torch was compiled against when torch says (cuDNN), else its copy's."""
    t = ctx.fact("torch").value
    compiled = t.cudnn.compiled if t is not None and t.cudnn is not None else ""
    out = []
    for lf in info.loaded:
        if lf.origin in (L.PIP, L.TORCH_LIB, L.WSL, L.STUB) or lf.family in DRIVER_FAMILIES:
            continue
        ships = [c for c in info.copies_of(lf.family) if c.origin in (L.PIP, L.TORCH_LIB) and c.realpath != lf.realpath]
        if not ships:
            continue
        ref = ships[0]
        want, how = ref.version, f"{ref.origin_detail or ref.origin} copy"
        if lf.family.startswith("libcudnn") and compiled:
            want, how = compiled, "torch was compiled against"
        out.append((lf, ref, want, how))
    return out


def _severity(have: str, want: str) -> Status:
    """FAIL: older major.minor than torch's (it lacks what torch calls); WARN: newer, an older patch, or unknown;
    OK: the same version."""
    if have.count(".") < 1 or want.count(".") < 1:
        return Status.WARN
    h, w = _mmp(have), _mmp(want)
    if h[:2] < w[:2]:
        return Status.FAIL
    n = min(len(_vkey(have)), len(_vkey(want)), 3)
    return Status.OK if _vkey(have)[:n] == _vkey(want)[:n] else Status.WARN


def cudnn_error(t, want: str, have: str) -> str:
    """torch's refusal of cuDNN `have` when it was compiled against `want`: its own words when it said them."""
    if t is not None and t.cudnn is not None and t.cudnn.version_error:
        return t.cudnn.version_error
    return CUDNN_ERROR.format(c=_tuple_text(want), r=_tuple_text(have))


def torch_error(ctx: Context, lf, want: str) -> str:
    """The error torch gives with this older copy: torch's own words when it said them."""
    if lf.family.startswith("libcudnn"):
        return cudnn_error(ctx.fact("torch").value, want, lf.version)
    return f"undefined symbol: … (a function of {NAMES.get(lf.family, lf.family)} {want} that {lf.version} lacks)"


def shadow_fix(info, found: list) -> Fix:
    """Let torch load its own copies: LD_LIBRARY_PATH without the entries that shadow them."""
    entries = sorted({lf.via.split("entry ", 1)[-1] for lf, _, _, _ in found if lf.via.startswith("LD_LIBRARY_PATH")})
    if entries:
        return Fix("Let torch load its own copies: remove these entries from LD_LIBRARY_PATH when running torch.",
                   (ld_without(info.ld_library_path, set(entries)),), DOCS_LOADER)
    return Fix("Find what loads it ahead of torch's copy and stop it:",
               ("cat /etc/ld.so.preload; echo $LD_PRELOAD  # who loads it ahead of torch's copy",), DOCS_LOADER)


def shadow_findings(ctx: Context, info) -> list:
    found = shadows(ctx, info)
    if not found:
        return []
    fix = shadow_fix(info, found)

    def line(lf, ref, want, how):
        return (f"{NAMES.get(lf.family, lf.family)} {lf.version or '?'} from {lf.realpath} ({lf.via or lf.origin}) "
                f"instead of {want or '?'} ({how})")

    def ev(group):
        return {lf.realpath: f"{lf.version} via {lf.via or lf.origin}; torch's: {want} ({how}) at {ref.realpath}"
                for lf, ref, want, how in group}

    out = []
    older = [x for x in found if _severity(x[0].version, x[2]) is Status.FAIL]
    newer = [x for x in found if _severity(x[0].version, x[2]) is Status.WARN]
    same = [x for x in found if _severity(x[0].version, x[2]) is Status.OK]
    if older:
        errors = []
        for lf, ref, want, how in older:
            e = torch_error(ctx, lf, want)
            if e not in errors:
                errors.append(e)
        cudnn = any(lf.family.startswith("libcudnn") for lf, _, _, _ in older)
        out.append(Finding(
            "libs.shadows-older", Status.FAIL,
            "older than torch's own: " + "; ".join(line(*x) for x in older) + f": torch gives {errors[0]}",
            detail="An older copy lacks what torch was built against. "
                   + ("torch raises this cuDNN RuntimeError whenever it checks cuDNN's version: "
                      "torch.backends.cudnn.version(), cuDNN RNNs (nn.LSTM/GRU on the GPU), torch.utils.collect_env. "
                      if cudnn else "Calls into it fail with 'undefined symbol' at import or at first use. ")
                   + "Seen: " + " | ".join(errors),
            fix=fix, evidence=ev(older), affects="torch"))
    if newer:
        out.append(Finding(
            "libs.shadows-newer", Status.WARN,
            "another copy wins over torch's: " + "; ".join(line(*x) for x in newer),
            detail="Newer (or of unknown version) and compatible today, but torch was tested with its own copy; "
                   "the next update of either breaks it silently.",
            fix=fix, evidence=ev(newer), affects="torch"))
    if same:
        out.append(Finding(
            "libs.shadows-same", Status.OK,
            "the same version as torch's, from another place: " + "; ".join(line(*x) for x in same),
            detail="Harmless today; an update of that folder changes what torch loads.",
            evidence=ev(same)))
    return out

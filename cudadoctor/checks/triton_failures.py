"""Why the Triton probe's kernel failed, read from the error Triton raised (and what its C build printed), with
the fix built from the machine's facts. Pure helpers of the torch.triton step; no step here.

Each cause was reproduced on an H200 (session 34) against a user's own Triton kernel and torch.compile
(tests/data/h200/s34_triton_user_errors.txt) unless its comment says otherwise.
"""

from __future__ import annotations

import os
import re

from cudadoctor.checks.common import env_vars, major_minor, q
from cudadoctor.checks.common import first_line as common_first_line
from cudadoctor.checks.env_cuda_driver import FORCED_JIT_ERRORS, forced_ptx_jit, forced_ptx_jit_failure
from cudadoctor.model import Finding, Fix, Status

DOCS = "https://triton-lang.org/main/getting-started/installation.html"
NIGHTLY_INDEX = "https://download.pytorch.org/whl/nightly/"
RE_NO_CC = re.compile(r"Failed to find C compiler", re.I)
RE_NO_PY_H = re.compile(r"Python\.h: No such file", re.I)
RE_PY_INCLUDE = re.compile(r"-I(/\S*?python3\.\d+\w*)['\s,]")
RE_LIBCUDA = re.compile(r"libcuda\.so cannot found", re.I)
RE_MAP = re.compile(r"failed to map segment from shared object", re.I)
RE_DENIED = re.compile(r"Permission denied: '([^']+)'")
# torch.compile refuses these before Triton runs ("Found ... which is too old to be supported by the triton GPU
# compiler ... Triton only supports devices of CUDA Capability >= 7.0": torch/_inductor/scheduler.py); not reproduced
# here (the H200 is 9.0)
MIN_CC = 7


def first_line(text: str) -> str:
    return common_first_line(text, limit=300)


def py_of(ctx, t) -> str:
    tv = ctx.fact("torch").value
    return (t.python if t is not None and t.python else "") or (tv.python if tv is not None else "") or "python"


def pip(ctx, t, spec: str) -> str:
    """The install command for a triton spec; pytorch-triton (torch nightlies') lives on PyTorch's nightly index."""
    extra = f" --index-url {NIGHTLY_INDEX}" if spec.startswith("pytorch-triton") else ""
    return f"{q(py_of(ctx, t))} -m pip install {q(spec)}{extra}"


def _system(ctx) -> str:
    p = ctx.fact("platform").value
    return p.system if p is not None and p.system else "Linux"


def _install(ctx, deb: str, rpm: str) -> tuple:
    """The distribution's install command ((): not Linux, where no package manager command is right)."""
    if _system(ctx) != "Linux":
        return ()
    p = ctx.fact("platform").value
    d = (p.distro if p is not None else "").lower()
    if any(k in d for k in ("fedora", "red hat", "rhel", "centos", "rocky", "alma", "amazon")):
        return (f"sudo dnf install -y {rpm}",)
    if "suse" in d:
        return (f"sudo zypper install -y {rpm}",)
    if "arch" in d or "manjaro" in d:
        return ("sudo pacman -S --needed base-devel",)
    return (f"sudo apt-get install -y {deb}",)


def major(capability: str):
    mm = major_minor(capability)
    return mm[0] if mm is not None else None


def libcuda_dir(ctx, t) -> str:
    """The folder of the libcuda.so.1 torch's CUDA really loaded (the torch probe's mapped libraries), else one on
    LD_LIBRARY_PATH that holds it."""
    tv = ctx.fact("torch").value
    for lib in (tv.libraries if tv is not None else []):
        if os.path.basename(lib).startswith("libcuda.so"):
            return os.path.dirname(lib)
    return t.libcuda_ld_library_path[0] if t.libcuda_ld_library_path else ""


def gpu_findings(ctx, t) -> list:
    """GPUs torch.compile refuses (compute capability below 7.0), every visible one, not only the probe's cuda:0."""
    tv = ctx.fact("torch").value
    old = [d for d in (tv.devices if tv is not None else []) if major(d.capability) is not None and
           major(d.capability) < MIN_CC]
    if not old:
        return []
    names = ", ".join(f"cuda:{d.index} {d.name} (cc {d.capability})" for d in old)
    keep = [str(d.index) for d in tv.devices if d not in old]
    return [Finding(
        "torch.triton.gpu-unsupported", Status.WARN,
        f"torch.compile refuses {names}: Triton's GPU compiler needs compute capability {MIN_CC}.0 or newer",
        "torch raises 'Found ... which is too old to be supported by the triton GPU compiler' before compiling; "
        "plain torch ops still run on it.",
        Fix("Run without torch.compile on it, or hide it:",
            ("export TORCHDYNAMO_DISABLE=1  # or torch.compile(model, backend='eager')",)
            + ((f"export CUDA_VISIBLE_DEVICES={','.join(keep)}",) if keep else ())), {"GPUs": names}, "torch")]


def _python_headers(ctx, t, text: str, ev: dict, c_build_failed: bool):
    said = RE_NO_PY_H.search(text)
    if not said and not (t.python_h is False and c_build_failed):
        return None
    mm = ".".join((t.python_version or "3").split(".")[:2])
    looked = next((m.group(1) for m in RE_PY_INCLUDE.finditer(text)), "")
    if said and t.python_h and looked and looked.rstrip("/") != t.python_include.rstrip("/"):
        # (review s34) old Triton on Debian's posix_local scheme, deadsnakes builds: the headers are there, Triton
        # looks elsewhere; not reproduced here
        return Finding(
            "torch.triton.python-headers-elsewhere", Status.FAIL,
            f"Triton looks for Python.h in {looked}; this interpreter's headers are in {t.python_include}",
            "The headers are installed, but Triton's C build reads another include folder (older Triton on "
            "Debian's posix_local scheme and some third-party Python builds report it so).",
            Fix("Upgrade triton, or point the C build at the right folder:",
                (pip(ctx, t, t.wants or "triton") + " --upgrade", f"export C_INCLUDE_PATH={q(t.python_include)}")),
            ev, "torch")
    system_python = t.python_include.startswith("/usr/include/")
    cmds = _install(ctx, f"python{mm}-dev", f"python{mm}-devel") if system_python else ()
    return Finding(
        "torch.triton.no-python-headers", Status.FAIL,
        f"Triton cannot build its launcher: Python.h is missing for {py_of(ctx, t)} (Python {mm})",
        f"Triton's C module includes Python.h from {t.python_include or 'the interpreter include folder'}; "
        "this interpreter has no development headers.",
        Fix(f"Install Python {mm}'s headers" + ("" if system_python else
                                                " (this interpreter's own build should ship them: reinstall it)") + ":",
            cmds + (f"ls {q(t.python_include)}/Python.h",)), ev, "torch")


def _libcuda(ctx, t, text: str, ev: dict):
    ldconfig_broke = bool(t.ldconfig_error) and "ldconfig" in text
    if not (RE_LIBCUDA.search(text) or ldconfig_broke):
        return None
    d = libcuda_dir(ctx, t)
    no_ldconfig = "No such file or directory: '/sbin/ldconfig'" in (text + t.ldconfig_error) or (
        "FileNotFoundError" in t.ldconfig_error)
    if d:
        cmds = (f"export TRITON_LIBCUDA_PATH={q(d)}",) + (() if no_ldconfig else (
            f"echo {q(d)} | sudo tee /etc/ld.so.conf.d/nvidia-libcuda.conf && sudo ldconfig",))
    else:
        cmds = ("find / -name libcuda.so.1 2>/dev/null | head  # then: export TRITON_LIBCUDA_PATH=<its folder>",) + (
            () if no_ldconfig else ("sudo ldconfig", "ldconfig -p | grep libcuda.so.1"))
    where_cuda = f", though CUDA loads it from {d}" if d else ""
    if no_ldconfig:
        summary = "Triton cannot look up libcuda.so.1: this system has no /sbin/ldconfig" + where_cuda
    elif ldconfig_broke:
        summary = (f"Triton cannot look up libcuda.so.1: `/sbin/ldconfig -p` fails ({first_line(t.ldconfig_error)[:120]})"
                   + where_cuda)
    else:
        summary = "Triton cannot find libcuda.so.1: it is not in the linker cache (ldconfig -p)" + where_cuda
    return Finding(
        "torch.triton.libcuda-not-found", Status.FAIL, summary,
        "Triton looks for libcuda.so.1 only through $TRITON_LIBCUDA_PATH, `ldconfig -p` and LD_LIBRARY_PATH, "
        "not where the dynamic loader found it. Common in containers whose driver libraries were mounted "
        "without running ldconfig, or built without a linker cache.",
        Fix("Tell Triton where the driver's libcuda is" + ("" if no_ldconfig else
                                                             ", or add that folder to the linker cache") + ":", cmds),
        dict(ev, ldconfig=t.ldconfig_error or ", ".join(t.libcuda_ldconfig) or "no libcuda.so.1"), "torch")


def _probe_cache(t, what: str, ev: dict) -> Finding:
    """The probe's own folder (under cudadoctor's cache) failed, not anything of the user's: not judged."""
    alt = (f"export CUDADOCTOR_CACHE_DIR={q(t.usable[0].rstrip('/') + '/cudadoctor')}",) if t.usable else ()
    return Finding(
        "torch.triton.probe-cache", Status.WARN,
        f"cudadoctor could not run its Triton kernel from its own cache folder: {what}",
        "The folder is cudadoctor's (under CUDADOCTOR_CACHE_DIR), not one your programs use; Triton itself was "
        "not judged.", Fix("Give cudadoctor a cache folder that allows running code, and check again:",
                           alt + ("cudadoctor check --only torch.triton",)), ev, "torch")


def failed(ctx, t) -> Finding:
    """The probe's kernel failed: the cause from the error triton raised, the fix from this machine's facts."""
    r = t.run
    err, where = r.error or "", r.where or ""
    text = err + "\n" + where + "\n" + (t.stderr or "")  # a failed C build prints its reason on stderr only
    ev = {"error": f"{r.error_type}: {first_line(err)}" if r.error_type else first_line(err), "triton": t.version}
    cc_named = t.cc and re.search(r"No such file or directory: '" + re.escape(t.cc) + "'", text)
    if RE_NO_CC.search(text) or cc_named:
        missing = f"CC={t.cc} is not found" if t.cc_from == "CC" else "no $CC, no gcc or clang on PATH"
        return Finding(
            "torch.triton.no-c-compiler", Status.FAIL, f"Triton cannot build its launcher: no C compiler ({missing})",
            "Triton compiles a small C module with the host's C compiler the first time it runs; every Triton "
            "kernel (torch.compile, vLLM, flash-attn's Triton kernels) fails until one is found.",
            Fix("Install a C compiler, or point CC at one:",
                _install(ctx, "gcc", "gcc") + (("unset CC  # or export CC=/path/to/gcc",) if t.cc_from == "CC" else
                                               ("export CC=/path/to/gcc",))), ev, "torch")
    if forced_ptx_jit(env_vars(ctx)) and FORCED_JIT_ERRORS.search(text):  # (session 35, H200) Triton loads SASS only
        return forced_ptx_jit_failure("torch.triton.kernel-failed", "a Triton kernel", first_line(err)[:200], ev)
    c_build_failed = "CalledProcessError" in text and bool(re.search(r"\.c'|cuda_utils|\bgcc\b|\bclang\b|\bcc\b", text))
    found = _python_headers(ctx, t, text, ev, c_build_failed) or _libcuda(ctx, t, text, ev)
    if found is not None:
        return found
    if RE_MAP.search(text):  # the probe compiles only into its own folder
        return _probe_cache(t, f"{first_line(err)[:160]}", ev)
    denied = RE_DENIED.search(text)
    if denied:
        path = denied.group(1)
        if r.work and path.startswith(r.work):
            return _probe_cache(t, f"permission denied on {path}", ev)
        if "/triton/" in path or path == t.cc:
            # (review s34) Triton's bundled ptxas without its exec bit (a packaging bug), a CC that cannot run;
            # not reproduced here
            return Finding(
                "torch.triton.tool-not-executable", Status.FAIL, f"Triton cannot run {path}: permission denied",
                "A program Triton runs (its bundled ptxas, or the C compiler) is not executable by this user, or lies "
                "on a file system mounted noexec.",
                Fix("Make it executable, or reinstall triton:",
                    (f"ls -l {q(path)}", f"chmod +x {q(path)}", f"findmnt -T {q(os.path.dirname(path))}",
                     pip(ctx, t, t.wants or "triton") + " --force-reinstall")), ev, "torch")
    if major(r.capability) is not None and major(r.capability) < MIN_CC:
        return Finding(
            "torch.triton.gpu-unsupported", Status.FAIL,
            f"Triton does not support {r.device} (compute capability {r.capability}): it needs {MIN_CC}.0 or newer",
            f"The kernel failed: {first_line(err)[:200]}",
            Fix("Run torch without compiling Triton kernels (eager mode):",
                ("export TORCHDYNAMO_DISABLE=1  # or torch.compile(model, backend='eager')",)), ev, "torch")
    first = first_line(err) or r.error_type or "no error text"
    return Finding(
        "torch.triton.kernel-failed", Status.FAIL, f"a Triton kernel failed: {first[:200]}",
        "torch's plain ops may work, but torch.compile and Triton kernels will fail the same way.",
        Fix("Explain the error:", (f"cudadoctor explain {q(first[:200])}",)), dict(ev, where=where[-600:]), "torch")

"""Step 45: Triton, the compiler behind torch.compile's GPU code, vLLM and every @triton.jit kernel.

torch's plain ops can work while every Triton kernel fails: triton builds a small C module with the
host's C compiler and Python.h the first time it runs, finds libcuda.so.1 through `ldconfig -p`, and
loads compiled kernels from a cache folder. The probe compiles and launches a real kernel (into
cudadoctor's cache) and inspects the user's own cache folders; the error it meets is verbatim.
"""

from __future__ import annotations

import os
import re

from cudadoctor.checks.common import q
from cudadoctor.checks.registry import Context, Outcome, step
from cudadoctor.model import FactState, Finding, Fix, Status

DOCS = "https://triton-lang.org/main/getting-started/installation.html"
RE_NO_CC = re.compile(r"Failed to find C compiler", re.I)
RE_NO_PY_H = re.compile(r"Python\.h: No such file", re.I)
RE_LIBCUDA = re.compile(r"libcuda\.so cannot found", re.I)
RE_MAP = re.compile(r"failed to map segment from shared object|Permission denied", re.I)


def _py(ctx: Context, t) -> str:
    tv = ctx.fact("torch").value
    return (t.python if t is not None and t.python else "") or (tv.python if tv is not None else "") or "python"


def _pip(ctx: Context, t, spec: str) -> str:
    return f"{q(_py(ctx, t))} -m pip install {q(spec)}"


def _distro(ctx: Context) -> str:
    p = ctx.fact("platform").value
    return (p.distro if p is not None else "").lower()


def _install(ctx: Context, deb: str, rpm: str) -> str:
    d = _distro(ctx)
    if any(k in d for k in ("fedora", "red hat", "rhel", "centos", "rocky", "alma", "amazon")):
        return f"sudo dnf install -y {rpm}"
    if "suse" in d:
        return f"sudo zypper install -y {rpm}"
    if "arch" in d or "manjaro" in d:
        return "sudo pacman -S --needed base-devel"
    return f"sudo apt-get install -y {deb}"


def _first(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[0][:300] if lines else ""


def _minor(version: str) -> tuple:
    return tuple(version.split("+")[0].split(".")[:2])


def _major(capability: str):
    head = (capability or "").split(".")[0]
    return int(head) if head.isdigit() else None


def _libcuda_dir(ctx: Context) -> str:
    """The folder of the libcuda.so.1 torch's CUDA really loaded (the torch probe's mapped libraries)."""
    tv = ctx.fact("torch").value
    for lib in (tv.libraries if tv is not None else []):
        if os.path.basename(lib).startswith("libcuda.so"):
            return os.path.dirname(lib)
    return ""


def _version_findings(ctx: Context, t) -> list:
    """torch names the triton it was built with; another one breaks torch.compile's generated code."""
    if not t.wants or "==" not in t.wants:
        return []
    name, want = t.wants.split("==", 1)
    have = t.wants_have or ""
    if have and _minor(have) == _minor(want):
        return []  # the same release line (3.6.0 and 3.6.1): torch's generated code works with either
    got = f"{name} {have}" if have else f"no {name} (triton {t.version} instead)" if t.version else f"no {name}"
    return [Finding(
        "torch.triton.version-mismatch", Status.WARN,
        f"torch {t.torch_version} was built for {name} {want}; this environment has {got}",
        "torch.compile's generated code calls the Triton it was built with; another release fails in it "
        "(ImportError: cannot import name 'AttrsDescriptor', unexpected keyword arguments, ...).",
        Fix(f"Install the {name} torch {t.torch_version} asks for:", (_pip(ctx, t, f"{name}=={want}"),), DOCS),
        {"torch requires": t.wants, "installed": have or t.version}, "torch")]


def _cache_findings(t) -> list:
    """The user's own cache folders: a kernel compiled there must be written and then loaded (mmap'd PROT_EXEC)."""
    out = []
    for which, folder, env in (("Triton", t.triton_cache, "TRITON_CACHE_DIR"),
                               ("torch.compile (Inductor)", t.inductor_cache, "TORCHINDUCTOR_CACHE_DIR")):
        if folder is None or not folder.checked:
            continue
        ev = {"folder": folder.path, "tested": folder.checked}
        alt = "$HOME/.cache/triton" if env == "TRITON_CACHE_DIR" else "$HOME/.cache/torchinductor"
        if folder.noexec:
            out.append(Finding(
                "torch.triton.cache-noexec", Status.FAIL,
                f"{which} compiles kernels into {folder.path}, on a file system mounted noexec",
                "Kernels compiled there cannot be loaded: 'failed to map segment from shared object'.",
                Fix(f"Point {env} at a folder on a file system that allows running code:",
                    (f"export {env}={alt}", f"findmnt -T {q(folder.checked)}")), ev, "torch"))
        elif folder.writable is False:
            out.append(Finding(
                "torch.triton.cache-unwritable", Status.FAIL,
                f"{which} compiles kernels into {folder.path}, which this user cannot write"
                + ("" if folder.exists else f" (it does not exist and {folder.checked} is not writable)"),
                "The first compiled kernel fails with PermissionError.",
                Fix(f"Point {env} at a folder you own:", (f"export {env}={alt}", f"ls -ld {q(folder.checked)}")),
                ev, "torch"))
    return out


def _failed(ctx: Context, t) -> Finding:
    """The probe's kernel failed: the cause from the error triton raised, the fix from this machine's facts."""
    r = t.run
    err = r.error or ""
    where = r.where or ""
    text = err + "\n" + where + "\n" + (t.stderr or "")  # a failed C build prints its reason on stderr only
    ev = {"error": f"{r.error_type}: {_first(err)}" if r.error_type else _first(err), "triton": t.version}
    py = _py(ctx, t)
    if RE_NO_CC.search(text) or (not t.cc_found and "compiler" in text.lower()):
        return Finding(
            "torch.triton.no-c-compiler", Status.FAIL,
            "Triton cannot build its launcher: no C compiler " + (f"(CC={t.cc} does not exist)" if t.cc else
                                                                  "(no $CC, no gcc or clang on PATH)"),
            "Triton compiles a small C module with the host's C compiler the first time it runs; every Triton "
            "kernel (torch.compile, vLLM, flash-attn's Triton kernels) fails until one is found.",
            Fix("Install a C compiler, or point CC at one:", (_install(ctx, "gcc", "gcc"),
                                                                "export CC=/path/to/gcc")), ev, "torch")
    # the C build itself failed (triton hides gcc's output but for stderr): then a missing Python.h is the reason
    c_build_failed = "CalledProcessError" in text and bool(re.search(r"\.c'|cuda_utils|\bgcc\b|\bclang\b|\bcc\b", text))
    if RE_NO_PY_H.search(text) or (t.python_h is False and c_build_failed):
        mm = ".".join((t.python_version or "3").split(".")[:2])
        return Finding(
            "torch.triton.no-python-headers", Status.FAIL,
            f"Triton cannot build its launcher: Python.h is missing for {py} (Python {mm})",
            f"Triton's C module includes Python.h from {t.python_include or 'the interpreter include folder'}; "
            "this interpreter has no development headers.",
            Fix(f"Install Python {mm}'s headers:", (_install(ctx, f"python{mm}-dev", f"python{mm}-devel"),)),
            ev, "torch")
    ldconfig_broke = bool(t.ldconfig_error) and "ldconfig" in text
    if RE_LIBCUDA.search(text) or ldconfig_broke:
        d = _libcuda_dir(ctx)
        cmds = ((f"export TRITON_LIBCUDA_PATH={q(d)}",
                 f"echo {q(d)} | sudo tee /etc/ld.so.conf.d/nvidia-libcuda.conf && sudo ldconfig") if d else
                ("sudo ldconfig", "ldconfig -p | grep libcuda.so.1"))
        where_cuda = f", though CUDA loads it from {d}" if d else ""
        summary = (f"Triton cannot look up libcuda.so.1: `/sbin/ldconfig -p` fails ({_first(t.ldconfig_error)[:120]})"
                   if ldconfig_broke else
                   "Triton cannot find libcuda.so.1: it is not in the linker cache (ldconfig -p)") + where_cuda
        return Finding(
            "torch.triton.libcuda-not-found", Status.FAIL, summary,
            "Triton looks for libcuda.so.1 only through $TRITON_LIBCUDA_PATH, `ldconfig -p` and LD_LIBRARY_PATH, "
            "not where the dynamic loader found it. Common in containers whose driver libraries were mounted "
            "without running ldconfig, or built without a linker cache.",
            Fix("Tell Triton where the driver's libcuda is, or add that folder to the linker cache:", cmds),
            dict(ev, ldconfig=t.ldconfig_error or ", ".join(t.libcuda_ldconfig) or "no libcuda.so.1"), "torch")
    if RE_MAP.search(text):
        return Finding(
            "torch.triton.cache-unusable", Status.FAIL,
            f"Triton compiled the kernel but could not load it: {_first(err)[:160]}",
            "The cache folder is on a noexec file system or not accessible to this user.",
            Fix("Point TRITON_CACHE_DIR at a folder you own on an exec-mounted file system:",
                ("export TRITON_CACHE_DIR=$HOME/.cache/triton",)), ev, "torch")
    if _major(r.capability) is not None and _major(r.capability) < 7:
        return Finding(
            "torch.triton.gpu-unsupported", Status.FAIL,
            f"Triton does not support {r.device} (compute capability {r.capability}): it needs 7.0 or newer",
            f"The kernel failed: {_first(err)[:200]}",
            Fix("Run torch without compiling Triton kernels (eager mode):",
                ("export TORCHDYNAMO_DISABLE=1  # or torch.compile(model, backend='eager')",)), ev, "torch")
    first = _first(err) or r.error_type or "no error text"
    return Finding(
        "torch.triton.kernel-failed", Status.FAIL, f"a Triton kernel failed: {first[:200]}",
        "torch's plain ops may work, but torch.compile and Triton kernels will fail the same way.",
        Fix("Explain the error and reproduce it with Triton's own tutorial kernel:",
            (f"cudadoctor explain {q(first[:200])}",)), dict(ev, where=where[-600:]), "torch")


@step("torch.triton", "Triton (torch.compile's GPU compiler)", 45, facts=("triton", "torch", "platform"),
      requires=("torch.cuda",))
def check_triton(ctx: Context) -> Outcome:
    """A Triton kernel compiled and launched; triton's version against torch's; the user's kernel caches."""
    tf = ctx.fact("triton")
    t = tf.value
    tv = ctx.fact("torch").value
    if tf.state is FactState.NOT_APPLICABLE:  # a report saved before this step existed
        return Outcome("not gathered", [Finding("torch.triton.not-run", Status.SKIP, "the Triton probe did not run")])
    if tv is None or not tv.installed or tv.cpu_only or tv.hip:
        return Outcome("no CUDA torch", [Finding("torch.triton.not-run", Status.SKIP,
                                                 "not checked: the target has no CUDA build of torch")])
    if tf.state is FactState.TIMEOUT:
        return Outcome("the Triton probe hung", [Finding(
            "torch.triton.hung", Status.FAIL, tf.error,
            "Compiling or launching a trivial Triton kernel did not finish; a program's first torch.compile call "
            "would hang the same way.",
            Fix("Run a Triton kernel yourself and see where it stops:",
                (f"TRITON_DEBUG=1 timeout 300 {q(_py(ctx, t))} -c 'import torch; "
                 "torch.compile(lambda x: x + 1)(torch.ones(8, device=\"cuda\"))'",)), {}, "torch")])
    if t is None:
        return Outcome("the Triton probe failed", [Finding(
            "torch.triton.probe-failed", Status.WARN, tf.error or "the Triton probe gave no answer",
            "cudadoctor could not run its Triton probe in the target interpreter.",
            Fix("Run it with details:", ("cudadoctor check --only torch.triton -v",)))])
    if not t.installed:
        if t.import_error and "No module named 'triton'" not in t.import_error:
            spec = t.wants or "triton"
            return Outcome("import triton fails", [Finding(
                "torch.triton.import-failed", Status.FAIL, f"import triton fails: {_first(t.import_error)[:200]}",
                "torch.compile and every Triton kernel need it.",
                Fix("Reinstall the triton torch was built with:", (_pip(ctx, t, spec) + " --force-reinstall",), DOCS),
                {"error": t.import_error[:500]}, "torch")])
        if t.wants:
            return Outcome("triton not installed", [Finding(
                "torch.triton.missing", Status.WARN,
                f"triton is not installed; torch {t.torch_version} was built to use {t.wants}",
                "torch.compile cannot compile for the GPU, and Triton-based libraries (vLLM, flash-attn's Triton "
                "kernels, bitsandbytes' and unsloth's kernels) cannot load.",
                Fix("Install the triton torch asks for:", (_pip(ctx, t, t.wants),), DOCS), {}, "torch")])
        return Outcome("no triton (torch names none here)", [Finding(
            "torch.triton.none", Status.SKIP, f"no triton, and torch {t.torch_version} does not require one here")])
    found = _version_findings(ctx, t) + _cache_findings(t)
    r = t.run
    if r is None or r.skipped:
        why = r.skipped if r is not None else "not run (--no-gpu-ops)"
        return Outcome(f"triton {t.version}; kernel {why}", found or [Finding(
            "torch.triton.not-run", Status.SKIP, f"triton {t.version} found; the kernel was {why}")])
    if not r.ok:
        bad = _failed(ctx, t)
        return Outcome(bad.summary[:100], [bad] + [f for f in found if f.id != bad.id])
    summary = (f"triton {t.version} compiled and ran a kernel on {r.device or 'cuda:0'}"
               + (f" (sm_{r.capability.replace('.', '')})" if r.capability else "")
               + (f" in {r.seconds:.1f} s" if r.seconds is not None else ""))
    ok = Finding("torch.triton.ok", Status.OK, summary, evidence={"triton": t.version, "file": t.file})
    worst = next((f for f in found if f.status is Status.FAIL), None) or next(iter(found), None)
    return Outcome(worst.summary[:100] if worst is not None else summary, [ok] + found)

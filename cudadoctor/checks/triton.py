"""Step 45: Triton, the compiler behind torch.compile's GPU code, vLLM and every @triton.jit kernel.

torch's plain ops can work while every Triton kernel fails: triton builds a small C module with the
host's C compiler and Python.h the first time it runs, finds libcuda.so.1 through `ldconfig -p`, and
loads compiled kernels from a cache folder. The probe compiles and launches a real kernel (into
cudadoctor's cache) and inspects the user's own cache folders; the error it meets is verbatim.
What the kernel's failure says decides the cause (triton_failures.py); the static facts only name the fix.
"""

from __future__ import annotations

from cudadoctor.checks.common import major_minor, q
from cudadoctor.checks.registry import Context, Outcome, step
from cudadoctor.checks.triton_failures import DOCS, failed, first_line, gpu_findings, pip, py_of
from cudadoctor.model import FactState, Finding, Fix, Status


def _same_release(have: str, want: str) -> bool:
    """3.6.0 and 3.6.1 are one release line; a nightly (+git...) must be the very build torch names."""
    if "+" in want or "+" in have:
        return have == want
    line = major_minor(have)
    return line is not None and line == major_minor(want)


def version_findings(ctx: Context, t) -> list:
    """torch names the triton it was built with; another one breaks torch.compile's generated code."""
    out = []
    both = [d for d in ("triton", "pytorch-triton") if t.dists.get(d)]
    if len(both) == 2:
        keep = t.wants.split("==")[0] if t.wants else "triton"
        drop = next(d for d in both if d != keep)
        out.append(Finding(
            "torch.triton.two-installs", Status.WARN,
            f"two distributions install the triton module: triton {t.dists['triton']} and pytorch-triton "
            f"{t.dists['pytorch-triton']}; the files on disk are {t.version or 'one of them'}",
            "Both write site-packages/triton/; whichever was installed last wins, and its metadata no longer "
            "describes the files.",
            Fix(f"Keep the one torch {t.torch_version} names ({keep}):",
                (f"{q(py_of(ctx, t))} -m pip uninstall -y {drop}",
                 pip(ctx, t, t.wants or keep) + " --force-reinstall"), DOCS),
            {"triton": t.dists["triton"], "pytorch-triton": t.dists["pytorch-triton"]}, "torch"))
    if not t.wants or "==" not in t.wants:
        return out
    name, want = t.wants.split("==", 1)
    have = t.wants_have or ""
    if have and _same_release(have, want) and (not t.version or _same_release(t.version, want)):
        return out
    got = (f"{name} {have}" + (f" (the module says {t.version})" if t.version and t.version != have else "")
           if have else f"no {name} (triton {t.version} instead)" if t.version else f"no {name}")
    out.append(Finding(
        "torch.triton.version-mismatch", Status.WARN,
        f"torch {t.torch_version} was built for {name} {want}; this environment has {got}",
        "torch.compile's generated code calls the Triton it was built with; another release fails in it "
        "(ImportError: cannot import name 'AttrsDescriptor', unexpected keyword arguments, ...).",
        Fix(f"Install the {name} torch {t.torch_version} asks for:", (pip(ctx, t, t.wants),), DOCS),
        {"torch requires": t.wants, "installed": have or t.version}, "torch"))
    return out


def _alt(t, env: str) -> tuple:
    """A folder the fix can point `env` at: one the probe found writable and allowing code to run."""
    sub = "triton" if env == "TRITON_CACHE_DIR" else "torchinductor"
    if t.usable:
        return (f"export {env}={q(t.usable[0].rstrip('/') + '/' + sub)}",)
    return (f"# no writable folder that allows running code was found: mount one and point {env} at it",)


def cache_findings(t) -> list:
    """The user's own cache folders: a kernel compiled there must be written and then loaded (mmap'd PROT_EXEC)."""
    out = []
    tc, ic = t.triton_cache, t.inductor_cache
    if tc is not None and tc.env == "empty":
        out.append(Finding(
            "torch.triton.cache-empty", Status.FAIL, "TRITON_CACHE_DIR is set to an empty string",
            "Triton uses the variable as given when it is set, so it has no folder to compile kernels into.",
            Fix("Unset it, or name a folder:", ("unset TRITON_CACHE_DIR",) + _alt(t, "TRITON_CACHE_DIR")),
            {"TRITON_CACHE_DIR": "''"}, "torch"))
    triton_elsewhere_ok = tc is not None and tc.env == "set" and tc.noexec is False and tc.writable is not False
    for which, folder, env in (("Triton", tc, "TRITON_CACHE_DIR"), ("torch.compile (Inductor)", ic,
                                                                    "TORCHINDUCTOR_CACHE_DIR")):
        if folder is None or not folder.checked or (folder is tc and tc.env == "empty"):
            continue
        ev = {"folder": folder.path, "tested": folder.checked}
        where = folder.path + (f" (relative: {folder.checked} from here)" if folder.relative else "")
        inductor_only = folder is ic and triton_elsewhere_ok
        if folder.noexec:
            out.append(Finding(
                "torch.triton.cache-noexec", Status.WARN if inductor_only else Status.FAIL,
                f"{which} compiles kernels into {where}, on a file system mounted noexec",
                ("TRITON_CACHE_DIR is set elsewhere, so torch.compile's GPU kernels load from there; its CPU kernels "
                 "and C++ wrappers, compiled here, cannot be loaded." if inductor_only else
                 "Kernels compiled there cannot be loaded: 'failed to map segment from shared object'."),
                Fix(f"Point {env} at a folder on a file system that allows running code:",
                    _alt(t, env) + (f"findmnt -T {q(folder.checked)}",)), ev, "torch"))
        elif folder.writable is False:
            out.append(Finding(
                "torch.triton.cache-unwritable", Status.WARN if inductor_only else Status.FAIL,
                f"{which} compiles kernels into {where}, which this user cannot write"
                + ("" if folder.exists else f" (it does not exist and {folder.checked} is not writable)"),
                "The first compiled kernel fails (PermissionError, or OSError: Read-only file system).",
                Fix(f"Point {env} at a folder you can write:", _alt(t, env) + (f"ls -ld {q(folder.checked)}",)),
                ev, "torch"))
    if ic is not None and ic.user_error:
        out.append(Finding(
            "torch.triton.no-user-name", Status.FAIL,
            f"torch.compile names its cache folder after the user, and this user has none: {ic.user_error}",
            "torch builds the default TORCHINDUCTOR_CACHE_DIR with getpass.getuser(), which fails for a uid with no "
            "passwd entry and no USER/LOGNAME (containers started with --user, OpenShift).",
            Fix("Give torch.compile a cache folder (or a user name):",
                _alt(t, "TORCHINDUCTOR_CACHE_DIR") + ("export USER=$(id -u)",)), {"error": ic.user_error}, "torch"))
    return out


def _stopped(ctx: Context, tf, t) -> Outcome:
    """The probe hung or died: where decides the finding (the kernel's compile or launch, or only importing)."""
    doing = (t.stopped_doing if t is not None else "") or "starting"
    in_run = "kernel" in doing
    tail = first_line(t.stderr[-400:]) if t is not None else ""
    py = py_of(ctx, t)
    repro = (f"TRITON_DEBUG=1 timeout 300 {q(py)} -X faulthandler -c 'import torch; "
             "torch.compile(lambda x: x + 1)(torch.ones(8, device=\"cuda\"))'")
    if tf.state is FactState.TIMEOUT:
        if in_run:
            return Outcome("a Triton kernel hung", [Finding(
                "torch.triton.hung", Status.FAIL, tf.error,
                "Compiling or launching a trivial Triton kernel did not finish; a program's first torch.compile call "
                "would hang the same way.", Fix("Run one yourself and see where it stops:", (repro,)), {}, "torch")])
        return Outcome("the Triton probe was slow", [Finding(
            "torch.triton.slow", Status.WARN, tf.error,
            f"The probe took too long while {doing} (a slow network file system for site-packages, or a loaded "
            "machine); the kernel was not tried.",
            Fix("Time it yourself, or give the probe longer:",
                (f"time {q(py)} -c 'import triton'", "CUDADOCTOR_TIMEOUT_TRITON=300 cudadoctor check --only torch.triton")),
            {}, "torch")])
    importing = doing.startswith("import triton") and "killed by SIG" in (tf.error or "")
    if in_run or importing:
        what = "compiling or launching a trivial Triton kernel" if in_run else "importing triton"
        return Outcome("Triton crashed the interpreter", [Finding(
            "torch.triton.crashed", Status.FAIL, tf.error,
            f"The interpreter died while {what}; torch.compile and every Triton kernel will crash it the same way."
            + (f" Last words: {tail}" if tail else ""),
            Fix("Reproduce it with a native backtrace:", (repro,)), {"stderr": (t.stderr or "")[-600:]}, "torch")])
    return Outcome("the Triton probe failed", [Finding(
        "torch.triton.probe-failed", Status.WARN, tf.error or "the Triton probe gave no answer",
        f"cudadoctor's Triton probe stopped while {doing}; the kernel was not tried.",
        Fix("Run it with details:", ("cudadoctor check --only torch.triton -v",)),
        {"stderr": (t.stderr or "")[-600:]} if t is not None else {}, "torch")])


def _not_installed(ctx: Context, t) -> Outcome:
    if t.import_error and "No module named 'triton'" not in t.import_error:
        return Outcome("import triton fails", [Finding(
            "torch.triton.import-failed", Status.FAIL, f"import triton fails: {first_line(t.import_error)[:200]}",
            "torch.compile and every Triton kernel need it.",
            Fix("Reinstall the triton torch was built with:", (pip(ctx, t, t.wants or "triton") + " --force-reinstall",),
                DOCS), {"error": t.import_error[:500]}, "torch")])
    if t.wants:
        return Outcome("triton not installed", [Finding(
            "torch.triton.missing", Status.WARN, f"triton is not installed; torch {t.torch_version} was built to use "
            f"{t.wants}",
            "torch.compile cannot compile for the GPU, and Triton-based libraries (vLLM, flash-attn's Triton "
            "kernels, bitsandbytes' and unsloth's kernels) cannot load.",
            Fix("Install the triton torch asks for:", (pip(ctx, t, t.wants),), DOCS), {}, "torch")])
    return Outcome("no triton (torch names none here)", [Finding(
        "torch.triton.none", Status.SKIP, f"no triton, and torch {t.torch_version} does not require one here")])


@step("torch.triton", "Triton (torch.compile's GPU compiler)", 45, facts=("triton", "torch", "platform", "env"),
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
    if tf.state in (FactState.TIMEOUT, FactState.FAILED) or t is None:
        return _stopped(ctx, tf, t)
    if not t.installed:
        return _not_installed(ctx, t)
    found = version_findings(ctx, t) + cache_findings(t)
    r = t.run
    if r is None or r.skipped:
        why = r.skipped if r is not None else ("not run (--no-gpu-ops)" if not t.run_requested else "not run")
        return Outcome(f"triton {t.version}; kernel {why}"[:100], found + [Finding(
            "torch.triton.not-run", Status.SKIP, f"triton {t.version} found; the kernel was {why}")])
    if not r.ok:
        bad = failed(ctx, t)
        return Outcome(bad.summary[:100], [bad] + [f for f in found if f.id != bad.id])
    found += gpu_findings(ctx, t)
    summary = (f"triton {t.version} compiled and ran a kernel on {r.device or 'cuda:0'}"
               + (f" (sm_{r.capability.replace('.', '')})" if r.capability else "")
               + (f" in {r.seconds:.1f} s" if r.seconds is not None else ""))
    ok = Finding("torch.triton.ok", Status.OK, summary, evidence={"triton": t.version, "file": t.file})
    worst = next((f for f in found if f.status is Status.FAIL), None) or next(iter(found), None)
    return Outcome(worst.summary[:100] if worst is not None else summary, [ok] + found)

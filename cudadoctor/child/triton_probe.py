"""Runs inside the TARGET interpreter, as a script: stdlib only (triton and torch are imported if present).

What torch.compile, vLLM and every Triton kernel meet on this machine: which triton is installed and
which one torch was built against, what triton's build step will find (a C compiler, Python.h,
libcuda.so.1 the way triton looks for it), whether the folders it caches compiled kernels in are
writable and allow running code, and then the real thing: a Triton kernel compiled and launched on
cuda:0, its result checked, its error verbatim.

Read-only: the kernel is compiled into a fresh folder under the one given as --cache (cudadoctor's own),
removed afterwards, never into the user's Triton or Inductor caches; those are only inspected. One JSON record per stage after a
marker, flushed at once; a `begin` record before each risky call (see torch_probe.py).

Stages: python, import, static, run, done.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # importing triton_kernel.py must not write next to cudadoctor's files
MARK = "@@CUDADOCTOR@@"


def emit(stage, **data):
    data["stage"] = stage
    sys.stdout.write(MARK + " " + json.dumps(data, default=str) + "\n")
    sys.stdout.flush()


def begin(part, doing):
    emit("begin", part=part, doing=doing)


def dist_version(name):
    try:
        from importlib.metadata import version

        return str(version(name))
    except Exception:  # noqa: BLE001 - not installed, or no metadata
        return ""


def torch_wants_triton():
    """The triton requirement in torch's metadata ('triton==3.6.0', 'pytorch-triton==3.5.0+git...'), '' if none
    applies here (CPU and Windows wheels, source builds)."""
    try:
        from importlib.metadata import requires

        reqs = requires("torch") or []
    except Exception:  # noqa: BLE001
        return ""
    for r in reqs:
        name = r.split(";")[0].strip()
        low = name.lower()
        if not (low.startswith("triton") or low.startswith("pytorch-triton")):
            continue
        marker = r.split(";", 1)[1] if ";" in r else ""
        if "extra ==" in marker or "extra==" in marker:
            continue
        if "platform_system" in marker and "Linux" in marker and not sys.platform.startswith("linux"):
            continue
        return name.replace(" ", "")
    return ""


def c_compiler():
    """The C compiler triton's build step picks: $CC, else gcc, else clang on PATH ('' when none)."""
    cc = os.environ.get("CC")
    if cc:
        return {"cc": cc, "from": "CC", "found": bool(shutil.which(cc) or os.path.isfile(cc))}
    for name in ("gcc", "clang"):
        p = shutil.which(name)
        if p:
            return {"cc": p, "from": "PATH", "found": True}
    return {"cc": "", "from": "", "found": False}


def python_headers():
    import sysconfig

    try:
        scheme = sysconfig.get_default_scheme() if hasattr(sysconfig, "get_default_scheme") else None
        if scheme == "posix_local":  # Debian's scheme; triton reads posix_prefix's include
            scheme = "posix_prefix"
        inc = sysconfig.get_paths(scheme=scheme)["include"] if scheme else sysconfig.get_paths()["include"]
    except Exception:  # noqa: BLE001
        inc = ""
    return {"include": inc, "python_h": bool(inc) and os.path.isfile(os.path.join(inc, "Python.h"))}


def libcuda_lookup():
    """Where triton's libcuda_dirs() finds libcuda.so.1: $TRITON_LIBCUDA_PATH, else `/sbin/ldconfig -p`, else
    the LD_LIBRARY_PATH folders holding it."""
    out = {"env": os.environ.get("TRITON_LIBCUDA_PATH", ""), "ldconfig": [], "ld_library_path": [],
           "ldconfig_error": ""}
    try:
        p = subprocess.run(["/sbin/ldconfig", "-p"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=15)
        text = p.stdout.decode("utf-8", "replace")
        out["ldconfig"] = [ln.split()[-1] for ln in text.splitlines() if "libcuda.so.1" in ln]
        if p.returncode != 0:
            out["ldconfig_error"] = "exit %d: %s" % (p.returncode, p.stderr.decode("utf-8", "replace")[:200])
    except Exception as e:  # noqa: BLE001 - no /sbin/ldconfig (Alpine, NixOS), or it hung
        out["ldconfig_error"] = "%s: %s" % (type(e).__name__, e)
    for d in (os.environ.get("LD_LIBRARY_PATH") or "").split(":"):
        if d and os.path.exists(os.path.join(d, "libcuda.so.1")):
            out["ld_library_path"].append(d)
    return out


def folder_state(path):
    """Whether Triton can write its compiled kernels under `path` and load them from there."""
    probe = path
    while probe and not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    rec = {"path": path, "exists": os.path.isdir(path), "checked": probe, "writable": None, "noexec": None}
    if probe and os.path.exists(probe):
        rec["writable"] = os.access(probe, os.W_OK | os.X_OK)
        try:
            rec["noexec"] = bool(os.statvfs(probe).f_flag & getattr(os, "ST_NOEXEC", 8))
        except OSError:
            pass
    return rec


def user_caches():
    """The folders the user's own runs compile into: plain Triton's (TRITON_CACHE_DIR, else
    $TRITON_HOME/.triton/cache) and torch.compile's (TORCHINDUCTOR_CACHE_DIR, else <tmp>/torchinductor_<user>)."""
    home = os.environ.get("TRITON_HOME") or os.path.expanduser("~")
    triton_dir = os.environ.get("TRITON_CACHE_DIR") or os.path.join(home, ".triton", "cache")
    try:
        import getpass

        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry (containers with a random uid)
        user = "unknown"
    inductor = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(
        tempfile.gettempdir(), "torchinductor_" + user.replace("\\", "_"))
    return {"triton": folder_state(triton_dir), "inductor": folder_state(inductor)}


def fresh_cache(root):
    """A new folder under `root` (cudadoctor's cache) for this run, '' when it cannot be made. A fresh one each time:
    Triton builds its C launcher once per cache, so a warm cache would hide a compiler or Python.h gone since.
    Folders of runs that were killed (a timeout) are removed after an hour."""
    try:
        os.makedirs(root, exist_ok=True)
        for name in os.listdir(root):
            p = os.path.join(root, name)
            if name.startswith("run-") and time.time() - os.path.getmtime(p) > 3600:
                shutil.rmtree(p, ignore_errors=True)
        return tempfile.mkdtemp(prefix="run-", dir=root)
    except OSError:
        return ""


def run_kernel():
    begin("run", "compiling and launching a Triton kernel on cuda:0")
    rec = {"ok": False}
    t0 = time.time()
    try:
        import torch

        if not torch.cuda.is_available():
            rec["skipped"] = "torch.cuda.is_available() is False"
            emit("run", **rec)
            return
        rec["device"] = torch.cuda.get_device_name(0)
        rec["capability"] = "%d.%d" % torch.cuda.get_device_capability(0)
        from triton_kernel import add_one  # next to this script

        n = 1000
        x = torch.arange(n, device="cuda", dtype=torch.float32)
        add_one[((n + 255) // 256,)](x, n, BLOCK=256)
        torch.cuda.synchronize()
        want = torch.arange(n, device="cuda", dtype=torch.float32) + 1
        rec["checked"] = bool(torch.equal(x, want))
        rec["ok"] = rec["checked"]
        if not rec["ok"]:
            rec["error"] = "the kernel ran but wrote wrong values"
    except BaseException as e:  # noqa: BLE001 - the error is the finding; SystemExit from a compiler too
        import traceback

        rec["error_type"] = type(e).__name__
        rec["error"] = str(e)[:4000]
        rec["where"] = "".join(traceback.format_exception(type(e), e, e.__traceback__)[-6:])[-3000:]
    rec["seconds"] = time.time() - t0
    emit("run", **rec)


def main(argv):
    cache = ""
    run = True
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--cache" and i + 1 < len(argv):
            cache = argv[i + 1]
            i += 1
        elif a == "--no-run":
            run = False
        i += 1
    emit("python", executable=sys.executable, version=sys.version.split()[0], pid=os.getpid())
    begin("import", "import triton")
    t0 = time.time()
    wants = torch_wants_triton()
    rec = {"torch_version": dist_version("torch"), "wants": wants,
           "wants_have": dist_version(wants.split("==")[0]) if "==" in wants else "",
           "version": dist_version("triton") or dist_version("pytorch-triton")}
    try:
        import triton

        rec["installed"] = True
        rec["file"] = str(getattr(triton, "__file__", ""))
        rec["version"] = str(getattr(triton, "__version__", "")) or rec["version"]
    except BaseException as e:  # noqa: BLE001
        rec["installed"] = False
        rec["not_found"] = isinstance(e, ImportError) and getattr(e, "name", "") == "triton"
        rec["import_error"] = "%s: %s" % (type(e).__name__, e)
    rec["seconds"] = time.time() - t0
    emit("import", **rec)
    begin("static", "looking for a C compiler, Python.h and libcuda.so.1")
    emit("static", compiler=c_compiler(), headers=python_headers(), libcuda=libcuda_lookup(),
         caches=user_caches())
    if rec["installed"] and run and cache:
        work = fresh_cache(cache)
        if work:
            os.environ["TRITON_CACHE_DIR"] = work
            run_kernel()
            shutil.rmtree(work, ignore_errors=True)
        else:
            emit("run", ok=False, skipped="cudadoctor's cache folder %s cannot be written" % cache)
    emit("done")
    sys.stdout.flush()
    os._exit(0)  # no teardown of CUDA or triton's threads: everything is reported


if __name__ == "__main__":
    main(sys.argv[1:])

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

import os
import shutil
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # importing the sibling modules must not write next to cudadoctor's files
from torch_probe import begin, emit  # noqa: E402 - the sibling child's marked records (stdlib only)
from triton_static import (TRITON_DISTS, c_compiler, dist_version, folder_state, libcuda_lookup,  # noqa: E402
                           marker_env, python_headers, torch_triton_requirements, usable_folders, user_caches)


def fresh_cache(root):
    """A new folder under `root` (cudadoctor's cache) for this run, and why not ('' when made). A fresh one each time:
    Triton builds its C launcher once per cache, so a warm cache would hide a compiler or Python.h gone since.
    Folders of runs that were killed (a timeout) are removed after an hour."""
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as e:
        return "", "cudadoctor's cache folder %s cannot be made: %s" % (root, e)
    for name in os.listdir(root):
        p = os.path.join(root, name)
        try:
            if name.startswith("run-") and time.time() - os.path.getmtime(p) > 3600:
                shutil.rmtree(p, ignore_errors=True)
        except OSError:  # another run removed it first
            pass
    st = folder_state(root)
    if st["noexec"]:
        return "", "cudadoctor's cache folder %s is on a file system mounted noexec (set CUDADOCTOR_CACHE_DIR)" % root
    try:
        return tempfile.mkdtemp(prefix="run-", dir=root), ""
    except OSError as e:
        return "", "cudadoctor's cache folder %s cannot be written: %s" % (root, e)


def run_kernel(work):
    begin("run", "compiling and launching a Triton kernel on cuda:0")
    rec = {"ok": False, "work": work}
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
    rec = {"torch_version": dist_version("torch"), "torch_requires": torch_triton_requirements(),
           "marker_env": marker_env(), "dists": {d: dist_version(d) for d in TRITON_DISTS},
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
         caches=user_caches(rec["version"]), usable=usable_folders())
    if rec["installed"] and run and cache:
        work, why = fresh_cache(cache)
        if work:
            os.environ["TRITON_CACHE_DIR"] = work
            os.environ["TMPDIR"] = work  # Triton's C build's temporary files too (the user's caches were read above)
            tempfile.tempdir = None
            run_kernel(work)
            shutil.rmtree(work, ignore_errors=True)
        else:
            emit("run", ok=False, skipped=why)
    emit("done")
    sys.stdout.flush()
    os._exit(0)  # no teardown of CUDA or triton's threads: everything is reported


if __name__ == "__main__":
    main(sys.argv[1:])

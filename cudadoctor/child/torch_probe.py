"""Runs inside the TARGET interpreter (any Python >= 3.6), as a script: stdlib only.

It reports what that interpreter's torch sees, one JSON record per stage, each on its own line
after a marker, flushed at once. If the child hangs or dies (SIGSEGV in a driver), the parent
still has every stage before that and knows where it stopped: before each risky call the child
reports what it is about to do (a `begin` record). Junk printed by site hooks or libraries is
ignored by the parent (it only reads marked lines).

Stages: python, import, cuda, init, devices, cudnn, maps, op, conv, libs, done.

The first CUDA use is torch's lazy initialisation (`torch.cuda.init()`). When it raises (an
allocator setting torch cannot parse, ...), torch is left half-initialised and a later CUDA call
can crash the interpreter (SIGSEGV, seen on an H200 with PYTORCH_CUDA_ALLOC_CONF=
expandable_segments:maybe). So after it raises the probe makes no further CUDA call: the exception,
verbatim, is what every program meets at its first CUDA use.
"""

import json
import os
import sys
import time
import warnings

MARK = "@@CUDADOCTOR@@"


def emit(stage, **data):
    data["stage"] = stage
    sys.stdout.write(MARK + " " + json.dumps(data, default=str) + "\n")
    sys.stdout.flush()


def begin(part, doing):
    """Say what comes next: if the child dies or hangs now, the parent knows in what."""
    emit("begin", part=part, doing=doing)


def err_text(e):
    return "%s: %s" % (type(e).__name__, e)


def caught_warnings(ws):
    out = []
    for w in ws:
        msg = str(w.message).strip()
        if msg and msg not in out:
            out.append(msg)
    return out


def mapped_libraries():
    libs = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6:
                    p = parts[5].strip()
                    if ".so" in p and p.startswith("/") and p not in libs:
                        libs.append(p)
    except (OSError, IOError):
        pass
    return libs


def installed_version(dist: str) -> str:
    """The installed distribution's version from its metadata, without importing it ('' when unknown): what a
    broken torch is, so that its reinstall can be pinned (2.11.0+cu130, not whatever pip resolves today)."""
    try:
        from importlib.metadata import version

        return str(version(dist))
    except Exception:  # noqa: BLE001 - no metadata, or an old Python
        return ""


def nvidia_packages() -> dict:
    """The installed nvidia-* pip packages, {name: version}, from their metadata (which one ships a library torch
    could not load: nvidia-cudnn-cu13, nvidia-cublas, ...)."""
    out = {}
    try:
        from importlib.metadata import distributions

        for d in distributions():
            name = str(d.metadata.get("Name") or "").lower().replace("_", "-")
            if name.startswith("nvidia-"):
                out[name] = str(d.version)
    except Exception:  # noqa: BLE001 - no metadata: the check names none
        pass
    return out


def import_torch():
    """The import stage: torch's version, CUDA build and arch list (no CUDA call). None when it fails."""
    t0 = time.time()
    begin("import", "import torch")
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        try:
            import torch
        except BaseException as e:  # ImportError, OSError (missing libcudart), SystemExit ...
            emit("import", installed=False, import_error=err_text(e), import_s=time.time() - t0,
                 not_found=isinstance(e, ImportError) and getattr(e, "name", "") == "torch",
                 warnings=caught_warnings(ws), version=installed_version("torch"), nvidia_packages=nvidia_packages())
            return None
    info = dict(installed=True, import_s=time.time() - t0, version=str(getattr(torch, "__version__", "")),
                file=str(getattr(torch, "__file__", "")))
    v = getattr(torch, "version", None)
    info["cuda"] = getattr(v, "cuda", None)
    info["hip"] = getattr(v, "hip", None)
    info["git"] = getattr(v, "git_version", "")
    info["debug"] = getattr(v, "debug", None)
    arch = []
    try:
        flags = torch._C._cuda_getArchFlags()  # works without a GPU, unlike get_arch_list()
        if flags:
            arch = flags.split()
    except Exception:
        pass
    info["arch_list"] = arch
    info["warnings"] = caught_warnings(ws)
    emit("import", **info)
    return torch


def cuda_stage(torch, cuda_build):
    """is_available() and device_count(): neither initialises torch's CUDA state."""
    begin("cuda", "torch.cuda.is_available() (CUDA initialisation)")
    cuda = {}
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        try:
            cuda["available"] = bool(torch.cuda.is_available())
        except Exception as e:
            cuda["available"] = False
            cuda["init_error"] = err_text(e)
        try:
            cuda["device_count"] = int(torch.cuda.device_count())
        except Exception as e:
            cuda["device_count"] = 0
            cuda.setdefault("init_error", err_text(e))
        if not cuda["available"] and cuda_build:
            try:
                torch.cuda.init()  # raises with torch's own reason ("Found no NVIDIA driver ...")
            except Exception as e:
                cuda["init_error"] = err_text(e)
        cuda["warnings"] = caught_warnings(ws)
    emit("cuda", **cuda)
    return cuda


def init_stage(torch):
    """torch's lazy CUDA initialisation, the first thing any program's first CUDA call does. True when it worked."""
    begin("init", "torch.cuda.init() (the first CUDA use)")
    rec = {"ok": False}
    t0 = time.time()
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        try:
            torch.cuda.init()
            rec["ok"] = True
        except BaseException as e:
            rec["error_type"] = type(e).__name__
            rec["error"] = str(e)
        rec["seconds"] = time.time() - t0
        rec["warnings"] = caught_warnings(ws)
    emit("init", **rec)
    return rec["ok"]


def devices_stage(torch, count):
    """Each device's properties; stops at the first error (no CUDA call after one raised). True when all answered."""
    begin("devices", "reading device properties")
    devices = []
    ok = True
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        for i in range(count):
            d = {"index": i}
            try:
                p = torch.cuda.get_device_properties(i)
                d["name"] = p.name
                d["capability"] = "%d.%d" % (p.major, p.minor)
                d["total_memory_mib"] = int(p.total_memory // (1024 * 1024))
                d["multi_processor_count"] = getattr(p, "multi_processor_count", None)
                d["uuid"] = str(getattr(p, "uuid", ""))
            except Exception as e:
                d["error"] = err_text(e)
                ok = False
            devices.append(d)
            if not ok:
                break
        dev_warn = caught_warnings(ws)
    emit("devices", devices=devices, warnings=dev_warn)
    return ok


def version_str(t):
    try:
        return ".".join(str(int(x)) for x in t)
    except Exception:
        return ""


def cudnn_stage(torch):
    """The cuDNN torch was compiled against and the one it finds at run time (library calls, no CUDA call);
    torch.backends.cudnn.version()'s exception verbatim (torch raises it for cuDNN RNNs too)."""
    begin("cudnn", "reading cuDNN's versions")
    rec = {}
    try:
        rec["available"] = bool(torch.backends.cudnn.is_available())
    except Exception as e:
        rec["available"] = False
        rec["error"] = err_text(e)
    if rec["available"]:
        c = getattr(torch._C, "_cudnn", None)
        for key, fn in (("compiled", "getCompileVersion"), ("runtime", "getRuntimeVersion")):
            try:
                rec[key] = version_str(getattr(c, fn)())
            except Exception:
                pass
        try:
            rec["version"] = torch.backends.cudnn.version()
        except Exception as e:
            rec["version_error"] = err_text(e)
    emit("cudnn", **rec)
    return rec


def op_stage(torch):
    """torch.ones(1).cuda() and a 64x64 matmul (cuBLAS), checked against the CPU. True when it worked."""
    op = {"ok": False}
    part = "ones"
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        t1 = time.time()
        try:
            begin("op.ones", "torch.ones(1).cuda()")
            x = torch.ones(1).cuda()
            torch.cuda.synchronize()
            part = "matmul"
            begin("op.matmul", "a 64x64 matmul on the GPU (cuBLAS)")
            a = torch.arange(64 * 64, dtype=torch.float32).reshape(64, 64).div_(4096.0)
            c = (a.cuda() @ a.cuda()).cpu()
            torch.cuda.synchronize()
            op["seconds"] = time.time() - t1
            part = "check"
            ref = a @ a
            op["checked"] = bool(torch.allclose(c, ref, rtol=1e-3, atol=1e-3)) and float(x.item()) == 1.0
            op["ok"] = op["checked"]
            if not op["checked"]:
                op["error"] = "the GPU result differs from the CPU result"
                op["part"] = part
        except BaseException as e:
            op["seconds"] = time.time() - t1
            op["error_type"] = type(e).__name__
            op["error"] = str(e)
            op["part"] = part
        op["warnings"] = caught_warnings(ws)
    emit("op", **op)
    return op["ok"]


def conv_stage(torch):
    """A 3x3 convolution on the GPU through cuDNN, checked against the CPU: what convolutional models meet."""
    rec = {"ok": False}
    begin("conv", "a 3x3 convolution on the GPU (cuDNN)")
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        t1 = time.time()
        try:
            x = torch.arange(3 * 8 * 8, dtype=torch.float32).reshape(1, 3, 8, 8).div_(192.0)
            w = torch.arange(4 * 3 * 3 * 3, dtype=torch.float32).reshape(4, 3, 3, 3).div_(108.0)
            y = torch.nn.functional.conv2d(x.cuda(), w.cuda(), padding=1).cpu()  # cuDNN: torch's default for it
            torch.cuda.synchronize()
            rec["seconds"] = time.time() - t1
            ref = torch.nn.functional.conv2d(x, w, padding=1)
            # cuDNN may compute in TF32 (torch's default for convolutions): 10-bit mantissas, hence 1e-2
            rec["checked"] = bool(torch.allclose(y, ref, rtol=1e-2, atol=1e-2))
            rec["ok"] = rec["checked"]
            if not rec["checked"]:
                rec["error"] = "the GPU result differs from the CPU result"
        except BaseException as e:
            rec["seconds"] = time.time() - t1
            rec["error_type"] = type(e).__name__
            rec["error"] = str(e)
        rec["warnings"] = caught_warnings(ws)
    emit("conv", **rec)


def nccl_version(torch):
    try:
        nv = torch.cuda.nccl.version()
        return ".".join(str(x) for x in nv) if isinstance(nv, tuple) else str(nv)
    except Exception:
        return ""


def memory_limits():
    """This process's soft limits on virtual memory (ulimit -v) and data (ulimit -d), in bytes; None = unlimited.
    CUDA reserves address space as it starts: under a low limit cudaGetDeviceCount() fails with 'out of memory'."""
    try:
        import resource
    except ImportError:  # not Unix
        return {}
    out = {}
    for key, name in (("as", "RLIMIT_AS"), ("data", "RLIMIT_DATA")):
        try:
            soft = resource.getrlimit(getattr(resource, name))[0]
            out[key] = None if soft == resource.RLIM_INFINITY else int(soft)
        except (AttributeError, ValueError, OSError):
            pass
    return out


def limit_retry():
    """CUDA's initialisation ran out of memory under a soft memory limit: start CUDA again in a grandchild whose soft
    limits are raised to the hard ones (any process may; nothing outside it changes). Whether it works there proves
    or clears the limit as the cause. Hard limits equal to the soft ones cannot be raised: the retry is not made."""
    lim = memory_limits()
    if not any(lim.get(k) for k in ("as", "data")):
        return
    import resource
    import subprocess

    raise_to = {}
    for key, name in (("as", "RLIMIT_AS"), ("data", "RLIMIT_DATA")):
        soft, hard = resource.getrlimit(getattr(resource, name))
        if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or hard > soft):
            raise_to[name] = hard
    if not raise_to:
        emit("limit_retry", made=False, why="the hard limits equal the soft ones")
        return
    code = ("import resource\n" + "".join("resource.setrlimit(resource.%s, (%d, %d))\n" % (
        n, h, h) for n, h in raise_to.items()) + "import torch\ntorch.cuda.init()\nprint(torch.cuda.device_count())\n")
    begin("limit_retry", "starting CUDA again with the soft memory limits raised to the hard ones")
    try:
        p = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=90)
        tail = p.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
        emit("limit_retry", made=True, ok=p.returncode == 0, raised=sorted(raise_to), error=tail[0][:300])
    except Exception as e:  # noqa: BLE001 - a hang or no interpreter: nothing proved
        emit("limit_retry", made=True, ok=None, raised=sorted(raise_to), error=err_text(e)[:300])


def main():
    do_op = "--no-op" not in sys.argv
    emit("python", executable=sys.executable, version=sys.version.split()[0], prefix=sys.prefix,
         visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"), pid=os.getpid(), rlimits=memory_limits())
    torch = import_torch()
    if torch is None:
        emit("done")
        return
    v = getattr(torch, "version", None)
    cuda = cuda_stage(torch, bool(getattr(v, "cuda", None)))
    extra = {}
    if not cuda["available"] and "out of memory" in (cuda.get("init_error") or "").lower():
        limit_retry()
    if not cuda["available"]:
        try:
            extra["cudnn_version"] = torch.backends.cudnn.version()
        except Exception:
            extra["cudnn_version"] = None
    elif init_stage(torch):
        devices_ok = devices_stage(torch, cuda["device_count"])
        cudnn = cudnn_stage(torch)
        extra["cudnn_version"] = cudnn.get("version")
        if do_op and devices_ok:
            emit("maps", libraries=mapped_libraries())  # what is loaded before the op, in case it dies there
            if op_stage(torch):
                if cudnn.get("available"):
                    conv_stage(torch)
                else:
                    emit("conv", skipped="torch was built without cuDNN")
            else:
                emit("conv", skipped="the op failed")
    else:  # torch's lazy init raised: no further CUDA call (see the module's docstring)
        extra["cudnn_version"] = cudnn_stage(torch).get("version")
    begin("libs", "reading the loaded libraries")
    extra["nccl_version"] = nccl_version(torch)
    emit("libs", libraries=mapped_libraries(), **extra)
    emit("done")


if __name__ == "__main__":
    try:
        main()
    except BaseException as e:  # report, never a traceback to the parent's user
        emit("crash", error=err_text(e))
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    # Everything is said: leave without tearing torch and CUDA down (cuBLAS/cuDNN handles, the caching
    # allocator, the context), which the parent does not wait for either (it stops reading at "done").
    os._exit(0)

"""Runs inside the TARGET interpreter (any Python >= 3.6), as a script: stdlib only.

It reports what that interpreter's torch sees, one JSON record per stage, each on its own line
after a marker, flushed at once. If the child hangs or dies (SIGSEGV in a driver), the parent
still has every stage before that and knows where it stopped. Junk printed by site hooks or
libraries is ignored by the parent (it only reads marked lines).

Stages: python, import, cuda, devices, op, libs, done.
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


def main():
    do_op = "--no-op" not in sys.argv
    emit("python", executable=sys.executable, version=sys.version.split()[0], prefix=sys.prefix,
         visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))

    t0 = time.time()
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        try:
            import torch  # noqa: F401
        except BaseException as e:  # ImportError, OSError (missing libcudart), SystemExit ...
            emit("import", installed=False, import_error=err_text(e), import_s=time.time() - t0,
                 not_found=isinstance(e, ImportError) and getattr(e, "name", "") == "torch",
                 warnings=caught_warnings(ws))
            emit("done")
            return
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
        if not cuda["available"] and info["cuda"]:
            try:
                torch.cuda.init()  # raises with torch's own reason ("Found no NVIDIA driver ...")
            except Exception as e:
                cuda["init_error"] = err_text(e)
        cuda["warnings"] = caught_warnings(ws)
    emit("cuda", **cuda)
    if not cuda["available"]:
        emit("libs", libraries=mapped_libraries())
        emit("done")
        return

    devices = []
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        for i in range(cuda["device_count"]):
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
            devices.append(d)
        dev_warn = caught_warnings(ws)
    emit("devices", devices=devices, warnings=dev_warn)

    if do_op:
        op = {"ok": False}
        with warnings.catch_warnings(record=True) as ws:
            warnings.simplefilter("always")
            t1 = time.time()
            try:
                x = torch.ones(1).cuda()
                a = torch.arange(64 * 64, dtype=torch.float32).reshape(64, 64).div_(4096.0)
                c = (a.cuda() @ a.cuda()).cpu()
                torch.cuda.synchronize()
                op["seconds"] = time.time() - t1
                ref = a @ a
                op["checked"] = bool(torch.allclose(c, ref, rtol=1e-3, atol=1e-3)) and float(x.item()) == 1.0
                op["ok"] = op["checked"]
                if not op["checked"]:
                    op["error"] = "the GPU result differs from the CPU result"
            except BaseException as e:
                op["seconds"] = time.time() - t1
                op["error_type"] = type(e).__name__
                op["error"] = str(e)
            op["warnings"] = caught_warnings(ws)
        emit("op", **op)

    extra = {}
    try:
        extra["cudnn_version"] = torch.backends.cudnn.version()
    except Exception:
        extra["cudnn_version"] = None
    try:
        nv = torch.cuda.nccl.version()
        extra["nccl_version"] = ".".join(str(x) for x in nv) if isinstance(nv, tuple) else str(nv)
    except Exception:
        extra["nccl_version"] = ""
    emit("libs", libraries=mapped_libraries(), **extra)
    emit("done")


if __name__ == "__main__":
    try:
        main()
    except BaseException as e:  # report, never a traceback to the parent's user
        emit("crash", error=err_text(e))

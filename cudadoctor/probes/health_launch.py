"""`cudadoctor health`'s kernel launch: one child process, every GPU the driver enumerates, in parallel.

Run as `python -I -S health_launch.py PTX_FILE` (isolated, no site: it starts in ~10 ms; it finds
cudadoctor's driver-API binding next to itself). cuInit starts at once in a thread while that binding
is imported; then one thread per GPU retains its primary context, JIT-loads probe_kernels/health.ptx,
launches it (2 blocks x 128 threads write 3*i + seed), synchronises and checks all 256 values.

Prints one line per result, each `@@CDHEALTH@@{json}` and flushed at once, so a GPU that hangs leaves
the others' records (the parent kills this child at its timeout and names the GPUs still missing):
  {"stage": "init", ...}     driver version, device count, cuInit seconds, the libcuda.so file mapped
  {"stage": "device", ...}   one per GPU: ordinal, uuid, pci_bus_id, name, cc, ok, seconds per step, error
  {"stage": "done", ...}     total seconds
An error is {"call", "code", "name", "message"} (CudaError.to_dict()).
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading
import time

MARK = "@@CDHEALTH@@"
KERNEL = "cudadoctor_health"
BLOCKS, THREADS = 2, 128
# PTX .target/.version for GPUs older than the file's sm_75 (PTX ISA 6.3 introduced sm_75, 4.0 sm_50,
# 3.0 sm_30: "PTX ISA release history", https://docs.nvidia.com/cuda/parallel-thread-execution/). PTX for
# an older target is JIT-compiled for any newer GPU, so sm_75 PTX serves every GPU from Turing on.
OLDER_TARGETS = (((5, 0), b".version 4.0", b".target sm_50"), ((0, 0), b".version 3.1", b".target sm_30"))


_EMIT = threading.Lock()  # one thread per GPU reports: whole lines only


def emit(rec: dict) -> None:
    line = MARK + json.dumps(rec) + "\n"
    with _EMIT:
        sys.stdout.write(line)
        sys.stdout.flush()


def error_of(e) -> dict:
    to_dict = getattr(e, "to_dict", None)
    if to_dict is not None:
        return to_dict()
    return {"call": "", "code": -1, "name": type(e).__name__, "message": str(e)}


def ptx_for(ptx: bytes, cc: tuple) -> bytes:
    if cc >= (7, 5):
        return ptx
    for floor, version, target in OLDER_TARGETS:
        if cc >= floor:
            return ptx.replace(b".version 6.3", version).replace(b".target sm_75", target)
    return ptx


def uuid_of(drv, dev: int) -> str:
    """GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, as NVML and nvidia-smi print it."""
    raw = ctypes.create_string_buffer(16)
    name = "cuDeviceGetUuid_v2" if hasattr(drv.lib, "cuDeviceGetUuid_v2") else "cuDeviceGetUuid"
    drv._call(name, raw, ctypes.c_int(dev))
    h = raw.raw.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def bus_id_of(drv, dev: int) -> str:
    buf = ctypes.create_string_buffer(64)
    drv._call("cuDeviceGetPCIBusId", buf, ctypes.c_int(64), ctypes.c_int(dev))
    return buf.value.decode(errors="replace")


def run_device(drv, ordinal: int, ptx: bytes, seed: int) -> dict:
    rec: dict = {"stage": "device", "ordinal": ordinal, "ok": False, "step": "cuDeviceGet"}
    t0 = time.monotonic()
    try:
        dev = drv.device(ordinal)
        rec["step"] = "identify"
        rec["uuid"] = uuid_of(drv, dev)
        rec["pci_bus_id"] = bus_id_of(drv, dev)
        rec["name"] = drv.name(dev)
        cc = drv.compute_capability(dev)
        rec["cc"] = f"{cc[0]}.{cc[1]}"
        rec["step"] = "context"
        t = time.monotonic()
        with drv.context(dev, release=False):  # released by the exit below: the answer is known by then
            rec["context_s"] = round(time.monotonic() - t, 4)
            rec["step"] = "load"
            t = time.monotonic()
            mod = drv.load_module(ptx_for(ptx, cc))
            fn = drv.function(mod, KERNEL)
            rec["load_s"] = round(time.monotonic() - t, 4)
            n = BLOCKS * THREADS
            rec["step"] = "alloc"
            buf = drv.alloc(4 * n)
            try:
                rec["step"] = "launch"
                t = time.monotonic()
                drv.launch(fn, (BLOCKS,), (THREADS,), [ctypes.c_uint64(buf), ctypes.c_uint32(seed)])
                drv.synchronize()
                rec["launch_s"] = round(time.monotonic() - t, 6)
                rec["step"] = "check"
                got = (ctypes.c_uint32 * n).from_buffer_copy(drv.dtoh(buf, 4 * n))
            finally:
                drv.free(buf)
            drv.unload(mod)
        wrong = [i for i in range(n) if got[i] != (3 * i + seed) & 0xFFFFFFFF]
        rec["wrong"] = len(wrong)
        if wrong:
            rec["first_wrong"] = {"index": wrong[0], "got": got[wrong[0]], "want": (3 * wrong[0] + seed) & 0xFFFFFFFF}
        rec["ok"] = not wrong
        rec["step"] = "done"
    except Exception as e:  # noqa: BLE001 - every failure is a record
        rec["error"] = error_of(e)
    rec["total_s"] = round(time.monotonic() - t0, 4)
    return rec


def libcuda_file() -> str:
    """The libcuda.so.X file this process mapped (its name carries the user-space driver version)."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rsplit(None, 1)[-1]
                if "/libcuda.so" in path:
                    return os.path.realpath(path)
    except OSError:
        pass
    return ""


def main(argv: list) -> int:
    t0 = time.monotonic()
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        emit({"stage": "init", "error": {"call": "dlopen", "code": -1, "name": "LIBCUDA_NOT_LOADABLE",
                                         "message": f"cannot load libcuda.so.1: {e}"}})
        return 0
    # cuInit takes most of this child's time: start it now and import the binding meanwhile
    rc: list = []
    init = threading.Thread(target=lambda: rc.append(lib.cuInit(ctypes.c_uint(0))), daemon=True)
    init.start()
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from cudadoctor.probes.driver_api import CudaError, Driver

    try:
        with open(argv[1], "rb") as f:
            ptx = f.read()
    except (OSError, IndexError) as e:
        emit({"stage": "init", "error": {"call": "open", "code": -1, "name": "PTX_NOT_READABLE", "message": str(e)}})
        return 0
    init.join()
    drv = Driver()
    rec: dict = {"stage": "init", "init_s": round(time.monotonic() - t0, 4), "libcuda": libcuda_file(),
                 "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    try:
        if rc[0] != 0:
            raise CudaError("cuInit", rc[0], drv.error_name(rc[0]), drv.error_string(rc[0]))
        rec["driver_version"] = drv.driver_version()
        rec["count"] = drv.device_count()
    except Exception as e:  # noqa: BLE001
        rec["error"] = error_of(e)
        emit(rec)
        return 0
    emit(rec)
    seed = int.from_bytes(os.urandom(2), "little") + 1
    threads = [threading.Thread(target=lambda i=i: emit(run_device(drv, i, ptx, seed)), daemon=True)
               for i in range(rec["count"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    emit({"stage": "done", "total_s": round(time.monotonic() - t0, 4)})
    return 0


if __name__ == "__main__":
    code = main(sys.argv)
    sys.stdout.flush()
    # No interpreter teardown: the contexts go with the process, and the parent stops waiting at "done"
    os._exit(code)

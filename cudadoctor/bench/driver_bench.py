"""Bench child without torch: the CUDA driver API (cudadoctor.probes.driver_api) in cudadoctor's own
interpreter. Run as `python -m cudadoctor.bench.driver_bench --gemm FILE [--minimal FILE] [--only
probe_gemm] [--quick] [--device N]`; FILEs are images of probe_kernels/gemm.cu and minimal.cu
built by cudadoctor.probes.build for this GPU.

Measures the probe GEMMs (naive vs tiled, FP32, CUDA events, median of many runs, sampled results
checked against float64 sums), and, when torch is missing: launch cost of the minimal kernel
(eager cuLaunchKernel from Python vs replay of a captured CUDA graph), device-to-device copy, and
host copies pinned (cuMemAllocHost) and pageable. Same record format as torch_bench.py.
"""

from __future__ import annotations

import array
import ctypes
import os
import random
import sys
import time

from cudadoctor.bench import torch_bench as tb
from cudadoctor.bench.torch_bench import emit, err_text, median, reps_for, stats

TILE = 32
MIB = 1 << 20


class DBench:
    def __init__(self, drv, quick: bool):
        self.drv = drv
        self.quick = quick
        self.target_s = 0.05 if quick else 0.3

    def event_times(self, work, reps: int) -> list:
        return [self.drv.time_ms(work, 1) / 1000.0 for _ in range(reps)]

    def adaptive(self, work, lo=3, hi=100) -> list:
        work()
        self.drv.synchronize()
        one = self.drv.time_ms(work, 1) / 1000.0
        return self.event_times(work, reps_for(one, self.target_s, lo, hi))


def random_floats(rng: random.Random, n: int) -> array.array:
    """n pseudo-random floats in [-1, 1): a random block of a prime length, repeated (fast in Python)."""
    p = 65521
    block = array.array("f", (rng.uniform(-1.0, 1.0) for _ in range(p)))
    reps = n // p + 1
    out = block * reps
    del out[n:]
    return out


def measure_probe_gemm(b: DBench, path: str, n: int) -> None:
    drv = b.drv
    rng = random.Random(1234)
    A, B = random_floats(rng, n * n), random_floats(random.Random(99), n * n)[::-1]
    with open(path, "rb") as f:
        mod = drv.load_module(f.read())
    dA, dB, dC = drv.alloc(4 * n * n), drv.alloc(4 * n * n), drv.alloc(4 * n * n)
    try:
        drv.htod(dA, A.tobytes())
        drv.htod(dB, B.tobytes())
        samples = [(rng.randrange(n), rng.randrange(n)) for _ in range(48)]
        ref = {}
        for i, j in samples:
            s = mag = 0.0
            for k in range(n):
                p = float(A[i * n + k]) * float(B[k * n + j])
                s += p
                mag += abs(p)
            ref[(i, j)] = (s, mag)
        grid = ((n + TILE - 1) // TILE, (n + TILE - 1) // TILE)
        args = [ctypes.c_uint64(dA), ctypes.c_uint64(dB), ctypes.c_uint64(dC), ctypes.c_int(n), ctypes.c_int(n),
                ctypes.c_int(n)]
        for name in ("cd_gemm_naive", "cd_gemm_tiled"):
            rid = "probe_gemm_" + name.split("_")[-1]
            try:
                fn = drv.function(mod, name)
                drv.memset(dC, 0, 4 * n * n)
                secs = b.adaptive(lambda: drv.launch(fn, grid, (TILE, TILE), args), lo=3, hi=50)
                C = array.array("f", drv.dtoh(dC, 4 * n * n))
                worst = max(abs(C[i * n + j] - s) / max(mag, 1e-30) for (i, j), (s, mag) in ref.items())
                m = median(secs)
                emit("measure", id=rid, n=n, flop=2.0 * n ** 3, tflops=2.0 * n ** 3 / m / 1e12,
                     checked=worst <= 1e-4, rel_error=worst, rel_error_bound=1e-4, **stats(secs))
            except Exception as e:  # noqa: BLE001
                emit("error", id=rid, error=err_text(e))
    finally:
        for p in (dA, dB, dC):
            drv.free(p)
        drv.unload(mod)


def measure_launch(b: DBench, path: str, n_kernels: int) -> None:
    """cd_minimal(out, 1) launched n times from Python vs replayed from a captured CUDA graph."""
    drv = b.drv
    with open(path, "rb") as f:
        mod = drv.load_module(f.read())
    fn = drv.function(mod, "cd_minimal")
    out = drv.alloc(8)
    args = [ctypes.c_uint64(out), ctypes.c_int(1)]
    stream = ctypes.c_void_p()
    graph, exe = ctypes.c_void_p(), ctypes.c_void_p()
    try:
        def eager():
            for _ in range(n_kernels):
                drv.launch(fn, (1,), (32,), args)

        eager()
        drv.synchronize()
        eager_s = []
        for _ in range(5 if b.quick else 9):
            t0 = time.perf_counter()
            eager()
            drv.synchronize()
            eager_s.append(time.perf_counter() - t0)
        drv._call("cuStreamCreate", ctypes.byref(stream), ctypes.c_uint(1))  # CU_STREAM_NON_BLOCKING
        drv._call("cuStreamBeginCapture_v2", stream, ctypes.c_int(2))  # CU_STREAM_CAPTURE_MODE_RELAXED
        for _ in range(n_kernels):
            drv.launch(fn, (1,), (32,), args, stream=stream.value)
        drv._call("cuStreamEndCapture", stream, ctypes.byref(graph))
        drv._call("cuGraphInstantiateWithFlags", ctypes.byref(exe), graph, ctypes.c_ulonglong(0))

        def replay():
            drv._call("cuGraphLaunch", exe, stream)
            drv._call("cuStreamSynchronize", stream)

        replay()
        graph_s = []
        for _ in range(5 if b.quick else 9):  # events would need the same stream: time on the host
            t0 = time.perf_counter()
            replay()
            graph_s.append(time.perf_counter() - t0)
        got = array.array("i", drv.dtoh(out, 8))
        ok = got[0] == 7 and got[1] > 0
        emit("measure", id="launch", kernels=n_kernels, op="cd_minimal<<<1,32>>> through cuLaunchKernel (ctypes)",
             eager=stats(eager_s), graph=stats(graph_s), eager_us=median(eager_s) / n_kernels * 1e6,
             graph_us=median(graph_s) / n_kernels * 1e6, checked=ok,
             check_error="" if ok else "the kernel did not write its output", under_load=None)
    finally:
        if exe.value:
            drv.lib.cuGraphExecDestroy(exe)
        if graph.value:
            drv.lib.cuGraphDestroy(graph)
        if stream.value:
            drv.lib.cuStreamDestroy_v2(stream)
        drv.free(out)
        drv.unload(mod)


def _fill_random(drv, ptr: int, nbytes: int) -> bytes:
    block = os.urandom(16 * MIB)
    data = (block * (nbytes // len(block) + 1))[:nbytes]
    drv.htod(ptr, data)
    return data


def measure_copies(b: DBench, d2d_bytes: int, host_bytes: int) -> None:
    drv = b.drv
    src, dst = drv.alloc(d2d_bytes), drv.alloc(d2d_bytes)
    try:
        _fill_random(drv, src, d2d_bytes)
        secs = b.adaptive(lambda: drv._call("cuMemcpyDtoD_v2", ctypes.c_uint64(dst), ctypes.c_uint64(src),
                                            ctypes.c_size_t(d2d_bytes)))
        probe = 4 * MIB
        ok = drv.dtoh(dst, probe) == drv.dtoh(src, probe)
        m = median(secs)
        emit("measure", id="d2d", bytes=d2d_bytes, traffic_bytes=2 * d2d_bytes, gbps=2 * d2d_bytes / m / 1e9,
             checked=ok, under_load=None, **stats(secs))
    except Exception as e:  # noqa: BLE001
        emit("error", id="d2d", error=err_text(e))
    finally:
        drv.free(src)
        drv.free(dst)
    dev = drv.alloc(host_bytes)
    pinned = ctypes.c_void_p()
    try:
        data = _fill_random(drv, dev, host_bytes)
        drv._call("cuMemAllocHost_v2", ctypes.byref(pinned), ctypes.c_size_t(host_bytes))
        pageable = ctypes.create_string_buffer(data, host_bytes)
        ctypes.memmove(pinned, data, host_bytes)
        for kind, hptr in (("pinned", pinned.value), ("pageable", ctypes.addressof(pageable))):
            for direction in ("h2d", "d2h"):
                rid = f"{direction}_{kind}"
                try:
                    if direction == "h2d":
                        call = ("cuMemcpyHtoD_v2", ctypes.c_uint64(dev), ctypes.c_void_p(hptr),
                                ctypes.c_size_t(host_bytes))
                    else:
                        call = ("cuMemcpyDtoH_v2", ctypes.c_void_p(hptr), ctypes.c_uint64(dev),
                                ctypes.c_size_t(host_bytes))
                    work = (lambda c=call: drv._call(*c))
                    if kind == "pinned":
                        secs = b.adaptive(work, lo=3, hi=50)
                    else:
                        work()
                        secs = []
                        for _ in range(max(3, reps_for(_wall(work), b.target_s, 3, 30))):
                            secs.append(_wall(work))
                    ok = drv.dtoh(dev, MIB) == data[:MIB]
                    m = median(secs)
                    emit("measure", id=rid, bytes=host_bytes, traffic_bytes=host_bytes, host_pinned=kind == "pinned",
                         gbps=host_bytes / m / 1e9, checked=ok, under_load=None, **stats(secs))
                except Exception as e:  # noqa: BLE001
                    emit("error", id=rid, error=err_text(e))
    finally:
        if pinned.value:
            drv.lib.cuMemFreeHost(pinned)
        drv.free(dev)


def _wall(work) -> float:
    t0 = time.perf_counter()
    work()
    return time.perf_counter() - t0


def main() -> None:
    from cudadoctor.probes.driver_api import Driver

    quick = "--quick" in sys.argv
    index = int(tb.arg_value("--device", "0"))
    only = tb.arg_value("--only", "")
    gemm = tb.arg_value("--gemm")
    minimal = tb.arg_value("--minimal")
    pfile = tb.arg_value("--progress")
    if pfile:
        try:
            tb._progress = open(pfile, "a")
        except OSError:
            tb._progress = None
    emit("start", python=sys.executable, version=sys.version.split()[0], quick=quick, backend="driver",
         env={k: os.environ[k] for k in tb.ENV_VARS if k in os.environ})
    t0 = time.time()
    drv = Driver()
    drv.init()
    dev = drv.device(index)
    cc = drv.compute_capability(dev)
    uuid = ""
    try:
        buf = (ctypes.c_ubyte * 16)()
        drv._call("cuDeviceGetUuid_v2", buf, ctypes.c_int(dev))
        h = bytes(buf).hex()
        uuid = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    except Exception:  # noqa: BLE001
        pass
    with drv.context(dev):
        free, total = drv.mem_info()
        emit("device", index=index, name=drv.name(dev), capability=f"{cc[0]}.{cc[1]}", total_bytes=total,
             free_bytes=free, uuid=uuid, sm_count=drv.attribute(dev, 16))
        b = DBench(drv, quick)
        n = 1024 if quick else 2048
        steps = [("launch", lambda: measure_launch(b, minimal, 200 if quick else 1000) if minimal else
                  emit("error", id="launch", error="no minimal-kernel image")),
                 ("d2d", lambda: measure_copies(b, min(256 * MIB if quick else 1024 * MIB, free // 8),
                                                min(64 * MIB if quick else 256 * MIB, free // 8))),
                 ("probe_gemm", lambda: measure_probe_gemm(b, gemm, n) if gemm else
                  emit("error", id="probe_gemm", error="no GEMM image"))]
        for name, fn in steps:
            if only and name not in only.split(","):
                continue
            emit("begin", id="copies" if name == "d2d" else name)
            try:
                fn()
            except Exception as e:  # noqa: BLE001
                emit("error", id=name, error=err_text(e))
    emit("done", seconds=time.time() - t0)


if __name__ == "__main__":
    try:
        main()
    except BaseException as e:  # noqa: BLE001
        emit("crash", error=err_text(e))

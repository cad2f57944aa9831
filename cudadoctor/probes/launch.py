"""Load and launch the probe kernels through the CUDA driver API, in a child process.

Run as `python -m cudadoctor.probes.launch` with a JSON plan on stdin:
    {"device": 0,
     "builds": [{"name": "native", "path": ".../minimal-<key>.fatbin"}, ...],
     "kernels": {"gemm": ".../gemm-<key>.fatbin", "attention": "..."},   (optional)
     "sizes": {"gemm": 1024, "attention_len": 1024, "attention_bh": 8}}   (optional)
Prints one line per result, each `@@CDPROBE@@{json}`: a "device" record, one "build" record per
build (module load, launch, result check, the __CUDA_ARCH__ the image reported), one "kernel"
record per GEMM/attention kernel (time, GFLOP/s, error against a CPU reference), then "done".
The parent (probes/run.py) runs it with a timeout, so a hung driver cannot hang cudadoctor; the
lines already printed survive a timeout.

CPU references are exact (float64) values of randomly sampled output elements, so a pure-Python
check stays fast at full problem size: GEMM |C_ij - ref| <= GEMM_TOL * sum_k |A_ik B_kj|
(float32 accumulation over K); attention max |O - ref| <= ATTN_TOL * max |ref| over sampled rows.
"""

from __future__ import annotations

import array
import ctypes
import json
import math
import random
import sys
import time

MARK = "@@CDPROBE@@"
GEMM_TOL = 1e-4
ATTN_TOL = 2e-3
HEAD_DIM = 64  # CD_HEAD_DIM in attention.cu
TILE = 32  # CD_TILE in gemm.cu


def emit(rec: dict) -> None:
    sys.stdout.write(MARK + json.dumps(rec) + "\n")
    sys.stdout.flush()


def _err(e) -> dict:
    from cudadoctor.probes.driver_api import CudaError

    if isinstance(e, CudaError):
        return e.to_dict()
    return {"call": "", "code": -1, "name": type(e).__name__, "message": str(e)}


def run_build(drv, b: dict) -> dict:
    from cudadoctor.probes.driver_api import CudaError

    rec = {"type": "build", "name": b["name"], "stage": "read"}
    n = 256
    try:
        with open(b["path"], "rb") as f:
            image = f.read()
    except OSError as e:
        rec.update(ok=False, error={"call": "open", "code": -1, "name": "OSError", "message": str(e)})
        return rec
    mod = None
    try:
        rec["stage"] = "load"
        mod = drv.load_module(image)
        rec["stage"] = "function"
        fn = drv.function(mod, "cd_minimal")
        out = drv.alloc(4 * (n + 1))
        try:
            drv.memset(out, 0, 4 * (n + 1))
            rec["stage"] = "launch"
            drv.launch(fn, (2,), (128,), [ctypes.c_uint64(out), ctypes.c_int(n)])
            rec["stage"] = "sync"
            drv.synchronize()
            vals = array.array("i", drv.dtoh(out, 4 * (n + 1)))
        finally:
            drv.free(out)
        rec["result_ok"] = all(vals[i] == 3 * i + 7 for i in range(n))
        rec["cuda_arch"] = vals[n]
        rec["ok"] = bool(rec["result_ok"])
    except CudaError as e:
        rec.update(ok=False, error=e.to_dict())
    finally:
        if mod is not None:
            try:
                drv.unload(mod)
            except CudaError:
                pass
    return rec


def _rand(rng: random.Random, n: int) -> array.array:
    return array.array("f", (rng.uniform(-1.0, 1.0) for _ in range(n)))


def run_gemm(drv, path: str, size: int, rng: random.Random) -> list:
    M = N = K = size
    A, B = _rand(rng, M * K), _rand(rng, K * N)
    mod = drv.load_module(open(path, "rb").read())
    dA, dB, dC = drv.alloc(4 * M * K), drv.alloc(4 * K * N), drv.alloc(4 * M * N)
    out = []
    try:
        drv.htod(dA, A.tobytes())
        drv.htod(dB, B.tobytes())
        samples = [(rng.randrange(M), rng.randrange(N)) for _ in range(256)]
        ref = {}
        for i, j in samples:
            row = A[i * K:(i + 1) * K]
            s = mag = 0.0
            for k in range(K):
                p = row[k] * B[k * N + j]
                s += p
                mag += abs(p)
            ref[(i, j)] = (s, mag)
        grid = ((N + TILE - 1) // TILE, (M + TILE - 1) // TILE)
        for name in ("cd_gemm_naive", "cd_gemm_tiled"):
            fn = drv.function(mod, name)
            args = [ctypes.c_uint64(dA), ctypes.c_uint64(dB), ctypes.c_uint64(dC), ctypes.c_int(M), ctypes.c_int(N),
                    ctypes.c_int(K)]
            drv.memset(dC, 0, 4 * M * N)
            drv.launch(fn, grid, (TILE, TILE), args)  # warm-up and the checked run
            drv.synchronize()
            C = array.array("f", drv.dtoh(dC, 4 * M * N))
            worst = max(abs(C[i * N + j] - s) / max(mag, 1e-30) for (i, j), (s, mag) in ref.items())
            ms = drv.time_ms(lambda: drv.launch(fn, grid, (TILE, TILE), args), repeat=5)
            out.append({"type": "kernel", "name": name.replace("cd_", ""), "size": f"{M}x{N}x{K}",
                        "ms": round(ms, 4), "gflops": round(2.0 * M * N * K / (ms * 1e6), 1),
                        "max_rel_err": worst, "bound": GEMM_TOL, "ok": worst <= GEMM_TOL})
    finally:
        for p in (dA, dB, dC):
            drv.free(p)
        drv.unload(mod)
    return out


def attention_reference(Q, K, V, L: int, bh: int, i: int, scale: float, causal: bool) -> list:
    base = bh * L * HEAD_DIM
    q = Q[base + i * HEAD_DIM: base + (i + 1) * HEAD_DIM]
    last = i + 1 if causal else L
    scores = []
    for j in range(last):
        k = K[base + j * HEAD_DIM: base + (j + 1) * HEAD_DIM]
        scores.append(scale * sum(a * b for a, b in zip(q, k)))
    m = max(scores)
    w = [math.exp(s - m) for s in scores]
    tot = sum(w)
    o = [0.0] * HEAD_DIM
    for j, wj in enumerate(w):
        v = V[base + j * HEAD_DIM: base + (j + 1) * HEAD_DIM]
        for d in range(HEAD_DIM):
            o[d] += wj * v[d]
    return [x / tot for x in o]


def run_attention(drv, path: str, L: int, BH: int, rng: random.Random) -> dict:
    n = BH * L * HEAD_DIM
    Q, K, V = _rand(rng, n), _rand(rng, n), _rand(rng, n)
    scale = 1.0 / math.sqrt(HEAD_DIM)
    mod = drv.load_module(open(path, "rb").read())
    ptrs = [drv.alloc(4 * n) for _ in range(4)]
    try:
        for p, h in zip(ptrs, (Q, K, V)):
            drv.htod(p, h.tobytes())
        fn = drv.function(mod, "cd_attention")
        block = 128
        grid = ((L + block - 1) // block, BH)
        args = [ctypes.c_uint64(p) for p in ptrs] + [ctypes.c_int(L), ctypes.c_float(scale), ctypes.c_int(1)]
        drv.launch(fn, grid, (block,), args)
        drv.synchronize()
        O = array.array("f", drv.dtoh(ptrs[3], 4 * n))
        rows = [(rng.randrange(BH), rng.randrange(L)) for _ in range(6)] + [(0, 0), (BH - 1, L - 1)]
        err = mag = 0.0
        for b, i in rows:
            ref = attention_reference(Q, K, V, L, b, i, scale, True)
            got = O[(b * L + i) * HEAD_DIM:(b * L + i + 1) * HEAD_DIM]
            err = max(err, max(abs(x - y) for x, y in zip(got, ref)))
            mag = max(mag, max(abs(y) for y in ref))
        rel = err / max(mag, 1e-30)
        ms = drv.time_ms(lambda: drv.launch(fn, grid, (block,), args), repeat=5)
        flops = 4.0 * BH * HEAD_DIM * L * (L + 1) / 2  # causal: Q.K^T and P.V over the lower triangle
        return {"type": "kernel", "name": "attention_fused", "size": f"BH={BH} L={L} D={HEAD_DIM} causal",
                "ms": round(ms, 4), "gflops": round(flops / (ms * 1e6), 1), "max_rel_err": rel, "bound": ATTN_TOL,
                "ok": rel <= ATTN_TOL}
    finally:
        for p in ptrs:
            drv.free(p)
        drv.unload(mod)


def main() -> int:
    try:
        plan = json.loads(sys.stdin.read() or "{}")
    except ValueError as e:
        emit({"type": "fatal", "error": {"name": "bad-plan", "message": str(e)}})
        return 2
    from cudadoctor.probes.driver_api import CudaError, Driver, DriverLoadError, version_str

    t0 = time.monotonic()
    try:
        drv = Driver()
    except DriverLoadError as e:
        emit({"type": "fatal", "stage": "load-libcuda", "error": {"name": "no-libcuda", "message": str(e)}})
        return 0
    try:
        drv.init()
        ver = drv.driver_version()
        count = drv.device_count()
        dev = drv.device(int(plan.get("device", 0)))
        cc = drv.compute_capability(dev)
        emit({"type": "device", "driver_cuda": version_str(ver), "device_count": count, "name": drv.name(dev),
              "cc": f"{cc[0]}.{cc[1]}", "init_s": round(time.monotonic() - t0, 3)})
    except CudaError as e:
        emit({"type": "fatal", "stage": e.call, "error": e.to_dict()})
        return 0
    rng = random.Random(1234)
    sizes = plan.get("sizes") or {}
    with drv.context(dev):
        for b in plan.get("builds") or []:
            emit(run_build(drv, b))
        kernels = plan.get("kernels") or {}
        if kernels.get("gemm"):
            try:
                for rec in run_gemm(drv, kernels["gemm"], int(sizes.get("gemm", 1024)), rng):
                    emit(rec)
            except (CudaError, OSError) as e:
                emit({"type": "kernel", "name": "gemm", "ok": False, "error": _err(e)})
        if kernels.get("attention"):
            try:
                emit(run_attention(drv, kernels["attention"], int(sizes.get("attention_len", 1024)),
                                   int(sizes.get("attention_bh", 8)), rng))
            except (CudaError, OSError) as e:
                emit({"type": "kernel", "name": "attention_fused", "ok": False, "error": _err(e)})
    emit({"type": "done", "seconds": round(time.monotonic() - t0, 3)})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Runs inside the TARGET interpreter, as a script: stdlib + torch only (any Python >= 3.6).

Measures, on one GPU: kernel launch cost (eager vs CUDA-graph replay), copy bandwidth (device to
device, host to device and back, pinned and pageable) and matrix products (FP32, TF32, BF16)
through torch (cuBLAS). One JSON record per measurement, each on its own line after a marker,
flushed at once, so the parent keeps every finished measurement if this child hangs or dies.
If --progress FILE is given the same lines are appended there (the parent's progress display).

Measured with care: warm-up first; CUDA events around each repetition (wall clock with a sync
only where the host does the work: eager launches and pageable copies); the repetition count
adapts so each figure takes a fixed time; the median is reported with min/max; buffers are many
times the L2 cache; data is random, never zeros; every result is checked. While the GPU is busy
the child samples NVML (libnvidia-ml through ctypes, when it loads) so clocks, throttle reasons
and the PCIe link are read under load, not at idle.

Records: start, device, measure (one per figure), error (one per failed figure), done; crash.
"""

import ctypes
import json
import os
import sys
import time
import warnings

MARK = "@@CUDADOCTOR-BENCH@@"
GIB = 1 << 30
MIB = 1 << 20
ENV_VARS = ("CUDA_LAUNCH_BLOCKING", "NVIDIA_TF32_OVERRIDE", "CUDA_INJECTION64_PATH", "CUDA_VISIBLE_DEVICES",
            "PYTORCH_NO_CUDA_MEMORY_CACHING", "CUDA_DEVICE_MAX_CONNECTIONS", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
            "CUDA_MODULE_LOADING", "NCCL_DEBUG", "PYTORCH_CUDA_ALLOC_CONF")

_progress = None


def emit(stage, **data):
    data["stage"] = stage
    line = MARK + " " + json.dumps(data, default=str) + "\n"
    sys.stdout.write(line)
    sys.stdout.flush()
    if _progress is not None:
        try:
            _progress.write(line)
            _progress.flush()
        except Exception:
            pass


def err_text(e):
    return "%s: %s" % (type(e).__name__, e)


def arg_value(name, default=None):
    if name in sys.argv:
        i = sys.argv.index(name)
        if i + 1 < len(sys.argv):
            return sys.argv[i + 1]
    return default


# ------------------------------------------------------------------ NVML under load (optional)

THROTTLE_BITS = [(0x1, "gpu_idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"),
                 (0x8, "hw_slowdown"), (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"),
                 (0x40, "hw_thermal_slowdown"), (0x80, "hw_power_brake_slowdown"),
                 (0x100, "display_clock_setting")]


class Nvml(object):
    """The few NVML calls read while the GPU is busy. Every call may fail; failures give None."""

    def __init__(self, uuid):
        self.lib = None
        self.h = None
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            if lib.nvmlInit_v2() != 0:
                return
            h = ctypes.c_void_p()
            if lib.nvmlDeviceGetHandleByUUID(ctypes.c_char_p(uuid.encode()), ctypes.byref(h)) != 0:
                return
            self.lib, self.h = lib, h
        except Exception:
            self.lib = None

    def _uint(self, fn, *args):
        v = ctypes.c_uint()
        try:
            if getattr(self.lib, fn)(self.h, *(args + (ctypes.byref(v),))) == 0:
                return int(v.value)
        except Exception:
            pass
        return None

    def sample(self):
        if self.lib is None:
            return None
        s = {"clock_sm_mhz": self._uint("nvmlDeviceGetClockInfo", ctypes.c_int(1)),
             "clock_mem_mhz": self._uint("nvmlDeviceGetClockInfo", ctypes.c_int(2)),
             "pcie_gen": self._uint("nvmlDeviceGetCurrPcieLinkGeneration"),
             "pcie_width": self._uint("nvmlDeviceGetCurrPcieLinkWidth"),
             "temperature_c": self._uint("nvmlDeviceGetTemperature", ctypes.c_int(0))}
        mw = self._uint("nvmlDeviceGetPowerUsage")
        s["power_w"] = None if mw is None else mw / 1000.0
        mask = ctypes.c_ulonglong()
        try:
            fn = getattr(self.lib, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
                self.lib.nvmlDeviceGetCurrentClocksThrottleReasons
            if fn(self.h, ctypes.byref(mask)) == 0:
                s["throttle_reasons"] = [n for b, n in THROTTLE_BITS if mask.value & b]
        except Exception:
            pass
        return s


# ------------------------------------------------------------------ helpers


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    if not n:
        return None
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def stats(seconds):
    return {"median_s": median(seconds), "min_s": min(seconds), "max_s": max(seconds), "reps": len(seconds)}


def reps_for(one_s, target_s, lo, hi):
    if one_s <= 0:
        return hi
    return int(max(lo, min(hi, target_s / one_s)))


class Bench(object):
    def __init__(self, torch, dev, quick, nvml):
        self.torch = torch
        self.dev = dev
        self.quick = quick
        self.nvml = nvml
        self.stream = torch.cuda.current_stream(dev)
        self.target_s = 0.05 if quick else 0.4  # time spent on the timed repetitions of one figure

    def sync(self):
        self.torch.cuda.synchronize(self.dev)

    def warm_clocks(self, seconds=0.2):
        """Keep the GPU busy for a moment so its clocks leave the idle state before a latency figure:
        an idle H200 sits at about 345 MHz, where even a 1-element kernel runs slower than Python
        launches it, and the 'launch cost' would measure the GPU instead of the launch path."""
        torch = self.torch
        a = torch.randn(2048, 2048, device=self.dev, dtype=torch.float16)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for _ in range(8):
                torch.mm(a, a)
            self.sync()

    def timed_events(self, fn, reps, sample=True):
        """Run fn `reps` times, each between two CUDA events; sample NVML while the GPU is busy."""
        torch = self.torch
        evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        for a, b in evs:
            a.record()
            fn()
            b.record()
        under = None
        if sample and self.nvml is not None:
            time.sleep(0.005)
            under = self.nvml.sample()
        self.sync()
        return [a.elapsed_time(b) / 1000.0 for a, b in evs], under

    def timed_wall(self, fn, reps):
        out = []
        for _ in range(reps):
            self.sync()
            t0 = time.perf_counter()
            fn()
            self.sync()
            out.append(time.perf_counter() - t0)
        return out

    def adaptive(self, fn, lo=5, hi=200, events=True):
        """Warm up, time one run, then time enough repetitions to fill the target time."""
        for _ in range(2):
            fn()
        self.sync()
        one = self.timed_wall(fn, 1)[0]
        reps = reps_for(one, self.target_s, lo, hi)
        if events:
            return self.timed_events(fn, reps)
        return self.timed_wall(fn, reps), None


def measure_launch(b, n_kernels):
    """A tiny op launched n times eagerly (host clock) vs replayed from one CUDA graph (events)."""
    torch = b.torch
    x = torch.zeros(1, device=b.dev)

    def eager():
        for _ in range(n_kernels):
            x.add_(1.0)

    b.warm_clocks()
    eager()
    b.sync()
    x.zero_()
    eager_s = b.timed_wall(eager, 5 if b.quick else 9)
    b.sync()
    expect = float(n_kernels * len(eager_s))
    ok_eager = float(x.item()) == expect

    side = torch.cuda.Stream(b.dev)
    side.wait_stream(torch.cuda.current_stream(b.dev))
    with torch.cuda.stream(side):
        for _ in range(3):
            x.add_(1.0)
    torch.cuda.current_stream(b.dev).wait_stream(side)
    b.sync()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n_kernels):
            x.add_(1.0)
    g.replay()
    b.sync()
    x.zero_()
    b.sync()
    graph_s, under = b.timed_events(g.replay, 5 if b.quick else 9)
    ok_graph = float(x.item()) == float(n_kernels * len(graph_s))
    emit("measure", id="launch", kernels=n_kernels, op="x.add_(1.0) on a 1-element tensor",
         eager=stats(eager_s), graph=stats(graph_s),
         eager_us=median(eager_s) / n_kernels * 1e6, graph_us=median(graph_s) / n_kernels * 1e6,
         checked=ok_eager and ok_graph,
         check_error="" if ok_eager and ok_graph else "the counter did not reach the number of launches",
         under_load=under)


def measure_d2d(b, nbytes):
    torch = b.torch
    n = nbytes // 4
    src = torch.rand(n, device=b.dev)
    dst = torch.empty_like(src)
    secs, under = b.adaptive(lambda: dst.copy_(src), lo=5, hi=100)
    ok = bool(torch.equal(dst, src))
    m = median(secs)
    emit("measure", id="d2d", bytes=n * 4, traffic_bytes=2 * n * 4, **dict(stats(secs), gbps=2 * n * 4 / m / 1e9,
                                                                           checked=ok, under_load=under))


def measure_host(b, nbytes):
    """H2D and D2H, pinned (events, async) and pageable (host clock)."""
    torch = b.torch
    n = nbytes // 4
    dev_src = torch.rand(n, device=b.dev)
    dev_dst = torch.empty_like(dev_src)
    pinned = torch.empty(n, dtype=torch.float32, pin_memory=True)
    pageable = torch.empty(n, dtype=torch.float32)
    pinned.copy_(dev_src)
    pageable.copy_(pinned)
    for kind, host in (("pinned", pinned), ("pageable", pageable)):
        is_pinned = bool(host.is_pinned())
        for direction in ("h2d", "d2h"):
            rec_id = "%s_%s" % (direction, kind)
            try:
                if direction == "h2d":
                    fn = (lambda h=host: dev_dst.copy_(h, non_blocking=True))
                else:
                    fn = (lambda h=host: h.copy_(dev_src, non_blocking=True))
                secs, under = b.adaptive(fn, lo=3, hi=50, events=(kind == "pinned"))
                b.sync()
                if direction == "h2d":
                    ok = bool(torch.equal(dev_dst, dev_src))
                else:
                    ok = bool(torch.equal(host[:1 << 20], dev_src[:1 << 20].cpu())) and bool(
                        torch.equal(host[-(1 << 20):], dev_src[-(1 << 20):].cpu()))
                m = median(secs)
                emit("measure", id=rec_id, bytes=n * 4, traffic_bytes=n * 4, host_pinned=is_pinned,
                     **dict(stats(secs), gbps=n * 4 / m / 1e9, checked=ok, under_load=under))
            except Exception as e:
                emit("error", id=rec_id, error=err_text(e))


def set_tf32(torch, on):
    """TF32 for cuBLAS on or off: the new API where torch has it (>= 2.9; mixing it with the legacy
    flags raises), else torch.backends.cuda.matmul.allow_tf32."""
    m = torch.backends.cuda.matmul
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if hasattr(m, "fp32_precision"):
            m.fp32_precision = "tf32" if on else "ieee"
        else:
            m.allow_tf32 = bool(on)


def measure_matmul(b, kind, n):
    torch = b.torch
    dtype = torch.bfloat16 if kind == "bf16" else torch.float32
    set_tf32(torch, kind == "tf32")
    a = torch.randn(n, n, device=b.dev, dtype=dtype)
    bb = torch.randn(n, n, device=b.dev, dtype=dtype)
    c = torch.empty(n, n, device=b.dev, dtype=dtype)
    # A burst of at most 40 products after the warm-up, as careful hand measurements do: a long
    # sustained run measures the card's power-capped steady state instead (about 12% lower on an H200).
    secs, under = b.adaptive(lambda: torch.mm(a, bb, out=c), lo=3, hi=40)
    # check: 64 rows against a float64 product of the same (already rounded) inputs
    rows = min(64, n)
    ref = a[:rows].double() @ bb.double()
    got = c[:rows].double()
    rel = float((got - ref).norm() / ref.norm())
    bound = {"fp32": 1e-4, "tf32": 5e-3, "bf16": 1e-2}[kind]
    set_tf32(torch, False)
    m = median(secs)
    emit("measure", id="matmul_" + kind, n=n, flop=2.0 * n ** 3,
         **dict(stats(secs), tflops=2.0 * n ** 3 / m / 1e12, checked=rel <= bound, rel_error=rel,
                rel_error_bound=bound, under_load=under))


def plan(quick, free_bytes, l2_bytes):
    """Sizes that fit the GPU: buffers many times the L2, at most a fraction of free memory."""
    l2 = max(l2_bytes or 0, 8 * MIB)
    d2d = (256 * MIB) if quick else (2 * GIB)
    d2d = max(min(d2d, free_bytes // 8), min(16 * l2, free_bytes // 4))
    host = (64 * MIB) if quick else (512 * MIB)
    host = min(host, free_bytes // 8)
    n = 4096 if quick else 8192
    while n > 1024 and 5 * n * n * 4 > free_bytes // 2:  # A, B, C and a float64 copy of B
        n //= 2
    return {"d2d_bytes": int(d2d), "host_bytes": int(host), "matmul_n": n,
            "launch_kernels": 200 if quick else 1000}


def main():
    global _progress
    quick = "--quick" in sys.argv
    index = int(arg_value("--device", "0"))
    only = arg_value("--only", "")
    wanted = set(only.split(",")) if only else None
    pfile = arg_value("--progress")
    if pfile:
        try:
            _progress = open(pfile, "a")
        except Exception:
            _progress = None
    emit("start", python=sys.executable, version=sys.version.split()[0], quick=quick,
         env=dict((k, os.environ[k]) for k in ENV_VARS if k in os.environ))
    t0 = time.time()
    try:
        import torch
    except BaseException as e:
        emit("import", installed=False, error=err_text(e), import_s=time.time() - t0,
             not_found=isinstance(e, ImportError) and getattr(e, "name", "") == "torch")
        emit("done")
        return
    v = getattr(torch, "version", None)
    emit("import", installed=True, version=str(torch.__version__), cuda=getattr(v, "cuda", None),
         debug=getattr(v, "debug", None), import_s=time.time() - t0)
    if not torch.cuda.is_available():
        err = "torch.cuda.is_available() is False"
        try:
            torch.cuda.init()
        except Exception as e:
            err = err_text(e)
        emit("error", id="cuda", error=err)
        emit("done")
        return
    dev = torch.device("cuda", index)
    torch.cuda.set_device(dev)
    p = torch.cuda.get_device_properties(dev)
    free, total = torch.cuda.mem_get_info(dev)
    uuid = str(getattr(p, "uuid", ""))
    l2 = int(getattr(p, "L2_cache_size", 0) or 0)
    sizes = plan(quick, free, l2)
    emit("device", index=index, name=p.name, capability="%d.%d" % (p.major, p.minor), total_bytes=int(total),
         free_bytes=int(free), l2_bytes=l2, sm_count=getattr(p, "multi_processor_count", None), uuid=uuid,
         plan=sizes)
    nvml = Nvml(uuid if uuid.startswith(("GPU-", "MIG-")) else "GPU-" + uuid) if uuid else None
    if nvml is not None and nvml.lib is None:
        nvml = None
    b = Bench(torch, dev, quick, nvml)
    steps = [("launch", lambda: measure_launch(b, sizes["launch_kernels"])),
             ("d2d", lambda: measure_d2d(b, sizes["d2d_bytes"])),
             ("host", lambda: measure_host(b, sizes["host_bytes"])),
             ("matmul_fp32", lambda: measure_matmul(b, "fp32", sizes["matmul_n"])),
             ("matmul_tf32", lambda: measure_matmul(b, "tf32", sizes["matmul_n"])),
             ("matmul_bf16", lambda: measure_matmul(b, "bf16", sizes["matmul_n"]))]
    for name, fn in steps:
        if wanted is not None and name not in wanted:
            continue
        emit("begin", id=name)
        try:
            fn()
        except Exception as e:
            emit("error", id=name, error=err_text(e))
        try:
            torch.cuda.empty_cache()
        except Exception:
            pass
    emit("done", seconds=time.time() - t0)


if __name__ == "__main__":
    try:
        main()
    except BaseException as e:
        emit("crash", error=err_text(e))

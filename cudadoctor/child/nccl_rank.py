"""One rank of a collective, run inside the TARGET interpreter as a script: stdlib + torch only.

Started once per GPU (by child/nccl_launch.py on one machine, by `cudadoctor fleet nccl-rank` under
srun across nodes) with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT in its
environment; every other variable is the user's own (NCCL_*, CUDA_VISIBLE_DEVICES, the multicast
switches), so the collective behaves as the user's jobs do.

Stages, in order, each announced with a `begin` record and closed with an `end` record, so whoever
reads the output knows where a rank that hangs is stuck: rendezvous (the TCP store on MASTER_ADDR),
init (the process group: NCCL's communicator, created eagerly through device_id), collective (one
all-reduce whose result is checked), measure (the timed all-reduce, or the bench sweep).

    --mode check   all-reduce of --bytes (64 MiB) per rank: checked, then timed (algbw, busbw)
    --mode bench   all_reduce, all_gather, reduce_scatter, sendrecv over --sizes, nccl-tests' way:
                   in-place where NCCL allows it (sendrecv needs two buffers); a size whose buffers
                   exceed --max-bytes per GPU is skipped and says so

Bandwidths use nccl-tests' definitions (doc/PERFORMANCE.md): algbw = bytes / time, busbw = algbw x
2(n-1)/n for all_reduce, (n-1)/n for all_gather and reduce_scatter (bytes = the whole gathered or
scattered buffer), 1 for sendrecv.

Records: `@@CUDADOCTOR-NCCL@@ {json}` lines on stdout, flushed at once. NCCL's own NCCL_DEBUG lines
go to stdout too; the reader picks what it needs.

Test hook, not for users: CUDADOCTOR_TEST_NCCL_HANG_RANK=R makes rank R stop before the stage named
by CUDADOCTOR_TEST_NCCL_HANG_STAGE (rendezvous, init or collective; default collective) and sleep,
so the other ranks wait for it exactly as they wait for a rank that hangs. It only ever delays.
"""

import ctypes
import datetime
import json
import os
import socket
import sys
import time

MARK = "@@CUDADOCTOR-NCCL@@"
MIB = 1 << 20
BUS_FACTOR = {"all_reduce": lambda n: 2.0 * (n - 1) / n, "all_gather": lambda n: (n - 1.0) / n,
              "reduce_scatter": lambda n: (n - 1.0) / n, "sendrecv": lambda n: 1.0}


def emit(stage, **data):
    data["stage"] = stage
    sys.stdout.write(MARK + " " + json.dumps(data, default=str) + "\n")
    sys.stdout.flush()


def err_text(e):
    return ("%s: %s" % (type(e).__name__, e)).strip()[:4000]


def arg(name, default=None):
    if name in sys.argv:
        i = sys.argv.index(name)
        if i + 1 < len(sys.argv):
            return sys.argv[i + 1]
    return default


def maybe_hang(rank, stage):
    if os.environ.get("CUDADOCTOR_TEST_NCCL_HANG_RANK", "") == str(rank) and \
            os.environ.get("CUDADOCTOR_TEST_NCCL_HANG_STAGE", "collective") == stage:
        while True:
            time.sleep(3600)


class Stage(object):
    """`with Stage("init"):` announces a stage and closes it with its duration (or the error)."""

    def __init__(self, what):
        self.what = what

    def __enter__(self):
        self.t0 = time.time()
        emit("begin", what=self.what)
        return self

    def __exit__(self, tp, e, tb):
        if e is None:
            emit("end", what=self.what, seconds=round(time.time() - self.t0, 4))
        else:
            emit("error", what=self.what, error=err_text(e))
        return False


# ------------------------------------------------------------------ NVLink counters (rank 0, optional)


class NvLinkCounters(object):
    """Replay, recovery and CRC-flit counters of every active NVLink, through libnvidia-ml (ctypes)."""

    def __init__(self):
        self.lib = None
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            if lib.nvmlInit_v2() == 0:
                self.lib = lib
        except Exception:
            self.lib = None

    def sample(self):
        if self.lib is None:
            return None
        out = {}
        n = ctypes.c_uint()
        if self.lib.nvmlDeviceGetCount_v2(ctypes.byref(n)) != 0:
            return None
        for i in range(n.value):
            h = ctypes.c_void_p()
            if self.lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(i), ctypes.byref(h)) != 0:
                continue
            links = {}
            for link in range(18 * 2):
                st = ctypes.c_uint()
                if self.lib.nvmlDeviceGetNvLinkState(h, ctypes.c_uint(link), ctypes.byref(st)) != 0 or not st.value:
                    continue
                vals = []
                for counter in (0, 1, 2):  # replay, recovery, CRC flit
                    v = ctypes.c_ulonglong()
                    rc = self.lib.nvmlDeviceGetNvLinkErrorCounter(h, ctypes.c_uint(link), ctypes.c_int(counter),
                                                                  ctypes.byref(v))
                    vals.append(int(v.value) if rc == 0 else None)
                links[str(link)] = vals
            if links:
                out[str(i)] = links
        return out


def libnccl_paths():
    out = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.split(None, 5)[-1].strip()
                if "libnccl" in os.path.basename(p) and p.startswith("/") and p not in out:
                    out.append(p)
    except (OSError, IOError):
        pass
    return out


# ------------------------------------------------------------------ measurements


def timed(torch, dev, fn, warmup, iters):
    """Seconds per call of fn() (which enqueues a collective), nccl-tests' way: warm-up calls, then
    `iters` calls back to back and one synchronisation at the end."""
    for _ in range(warmup):
        fn()
    sync(torch, dev)
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    sync(torch, dev)
    return (time.perf_counter() - t0) / max(1, iters)


def sync(torch, dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def bandwidths(coll, nbytes, seconds, n):
    algbw = nbytes / seconds / 1e9 if seconds > 0 else 0.0
    return round(algbw, 3), round(algbw * BUS_FACTOR[coll](n), 3)


def run_check(torch, dist, dev, rank, world, nbytes, warmup, iters):
    count = max(1, nbytes // 4)
    x = torch.full((count,), float(rank + 1), dtype=torch.float32, device=dev)
    want = world * (world + 1) / 2.0
    maybe_hang(rank, "collective")
    with Stage("collective"):
        dist.all_reduce(x)
        sync(torch, dev)
        ok = bool((x == want).all().item())
        rec = {"ok": ok, "expected": want}
        if not ok:
            rec.update(got_min=float(x.min().item()), got_max=float(x.max().item()))
        emit("check", **rec)
    with Stage("measure"):
        sec = timed(torch, dev, lambda: dist.all_reduce(x), warmup, iters)
        algbw, busbw = bandwidths("all_reduce", count * 4, sec, world)
        if rank == 0:
            emit("measure", coll="all_reduce", bytes=count * 4, time_us=round(sec * 1e6, 2), algbw=algbw,
                 busbw=busbw, iters=iters, warmup=warmup)
    return ok


def bench_buffers(coll, nbytes, world):
    """(element count per rank, bytes the collective moves, bytes of GPU memory it needs) for a size."""
    total = max(1, nbytes // 4)
    if coll in ("all_gather", "reduce_scatter"):
        per = max(1, total // world)
        return per, per * world * 4, per * world * 4
    if coll == "sendrecv":
        return total, total * 4, 2 * total * 4
    return total, total * 4, total * 4


def bench_one(torch, dist, dev, rank, world, coll, per, buf, out):
    """The collective on views of `buf` (and `out` for sendrecv): (call, check) closures."""
    if coll == "all_reduce":
        x = buf[:per]
        x.fill_(rank + 1)

        def check():
            return bool((x == world * (world + 1) / 2.0).all().item())
        return (lambda: dist.all_reduce(x)), check
    if coll == "all_gather":
        full = buf[:per * world]
        mine = full.narrow(0, rank * per, per)  # in place: the rank's slice of the output
        mine.fill_(rank + 1)

        def check():
            want = torch.arange(1, world + 1, device=dev, dtype=torch.float32).repeat_interleave(per)
            return bool((full == want).all().item())
        return (lambda: dist.all_gather_into_tensor(full, mine)), check
    if coll == "reduce_scatter":
        full = buf[:per * world]
        full.fill_(rank + 1)
        mine = full.narrow(0, rank * per, per)

        def check():
            return bool((mine == world * (world + 1) / 2.0).all().item())
        return (lambda: dist.reduce_scatter_tensor(mine, full)), check
    send, recv = buf[:per], out[:per]
    send.fill_(rank + 1)
    nxt, prv = (rank + 1) % world, (rank - 1 + world) % world

    def sendrecv():
        for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, send, nxt), dist.P2POp(dist.irecv, recv, prv)]):
            w.wait()

    def check():
        return bool((recv == prv + 1).all().item())
    return sendrecv, check


def run_bench(torch, dist, dev, rank, world, colls, sizes, max_bytes, warmup, iters):
    maybe_hang(rank, "collective")
    with Stage("measure"):
        for coll in colls:
            plan = [(s,) + bench_buffers(coll, s, world) for s in sizes]
            fit = [p for p in plan if p[3] <= max_bytes]
            for s, per, moved, need in plan:
                if need > max_bytes and rank == 0:
                    emit("bench", coll=coll, bytes=moved, skipped="needs %d MiB per GPU, over the %d MiB budget"
                         % (need // MIB, max_bytes // MIB))
            if not fit:
                continue
            biggest = max(p[1] for p in fit)
            n_elems = biggest * (world if coll in ("all_gather", "reduce_scatter") else 1)
            buf = torch.empty(n_elems, dtype=torch.float32, device=dev)
            out = torch.empty(biggest, dtype=torch.float32, device=dev) if coll == "sendrecv" else None
            for s, per, moved, need in fit:
                try:
                    call, check = bench_one(torch, dist, dev, rank, world, coll, per, buf, out)
                    call()
                    sync(torch, dev)
                    ok = check()
                    sec = timed(torch, dev, call, warmup, iters)
                except Exception as e:
                    emit("bench", coll=coll, bytes=moved, ok=False, error=err_text(e))
                    break
                if rank == 0 or not ok:
                    algbw, busbw = bandwidths(coll, moved, sec, world)
                    emit("bench", coll=coll, bytes=moved, time_us=round(sec * 1e6, 2), algbw=algbw, busbw=busbw,
                         ok=ok, iters=iters)
            del buf, out
            if dev.type == "cuda":
                torch.cuda.empty_cache()


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    backend = arg("--backend", "nccl")
    mode = arg("--mode", "check")
    timeout = float(arg("--timeout", "60"))
    emit("start", rank=rank, world=world, local_rank=local, pid=os.getpid(), host=socket.gethostname(),
         python=sys.executable, version=sys.version.split()[0], backend=backend,
         visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))
    t0 = time.time()
    try:
        import torch
        import torch.distributed as dist
    except BaseException as e:
        emit("import", ok=False, error=err_text(e), seconds=round(time.time() - t0, 3))
        return 3
    info = {"ok": True, "torch": str(torch.__version__), "cuda": getattr(torch.version, "cuda", None),
            "seconds": round(time.time() - t0, 3), "dist": bool(dist.is_available())}
    try:
        v = torch.cuda.nccl.version()
        info["nccl"] = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
    except Exception:
        info["nccl"] = ""
    emit("import", **info)
    if not info["dist"]:
        emit("error", what="import", error="torch.distributed is not available in this torch build")
        return 3
    if backend == "nccl":
        try:
            # under Slurm with one GPU bound per task (--gpus-per-task=1) each task sees only cuda:0
            count = torch.cuda.device_count()
            ordinal = local if local < count or count == 0 else local % count
            torch.cuda.set_device(ordinal)
            dev = torch.device("cuda", ordinal)
            p = torch.cuda.get_device_properties(ordinal)
            emit("device", ordinal=ordinal, name=p.name, uuid=str(getattr(p, "uuid", "")),
                 bus="%04x:%02x:%02x.0" % (getattr(p, "pci_domain_id", 0), getattr(p, "pci_bus_id", 0),
                                           getattr(p, "pci_device_id", 0)))
        except Exception as e:
            emit("error", what="device", error=err_text(e))
            return 3
    else:
        dev = torch.device("cpu")
        emit("device", ordinal=None, name="cpu")
    td = datetime.timedelta(seconds=timeout)
    counters = NvLinkCounters() if (rank == 0 and backend == "nccl" and "--nvlink" in sys.argv) else None
    try:
        maybe_hang(rank, "rendezvous")
        with Stage("rendezvous"):
            store = dist.TCPStore(os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ["MASTER_PORT"]), world,
                                  rank == 0, td)
        maybe_hang(rank, "init")
        with Stage("init"):
            kw = dict(backend=backend, store=store, rank=rank, world_size=world, timeout=td)
            if backend == "nccl":
                try:
                    dist.init_process_group(device_id=dev, **kw)  # eager: the communicator is made here
                except TypeError:  # torch < 2.3: NCCL's communicator is made at the first collective
                    dist.init_process_group(**kw)
            else:
                dist.init_process_group(**kw)
        before = counters.sample() if counters else None
        if mode == "bench":
            colls = [c for c in arg("--colls", "all_reduce,all_gather,reduce_scatter,sendrecv").split(",") if c]
            sizes = [int(s) for s in arg("--sizes", "67108864").split(",") if s]
            run_bench(torch, dist, dev, rank, world, colls, sizes, int(arg("--max-bytes", str(1 << 30))),
                      int(arg("--warmup", "5")), int(arg("--iters", "20")))
            ok = True
        else:
            ok = run_check(torch, dist, dev, rank, world, int(arg("--bytes", str(64 * MIB))),
                           int(arg("--warmup", "5")), int(arg("--iters", "20")))
        if counters:
            emit("nvlink", before=before, after=counters.sample())
        emit("libs", libnccl=libnccl_paths())
        try:
            dist.destroy_process_group()
        except Exception:
            pass
    except Exception:
        return 1  # the failing stage already said why (its `error` record)
    emit("done", ok=ok, seconds=round(time.time() - t0, 3))
    return 0 if ok else 2


if __name__ == "__main__":
    try:
        code = main()
    except BaseException as e:  # report, never a traceback to the reader
        emit("crash", error=err_text(e))
        code = 1
    sys.stdout.flush()
    try:
        ctypes.CDLL(None).fflush(None)  # NCCL's own lines go through C stdio; os._exit would drop a buffer
    except Exception:
        pass
    os._exit(code)  # skip interpreter teardown: NCCL/CUDA atexit handlers can hang a process that failed

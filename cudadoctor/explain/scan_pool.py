"""Large logs scanned on several cores: the blocks scan.Scanner cuts are independent, so forked workers scan them and
the parent merges the partial results in block order. The answer is the same as a serial scan's (a test compares
them field by field); only the time changes (a 50 MB log: 2.4 s serial on this project's 2-vCPU VM).

Why processes: the scan is CPU-bound in `re` (the GIL serialises threads). Why fork: a worker inherits the Scanner
with its compiled trie regex at no cost, where spawn/forkserver would import and compile again (~0.1 s each). Fork is
used only on Linux and only from a process with no other thread running (`cudadoctor explain` scans before it gathers
any fact), where it is safe; elsewhere the scan stays serial.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Optional

MAX_WORKERS = 8  # beyond this the parent's reading and merging, not the scanning, is the limit
BLOCK_TIMEOUT_S = 120.0  # a block takes ~0.05 s; a worker stopped or stuck this long is given up (its blocks: the parent)
PARALLEL_AFTER = 4 << 20  # bytes scanned serially first: a pasted error or a short log never starts a worker
IN_FLIGHT = 2  # blocks queued per worker (bounds memory: each is 1 MiB)

_SCANNER = None  # the parent's Scanner, inherited by the forked workers
_SEEN: set = set()  # a worker's context literals found so far (its regex is rebuilt without them)


def default_workers() -> int:
    """How many workers a large scan may use here: 1 (serial) where fork is not safe or there is one core's worth of
    CPU. Python before 3.10.5 starts a fork pool's workers one by one while its manager thread runs (CPython
    gh-90622): forking with a thread alive, so not there."""
    if not sys.platform.startswith("linux") or threading.active_count() > 1 or sys.version_info < (3, 10, 5):
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = cgroup_cpus()
    if quota is not None:
        cores = min(cores, quota)
    return max(1, min(MAX_WORKERS, cores))


def cgroup_cpus(root: str = "/sys/fs/cgroup", self_cgroup: str = "/proc/self/cgroup") -> Optional[int]:
    """The CPUs a cgroup quota allows this process (`docker --cpus=2`, a Slurm or Kubernetes limit), rounded down, at
    least 1; None when no quota applies. sched_getaffinity shows every host CPU inside such a container, and 8
    workers on one CPU's quota are slower than none (measured: 1.74 s serial, 2.12 s with 8). Read by hand: no
    maintained library exposes the quota (psutil reports CPUs, not the cgroup's cpu.max)."""
    quotas = []
    try:
        with open(self_cgroup) as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    for ln in lines:
        num, hier, path = (ln.split(":", 2) + ["", ""])[:3]
        if num == "0" and not hier:  # cgroup v2: cpu.max at the process's cgroup and every parent
            parts = [p for p in path.split("/") if p]
            for k in range(len(parts), -1, -1):
                q = _read_v2(os.path.join(root, *parts[:k], "cpu.max"))
                if q is not None:
                    quotas.append(q)
        elif "cpu" in hier.split(","):  # cgroup v1: the cpu controller's quota and period
            for base in (os.path.join(root, hier, path.lstrip("/")), os.path.join(root, hier)):
                q = _read_v1(base)
                if q is not None:
                    quotas.append(q)
                    break
    return max(1, int(min(quotas))) if quotas else None


def _read_v2(path: str) -> Optional[float]:
    try:
        with open(path) as f:
            quota, period = (f.read().split() + ["100000"])[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError, ZeroDivisionError):
        return None


def _read_v1(base: str) -> Optional[float]:
    try:
        with open(os.path.join(base, "cpu.cfs_quota_us")) as f:
            quota = int(f.read())
        with open(os.path.join(base, "cpu.cfs_period_us")) as f:
            period = int(f.read())
        return None if quota <= 0 or period <= 0 else quota / period
    except (OSError, ValueError):
        return None


def start(scanner, workers: int, seen: set):
    """A pool of `workers` forked processes that scan blocks with `scanner`, or None where none can start (the caller
    then goes on serially). `seen`: the context literals the parent has found, which its regex no longer holds."""
    global _SCANNER, _SEEN
    if workers < 2:
        return None
    try:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        _SCANNER, _SEEN = scanner, set(seen)
        return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork"),
                                   initializer=_worker_init, initargs=(os.getpid(),))
    except (ImportError, OSError, ValueError):
        return None


def _worker_init(parent: int) -> None:
    """A worker dies with cudadoctor: the kernel kills it when the parent ends, however it ends (Ctrl-C, SIGTERM,
    SIGKILL), since a forked worker would otherwise wait for work forever (its siblings hold the queue open). The
    terminal's Ctrl-C is the parent's to handle (its handler would otherwise print once per worker)."""
    import ctypes
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent ended before prctl took hold
        os._exit(1)


def scan_block(args: tuple):
    """In a worker: scan one block into a fresh ScanResult (its context literals carry over between the worker's
    blocks, so its regex is rebuilt without them as in a serial scan)."""
    from cudadoctor.explain.scan import ScanResult

    part = ScanResult()
    part.context_seen = _SEEN
    _scan(_SCANNER, args, part)
    return part


def _scan(scanner, args: tuple, res) -> None:
    """Scan one block, (proc, skip, pos_base, line_base), into `res`: the same step in a worker and in the parent."""
    proc, skip, pos_base, line_base = args
    scanner._scan_block(proc, proc.lower(), skip, pos_base, line_base, res)


def merge(scanner, res, part) -> None:
    """Add a block's partial result to `res` as a serial scan would have (Scanner._hit): counts summed, evidence kept
    up to the limit in block order, a reading's values once per line (a line cut across two blocks), context literals
    united."""
    from cudadoctor.explain.scan import MAX_EVIDENCE

    for key, n in part.counts.items():
        res.counts[key] = res.counts.get(key, 0) + n
    for key, hits in part.hits.items():
        pat = scanner.signatures[key[0]].patterns[key[1]]
        reading = pat.capture is not None and pat.weight == 0
        kept = res.hits.setdefault(key, [])
        for h in hits:
            if len(kept) >= MAX_EVIDENCE:
                break
            if not (reading and any(k.line_no == h.line_no and k.captures == h.captures for k in kept)):
                kept.append(h)
    res.context_seen |= part.context_seen
    res.truncated_counts = res.truncated_counts or part.truncated_counts


class Blocks:
    """The blocks of one scan: each one is scanned in the parent until PARALLEL_AFTER bytes have gone by, then by the
    pool. Results are merged in submission order; if the pool fails (a worker killed), the blocks it still held are
    scanned in the parent."""

    def __init__(self, scanner, res, workers: int) -> None:
        self.scanner, self.res, self.workers = scanner, res, workers
        self.pool = None
        self.pending: list = []  # (future, args), oldest first
        self.serial_bytes = 0
        self.broken = False

    def add(self, proc: bytes, skip: int, pos_base: int, line_base: int) -> None:
        args = (proc, skip, pos_base, line_base)
        if self.pool is None and not self.broken and self.workers > 1 and self.serial_bytes >= PARALLEL_AFTER:
            self.pool = start(self.scanner, self.workers, self.res.context_seen)
            self.broken = self.pool is None
        if self.pool is None:
            self.serial_bytes += len(proc)
            _scan(self.scanner, args, self.res)
            return
        try:
            self.pending.append((self.pool.submit(scan_block, args), args))
        except Exception:  # noqa: BLE001 - a broken pool: scan here
            self._fail()
            _scan(self.scanner, args, self.res)
            return
        while len(self.pending) > IN_FLIGHT * self.workers:
            self._collect_oldest()

    def _collect_oldest(self) -> None:
        fut, args = self.pending.pop(0)
        try:
            part = fut.result(timeout=BLOCK_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - a worker died (killed, out of memory) or hung: this block and the rest here
            self.pending.insert(0, (fut, args))
            self._fail()
            return
        merge(self.scanner, self.res, part)

    def _fail(self) -> None:
        held = [args for _, args in self.pending]
        self.pending = []
        self.broken = True
        self._shutdown()
        for args in held:
            _scan(self.scanner, args, self.res)

    def finish(self) -> None:
        try:
            while self.pending:
                self._collect_oldest()
        finally:
            self._shutdown()

    def abort(self) -> None:
        """The scan stopped (an error, Ctrl-C): drop what the workers hold."""
        self.pending = []
        self._shutdown()

    def _shutdown(self) -> None:
        """Stop the pool and make sure no worker outlives it: after a failed fork (a pids limit, no memory) the pool
        never started its manager thread, and the workers that did start would wait for work until the interpreter's
        exit joined them, forever. (ProcessPoolExecutor has no public list of its processes: `_processes`.)"""
        if self.pool is None:
            return
        procs = list((getattr(self.pool, "_processes", None) or {}).values())
        self.pool.shutdown(wait=not self.broken, cancel_futures=True)
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
        self.pool = None

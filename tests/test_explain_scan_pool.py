"""A large log scanned by forked workers (explain/scan_pool.py) gives the serial scan's result, field by field: the
evidence kept per pattern and its order, the counts, the readings of a gate, the context literals, the line numbers
and positions, a line cut across blocks; also when a worker dies mid-scan."""

from __future__ import annotations

import io
import os
import random
import sys
import threading
from pathlib import Path

import pytest

from cudadoctor.explain import rank, scan, scan_pool
from explain_sets import SIGS, cases, DATA
from proc_support import alive, children

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the pool forks (Linux only)")


def _log(mb: float, seed: int = 3) -> bytes:
    """Training-log noise with real report lines sprinkled through it (so patterns, readings and context literals
    hit in many blocks, more than MAX_EVIDENCE times), a 1.5 MB progress line cut across blocks, and binary junk."""
    rnd = random.Random(seed)
    reports = [c["text"] for c in cases(DATA / "explain_fresh21" / "cases.toml")][:40]
    words = ["epoch", "step", "loss", "lr", "kernel", "device", "memory", "torch", "34", "802", "xid", "cuda:0"]
    out, size = [], 0
    i = 0
    while size < mb * (1 << 20):
        i += 1
        if i % 1500 == 0:
            chunk = rnd.choice(reports)
        elif i == 9000:
            chunk = "\r".join(f"progress {k}%" for k in range(120000)) + " RuntimeError: CUDA error: out of memory"
        elif i % 4000 == 0:
            chunk = bytes(rnd.getrandbits(8) for _ in range(2048)).decode("latin-1")
        else:
            chunk = " ".join(rnd.choice(words) for _ in range(10)) + f" {i}"
        out.append(chunk + "\n")
        size += len(chunk) + 1
    return "".join(out).encode("utf-8", "surrogateescape")


def _fields(r) -> tuple:
    return (sorted((k, [(h.line_no, h.text, h.pos, h.captures, h.before) for h in v]) for k, v in r.hits.items()),
            sorted(r.counts.items()), sorted(r.context_seen), r.bytes, r.lines, r.blank, r.truncated_counts)


@pytest.fixture(scope="module")
def log() -> bytes:
    return _log(7)


@pytest.fixture(scope="module")
def serial(log):
    return scan.Scanner(SIGS).scan_stream(io.BytesIO(log))


@pytest.mark.parametrize("after", [0, scan_pool.PARALLEL_AFTER])
def test_pool_gives_the_serial_result(log, serial, monkeypatch, after):
    monkeypatch.setattr(scan_pool, "PARALLEL_AFTER", after)
    par = scan.Scanner(SIGS).scan_stream(io.BytesIO(log), workers=2)
    assert _fields(par) == _fields(serial)
    assert len(serial.hits) > 10 and any(len(v) == scan.MAX_EVIDENCE for v in serial.hits.values())
    assert [m.id for m in rank.rank(rank.matches(SIGS, par))] == [m.id for m in rank.rank(rank.matches(SIGS, serial))]


_DIE_PAST = {"at": 0}  # set by the test before the workers fork; they inherit it
_REAL_SCAN_BLOCK = scan_pool.scan_block


def _dies_halfway(args):
    """A worker's task that kills its worker once the blocks pass the middle of the log (module-level: the pool pickles
    the task by reference)."""
    if args[2] > _DIE_PAST["at"]:
        os._exit(9)
    return _REAL_SCAN_BLOCK(args)


def test_a_worker_that_dies_leaves_its_blocks_to_the_parent(log, serial, monkeypatch):
    monkeypatch.setattr(scan_pool, "PARALLEL_AFTER", 0)
    monkeypatch.setattr(scan_pool, "scan_block", _dies_halfway)
    monkeypatch.setitem(_DIE_PAST, "at", len(log) // 2)
    blocks = []
    real_fail = scan_pool.Blocks._fail
    monkeypatch.setattr(scan_pool.Blocks, "_fail", lambda self: (blocks.append(len(self.pending)), real_fail(self)))
    par = scan.Scanner(SIGS).scan_stream(io.BytesIO(log), workers=2)
    assert blocks, "no worker died: the test did not test the fallback"
    assert _fields(par) == _fields(serial)


def test_small_inputs_never_start_a_pool(monkeypatch):
    started = []
    monkeypatch.setattr(scan_pool, "start", lambda *a: started.append(a) or None)
    scan.Scanner(SIGS).scan_stream(io.BytesIO(b"RuntimeError: CUDA error: out of memory\n" * 1000), workers=8)
    assert not started


def test_no_fork_while_another_thread_runs():
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert scan_pool.default_workers() == 1
    finally:
        stop.set()
        t.join()
    assert 1 <= scan_pool.default_workers() <= scan_pool.MAX_WORKERS




@pytest.mark.parametrize("how", ["sigterm", "ctrl-c", "sigkill"])
def test_workers_end_with_cudadoctor(tmp_path, how):
    """SIGTERM or Ctrl-C during a parallel scan: one "interrupted" line, exit 128+signal, and no worker left behind;
    SIGKILL, where no handler runs: no worker left either (the kernel kills them with their parent)."""
    import signal
    import subprocess
    import time

    if scan_pool.default_workers() < 2 and (os.cpu_count() or 1) < 2:
        pytest.skip("one core: explain scans serially")
    big = tmp_path / "big.log"
    block = _log(1, seed=5)
    with open(big, "wb") as f:
        for _ in range(200):
            f.write(block)
    p = subprocess.Popen([sys.executable, "-m", "cudadoctor", "explain", "--offline", "--file", str(big)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 30
    kids: list = []
    while time.monotonic() < deadline and len(kids) < 2 and p.poll() is None:
        time.sleep(0.05)
        kids = children(p.pid)
    assert len(kids) >= 2, "no workers started"
    sig = {"sigterm": signal.SIGTERM, "ctrl-c": signal.SIGINT, "sigkill": signal.SIGKILL}[how]
    if how == "ctrl-c":
        os.killpg(p.pid, sig)  # a terminal sends it to the whole group, workers included
    else:
        p.send_signal(sig)
    err = p.communicate(timeout=20)[1].decode("utf-8", "replace")
    time.sleep(0.5)
    assert not [k for k in kids if alive(k)], "a worker was left running"
    if how == "sigkill":
        assert p.returncode == -signal.SIGKILL
    else:
        assert p.returncode == 128 + sig and err.count("cudadoctor: interrupted") == 1, (p.returncode, err[-2000:])


def test_a_failed_fork_neither_changes_the_result_nor_hangs_the_exit():
    """(review s29) fork fails for the second worker (EAGAIN under a pids limit): the scan ends with the serial result
    and the interpreter exits (the worker that did start used to wait for work forever, and exit joined it)."""
    import subprocess

    code = ("import io, sys\n"
            "sys.path.insert(0, %r)\n"
            "from multiprocessing import context\n"
            "from cudadoctor.explain import scan, scan_pool\n"
            "from explain_sets import SIGS\n"
            "scan_pool.PARALLEL_AFTER = 0\n"
            "n = [0]\n"
            "real = context.ForkProcess._Popen\n"
            "def flaky(proc, *a):\n"
            "    n[0] += 1\n"
            "    if n[0] == 2:\n"
            "        raise OSError(11, 'Resource temporarily unavailable')\n"
            "    return real(proc, *a)\n"
            "context.ForkProcess._Popen = staticmethod(flaky)\n"
            "data = (b'RuntimeError: CUDA error: out of memory\\n' + b'x' * 200 + b'\\n') * 30000\n"
            "a = scan.Scanner(SIGS).scan_stream(io.BytesIO(data), workers=2)\n"
            "b = scan.Scanner(SIGS).scan_stream(io.BytesIO(data))\n"
            "print(n[0] >= 2, a.counts == b.counts and a.lines == b.lines, flush=True)\n") % str(Path(__file__).parent)
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the interpreter did not exit after a failed fork")
    assert p.returncode == 0 and p.stdout.split() == ["True", "True"], (p.returncode, p.stdout, p.stderr[-2000:])


def test_cgroup_quota_caps_the_workers(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "cpu.max").write_text("150000 100000\n")  # a parent's quota: 1.5 CPUs
    (tmp_path / "a" / "b" / "cpu.max").write_text("max 100000\n")
    me = tmp_path / "cgroup"
    me.write_text("0::/a/b\n")
    assert scan_pool.cgroup_cpus(str(tmp_path), str(me)) == 1
    (tmp_path / "a" / "cpu.max").write_text("max 100000\n")
    assert scan_pool.cgroup_cpus(str(tmp_path), str(me)) is None
    # cgroup v1: the cpu controller's quota and period
    (tmp_path / "cpu,cpuacct" / "job").mkdir(parents=True)
    (tmp_path / "cpu,cpuacct" / "job" / "cpu.cfs_quota_us").write_text("400000\n")
    (tmp_path / "cpu,cpuacct" / "job" / "cpu.cfs_period_us").write_text("100000\n")
    me.write_text("4:memory:/job\n3:cpu,cpuacct:/job\n")
    assert scan_pool.cgroup_cpus(str(tmp_path), str(me)) == 4
    (tmp_path / "cpu,cpuacct" / "job" / "cpu.cfs_quota_us").write_text("-1\n")
    assert scan_pool.cgroup_cpus(str(tmp_path), str(me)) is None
    assert scan_pool.cgroup_cpus(str(tmp_path), str(tmp_path / "none")) is None

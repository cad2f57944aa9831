"""The real launcher and rank script, with the gloo backend on the CPU (the test extra's torch): rendezvous,
the collective and its check, the timings, a rank made to hang (every rank ends on time), a rank that
fails (the others are stopped), the bench sweep. Only the backend differs from the GPU machine."""

from __future__ import annotations

import os
import sys
import time

import pytest

from cudadoctor.probes.nccl_run import run_collective
from cudadoctor.system.host import HostSystem

pytestmark = pytest.mark.slow
pytest.importorskip("torch.distributed")
GLOO = ["--backend", "gloo", "--bytes", str(1 << 20), "--timeout", "120", "--iters", "5", "--warmup", "2"]


def _ranks_left() -> list:
    """Processes still running this checkout's rank script (none may outlive a run)."""
    from cudadoctor.probes.nccl_run import RANK_SCRIPT

    left = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if RANK_SCRIPT.encode() in f.read():
                    left.append(int(pid))
        except OSError:
            pass
    return left


def test_two_ranks_all_reduce_checked_and_timed():
    run = run_collective(HostSystem(), sys.executable, 2, GLOO, deadline_s=90)
    assert run.outcome == "ok", (run.error, [r.tail for r in run.ranks])
    assert run.backend == "gloo" and run.check_ok is True and run.world == 2
    assert run.size_bytes == 1 << 20 and run.busbw > 0 and run.algbw > 0
    assert abs(run.busbw - run.algbw) < 1e-6  # all_reduce on 2 ranks: 2(n-1)/n = 1
    assert all(r.progress == 8 and r.rc == 0 for r in run.ranks)


def test_a_hanging_rank_ends_every_rank_on_time():
    t0 = time.monotonic()
    run = run_collective(HostSystem(), sys.executable, 2, GLOO, deadline_s=20,
                         extra_env={"CUDADOCTOR_TEST_NCCL_HANG_RANK": "1"})
    took = time.monotonic() - t0
    assert run.outcome == "hang" and run.stage == "collective", run.error
    assert [r.rank for r in run.laggards] == [1]
    assert all(r.killed for r in run.ranks)
    assert took < 20 + 15, took
    time.sleep(0.5)
    assert _ranks_left() == []


def test_a_rank_hanging_before_the_rendezvous_is_named():
    run = run_collective(HostSystem(), sys.executable, 2, GLOO, deadline_s=20,
                         extra_env={"CUDADOCTOR_TEST_NCCL_HANG_RANK": "0", "CUDADOCTOR_TEST_NCCL_HANG_STAGE": "rendezvous"})
    assert run.outcome == "hang" and run.stage == "rendezvous"
    assert [r.rank for r in run.laggards] == [0]


def test_a_failing_rank_stops_the_others_quickly(tmp_path):
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('libcudart.so.13: cannot open shared object file')\n")
    t0 = time.monotonic()
    run = run_collective(HostSystem(), sys.executable, 2, GLOO, deadline_s=60,
                         extra_env={"PYTHONPATH": str(tmp_path)})
    assert run.outcome == "error" and run.stage == "import"
    assert "libcudart.so.13" in run.error
    assert time.monotonic() - t0 < 30


def test_a_missing_interpreter_is_not_started(tmp_path):
    run = run_collective(HostSystem(), str(tmp_path / "nope" / "python"), 2, GLOO, deadline_s=10)
    assert run.outcome == "not-started" and "could not start" in run.error


def test_bench_sweep_rows_and_memory_budget():
    args = ["--backend", "gloo", "--mode", "bench", "--colls", "all_reduce,sendrecv", "--sizes", "8,4096,1048576",
            "--max-bytes", str(1 << 20), "--iters", "3", "--warmup", "1", "--timeout", "120"]
    run = run_collective(HostSystem(), sys.executable, 2, args, deadline_s=90)
    assert run.outcome == "ok", run.error
    rows = {(r["coll"], r["bytes"]): r for r in run.bench}
    assert rows[("all_reduce", 1048576)]["ok"] is True and rows[("sendrecv", 4096)]["ok"] is True
    assert "skipped" in rows[("sendrecv", 1048576)]  # two 1 MiB buffers exceed a 1 MiB budget
    r = rows[("sendrecv", 4096)]
    assert abs(r["busbw"] - r["algbw"]) < 1e-6  # sendrecv: busbw = algbw

"""The bench children's pure parts (sizes, repetitions, data) and the torch child on this CPU-only torch."""

from __future__ import annotations

import random

from cudadoctor.bench import torch_bench as tb
from cudadoctor.bench.driver_bench import random_floats
from cudadoctor.bench.records import build_run, parse_records

GIB, MIB = 1 << 30, 1 << 20


def test_sizes_on_a_big_gpu_are_far_beyond_l2():
    p = tb.plan(False, 140 * GIB, 60 * MIB)
    assert p["d2d_bytes"] == 2 * GIB and p["d2d_bytes"] >= 16 * 60 * MIB
    assert p["matmul_n"] == 8192 and p["host_bytes"] == 512 * MIB
    q = tb.plan(True, 140 * GIB, 60 * MIB)
    assert q["d2d_bytes"] >= 4 * 60 * MIB and q["matmul_n"] == 4096 and q["launch_kernels"] < p["launch_kernels"]


def test_sizes_adapt_to_a_small_gpu():
    p = tb.plan(False, 2 * GIB, 4 * MIB)
    assert p["d2d_bytes"] <= 2 * GIB // 4 and p["d2d_bytes"] >= 64 * MIB
    assert p["matmul_n"] == 4096 and 5 * p["matmul_n"] ** 2 * 4 <= GIB
    assert p["host_bytes"] <= 2 * GIB // 8


def test_repetitions_fill_the_target_time_within_bounds():
    assert tb.reps_for(0.001, 0.4, 5, 200) == 200
    assert tb.reps_for(0.01, 0.4, 5, 200) == 40
    assert tb.reps_for(1.0, 0.4, 5, 200) == 5
    assert tb.reps_for(0.0, 0.4, 5, 200) == 200


def test_child_median_and_stats():
    assert tb.median([3.0, 1.0, 2.0]) == 2.0 and tb.median([1.0, 2.0, 3.0, 4.0]) == 2.5
    s = tb.stats([0.3, 0.1, 0.2])
    assert s == {"median_s": 0.2, "min_s": 0.1, "max_s": 0.3, "reps": 3}


def test_probe_data_is_random_not_constant():
    a = random_floats(random.Random(1), 200_000)
    assert len(a) == 200_000 and -1.0 <= min(a) < -0.9 and 0.9 < max(a) < 1.0
    assert len(set(a[:1000])) > 990


def test_torch_child_on_cpu_torch_reports_no_cuda():
    """The real child script under this venv's CPU-only torch: a clean record, never a traceback."""
    from cudadoctor.system.host import HostSystem

    s = HostSystem()
    res = s.run([s.own_python(), tb.__file__, "--quick"], timeout=120)
    run = build_run(parse_records(res.stdout))
    assert res.returncode == 0 and run.done
    assert run.torch_installed is True and "cuda" in run.errors and not run.measures

"""A careful hand measurement, independent of cudadoctor's code, to check `cudadoctor bench` against.

    python benchmarks/gpu/hand_measure.py [--json] [--compare BENCH.json]

torch only. CUDA events around every repetition, warm-up first, the median of many repetitions:
  - device-to-device copy of a 4 GiB buffer of random floats (bytes read + written per second);
  - BF16 8192 x 8192 x 8192 matmul on random data (2*n^3 FLOP), checked against float64 on 32 rows;
  - a tiny op (x.add_(1) on one element) launched 10000 times eagerly (host clock, per launch) vs
    1000 of them captured in a CUDA graph and replayed (events, per kernel).
--compare reads `cudadoctor bench --json` output and prints both sets side by side with the ratio;
targets: within 10% for bandwidth and matmul, 20% for launch cost. Exit 1 when one is missed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

TARGETS = {"d2d_gbps": 0.10, "bf16_tflops": 0.10, "eager_us": 0.20, "graph_us": 0.20}


def events(fn, reps: int) -> list:
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) / 1e3)
    return out


def d2d() -> float:
    n = (4 << 30) // 4
    src = torch.rand(n, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    t = statistics.median(events(lambda: dst.copy_(src), 30))
    assert torch.equal(dst, src), "copy differs"
    return 2 * n * 4 / t / 1e9


def bf16() -> float:
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(5):
        c = a @ b
    torch.cuda.synchronize()
    t = statistics.median(events(lambda: torch.mm(a, b, out=c), 40))
    ref = a[:32].double() @ b.double()
    err = float((c[:32].double() - ref).norm() / ref.norm())
    assert err < 1e-2, f"bf16 relative error {err}"
    return 2 * n ** 3 / t / 1e12


def launch() -> tuple:
    x = torch.zeros(1, device="cuda")
    n = 10000
    for _ in range(1000):
        x.add_(1)
    torch.cuda.synchronize()
    eager = []
    for _ in range(7):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            x.add_(1)
        torch.cuda.synchronize()
        eager.append((time.perf_counter() - t0) / n)
    k = 1000
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            x.add_(1)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(k):
            x.add_(1)
    g.replay()
    torch.cuda.synchronize()
    graph = [t / k for t in events(g.replay, 20)]
    return statistics.median(eager) * 1e6, statistics.median(graph) * 1e6


def from_bench(d: dict) -> dict:
    figs = {f["id"]: f for f in d.get("figures", [])}
    launch = figs.get("launch", {})
    return {"d2d_gbps": figs.get("d2d", {}).get("value"), "bf16_tflops": figs.get("matmul_bf16", {}).get("value"),
            "eager_us": launch.get("value"), "graph_us": (launch.get("extra") or {}).get("graph_us")}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--compare", metavar="BENCH_JSON")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("hand_measure: no CUDA device", file=sys.stderr)
        return 2
    eager_us, graph_us = launch()
    hand = {"device": torch.cuda.get_device_name(0), "d2d_gbps": d2d(), "bf16_tflops": bf16(),
            "eager_us": eager_us, "graph_us": graph_us}
    if a.json:
        print(json.dumps(hand))
    if not a.compare:
        if not a.json:
            for k, v in hand.items():
                print(f"{k:12s} {v}")
        return 0
    with open(a.compare) as f:
        ours = from_bench(json.load(f))
    print(f"{'figure':12s} {'cudadoctor':>12s} {'hand':>12s} {'ratio':>7s} {'target':>7s}")
    ok = True
    for k, tol in TARGETS.items():
        c, h = ours.get(k), hand[k]
        r = c / h if c and h else None
        good = r is not None and abs(r - 1) <= tol
        ok &= good
        print(f"{k:12s} {c if c is not None else float('nan'):12.3f} {h:12.3f} "
              f"{r if r is not None else float('nan'):7.3f} {'±' + str(int(tol * 100)) + '%':>7s} "
              f"{'PASS' if good else 'FAIL'}")
    print("hand_measure: all within target" if ok else "hand_measure: SOME FIGURES MISS THEIR TARGET")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

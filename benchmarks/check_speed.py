"""How long `cudadoctor check` takes against the floor: importing torch and touching the GPU.

    python benchmarks/check_speed.py [--runs 5] [--python PATH]

Runs `python -m cudadoctor check --json` and `python -c "import torch; torch.ones(1).cuda()"` in the
same interpreter, alternately, several times; prints each median and their ratio (target <= 1.2 on a
GPU machine). On a machine without a GPU the baseline is `import torch` alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time


def timed(argv: list) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    gpu = subprocess.run([a.python, "-c", "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)"],
                         capture_output=True, timeout=600).returncode == 0
    base_code = "import torch; torch.ones(1).cuda()" if gpu else "import torch"
    check_argv = [a.python, "-m", "cudadoctor", "check", "--json"]
    base_argv = [a.python, "-c", base_code]
    timed(base_argv)  # warm the page cache for both
    timed(check_argv)
    c, b = [], []
    for _ in range(a.runs):
        c.append(timed(check_argv))
        b.append(timed(base_argv))
    mc, mb = statistics.median(c), statistics.median(b)
    res = {"runs": a.runs, "gpu": gpu, "baseline": base_code, "check_median_s": round(mc, 3),
           "baseline_median_s": round(mb, 3), "ratio": round(mc / mb, 3),
           "check_all_s": [round(x, 3) for x in c], "baseline_all_s": [round(x, 3) for x in b]}
    if a.json:
        print(json.dumps(res))
    else:
        print(f"cudadoctor check --json : median {mc:.3f} s  {res['check_all_s']}")
        print(f"python -c {base_code!r} : median {mb:.3f} s  {res['baseline_all_s']}")
        print(f"ratio {mc / mb:.2f} (target <= 1.2 on a GPU machine)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How long `cudadoctor health` takes, side by side in one run with `cudadoctor check`, `nvidia-smi -q` and
the torch import floor, interleaved (so a busy machine slows them all alike).

    python benchmarks/health_speed.py [--runs 10] [--check-runs 3] [--aux-runs N] [--python TORCH_PY] [--one-gpu]
                                      [--json]

Rows (median, min, max wall seconds of whole processes):
  health            `cudadoctor health --quiet`: every GPU, the kernel launch included
  health 1 GPU      the same with CUDA_VISIBLE_DEVICES=0 (--one-gpu): NVML still asks every GPU (it is a
                    node check), the CUDA side (cuInit, a context, the launch) sees one GPU; this is the
                    figure for a 1-GPU node
  health no launch  `--no-launch`: NVML, the kernel log and /dev only
  check             `cudadoctor check --json --python TORCH_PY` (imports torch in a child)
  nvidia-smi -q     the tool people run by hand
  import torch      `TORCH_PY -c "import torch"`: the floor every torch-based check pays
Then the breakdown of one `health --json` run (cuInit, each GPU's context/JIT/launch, NVML, dmesg).
Targets (issue 15): health <= 0.5 s on one H200, <= 1 s with 8 GPUs, <= 0.8 s on a GPU-less CI machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time


def cudadoctor() -> list:
    exe = shutil.which("cudadoctor")
    return [exe] if exe else [sys.executable, "-m", "cudadoctor"]


def timed(argv: list, env: dict = None) -> tuple:
    t0 = time.perf_counter()
    p = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600,
                       env=dict(os.environ, **(env or {})))
    return time.perf_counter() - t0, p.returncode


def row(name: str, xs: list, codes: set) -> dict:
    return {"name": name, "runs": len(xs), "median_s": round(statistics.median(xs), 3), "min_s": round(min(xs), 3),
            "max_s": round(max(xs), 3), "exit_codes": sorted(codes)}


def breakdown(cd: list, env: dict = None) -> dict:
    p = subprocess.run(cd + ["health", "--json"], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, **(env or {})))
    try:
        r = json.loads(p.stdout)
    except ValueError:
        return {"error": (p.stderr or p.stdout)[-300:]}
    facts = r["facts"]
    launch = facts.get("health_launch", {}).get("value") or {}
    out = {"elapsed_s": r.get("elapsed_s"), "exit_code": r["exit_code"], "reason": r.get("reason"),
           "cuinit_s": launch.get("init_s"), "launch_child_s": facts.get("health_launch", {}).get("elapsed_s"),
           "nvml_child_s": facts.get("health_nvml", {}).get("elapsed_s"), "dmesg_s": facts.get("xid", {}).get("elapsed_s"),
           "gpus": [{k: d.get(k) for k in ("ordinal", "name", "context_s", "load_s", "launch_s", "total_s", "ok")}
                    for d in launch.get("devices", [])]}
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--check-runs", type=int, default=3)
    ap.add_argument("--aux-runs", type=int, default=0, help="runs of health --no-launch and nvidia-smi -q "
                    "(default: --runs)")
    ap.add_argument("--python", default=sys.executable, help="the interpreter whose torch `check` inspects")
    ap.add_argument("--one-gpu", action="store_true", help="also health with CUDA_VISIBLE_DEVICES=0")
    ap.add_argument("--budget", type=float, default=0, help="stop starting new rounds after this many seconds "
                    "(the rounds done so far are reported)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    cd = cudadoctor()
    smi = shutil.which("nvidia-smi")
    torch_ok = subprocess.run([a.python, "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"],
                              capture_output=True, timeout=60).returncode == 0
    plan = [("health", cd + ["health", "--quiet"], None, a.runs)]
    if a.one_gpu:
        plan.append(("health 1 GPU", cd + ["health", "--quiet"], {"CUDA_VISIBLE_DEVICES": "0"}, a.runs))
    aux = a.aux_runs or a.runs
    plan.append(("health no launch", cd + ["health", "--quiet", "--no-launch"], None, aux))
    if smi:
        plan.append(("nvidia-smi -q", [smi, "-q"], None, aux))
    plan.append(("check", cd + ["check", "--json", "--python", a.python], None, a.check_runs))
    if torch_ok:
        plan.append(("import torch", [a.python, "-c", "import torch"], None, a.check_runs))
    t_start = time.perf_counter()
    first, _ = timed(plan[0][1])  # the first health of this run: caches (page cache, JIT cache) cold or not
    times: dict = {name: [] for name, *_ in plan}
    codes: dict = {name: set() for name, *_ in plan}
    for i in range(max(n for *_, n in plan)):
        if a.budget and i and time.perf_counter() - t_start > a.budget:
            break
        for name, argv, env, n in plan:
            if i < n:
                t, rc = timed(argv, env)
                times[name].append(t)
                codes[name].add(rc)
    rows = [row(name, times[name], codes[name]) for name, *_ in plan]
    res = {"first_health_s": round(first, 3), "rows": rows, "breakdown": breakdown(cd),
           "breakdown_1gpu": breakdown(cd, {"CUDA_VISIBLE_DEVICES": "0"}) if a.one_gpu else None}
    if a.json:
        print(json.dumps(res, indent=1))
        return 0
    print(f"{'':18} {'median':>8} {'min':>8} {'max':>8}  runs  exit")
    for r in rows:
        print(f"{r['name']:18} {r['median_s']:8.3f} {r['min_s']:8.3f} {r['max_s']:8.3f}  {r['runs']:>4}  "
              f"{','.join(map(str, r['exit_codes']))}")
    print(f"first health of this run: {first:.3f} s")
    med = {r["name"]: r["median_s"] for r in rows}
    if "import torch" in med:
        print(f"health is {med['import torch'] / med['health']:.1f}x under the torch import floor "
              f"({med['import torch']:.3f} s) and {med['check'] / med['health']:.1f}x under check")
    for key in ("breakdown", "breakdown_1gpu"):
        b = res[key]
        if not b:
            continue
        print(f"{key}: elapsed {b.get('elapsed_s')} s (after start-up), cuInit {b.get('cuinit_s')} s, launch child "
              f"{b.get('launch_child_s')} s, NVML child {b.get('nvml_child_s')} s, dmesg {b.get('dmesg_s')} s")
        for g in b.get("gpus", []):
            print(f"  CUDA device {g['ordinal']}: context {g['context_s']} s, JIT load {g['load_s']} s, "
                  f"launch {g['launch_s']} s, ok={g['ok']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

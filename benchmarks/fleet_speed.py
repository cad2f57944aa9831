"""How long `cudadoctor fleet summarize` takes on 10,000 nodes' reports.

    python benchmarks/fleet_speed.py [--count 10000] [--base REPORT.json] [--runs 3] [--keep DIR]

Makes COUNT synthetic reports from one real `cudadoctor check --json` report (this machine's, or
--base), every one a full-size report with its own node name; a few nodes differ on purpose (3 have
another driver, 25 another torch, 40 fail driver.version-mismatch). Then times
`cudadoctor fleet summarize DIR --json` end to end (a fresh process, as a user runs it), checks
that the summary names exactly the planted outliers, and prints the median. Target: a few seconds.
Exit 1 when the summary is wrong or the median is over --budget seconds.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

DRIVER, ODD_DRIVER = "580.159.04", "570.124.06"
TORCH, ODD_TORCH = "2.11.0+cu130", "2.10.0+cu128"
ODD_DRIVERS = 3
ODD_TORCH_N = 25
MISMATCH_N = 40


def base_report(path: str | None) -> dict:
    if path:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    p = subprocess.run([sys.executable, "-m", "cudadoctor", "check", "--json"], capture_output=True, text=True,
                       timeout=600)
    return json.loads(p.stdout)


def gpu_node(base: dict) -> dict:
    """The base report made to look like a healthy 8× H200 node (its other facts kept, full size)."""
    rep = copy.deepcopy(base)
    facts = rep.setdefault("facts", {})
    gpus = [{"index": i, "name": "NVIDIA H200", "uuid": f"GPU-{i:08d}", "compute_capability": "9.0",
             "memory_total_mib": 143771} for i in range(8)]
    facts["nvml"] = {"state": "found", "source": "nvml", "error": "", "elapsed_s": 0.1,
                     "value": {"driver_version": DRIVER, "nvml_version": "13." + DRIVER, "cuda_driver_version": "13.0",
                               "device_count": 8, "gpus": gpus, "error": ""}}
    facts["nvidia_smi"] = {"state": "found", "source": "nvidia-smi", "error": "", "elapsed_s": 0.1,
                           "value": {"driver_version": DRIVER, "cuda_version": "13.0", "gpus": gpus, "problem": ""}}
    torch = facts.get("torch", {}).get("value") or {}
    torch.update({"installed": True, "version": TORCH, "cuda": "13.0", "cudnn_version": 91900, "available": True})
    facts["torch"] = {"state": "found", "source": "torch", "error": "", "elapsed_s": 3.0, "value": torch}
    rep["steps"] = [{"id": s["id"], "title": s["title"], "status": "ok", "summary": s["summary"], "waits_on": [],
                     "elapsed_s": s.get("elapsed_s", 0.0),
                     "findings": [dict(f, status="ok", fix=None) for f in s.get("findings", [])]}
                    for s in rep.get("steps", [])]
    rep["exit_code"] = 0
    return rep


def make_reports(folder: str, count: int, base: dict) -> dict:
    healthy = gpu_node(base)
    planted = {"driver": [], "torch": [], "mismatch": []}
    template = json.dumps(healthy)
    for i in range(1, count + 1):
        name = f"gpu{i:05d}"
        rep = json.loads(template)
        rep["node"] = rep["host"] = name
        if i % (count // ODD_DRIVERS) == 7 and len(planted["driver"]) < ODD_DRIVERS:
            for k in ("nvml", "nvidia_smi"):
                rep["facts"][k]["value"]["driver_version"] = ODD_DRIVER
            planted["driver"].append(name)
        elif i % (count // ODD_TORCH_N) == 11 and len(planted["torch"]) < ODD_TORCH_N:
            rep["facts"]["torch"]["value"]["version"] = ODD_TORCH
            planted["torch"].append(name)
        elif i % (count // MISMATCH_N) == 13 and len(planted["mismatch"]) < MISMATCH_N:
            rep["steps"][0]["status"] = "fail"
            rep["steps"][0]["findings"] = [{"id": "driver.version-mismatch", "status": "fail",
                                            "summary": "kernel module 580.159.04 but NVML library 580.173",
                                            "detail": "", "fix": {"text": "reboot", "commands": ["sudo reboot"],
                                                                  "docs": ""}, "evidence": {}, "affects": ""}]
            rep["exit_code"] = 1
            planted["mismatch"].append(name)
        with open(os.path.join(folder, f"{name}.json"), "w", encoding="utf-8") as f:
            f.write(json.dumps(rep, indent=2))
    return planted


def verify(summary: dict, planted: dict, count: int) -> list:
    errors = []
    if summary["counts"]["nodes"] != count:
        errors.append(f"{summary['counts']['nodes']} nodes summarised, expected {count}")
    dims = {d["key"]: d for d in summary["dimensions"]}
    odd = sorted(o["node"] for o in dims["driver"]["outliers"])
    if odd != sorted(planted["driver"]) or dims["driver"]["majority"] != DRIVER:
        errors.append(f"driver outliers {odd}, expected {planted['driver']}")
    odd = sorted(o["node"] for o in dims["torch"]["outliers"])
    if odd != sorted(planted["torch"]):
        errors.append(f"torch outliers: {len(odd)}, expected {len(planted['torch'])}")
    failing = sorted(f["node"] for f in summary["failing"])
    if failing != sorted(planted["mismatch"]):
        errors.append(f"failing nodes: {len(failing)}, expected {len(planted['mismatch'])}")
    return errors


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=10_000)
    ap.add_argument("--base", help="a `cudadoctor check --json` report to copy (default: run check here)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--budget", type=float, default=10.0, help="seconds the median may take (exit 1 above)")
    ap.add_argument("--keep", help="write the reports here and keep them")
    args = ap.parse_args()

    base = base_report(args.base)
    folder = args.keep or tempfile.mkdtemp(prefix="cudadoctor-fleet-bench-")
    os.makedirs(folder, exist_ok=True)
    t0 = time.perf_counter()
    planted = make_reports(folder, args.count, base)
    size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
    print(f"made {args.count} reports ({size / 1e6:.0f} MB, {size / args.count / 1e3:.0f} kB each) "
          f"in {time.perf_counter() - t0:.1f} s")
    times, summary = [], None
    for _ in range(args.runs):
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "cudadoctor", "fleet", "summarize", folder, "--json"],
                           capture_output=True, text=True, timeout=600)
        times.append(time.perf_counter() - t0)
        summary = json.loads(p.stdout)
    errors = verify(summary, planted, args.count)
    med = statistics.median(times)
    print(f"cudadoctor fleet summarize: {args.count} reports in {med:.2f} s (median of {args.runs}: "
          + ", ".join(f"{t:.2f}" for t in times) + f") on {os.cpu_count()} CPUs")
    print("summary: " + summary["headline"])
    for d in summary["dimensions"]:
        if not d["uniform"] and d["key"] != "outcome":
            print("  " + d["sentence"][:160])
    if not args.keep:
        for f in os.listdir(folder):
            os.unlink(os.path.join(folder, f))
        os.rmdir(folder)
    for e in errors:
        print("WRONG: " + e)
    if med > args.budget:
        print(f"TOO SLOW: {med:.2f} s > {args.budget:g} s")
    return 1 if errors or med > args.budget else 0


if __name__ == "__main__":
    sys.exit(main())

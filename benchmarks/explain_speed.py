"""How fast is `cudadoctor explain`? Start-up on a one-line message, and a 50 MB log.

    python benchmarks/explain_speed.py            # prints the figures, exits 1 if a target is missed
    python benchmarks/explain_speed.py --mb 200   # a bigger log

Targets (issue 17, tighter than issue 6's): start-up <= 0.3 s for a one-line message, without
importing torch, pynvml or rich's heavy modules; a 50 MB log (binary junk, invalid UTF-8, a
multi-MB line) in <= 3 s with bounded memory. Runs `explain --offline` so no fact gathering is timed.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time

MESSAGE = "RuntimeError: CUDA error: no kernel image is available for execution on the device"
HEAVY = ("torch", "pynvml", "rich.console", "rich.table", "rich.progress", "numpy", "pydantic")

STARTUP_TARGET_S = 0.3
LOG_TARGET_S = 3.0
RSS_TARGET_MB = 300.0


def cmd(*args: str) -> list:
    return [sys.executable, "-m", "cudadoctor", "explain", "--offline", *args]


def startup(runs: int) -> tuple:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        p = subprocess.run(cmd(MESSAGE), capture_output=True, timeout=60)
        times.append(time.perf_counter() - t0)
        if p.returncode != 0:
            raise SystemExit(f"explain failed (rc {p.returncode}): {p.stderr.decode(errors='replace')}")
    p = subprocess.run([sys.executable, "-X", "importtime", *cmd(MESSAGE)[1:]], capture_output=True, timeout=60)
    mods = [ln.split("|")[-1].strip() for ln in p.stderr.decode(errors="replace").splitlines() if "|" in ln]
    heavy = sorted({m for m in mods if m.split(".")[0] in {h.split(".")[0] for h in HEAVY} and
                    any(m == h or m.startswith(h + ".") for h in HEAVY)})
    return statistics.median(times), min(times), heavy


def make_log(path: str, mb: int, seed: int = 6) -> int:
    rnd = random.Random(seed)
    words = ["epoch", "step", "loss", "lr", "grad_norm", "tokens/s", "INFO", "WARNING", "rank0", "cuda:0",
             "C:\\Users\\me\\AppData\\Local\\Programs\\Python\\Python310\\lib\\site-packages\\torch\\nn",
             "训练", "ошибка", "エラー", "kernel", "device", "memory", "allocated", "802", "34", "xid"]
    target = mb * 1024 * 1024
    written = 0
    with open(path, "wb") as f:
        f.write(b"NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current "
                b"PyTorch installation.\n")
        i = 0
        while written < target:
            i += 1
            if i % 5000 == 0:
                chunk = bytes(rnd.getrandbits(8) for _ in range(4096)) + b"\n"  # binary junk / invalid UTF-8
            elif i % 20011 == 0:
                chunk = (b"\r".join(b"progress %d%%" % k for k in range(100000))) + b"\n"  # a ~1.3 MB line
            else:
                chunk = (" ".join(rnd.choice(words) for _ in range(12)) + f" {i}\n").encode()
            f.write(chunk)
            written += len(chunk)
        f.write(b"Traceback (most recent call last):\n  File \"/opt/venv/lib/python3.11/site-packages/"
                b"flash_attn/flash_attn_interface.py\", line 1, in fwd\n"
                b"RuntimeError: CUDA error: no kernel image is available for execution on the device\n")
    return os.path.getsize(path)


def big_log(mb: int) -> tuple:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "train.log")
        size = make_log(path, mb)
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        t0 = time.perf_counter()
        p = subprocess.run(cmd("--json", "--file", path), capture_output=True, timeout=600)
        dt = time.perf_counter() - t0
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        import json

        ids = [m["id"] for m in json.loads(p.stdout)["matches"]] if p.returncode in (0, 1) else []
        return size, dt, max(rss, before) / 1024.0, ids, p.returncode


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=50)
    ap.add_argument("--runs", type=int, default=7)
    a = ap.parse_args()
    ok = True
    med, best, heavy = startup(a.runs)
    print(f"start-up, one-line message: median {med:.3f} s, best {best:.3f} s (target <= {STARTUP_TARGET_S} s)")
    print(f"heavy modules imported: {', '.join(heavy) if heavy else 'none'}")
    ok &= med <= STARTUP_TARGET_S and not heavy
    size, dt, rss, ids, rc = big_log(a.mb)
    print(f"{size / 1e6:.1f} MB log: {dt:.2f} s, peak RSS {rss:.0f} MB, exit {rc}, matches {ids}")
    print(f"  targets: <= {LOG_TARGET_S} s, < {RSS_TARGET_MB:.0f} MB, torch-arch-unsupported ranked before no-kernel-image")
    ok &= dt <= LOG_TARGET_S * max(1, a.mb / 50) and rss < RSS_TARGET_MB and rc == 0
    ok &= ids[:1] == ["torch-arch-unsupported"] and "no-kernel-image" in ids
    print("OK" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""How long a scan of everywhere an interpreter loads from takes: torch's site-packages plus three
editable source trees of 50,000 files in all (target <= 2 s on a 2-core dev machine).

    python benchmarks/scan_speed.py [--python PATH] [--runs 3] [--files 50000] [--json]

The trees are made in a temporary folder: packages of .py files, data files, a few non-CUDA shared
objects (copies of the interpreter's own lib-dynload modules), one real nvcc-built CUDA .so each when
nvcc is on PATH, a `.git` folder (skipped) and a stale `build/lib.*` copy (skipped). They are
registered as editable installs the way setuptools does (`__editable__.<name>-0.1.pth` +
`direct_url.json` + RECORD) in a temporary site folder added to the interpreter's own answer, so the
scan is exactly `cudadoctor scan`'s (roots, owners, module verdicts for cc 9.0) minus the child that
asks the interpreter where it loads from; that child's time is printed apart.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time

from cudadoctor.probes.owners import Owners
from cudadoctor.probes.scan import label_editable, scan_roots
from cudadoctor.probes.where import ask_interpreter, roots_from
from cudadoctor.system.host import HostSystem


def make_tree(top: str, name: str, files: int, sos: list, cuda_so: str) -> None:
    pkg = os.path.join(top, name)
    made = 0
    i = 0
    while made < files:
        d = os.path.join(pkg, f"sub{i // 50:03d}", f"mod{i % 50:02d}")
        os.makedirs(d, exist_ok=True)
        for j in range(20):
            if made >= files:
                break
            ext = ".py" if j % 4 else ".json"
            with open(os.path.join(d, f"f{j:02d}{ext}"), "w") as f:
                f.write("x = 1\n")
            made += 1
        if i % 40 == 0 and sos and made < files:
            shutil.copy(sos[(i // 40) % len(sos)], os.path.join(d, f"_native{i}.cpython-3-x86_64-linux-gnu.so"))
            made += 1
        i += 1
    if cuda_so:
        shutil.copy(cuda_so, os.path.join(pkg, "_cuda_k.so"))
    for k in range(200):  # skipped: not importable / version control
        for where in (os.path.join(top, ".git", "objects", f"{k:02x}"),
                      os.path.join(top, "build", "lib.linux-x86_64-cpython-312", name)):
            os.makedirs(where, exist_ok=True)
            with open(os.path.join(where, f"o{k}"), "w") as f:
                f.write("0")


def register_editable(site: str, name: str, src: str) -> None:
    with open(os.path.join(site, f"__editable__.{name}-0.1.pth"), "w") as f:
        f.write(src + "\n")
    di = os.path.join(site, f"{name}-0.1.dist-info")
    os.makedirs(di)
    with open(os.path.join(di, "direct_url.json"), "w") as f:
        json.dump({"url": "file://" + src, "dir_info": {"editable": True}}, f)
    with open(os.path.join(di, "RECORD"), "w") as f:
        f.write(f"__editable__.{name}-0.1.pth,,\n{name}-0.1.dist-info/RECORD,,\n")


def cuda_so(tmp: str) -> str:
    nvcc = shutil.which("nvcc")
    if not nvcc:
        return ""
    cu = os.path.join(tmp, "k.cu")
    with open(cu, "w") as f:
        f.write('extern "C" __global__ void k(int *o) { o[0] = 1; }\n')
    out = os.path.join(tmp, "libk.so")
    r = subprocess.run([nvcc, "-shared", "-Xcompiler", "-fPIC", "-gencode", "arch=compute_80,code=sm_80", "-o", out,
                        cu], capture_output=True, timeout=300)
    return out if r.returncode == 0 else ""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default=sys.executable, help="the interpreter whose site-packages (with torch) to scan")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--files", type=int, default=50_000, help="files in the three trees together")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    system = HostSystem()
    t0 = time.perf_counter()
    answer, err = ask_interpreter(system, a.python)
    child_s = time.perf_counter() - t0
    if answer is None:
        print(f"scan_speed: {err}", file=sys.stderr)
        return 2
    tmp = tempfile.mkdtemp(prefix="cudadoctor-scan-bench-")
    try:
        sos = sorted(glob.glob(os.path.join(sysconfig.get_config_var("DESTSHARED") or "", "*.so")))[:8]
        cu = cuda_so(tmp)
        site = os.path.join(tmp, "site")
        os.makedirs(site)
        for n in range(3):
            src = os.path.join(tmp, f"tree{n}")
            make_tree(src, f"bench{n}", a.files // 3 + (1 if n < a.files % 3 else 0), sos, cu)
            register_editable(site, f"bench{n}", src)
        answer = dict(answer, site=list(answer.get("site") or []) + [site])
        times, info = [], None
        for _ in range(a.runs):
            t0 = time.perf_counter()
            w = roots_from(system, answer, a.python)
            owners = Owners(system, w.site_dirs)
            label_editable(w.roots, owners)
            info = scan_roots(system, w.roots, owners, cc=(9, 0))
            times.append(time.perf_counter() - t0)
        walked = {r.origin: 0 for r in info.roots}
        for r in info.roots:
            walked[r.origin] += r.files
        out = {"python": answer.get("python"), "runs": [round(t, 3) for t in times],
               "median_s": round(statistics.median(times), 3), "child_s": round(child_s, 3),
               "files_walked": walked, "candidates": info.candidates, "cuda_binaries": len(info.files),
               "editable_cuda": sum(1 for f in info.files if f.origin == "editable"),
               "cut": [r.path for r in info.roots if r.cut], "target_s": 2.0, "cpus": os.cpu_count()}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if a.json:
        print(json.dumps(out))
    else:
        print(f"scan of {out['python']}: median {out['median_s']} s over {a.runs} runs {out['runs']} "
              f"(+ {out['child_s']} s asking the interpreter); files walked {walked}; "
              f"{out['candidates']} candidates, {out['cuda_binaries']} with CUDA code; cut: {out['cut'] or 'none'}")
    return 0 if out["median_s"] <= out["target_s"] and not out["cut"] else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env bash
# cudadoctor's own speed, as rows for the table in benchmarks/README.md.
#
#   benchmarks/self_speed.sh [TORCH_PYTHON]      (default: python3 on PATH)
#
#   check   : benchmarks/check_speed.py (the lead's): `check --json` vs `import torch` (+ first CUDA op on a GPU)
#   explain : benchmarks/explain_speed.py (the explain helper's), when present: one-line message and a 50 MB log
#   archs   : `cudadoctor archs --cc 9.0` on torch's libtorch_cuda.so, median of 5 runs
# cudadoctor runs from this checkout in CUDADOCTOR_PYTHON (default: TORCH_PYTHON), PYTHONPATH=checkout.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${1:-python3}"
CDPY="${CUDADOCTOR_PYTHON:-$PY}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
echo "machine: $(uname -srm); $(nproc) CPUs; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "no GPU"
echo "== check vs import torch"
"$CDPY" benchmarks/check_speed.py --runs 5 --python "$CDPY" || echo "check_speed.py failed"
if [ -f benchmarks/explain_speed.py ]; then
  echo "== explain"
  "$CDPY" benchmarks/explain_speed.py || echo "explain_speed.py failed"
else
  echo "== explain: benchmarks/explain_speed.py is not there yet"
fi
LIB=$("$PY" -c "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'lib', 'libtorch_cuda.so'))" 2>/dev/null)
if [ -n "$LIB" ] && [ -f "$LIB" ]; then
  echo "== archs on $LIB ($(du -h "$LIB" | cut -f1))"
  "$CDPY" - "$LIB" <<'PY'
import statistics, subprocess, sys, time
argv = [sys.executable, "-m", "cudadoctor", "archs", "--cc", "9.0", "--json", sys.argv[1]]
subprocess.run(argv, capture_output=True, timeout=300)  # warm the page cache
ts = []
for _ in range(5):
    t0 = time.perf_counter()
    r = subprocess.run(argv, capture_output=True, timeout=300)
    ts.append(time.perf_counter() - t0)
print(f"archs libtorch_cuda.so: median {statistics.median(ts):.3f} s {[round(t, 3) for t in ts]} exit {r.returncode}")
print(r.stdout.decode()[:300])
PY
else
  echo "== archs: no libtorch_cuda.so in $PY's torch (CPU-only torch?)"
fi

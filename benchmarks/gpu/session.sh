#!/usr/bin/env bash
# One GPU-machine session: install cudadoctor from carried wheels (.whl/) and run the verification
# scripts of one part. Used by the lead through the device tool; outputs land in $OUT.
#   bash benchmarks/gpu/session.sh core|probes|libs|bench|speed
set -u
. "$(dirname "$0")/_install.sh"
for part in "$@"; do
  echo "################ $part"
  case "$part" in
    core)
      echo "=== cudadoctor check"; cudadoctor check; echo "rc=$?"
      echo "=== cudadoctor check -v"; cudadoctor check -v; echo "rc=$?"
      cudadoctor check --json > "$OUT/check.json"; echo "=== check --json rc=$? ($(wc -c < "$OUT/check.json") bytes)"
      echo "=== CUDA_VISIBLE_DEVICES= cudadoctor check"; CUDA_VISIBLE_DEVICES= cudadoctor check; echo "rc=$?"
      mkdir -p /tmp/fake && printf '#!/bin/sh\necho "nvcc: NVIDIA (R) Cuda compiler driver"\necho "Cuda compilation tools, release 12.1, V12.1.105"\necho "Build cuda_12.1.r12.1/compiler.32688072_0"\n' > /tmp/fake/nvcc && chmod +x /tmp/fake/nvcc
      echo "=== fake nvcc 12.1 first on PATH"; PATH=/tmp/fake:$PATH cudadoctor check --only toolkit.nvcc --only matrix; echo "rc=$?"
      echo "=== fake nvcc 12.1 first on PATH, CUDA_HOME unset"; env -u CUDA_HOME PATH=/tmp/fake:$PATH cudadoctor check --only toolkit.nvcc; echo "rc=$?"
      echo "=== matrix recommend"; cudadoctor matrix recommend; echo "rc=$?"
      echo "=== explain"; cudadoctor explain "RuntimeError: CUDA error: no kernel image is available for execution on the device"; echo "rc=$?"
      ;;
    probes) bash "$REPO/benchmarks/gpu/probes.sh" "$TORCH_PY" ;;
    libs) bash "$REPO/benchmarks/gpu/libs.sh" "$TORCH_PY" ;;
    bench) bash "$REPO/benchmarks/gpu/bench.sh" "$TORCH_PY" ;;
    speed)
      python3 "$REPO/benchmarks/check_speed.py" --runs 5 | tee "$OUT/check_speed.txt"
      python3 "$REPO/benchmarks/explain_speed.py" | tee "$OUT/explain_speed.txt"
      LIB=$($TORCH_PY -c "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'lib', 'libtorch_cuda.so'))")
      TIMEFORMAT="archs on libtorch_cuda.so: %R s"
      for i in 1 2 3 4 5; do time cudadoctor archs --cc 9.0 --json "$LIB" > /dev/null; done 2>&1 | tee "$OUT/archs_speed.txt"
      ;;
  esac
done

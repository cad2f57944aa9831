#!/usr/bin/env bash
# On the GPU machine: `cudadoctor bench --json` and `--quick`, then the hand measurement, side by side.
#
#   benchmarks/gpu/bench.sh [TORCH_PYTHON]     (default /opt/torch/.venv/bin/python3)
#
# cudadoctor runs from this checkout (PYTHONPATH) in CUDADOCTOR_PYTHON (default: python3 on PATH, which
# needs typer, rich, packaging, platformdirs, psutil and nvidia-ml-py) or the `cudadoctor` on PATH;
# torch measurements run in TORCH_PYTHON. Checks: full bench < 60 s, --quick < 15 s, figures within
# 10% (bandwidth, matmul) / 20% (launch) of the hand measurement. Under 3 minutes in all.
set -uo pipefail
cd "$(dirname "$0")/../.."
TORCH_PY="${1:-/opt/torch/.venv/bin/python3}"
OUT="${OUT:-$(mktemp -d)}"
if [ -n "${CUDADOCTOR_PYTHON:-}" ]; then
  CD=(env PYTHONPATH="$PWD" "$CUDADOCTOR_PYTHON" -m cudadoctor)
elif command -v cudadoctor >/dev/null 2>&1; then
  CD=(cudadoctor)
else
  CD=(env PYTHONPATH="$PWD" python3 -m cudadoctor)
fi
echo "== cudadoctor: ${CD[*]} ; torch: $TORCH_PY ; output in $OUT"
nvidia-smi --query-gpu=name,pcie.link.gen.current,pcie.link.width.current,clocks.sm,clocks.max.sm,power.limit \
  --format=csv 2>/dev/null || true
fail=0

t0=$(date +%s.%N)
"${CD[@]}" bench --json --python "$TORCH_PY" >"$OUT/bench.json" 2>"$OUT/bench.err"
rc=$?
t1=$(date +%s.%N)
full_s=$(python3 -c "print(round($t1-$t0,1))")
echo "== cudadoctor bench --json: exit $rc in ${full_s} s"
python3 - "$OUT/bench.json" <<'PY' || fail=1
import json, sys
d = json.load(open(sys.argv[1]))
print(f"backend {d['backend']} device {d['device']} status {d['status']}")
for f in d["figures"]:
    print(f"  {f['status']:5s} {f['id']:17s} {f['value']!s:>12} {f['unit']:8s} expected {f['expected']!s:>9} "
          f"ratio {f['ratio']!s:>7}  {f['summary'][:90]}")
    for c in f["causes"]:
        print(f"        cause {c['id']}: {c['text'][:100]}")
if d.get("stop_reason"):
    print("stop:", d["stop_reason"])
for n in d.get("notes", []):
    print("note:", n)
PY
[ "$rc" -le 1 ] || { echo "FAIL: bench --json exit $rc"; cat "$OUT/bench.err"; fail=1; }
python3 -c "import sys; sys.exit(0 if $full_s < 60 else 1)" || { echo "FAIL: full bench took ${full_s} s (> 60 s)"; fail=1; }

t0=$(date +%s.%N)
"${CD[@]}" bench --quick --python "$TORCH_PY"
rc=$?
t1=$(date +%s.%N)
quick_s=$(python3 -c "print(round($t1-$t0,1))")
echo "== cudadoctor bench --quick: exit $rc in ${quick_s} s"
[ "$rc" -le 1 ] || { echo "FAIL: bench --quick exit $rc"; fail=1; }
python3 -c "import sys; sys.exit(0 if $quick_s < 15 else 1)" || { echo "FAIL: --quick took ${quick_s} s (> 15 s)"; fail=1; }

echo "== hand measurement (benchmarks/gpu/hand_measure.py) vs cudadoctor bench --json"
"$TORCH_PY" benchmarks/gpu/hand_measure.py --compare "$OUT/bench.json" || fail=1

echo "== timings: full ${full_s} s, quick ${quick_s} s"
[ "$fail" -eq 0 ] && echo "bench.sh: ALL PASS" || echo "bench.sh: SOME CHECKS FAILED"
exit "$fail"

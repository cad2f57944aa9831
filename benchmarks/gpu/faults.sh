#!/usr/bin/env bash
# Hardening checks that need a real GPU and driver (issue 9). Self-checking: prints PASS/FAIL per item
# and exits 1 when any FAILs. About a minute. Run after session.sh has installed the wheel:
#   bash benchmarks/gpu/session.sh core && bash benchmarks/gpu/faults.sh [/opt/torch/.venv/bin/python3]
# 1. read-only on a real GPU: check, probe, bench --quick, scan, libs, env write nothing outside the cache
#    dir (catches the driver's JIT cache ~/.nv/ComputeCache, torch/Triton caches, nvcc temporaries)
# 2. two probes at once on an empty cache: both finish, agree, leave only whole artifacts; a 3rd run is cached
# 3. a hung nvidia-smi next to a working NVML: driver.smi-hang within the timeout
# 4. SIGTERM while the torch probe runs on the GPU: exits 143 at once, no probe child left behind
set -u
TORCH_PY=${1:-/opt/torch/.venv/bin/python3}
if [ -d /tmp/site ]; then export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH; fi
export NO_COLOR=1 PYTHONUNBUFFERED=1
CD="python3 -m cudadoctor"
W=$(mktemp -d /tmp/cdfaults.XXXX)
FAILS=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; FAILS=$((FAILS + 1)); }
cd "$W" || exit 2

echo "=== 1. read-only (HOME, TMPDIR, cwd must stay as they were)"
mkdir -p home tmp cwd cache
touch "$W/stamp"; sleep 1
for cmd in "check --json --python $TORCH_PY" "probe --json" "bench --quick --json --python $TORCH_PY" \
           "scan --json --python $TORCH_PY" "libs --json --python $TORCH_PY" "env --json --python $TORCH_PY"; do
  (cd cwd && HOME="$W/home" XDG_CACHE_HOME="$W/home/.cache" CUDADOCTOR_CACHE_DIR="$W/cache" TMPDIR="$W/tmp" \
     timeout 300 $CD $cmd > "$W/out.json" 2> "$W/err.txt"); rc=$?
  written=$(find "$W/home" "$W/tmp" "$W/cwd" -newer "$W/stamp" 2>/dev/null | grep -v -x -e "$W/home" -e "$W/tmp" -e "$W/cwd")
  if [ -n "$written" ]; then fail "$cmd wrote outside its cache: $(echo "$written" | head -5 | tr '\n' ' ')"
  elif grep -q Traceback "$W/err.txt"; then fail "$cmd: traceback: $(tail -3 "$W/err.txt")"
  else pass "$cmd (rc=$rc) wrote only under the cache dir"; fi
done
ls -R "$W/cache" | head -20

echo "=== 2. two probes at once on an empty cache"
rm -rf "$W/cache2"; t0=$(date +%s)
for i in 1 2; do CUDADOCTOR_CACHE_DIR="$W/cache2" timeout 300 $CD probe --json > "$W/p$i.json" 2> "$W/p$i.err" & done
wait
echo "both done in $(( $(date +%s) - t0 )) s"
python3 - "$W" <<'EOF'
import json, os, sys
w = sys.argv[1]
a, b = (json.load(open(f"{w}/p{i}.json")) for i in (1, 2))
ka = {x["name"]: (x["sass"], x["ptx"], x["driver_api"]) for x in a["builds"]}
kb = {x["name"]: (x["sass"], x["ptx"], x["driver_api"]) for x in b["builds"]}
print("builds:", {k: v for k, v in ka.items()})
d = f"{w}/cache2/probes"
bad = [f for f in os.listdir(d) if ".tmp" in f or f.startswith(".")] if os.path.isdir(d) else ["(no cache)"]
ok = ka and ka == kb and not bad and all(not x["build_error"] for x in a["builds"] + b["builds"])
print(("PASS" if ok else "FAIL") + f" two probes agree={ka == kb} leftovers={bad} exit codes={a['exit_code']},{b['exit_code']}")
sys.exit(0 if ok else 1)
EOF
[ $? -eq 0 ] || FAILS=$((FAILS + 1))
grep -h "FAIL " "$W"/p*.err 2>/dev/null | head -3
CUDADOCTOR_CACHE_DIR="$W/cache2" $CD probe --json > "$W/p3.json" 2>/dev/null
python3 -c "import json,sys; r=json.load(open('$W/p3.json')); c=[b['cached'] for b in r['builds']]; print(('PASS' if c and all(c) else 'FAIL')+' third probe cached:', c)" | tee "$W/p3.txt"
grep -q PASS "$W/p3.txt" || FAILS=$((FAILS + 1))

echo "=== 3. hung nvidia-smi, working NVML"
mkdir -p "$W/fakebin"; printf '#!/bin/sh\nexec sleep 1000\n' > "$W/fakebin/nvidia-smi"; chmod +x "$W/fakebin/nvidia-smi"
t0=$(date +%s)
PATH="$W/fakebin:$PATH" CUDADOCTOR_TIMEOUT_SMI=3 timeout 60 $CD check --json --only driver > "$W/smi.json"; rc=$?
el=$(( $(date +%s) - t0 ))
python3 -c "import json; r=json.load(open('$W/smi.json')); print([f['id'] for s in r['steps'] for f in s['findings']])"
if grep -q '"driver.smi-hang"' "$W/smi.json" && [ "$rc" = 1 ] && [ "$el" -le 15 ]; then pass "smi hang named in ${el} s (limit 3 s)"
else fail "smi hang: rc=$rc ${el} s"; fi

echo "=== 4. SIGTERM during the torch probe on the GPU"
$CD check --json --python "$TORCH_PY" > /dev/null 2>&1 &
pid=$!; sleep 1.5
if ! pgrep -f "torch_probe.py" > /dev/null; then
  echo "SKIP the torch probe was not running 1.5 s in"; wait $pid
else
  kill -TERM $pid; t0=$(date +%s); wait $pid; rc=$?; el=$(( $(date +%s) - t0 ))
  sleep 0.5
  left=$(pgrep -f "torch_probe.py" || true)
  if [ "$rc" = 143 ] && [ "$el" -le 3 ] && [ -z "$left" ]; then pass "SIGTERM: exit 143 in ${el} s, no probe left"
  else fail "SIGTERM: rc=$rc after ${el} s, left: $left"; [ -n "$left" ] && kill -9 $left; fi
fi

echo "=== $FAILS failure(s)"
rm -rf "$W"
[ "$FAILS" -eq 0 ]

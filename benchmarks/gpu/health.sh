#!/usr/bin/env bash
# GPU-machine verification of `cudadoctor health` (issue 15) on the healthy 2x H200 (NVSwitch). Self-checking:
# PASS/FAIL lines, exit 1 when a check FAILs; TARGET lines report the speed targets (they do not fail the run).
# About 70 s; every command has a timeout; the whole log goes to $OUT/i15.log, stdout stays short.
#   1. health (text), --json, --prometheus FILE (parsed with prometheus_client), --quiet: healthy, exit 0;
#      its facts against nvidia-smi (NVLink links up, fabric state, GPU count)
#   2. --expect-gpus 3 and --expect-driver 570: unhealthy, exit 1, with the one-line reason
#   3. CUDA_VISIBLE_DEVICES=1: the kernel runs on GPU 1 only, matched to NVML by UUID; GPU 0 "not tested"
#   4. read-only: health writes nothing outside its cache dir (and the files it is told to write)
#   5. check --only container: the fabric state is read now (nvml_probe passes the struct it needs)
#   6. explain of an Xid 79 line: answered from the Xid catalogue
#   7. a process holding nearly all of GPU 0's memory: health must not call the GPU broken; health as a
#      non-root user: the kernel log unreadable is a fact (skip), not a failure
#   8. speed: health (10 runs, both GPUs and CUDA_VISIBLE_DEVICES=0), --no-launch, nvidia-smi -q, check (3),
#      import torch (3), interleaved, within the time left; medians; the breakdown of one run (cuInit,
#      context, JIT, launch, NVML)
# Usage: bash benchmarks/gpu/health.sh
set -u
. "$(dirname "$0")/_install.sh"
LOG="$OUT/i15.log"
: > "$LOG"
W=$(mktemp -d /tmp/cdhealth.XXXX)
export CUDADOCTOR_CACHE_DIR="$W/cache"  # cold: the first run pays the PTX JIT, later runs use the cache
PY="$TORCH_PY"
FAILS=0
T0=$SECONDS
say() { echo "$*" | tee -a "$LOG"; }
pass() { say "PASS $*"; }
fail() { say "FAIL $*"; FAILS=$((FAILS + 1)); }
# run CMD..., keep its output in $W/out (and the log), its exit code in $rc and wall ms in $ms
run() { local s; s=$(date +%s%N); timeout 30 "$@" > "$W/out" 2> "$W/err"; rc=$?
        ms=$(( ($(date +%s%N) - s) / 1000000 ))
        { echo "\$ $* -> exit $rc, ${ms} ms"; cat "$W/out" "$W/err"; } >> "$LOG"; }
# a small python (its code on stdin) with the JSON file $1 loaded as R; no JSON is a FAIL line, not a traceback
jq_py() { timeout 30 "$PY" -c 'import json, sys
try:
    R = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"FAIL {sys.argv[1]} is not JSON: {e}"); sys.exit(1)
exec(sys.stdin.read())' "$@"; }

say "== 0. machine: $(nvidia-smi -L 2>&1 | tr '\n' ' ')"
say "   $(cudadoctor --version 2>&1 | tail -1) at $(command -v cudadoctor); python3 = $(command -v python3)"

say "== 1. cudadoctor health on the healthy machine"
run cudadoctor health
head -n 40 "$W/out"
say "   (first run, cold JIT cache: ${ms} ms)"
[ "$rc" = 0 ] && grep -q "^healthy: " "$W/out" && pass "health: exit 0, healthy" || fail "health: exit $rc"
run cudadoctor health --json
cp "$W/out" "$W/health.json"
jq_py "$W/health.json" <<'EOF' | tee -a "$LOG"
r = R
f = r["facts"]
steps = {s["id"]: s["status"] for s in r["steps"]}
nv = f["health_nvml"]["value"] or {}
la = f["health_launch"]["value"] or {}
gpus = nv.get("gpus", [])
print("   steps:", " ".join(f"{k}={v}" for k, v in steps.items()))
print("   reason:", r["reason"], "| elapsed_s", r["elapsed_s"])
for g in gpus:
    print(f"   NVML GPU {g['index']}: {g.get('name')} {g.get('uuid')} {g.get('pci_bus_id')} minor={g.get('minor_number')} "
          f"temp={g.get('temperature_c')}/{g.get('temp_slowdown_c')} events={g.get('clock_events')} "
          f"links_up={sum(1 for s in g.get('nvlinks', []) if s == 1)}/{len(g.get('nvlinks', []))} fabric={g.get('fabric')} "
          f"recovery={g.get('recovery_action')} rows={g.get('remapped_rows')} errors={g.get('errors')}")
print(f"   launch: cuInit {la.get('init_s')} s, libcuda {la.get('libcuda')}, CUDA {la.get('cuda_version')}, "
      f"count {la.get('count')}, total {la.get('total_s')} s")
for d in la.get("devices", []):
    print(f"   CUDA {d['ordinal']}: {d.get('uuid')} {d.get('pci_bus_id')} cc {d.get('cc')} ok={d['ok']} step={d.get('step')} "
          f"context {d.get('context_s')} s, JIT {d.get('load_s')} s, launch {d.get('launch_s')} s, error={d.get('error')}")
x = f["xid"]
print(f"   xid fact: {x['state']} {x['error'][:80]} lines={(x.get('value') or {}).get('lines')}")
ok = (r["exit_code"] == 0 and set(steps.values()) <= {"ok", "skip"} and len(gpus) == 2
      and len(la.get("devices", [])) == 2 and all(d["ok"] for d in la["devices"])
      and {d["uuid"] for d in la["devices"]} == {g["uuid"] for g in gpus}
      and all((g.get("fabric") or {}).get("state") == 3 for g in gpus)
      and all(sum(1 for s in g.get("nvlinks", []) if s == 1) == 18 for g in gpus))
print(("PASS" if ok else "FAIL") + " health --json: 2 GPUs, both ran the kernel (UUIDs match NVML), fabric completed, 18 NVLinks up each")
sys.exit(0 if ok else 1)
EOF
[ "${PIPESTATUS[0]}" = 0 ] || FAILS=$((FAILS + 1))
# the same facts as nvidia-smi tells them
up=$(timeout 20 nvidia-smi nvlink -s 2>/dev/null | grep -c "GB/s")
fab=$(timeout 20 nvidia-smi -q 2>/dev/null | grep -A1 "^    Fabric" | grep -c "State *: Completed")
say "   nvidia-smi: $up NVLink lines with a speed (2 x 18 expected), fabric Completed on $fab GPU(s)"
[ "$up" = 36 ] && [ "$fab" = 2 ] && pass "nvidia-smi agrees (36 links up, fabric Completed x2)" || fail "nvidia-smi: links $up, fabric $fab"
run cudadoctor health --quiet --prometheus "$W/textfile/cudadoctor.prom" --save "$W/saved.json"
say "   --quiet: $(cat "$W/out")"
head -n 12 "$W/textfile/cudadoctor.prom" | tee -a "$LOG"
cat "$W/textfile/cudadoctor.prom" >> "$LOG"
timeout 30 "$PY" - "$W/textfile/cudadoctor.prom" <<'EOF' 2>&1 | tee -a "$LOG"
import os, stat, sys
try:
    from prometheus_client.parser import text_string_to_metric_families
    p = sys.argv[1]
    fams = {f.name: f for f in text_string_to_metric_families(open(p).read())}
    s = {(x.name, tuple(sorted(x.labels.items()))): x.value for f in fams.values() for x in f.samples}
    status = s[("cudadoctor_health_status", ())]
    launch = [v for (n, l), v in s.items() if n == "cudadoctor_health_gpu_launch_seconds"]
    mode = stat.S_IMODE(os.stat(p).st_mode)
    ok = status == 0 and len(launch) == 2 and mode == 0o644 and os.listdir(os.path.dirname(p)) == ["cudadoctor.prom"]
    print(f"   {len(fams)} metric families, {len(s)} samples; launch seconds {launch}; mode {oct(mode)}")
except Exception as e:
    print(f"   {type(e).__name__}: {e}")
    ok = False
print(("PASS" if ok else "FAIL") + " --prometheus: parsed by prometheus_client, status 0, per-GPU launch latency, 0644, no temp file")
sys.exit(0 if ok else 1)
EOF
[ "${PIPESTATUS[0]}" = 0 ] || FAILS=$((FAILS + 1))

say "== 2. expectations the node does not meet"
run cudadoctor health --quiet --expect-gpus 3
say "   --expect-gpus 3 -> exit $rc: $(cat "$W/out")"
[ "$rc" = 1 ] && grep -q "^unhealthy: health.gpu-count: 2 GPUs, expected 3" "$W/out" && pass "--expect-gpus 3: unhealthy, exit 1" || fail "--expect-gpus 3: exit $rc"
run cudadoctor health --quiet --expect-driver 570
say "   --expect-driver 570 -> exit $rc: $(cat "$W/out")"
[ "$rc" = 1 ] && grep -q "health.driver-unexpected" "$W/out" && pass "--expect-driver 570: unhealthy" || fail "--expect-driver 570: exit $rc"

say "== 3. CUDA_VISIBLE_DEVICES=1"
CUDA_VISIBLE_DEVICES=1 run cudadoctor health --json
jq_py "$W/out" <<'EOF' | tee -a "$LOG"
r = R
fs = [(f["id"], f["status"], f["evidence"].get("gpu")) for s in r["steps"] if s["id"] == "launch" for f in s["findings"]]
print("   launch findings:", fs, "| exit", r["exit_code"])
ok = r["exit_code"] == 0 and ("probe.launch.not-tested", "skip", 0) in fs and ("probe.launch.ok", "ok", None) in fs
print(("PASS" if ok else "FAIL") + " CUDA_VISIBLE_DEVICES=1: kernel on GPU 1 only, GPU 0 not tested, healthy")
sys.exit(0 if ok else 1)
EOF
[ "${PIPESTATUS[0]}" = 0 ] || FAILS=$((FAILS + 1))

say "== 4. read-only"
mkdir -p "$W/home" "$W/tmp" "$W/cwd"; touch "$W/stamp"; sleep 1
(cd "$W/cwd" && HOME="$W/home" XDG_CACHE_HOME="$W/home/.cache" TMPDIR="$W/tmp" timeout 60 cudadoctor health > /dev/null 2>&1)
written=$(find "$W/home" "$W/tmp" "$W/cwd" -newer "$W/stamp" 2>/dev/null | grep -v -x -e "$W/home" -e "$W/tmp" -e "$W/cwd")
[ -z "$written" ] && pass "health wrote nothing outside its cache dir" || fail "health wrote: $(echo "$written" | head -3 | tr '\n' ' ')"
say "   cache dir: $(find "$CUDADOCTOR_CACHE_DIR" -type f 2>/dev/null | wc -l) file(s) (the driver's PTX JIT cache)"

say "== 5. check --only container (fabric state through nvml_probe)"
run cudadoctor check --json --only container
jq_py "$W/out" <<'EOF' | tee -a "$LOG"
r = R
states = [g.get("fabric_state") for g in (r["facts"]["nvml"]["value"] or {}).get("gpus", [])]
fs = {f["id"]: f["status"] for s in r["steps"] for f in s["findings"]}
print("   fabric_state per GPU:", states, "| findings:", fs)
ok = states == [3, 3] and "fail" not in fs.values()
print(("PASS" if ok else "FAIL") + " check's container step reads the fabric state (3 = completed) and finds no fault")
sys.exit(0 if ok else 1)
EOF
[ "${PIPESTATUS[0]}" = 0 ] || FAILS=$((FAILS + 1))

say "== 6. explain an Xid 79 line"
run cudadoctor explain --offline "NVRM: Xid (PCI:0000:00:06): 79, pid=1234, name=python3, GPU has fallen off the bus."
grep -m1 "Xid 79 (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS)" "$W/out" | cut -c1-160 | tee -a "$LOG"
grep -q "RESTART_BM" "$W/out" && pass "explain answers Xid 79 from the catalogue" || fail "explain: no catalogue answer"

say "== 7. faults that must not be called GPU faults (elapsed $((SECONDS - T0)) s)"
if [ $((SECONDS - T0)) -lt 30 ]; then
  timeout 40 "$PY" -c "
import torch, time, sys
free, total = torch.cuda.mem_get_info(0)
x = torch.empty(int(free - (256 << 20)), dtype=torch.uint8, device='cuda:0')
print('HOG holds', x.numel() >> 20, 'MiB', flush=True); time.sleep(25)" > "$W/hog.txt" 2>&1 &
  hog=$!
  for _ in $(seq 100); do grep -q HOG "$W/hog.txt" && break; sleep 0.1; done
  say "   $(cat "$W/hog.txt" | tail -1)"
  run cudadoctor health --json
  kill $hog 2>/dev/null; wait $hog 2>/dev/null
  jq_py "$W/out" <<'EOF' | tee -a "$LOG"
r = R
fs = [(f["id"], f["status"], f["evidence"].get("gpu"), f["summary"][:90]) for s in r["steps"] if s["id"] == "launch" for f in s["findings"]]
for x in fs:
    print("  ", x)
ok = r["exit_code"] == 0 and not any(i in ("probe.launch.failed", "probe.launch.timeout") for i, *_ in fs)
print(("PASS" if ok else "FAIL") + f" GPU 0 full of another process's memory: exit {r['exit_code']}, not called broken")
sys.exit(0 if ok else 1)
EOF
  [ "${PIPESTATUS[0]}" = 0 ] || FAILS=$((FAILS + 1))
else
  say "SKIP memory hog (time budget)"
fi
if [ $((SECONDS - T0)) -lt 40 ] && command -v setpriv > /dev/null; then
  chmod 777 "$W"; mkdir -p "$W/nobody"; chmod 777 "$W/nobody"
  timeout 30 setpriv --reuid=65534 --regid=65534 --clear-groups env HOME="$W/nobody" CUDADOCTOR_CACHE_DIR="$W/nobody/cache" \
    PATH="$PATH" PYTHONPATH="$PYTHONPATH" cudadoctor health --json > "$W/out" 2> "$W/err"; rc=$?
  cat "$W/out" "$W/err" >> "$LOG"
  if jq_py "$W/out" > "$W/nb.txt" 2>&1 <<'EOF'
r = R
st = {s["id"]: s["status"] for s in r["steps"]}
print(f"   as nobody: exit {r['exit_code']}, xid {st['xid']}, launch {st['launch']}: {r['reason'][:120]}")
sys.exit(0 if r["exit_code"] == 0 and st["xid"] in ("skip", "ok") else 1)
EOF
  then tee -a "$LOG" < "$W/nb.txt"; pass "health as a non-root user: healthy; kernel log $(grep -o 'xid [a-z]*' "$W/nb.txt")"
  else tee -a "$LOG" < "$W/nb.txt"; say "   $(tail -2 "$W/err")"; fail "health as a non-root user (exit $rc)"; fi
else
  say "SKIP non-root run (time budget or no setpriv)"
fi

say "== 8. speed, side by side (medians; health = every GPU, 1 GPU = CUDA_VISIBLE_DEVICES=0)"
budget=$((76 - (SECONDS - T0))); [ "$budget" -lt 20 ] && budget=20  # whole run <= 90 s
timeout $((budget + 15)) python3 "$REPO/benchmarks/health_speed.py" --runs 10 --check-runs 3 --aux-runs 5 --one-gpu \
  --budget "$budget" --python "$PY" \
  > "$W/speed.txt" 2>&1; src=$?
tee -a "$LOG" < "$W/speed.txt"
[ "$src" = 0 ] || fail "health_speed.py exit $src"
med() { awk -v n="$1" '$0 ~ "^"n" " {print $(NF-4)}' "$W/speed.txt" | head -1; }
h2=$(med "health"); h1=$(med "health 1 GPU")
say "TARGET health on 1 GPU (CUDA_VISIBLE_DEVICES=0) <= 0.5 s: ${h1:-?} s $(awk -v x="${h1:-9}" 'BEGIN{print (x <= 0.5) ? "met" : "missed"}')"
say "TARGET health on both GPUs <= 1 s: ${h2:-?} s $(awk -v x="${h2:-9}" 'BEGIN{print (x <= 1.0) ? "met" : "missed"}')"

say "== done in $((SECONDS - T0)) s: $FAILS failure(s); full log: $LOG"
rm -rf "$W"
[ "$FAILS" = 0 ]

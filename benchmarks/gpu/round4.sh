#!/usr/bin/env bash
# Session of 2026-11-30 (round 4 of issue 17, and two review mends) on the GPU machine, self-checking:
# 1. CUDA_VISIBLE_DEVICES='' (every GPU hidden): what torch really says, and check's torch.cuda / device.capability
#    verdicts (capability now judges no device instead of the hidden ones); CUDA_VISIBLE_DEVICES=1: one device
# 2. `envs`: the archs column follows the environment's CUDA_VISIBLE_DEVICES as the capability step does
# 3. explain's speed (start-up and a 50 MB log) with the installed wheel
# 4. a plain `cudadoctor check` on the healthy machine: exit 0
set -u
. "$(dirname "$0")/_install.sh"
LOG="$OUT/round4.log"; : > "$LOG"
FAILS=0
say() { echo "$*" | tee -a "$LOG"; }
pass() { say "PASS $*"; }
fail() { say "FAIL $*"; FAILS=$((FAILS + 1)); }
W=$(mktemp -d /tmp/r4.XXXX); trap 'rm -rf "$W"' EXIT
say "== round 4 · cudadoctor $(timeout 30 cudadoctor --version 2>&1) · torch python $TORCH_PY"
timeout 15 nvidia-smi -L | tee -a "$LOG"

steps() {  # $1 = JSON report: "step finding-id status" lines
  python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for s in r["steps"]:
    for f in s["findings"]:
        print(s["id"], f["id"], f["status"])
PY
}
for V in "" "1"; do
  say "-- CUDA_VISIBLE_DEVICES='$V'"
  REAL=$(CUDA_VISIBLE_DEVICES="$V" timeout 120 "$TORCH_PY" -c "import torch; print(torch.cuda.is_available(), torch.cuda.device_count())" 2>&1 | tail -1)
  say "  real torch: is_available, device_count = $REAL"
  CUDA_VISIBLE_DEVICES="$V" timeout 180 cudadoctor check --python "$TORCH_PY" --only driver --only torch.cuda --only device.capability --json > "$W/c.json" 2>"$W/c.err"
  say "  check rc=$?"; steps "$W/c.json" | sed 's/^/  /' | tee -a "$LOG"
  CUDA_VISIBLE_DEVICES="$V" timeout 180 cudadoctor check --python "$TORCH_PY" --only driver --only torch.cuda --only device.capability 2>&1 | sed 's/^/  | /' | head -30 >> "$LOG"
  if [ -z "$V" ]; then
    [ "$REAL" = "False 0" ] && pass "torch with CUDA_VISIBLE_DEVICES='' sees no GPU" || fail "torch with '' says $REAL"
    steps "$W/c.json" | grep -q "^torch.cuda .* fail$" && pass "torch.cuda FAILs when every GPU is hidden" || fail "torch.cuda did not FAIL"
    steps "$W/c.json" | grep -q "^device.capability device.capability.no-devices skip$" && pass "device.capability judges no hidden GPU (SKIP no-devices)" || fail "device.capability: $(steps "$W/c.json" | grep ^device.capability | head -2 | tr '\n' ';')"
  else
    [ "$REAL" = "True 1" ] && pass "torch with CUDA_VISIBLE_DEVICES=1 sees one GPU" || fail "torch with 1 says $REAL"
    N=$(python3 -c "import json;r=json.load(open('$W/c.json'));s=[s for s in r['steps'] if s['id']=='device.capability'][0];print(sum(1 for f in s['findings'] if f['status']=='ok'))")
    [ "$N" = 1 ] && pass "device.capability judges the one visible GPU" || fail "device.capability judged $N GPUs"
  fi
  CUDA_VISIBLE_DEVICES="$V" timeout 180 cudadoctor envs --add "$TORCH_PY" --json > "$W/e.json" 2>>"$LOG"
  A=$(python3 -c "
import json,os;d=json.load(open('$W/e.json'))
tp='$TORCH_PY'; pre=os.path.dirname(os.path.dirname(tp))
print([(e['verdict'], e['archs']) for e in d['environments'] if e['python']==tp or tp in e.get('aliases',[]) or e.get('prefix')==pre][:1])")
  say "  envs row of the torch python: $A"
  if [ -z "$V" ]; then [ "$A" = "[('no-gpu', '-')]" ] && pass "envs: hidden GPUs give no-gpu and archs '-'" || fail "envs with '': $A"
  else [ "$A" = "[('works', 'sm_90')]" ] && pass "envs: one visible H200, works sm_90" || fail "envs with 1: $A"; fi
done

say "-- explain speed (installed wheel)"
cp "$REPO/benchmarks/explain_speed.py" "$W/" && (cd "$W" && timeout 300 python3 explain_speed.py 2>&1) | tee -a "$LOG"
say "-- explain on a real message"
timeout 30 cudadoctor explain "RuntimeError: CUDA error: no kernel image is available for execution on the device" 2>&1 | head -12 >> "$LOG"
say "-- full check (healthy machine)"
timeout 300 cudadoctor check > "$W/full.txt" 2>&1; RC=$?
tail -25 "$W/full.txt" >> "$LOG"
[ $RC = 0 ] && pass "cudadoctor check exit 0 on the healthy machine" || fail "cudadoctor check exit $RC: $(grep -E 'FAIL|WARN' "$W/full.txt" | head -3 | tr '\n' ';')"
say "== FAILS=$FAILS"
exit $((FAILS > 0))

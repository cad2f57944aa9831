#!/usr/bin/env bash
# GPU-machine verification for issue 16: `cudadoctor envs`, `envs --diff`, `check --kernel` and check's
# pointer to a working environment. Self-checking (PASS/FAIL lines, exit 1 on a FAIL), <= 90 s, full log
# in $OUT/i16.log. Reads only; writes under a temp folder and its own cache dir.
#   bash benchmarks/gpu/envs.sh
# Six environments: the torch venv (TORCH_PY, on PATH), /usr/bin/python3 (and /bin/python3, one row), a venv
# without torch, a venv made with --system-site-packages from the torch venv (it sees the *base* Python's
# packages, not the venv's: no torch), a second venv that sees the torch venv's packages through a .pth,
# and a Jupyter kernel (JUPYTER_PATH) running the torch venv with CUDA_VISIBLE_DEVICES='' in its kernel.json.
# A second kernel without env merges into the torch venv's row. Then a hung interpreter (a script named
# python that sleeps) as a 7th, with --strict.
set -u
. "$(dirname "$0")/_install.sh"
LOG="$OUT/i16.log"; : > "$LOG"
W=$(mktemp -d /tmp/i16.XXXX)
export CUDADOCTOR_CACHE_DIR; CUDADOCTOR_CACHE_DIR=$(mktemp -d /tmp/i16cache.XXXX)
trap 'rm -rf "$W" "$CUDADOCTOR_CACHE_DIR"' EXIT
T0=$(date +%s.%N)
FAILS=0
say() { echo "$*"; echo "$*" >> "$LOG"; }
pass() { say "PASS $*"; }
fail() { say "FAIL $*"; FAILS=$((FAILS + 1)); }
now() { python3 -c "import time; print(f'{time.time() - $T0:.1f}')"; }
secs() { python3 -c "print(f'{$2 - $1:.2f}')"; }
# log CMD...: run with a timeout, full output to the log, stdout kept in $W/last.out, rc in $RC
log_run() {
  local t1 t2; t1=$(date +%s.%N)
  timeout 60 "$@" > "$W/last.out" 2> "$W/last.err"; RC=$?
  t2=$(date +%s.%N); WALL=$(secs "$t1" "$t2")
  { echo "\$ $*"; cat "$W/last.out"; cat "$W/last.err"; echo "rc=$RC wall=${WALL}s"; } >> "$LOG"
}
# judge FILE EXPR MESSAGE: a Python expression over `d` (the JSON in FILE) and `rows` (python -> row)
judge() {
  if python3 - "$1" "$2" <<'EOF'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except ValueError as e:
    print(f"  ({sys.argv[1]} is not JSON: {e})")
    sys.exit(1)
rows = {}
for e in d.get("environments", []):
    for p in [e["python"]] + e.get("aliases", []):
        rows.setdefault(p, e)
kern = {e["name"]: e for e in d.get("environments", []) if e.get("kind") == "kernel"}
find = {f["id"]: f for s in d.get("steps", []) for f in s["findings"]}
try:
    ok = eval(sys.argv[2])
except Exception as e:  # a missing row or finding: say which, in one line
    print(f"  ({type(e).__name__}: {e})")
    ok = False
sys.exit(0 if ok else 1)
EOF
  then pass "$3"; else fail "$3"; fi
}

TSITE=$("$TORCH_PY" -c "import site; print([p for p in site.getsitepackages() if p.endswith('site-packages')][0])")
PYV=$("$TORCH_PY" -c "import sys; print(f'python{sys.version_info[0]}.{sys.version_info[1]}')")
TORCH_PREFIX=$(dirname "$(dirname "$TORCH_PY")")
say "== setup: torch venv $TORCH_PREFIX ($TSITE), work folder $W"
mkdir -p "$W/venvs" "$W/jupyter/kernels/torch-nogpu" "$W/jupyter/kernels/torch-ok" "$W/hung/bin"
"$TORCH_PY" -m venv --without-pip "$W/venvs/notorch" >> "$LOG" 2>&1 || fail "venv notorch"
"$TORCH_PY" -m venv --without-pip --system-site-packages "$W/venvs/ssp" >> "$LOG" 2>&1 || fail "venv ssp"
"$TORCH_PY" -m venv --without-pip "$W/venvs/torch2" >> "$LOG" 2>&1 || fail "venv torch2"
mkdir -p "$W/venvs/torch2/lib/$PYV/site-packages"
echo "$TSITE" > "$W/venvs/torch2/lib/$PYV/site-packages/_torch_venv.pth"
cat > "$W/jupyter/kernels/torch-nogpu/kernel.json" <<EOF
{"argv": ["$TORCH_PY", "-m", "ipykernel_launcher", "-f", "{connection_file}"], "display_name": "Torch (no GPU)",
 "language": "python", "env": {"CUDA_VISIBLE_DEVICES": ""}}
EOF
cat > "$W/jupyter/kernels/torch-ok/kernel.json" <<EOF
{"argv": ["$TORCH_PY", "-m", "ipykernel_launcher", "-f", "{connection_file}"], "display_name": "Torch",
 "language": "python"}
EOF
# 307: a mark to find a leftover by
printf '#!/bin/sh\nexec sleep 307\n' > "$W/hung/bin/python"; chmod +x "$W/hung/bin/python"
export JUPYTER_PATH="$W/jupyter"
ADD=(--add "$W/venvs/notorch" --add "$W/venvs/ssp" --add "$W/venvs/torch2")
ls -la /bin /usr/bin/python3* >> "$LOG" 2>&1

say "== 1. one torch probe alone (the floor), twice: the first warms the page cache  [t=$(now)s]"
PROBE=$(python3 -c "import cudadoctor.facts.torch as t; print(t.PROBE_SCRIPT)")
log_run "$TORCH_PY" "$PROBE" --no-op; say "  probe 1: ${WALL} s rc=$RC"
log_run "$TORCH_PY" "$PROBE" --no-op; ONE=$WALL; say "  probe 2: ${ONE} s rc=$RC"

say "== 2. cudadoctor envs (6 environments)  [t=$(now)s]"
log_run cudadoctor envs "${ADD[@]}" --timeout 40 --json; cp "$W/last.out" "$W/envs.json"; ENVS_WALL=$WALL
say "  envs --json: rc=$RC wall=${WALL} s"
J="$W/envs.json"
judge "$J" "len(d['environments']) == 6" "6 environments found (symlinks and the plain kernel merged)"
judge "$J" "rows['$TORCH_PY']['verdict'] == 'works' and rows['$TORCH_PY']['torch']['device_count'] >= 1 and 'sm_90' in rows['$TORCH_PY']['archs']" \
  "torch venv: works, sees the GPUs, archs cover sm_90"
judge "$J" "any(f.startswith('kernel torch-ok') for f in rows['$TORCH_PY']['found_as'])" "kernel torch-ok merged into the torch venv row"
judge "$J" "kern['torch-nogpu']['verdict'] == 'no-gpu' and kern['torch-nogpu']['finding']['id'] == 'torch.cuda.hidden-by-visible-devices' and any('kernel.json' in c for c in kern['torch-nogpu']['finding']['fix']['commands'])" \
  "kernel with CUDA_VISIBLE_DEVICES='': no-gpu, torch.cuda.hidden-by-visible-devices, fix edits kernel.json"
judge "$J" "rows['/usr/bin/python3']['verdict'] == 'no-torch' and ('/bin/python3' in rows['/usr/bin/python3']['aliases'] or '/bin/python3' not in rows)" \
  "/usr/bin/python3 no-torch, /bin/python3 merged into it"
judge "$J" "rows['$W/venvs/notorch/bin/python']['verdict'] == 'no-torch'" "venv without torch: no-torch"
judge "$J" "rows['$W/venvs/ssp/bin/python']['verdict'] == 'no-torch' and rows['$W/venvs/ssp/bin/python']['system_site_packages'] is True" \
  "--system-site-packages venv from the torch venv: no-torch (it sees the base Python's packages)"
judge "$J" "rows['$W/venvs/torch2/bin/python']['verdict'] == 'works'" "venv seeing the torch venv through a .pth: works"
judge "$J" "d['exit_code'] == 0 and $RC == 0" "exit 0: an environment can use the GPU"
python3 - "$J" "$ONE" "$ENVS_WALL" <<'EOF' | tee -a "$LOG"
import json, sys
d = json.load(open(sys.argv[1])); one, wall = float(sys.argv[2]), float(sys.argv[3])
es = d["environments"]
for e in es:
    t = e["torch"] or {}
    print(f"  {e['verdict']:<9} {e['kind']:<7} {e['python']:<46} torch {t.get('version', '-'):<14} "
          f"avail {t.get('available', '-')!s:<5} n={t.get('device_count', '-')!s:<2} probe {e['probe']['seconds']} s")
slow = max(e["probe"]["seconds"] or 0 for e in es)
tot = sum(e["probe"]["seconds"] or 0 for e in es)
p = d["probe"]
print(f"  SPEED 6 envs: probes {p['seconds']:.2f} s with {p['workers']} workers; slowest single {slow:.2f} s; "
      f"sum of all {tot:.2f} s (x{tot / max(p['seconds'], 1e-9):.1f} by running at once); whole command {wall:.2f} s; "
      f"one probe alone {one:.2f} s")
ok = p["seconds"] <= 1.3 * slow + 0.5
print(("PASS" if ok else "FAIL") + f" envs probes take about as long as the slowest one ({p['seconds']:.2f} <= 1.3 x {slow:.2f} + 0.5)")
sys.exit(0 if ok else 1)
EOF
[ "${PIPESTATUS[0]}" -eq 0 ] || FAILS=$((FAILS + 1))

say "== 3. the console table  [t=$(now)s]"
log_run cudadoctor envs "${ADD[@]}" --timeout 40; say "  rc=$RC wall=${WALL} s"
head -40 "$W/last.out" | cut -c1-220

say "== 4. a hung interpreter (7th) and --strict  [t=$(now)s]"
log_run cudadoctor envs "${ADD[@]}" --add "$W/hung/bin/python" --timeout 8 --strict --json
cp "$W/last.out" "$W/envs_hung.json"; say "  rc=$RC wall=${WALL} s"
judge "$W/envs_hung.json" "rows['$W/hung/bin/python']['verdict'] == 'hung' and rows['$W/hung/bin/python']['finding']['id'] == 'torch.cuda.probe-hung'" \
  "hung interpreter: verdict hung (torch.cuda.probe-hung)"
python3 -c "import sys; sys.exit(0 if $RC == 1 and $WALL < 30 else 1)" && pass "--strict exits 1 (hung + no-gpu kernel) in ${WALL} s (timeout 8 s)" \
  || fail "--strict rc=$RC wall=$WALL (want 1, < 30 s)"
pgrep -x -f "sleep 307" > /dev/null && fail "the hung interpreter was left running" || pass "no hung interpreter left running"

say "== 5. check --kernel  [t=$(now)s]"
log_run cudadoctor check --kernel torch-nogpu --only torch.cuda --only environment --only device.capability
sed -n '1,12p' "$W/last.out" | cut -c1-220
log_run cudadoctor check --kernel torch-nogpu --only torch.cuda --only environment --json; cp "$W/last.out" "$W/check_kernel.json"
judge "$W/check_kernel.json" "find['torch.cuda.hidden-by-visible-devices']['status'] == 'fail' and d['facts']['jupyter_kernel']['state'] == 'found' and d['target_python'] == '$TORCH_PY'" \
  "check --kernel torch-nogpu: torch.cuda.hidden-by-visible-devices FAIL on the kernel's interpreter"
judge "$W/check_kernel.json" "any('kernel.json' in c for c in find['torch.cuda.hidden-by-visible-devices']['fix']['commands'])" \
  "its fix edits the kernel.json (not the shell)"
log_run cudadoctor check --kernel torch-ok --only torch.cuda --only torch.op
sed -n '1,6p' "$W/last.out" | cut -c1-220
[ "$RC" -eq 0 ] && pass "check --kernel torch-ok: rc 0" || fail "check --kernel torch-ok: rc $RC"

say "== 6. check on a venv without torch points to the one that works  [t=$(now)s]"
log_run cudadoctor check --python "$W/venvs/notorch/bin/python" --only torch.cuda --json
cp "$W/last.out" "$W/pointer.json"; say "  rc=$RC wall=${WALL} s"
judge "$W/pointer.json" "find['torch.cuda.not-installed']['status'] == 'warn' and 'torch with CUDA is in $TORCH_PREFIX' in find['torch.cuda.not-installed']['summary']" \
  "no torch: WARN naming $TORCH_PREFIX"
python3 -c "
import json; d = json.load(open('$W/pointer.json')); f = d['steps'][0]['findings'][0]
print('  ' + f['summary']); print('  fix: ' + f['fix']['text']); [print('    ' + c) for c in f['fix']['commands'][:4]]"

say "== 7. envs --diff torch venv vs the kernel  [t=$(now)s]"
if python3 -c "import sys, time; sys.exit(0 if time.time() - $T0 > 78 else 1)"; then
  fail "no time left for --diff (budget 90 s)"; say "== done in $(now) s: $FAILS failed (full log: $LOG)"; exit 1
fi
log_run cudadoctor envs --diff "$TORCH_PY" torch-nogpu --timeout 40
head -20 "$W/last.out" | cut -c1-200
grep -q "CUDA_VISIBLE_DEVICES" "$W/last.out" && grep -q "is_available" "$W/last.out" \
  && pass "diff names CUDA_VISIBLE_DEVICES and is_available" || fail "diff lacks CUDA_VISIBLE_DEVICES / is_available"

say "== done in $(now) s: $FAILS failed (full log: $LOG)"
[ "$FAILS" -eq 0 ]

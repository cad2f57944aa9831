#!/usr/bin/env bash
# Issue 13 on the GPU machine: the four faults a new user met, reproduced, and cudadoctor's verdicts checked
# against what torch itself does there (layer and severity). Self-checking: PASS/FAIL lines, exit 1 when a
# check failed. About 45 s; every command has a timeout; the full console outputs go to $OUT/i13.log.
#
#   bash benchmarks/gpu/verdicts.sh          (after the lead built .whl/; see _install.sh)
#
# 1. healthy, both GPUs: everything green, exit 0; the op runs a cuDNN conv; `check -v` shows fact timings
# 2. PYTORCH_CUDA_ALLOC_CONF=expandable_segments:maybe: torch.cuda OK, the op FAILs with torch's ValueError
#    verbatim, the probe no longer dies (0.1.0: SIGSEGV, "torch sees CUDA" FAIL)
# 3. LD_LIBRARY_PATH=/lib/x86_64-linux-gnu first (system cuDNN 9.14 ahead of the wheel's 9.19): libraries and
#    matrix.cudnn FAIL with torch's RuntimeError; plain torch shows where that error comes (LSTM, conv)
# 4. another process holding all but 256 MiB of GPU 0 (CUDA_VISIBLE_DEVICES=0): the op FAILs naming it,
#    container WARNs; killed after
# 5. a broken nvcc first on PATH (answers --version, cannot compile), CUDA_HOME unset, empty probe cache:
#    a toolkit (build) failure, not a launch failure
# Compute mode EXCLUSIVE_PROCESS is not tried (the machine's settings are never changed): tests use fakes.
set -u
. "$(dirname "$0")/_install.sh"
LOG="$OUT/i13.log"
: > "$LOG"
W=$(mktemp -d /tmp/i13v.XXXX)
FAILS=0
HOG=""
T0=$(date +%s)
say() { echo "$*" | tee -a "$LOG"; }
fail() { say "FAIL $*"; FAILS=$((FAILS + 1)); }
cleanup() { [ -n "$HOG" ] && kill "$HOG" 2>/dev/null; rm -rf "$W"; }
trap cleanup EXIT
CD() { timeout 90 cudadoctor "$@"; }

say "== issue 13 verdicts · cudadoctor $(CD --version 2>&1) · torch python $TORCH_PY · log $LOG"
if ! timeout 15 nvidia-smi -L > "$W/smi_L.txt" 2>&1; then
  if [ "${VERDICTS_ALLOW_NO_GPU:-0}" = 1 ]; then say "SKIP no GPU here: nvidia-smi -L failed ($(head -1 "$W/smi_L.txt"))"
  else fail "no GPU visible: $(head -1 "$W/smi_L.txt")"; fi
  GPU=0
else
  GPU=1
  sed 's/^/  /' "$W/smi_L.txt" | tee -a "$LOG"
fi

cat > "$W/judge.py" <<'PYEOF'
import json, sys
case, path = sys.argv[1], sys.argv[2]
try:
    r = json.load(open(path))
except (OSError, ValueError) as e:
    print(f"FAIL {case}: no JSON report ({e})")
    sys.exit(1)
steps = {s["id"]: s for s in r["steps"]}
every = [f for s in r["steps"] for f in s["findings"]]
finds = {f["id"]: f for f in every}
tv = (r["facts"].get("torch") or {}).get("value") or {}
cud = tv.get("cudnn") or {}
fails = 0


def check(ok, what):
    global fails
    print(("PASS " if ok else "FAIL ") + f"{case}: {what}")
    fails += not ok


def st(i):
    return steps.get(i, {}).get("status")


def summ(i):
    return steps.get(i, {}).get("summary", "")


if case == "healthy":
    bad = [f"{f['id']}={f['status']}" for f in every if f["status"] in ("warn", "fail", "error")]
    check(r["exit_code"] == 0 and not bad, f"exit {r['exit_code']}, warnings/failures: {', '.join(bad) or 'none'}")
    check(summ("device.capability").startswith("2× NVIDIA H200"), f"identical GPUs said once: {summ('device.capability')}")
    check("3×3 conv (cuDNN)" in summ("torch.op"), f"the op ran the cuDNN conv: {summ('torch.op')}")
    check(cud.get("compiled") and cud.get("compiled") == cud.get("runtime"),
          f"cuDNN compiled {cud.get('compiled')} = runtime {cud.get('runtime')} (torch's own word)")
    mem = [f["summary"] for f in every if f["id"] == "health.gpu-memory"]
    check(len(mem) == 2, f"memory of both GPUs: {' | '.join(mem)}")
elif case == "alloc":
    check(st("torch.cuda") == "ok" and "2 devices" in summ("torch.cuda"), f"torch.cuda ok: {summ('torch.cuda')}")
    check(st("device.capability") == "ok", f"device.capability ok: {summ('device.capability')}")
    f = finds.get("torch.op.first-use-failed") or {}
    want = "ValueError: Expected 'True' or 'False' at index 2 in ConfigTokenizer but got 'maybe'"
    check(f.get("status") == "fail", f"torch.op FAIL torch.op.first-use-failed: {f.get('summary', summ('torch.op'))}")
    check((f.get("evidence") or {}).get("torch.cuda.init()") == want, "torch's exception verbatim in the evidence")
    check(not tv.get("stopped") and r["facts"]["torch"]["state"] == "found", "the probe did not die (0.1.0: SIGSEGV)")
    check((finds.get("env.alloc-conf") or {}).get("status") == "fail", "environment names the variable")
    check(r["exit_code"] == 1, f"exit {r['exit_code']}")
elif case == "cudnn":
    f = finds.get("libs.shadows-older") or {}
    check(f.get("status") == "fail" and "cuDNN version incompatibility" in f.get("summary", ""),
          f"libraries FAIL libs.shadows-older naming torch's error: {f.get('summary', summ('libraries'))[:160]}")
    check((cud.get("compiled"), cud.get("runtime")) == ("9.19.0", "9.14.0"),
          f"torch's compiled/runtime cuDNN: {cud.get('compiled')}/{cud.get('runtime')}")
    check("PyTorch was compiled  against (9, 19, 0) but found runtime version (9, 14, 0)" in cud.get("version_error", ""),
          "torch.backends.cudnn.version()'s exception kept verbatim")
    m = finds.get("matrix.cudnn.older-than-torch") or {}
    check(m.get("status") == "fail", f"matrix.cudnn FAIL, not 'no cuDNN': {summ('matrix.cudnn')[:120]}")
    conv = tv.get("conv") or {}
    print(f"INFO cudnn: torch.op {st('torch.op')}: {summ('torch.op')[:120]} (conv ok={conv.get('ok')}: "
          f"{(conv.get('error') or '').splitlines()[0] if conv.get('error') else 'ran'})")
    check(r["exit_code"] == 1, f"exit {r['exit_code']}")
elif case == "oom":
    hog = sys.argv[3]
    f = finds.get("torch.op.out-of-memory") or {}
    check(f.get("status") == "fail" and f"PID {hog} python3 (root" in f.get("summary", ""),
          f"torch.op FAIL naming the holder: {f.get('summary', summ('torch.op'))[:170]}")
    cmds = (f.get("fix") or {}).get("commands") or []
    check(any(c.startswith(f"kill {hog}") for c in cmds) and any(c.startswith("CUDA_VISIBLE_DEVICES=1 ") for c in cmds),
          "fix: kill PID / another GPU through CUDA_VISIBLE_DEVICES / wait")
    w = [x for x in every if x["id"] == "health.gpu-memory-full"]
    check(bool(w) and w[0]["status"] == "warn" and f"PID {hog}" in w[0]["summary"],
          f"container WARN: {w[0]['summary'][:150] if w else summ('container')}")
    gp = (r["facts"].get("gpu_processes") or {}).get("value") or {}
    p = [x for x in gp.get("processes", []) if str(x.get("pid")) == hog]
    check(bool(p) and p[0].get("visible") and p[0].get("uses_gpu") is True,
          "the holder seen in this PID namespace, mapping /dev/nvidia*: "
          + str({k: p[0].get(k) for k in ("pid", "name", "user", "used_mib", "uses_gpu")} if p else None))
    check(st("torch.cuda") == "ok", f"torch.cuda ok: {summ('torch.cuda')}")
elif case == "nvcc":
    bad = sys.argv[3]
    f = finds.get("probe.launch.build-failed") or {}
    check(f.get("status") == "fail" and bad in f.get("summary", ""),
          f"a build failure at the toolkit layer: {f.get('summary', summ('probe.launch'))[:150]}")
    check("probe.launch.native-failed" not in finds, "not reported as a launch failure")
    pl = (r["facts"].get("probe_launch") or {}).get("value") or {}
    print(f"INFO nvcc: launch built with {pl.get('compiler') or 'nothing'}; probe.launch: {summ('probe.launch')[:120]}")
    if (pl.get("compiler") or "").startswith("nvrtc"):
        check("probe.launch.ok" in finds, "the launch still verified with NVRTC builds")
sys.exit(min(fails, 100))
PYEOF

# run_case NAME ENV... -- CHECK-ARGS...: `check --json` under ENV, then the console (from the saved facts)
run_case() {
  local name=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local t0; t0=$(date +%s.%N)
  env "${envs[@]}" timeout 120 cudadoctor check --json --python "$TORCH_PY" "$@" > "$W/$name.json" 2> "$W/$name.err"
  local rc=$?
  local el; el=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
  say "-- $name: check exit $rc in $el s ($(echo "${envs[*]}" | cut -c1-120))"
  grep -q Traceback "$W/$name.err" && fail "$name: traceback: $(tail -2 "$W/$name.err")"
  CD check --facts "$W/$name.json" "$@" > "$W/$name.txt" 2>&1
  cat "$W/$name.txt" >> "$LOG"
  # stdout: the step lines and the one-line problems (details and fixes are in the log); healthy: see -v below
  [ "$name" = healthy ] || grep -E '^ ?[0-9]+ (✓|!|✗|-|‼|ok|X|!!) |^(✗|!|‼|X|!!) [0-9]' "$W/$name.txt" | cut -c1-230
  cp "$W/$name.json" "$OUT/i13_$name.json" 2>/dev/null
}
judge() { python3 "$W/judge.py" "$@" | tee -a "$LOG"; [ "${PIPESTATUS[0]}" = 0 ] || FAILS=$((FAILS + 1)); }

if [ "$GPU" = 1 ]; then
  say "=== 1. healthy, both GPUs"
  run_case healthy CUDADOCTOR_CACHE_DIR="$W/cache1" --
  judge healthy "$W/healthy.json"
  CD check --facts "$W/healthy.json" -v > "$W/healthy_v.txt" 2>&1
  cat "$W/healthy_v.txt" >> "$LOG"
  say "check -v (per-step fact timings):"
  grep -E '^ ?[0-9]+ (✓|!|✗|-|‼|ok|X|!!) ' "$W/healthy_v.txt" | sed -E 's/^( ?[0-9]+ \S+ .{34}).*(\[[^]]*\])$/\1 \2/' | tee -a "$LOG"

  say "=== 2. PYTORCH_CUDA_ALLOC_CONF=expandable_segments:maybe"
  run_case alloc PYTORCH_CUDA_ALLOC_CONF=expandable_segments:maybe -- --only driver --only torch.cuda \
    --only device.capability --only torch.op --only environment
  judge alloc "$W/alloc.json"

  say "=== 3. the system cuDNN 9.14 first on LD_LIBRARY_PATH"
  if ls /lib/x86_64-linux-gnu/libcudnn_graph.so.9.* > /dev/null 2>&1; then
    run_case cudnn LD_LIBRARY_PATH="/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}" -- --only torch.cuda --only torch.op \
      --only libraries --only matrix.cudnn
    judge cudnn "$W/cudnn.json"
    say "what plain torch meets there (a fresh process: conv first, then an LSTM):"
    LD_LIBRARY_PATH="/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}" timeout 60 "$TORCH_PY" - > "$W/plain.txt" 2>&1 <<'PYEOF'
import torch
def t(label, f):
    try:
        f()
        print(f"  {label}: ran")
    except Exception as e:
        print(f"  {label}: RAISES {type(e).__name__}: {str(e).splitlines()[0][:150]}")
t("conv2d", lambda: torch.nn.functional.conv2d(torch.randn(1, 3, 8, 8, device="cuda"),
                                              torch.randn(4, 3, 3, 3, device="cuda")).sum().item())
t("nn.LSTM on the GPU", lambda: torch.nn.LSTM(4, 4).cuda()(torch.randn(2, 1, 4, device="cuda")))
PYEOF
    tee -a "$LOG" < "$W/plain.txt"
    grep -q "LSTM on the GPU: RAISES RuntimeError: cuDNN version incompatibility" "$W/plain.txt" \
      && say "PASS cudnn: torch raises that error for cuDNN RNNs, as the finding says" \
      || fail "cudnn: plain torch's LSTM did not raise the incompatibility (the finding's detail says it does)"
  else
    say "SKIP cudnn: no system cuDNN in /lib/x86_64-linux-gnu"
  fi

  say "=== 4. another process holds GPU 0"
  cat > "$W/hog.py" <<'PYEOF'
import os, sys, time, torch
free, total = torch.cuda.mem_get_info(0)
x = torch.empty(int(free - (256 << 20)), dtype=torch.uint8, device="cuda:0")
print("HOG pid", os.getpid(), "holds", x.numel() >> 20, "MiB of", total >> 20, flush=True)
time.sleep(float(sys.argv[1]))
PYEOF
  CUDA_VISIBLE_DEVICES=0 timeout 45 "$TORCH_PY" "$W/hog.py" 40 > "$W/hog.txt" 2>&1 &
  HOG=$!
  for _ in $(seq 1 60); do grep -q "HOG pid" "$W/hog.txt" && break; sleep 0.5; done
  HOGPID=$(sed -n 's/^HOG pid \([0-9]*\) .*/\1/p' "$W/hog.txt")
  if [ -z "$HOGPID" ]; then
    fail "oom: the memory hog did not start: $(tail -2 "$W/hog.txt")"
  else
    say "$(cat "$W/hog.txt")"
    run_case oom CUDA_VISIBLE_DEVICES=0 -- --only torch.cuda --only torch.op --only container
    grep -E '^  fix:|^       (kill|CUDA_VISIBLE|nvidia-smi)' "$W/oom.txt" | head -4 | cut -c1-200
    judge oom "$W/oom.json" "$HOGPID"
  fi
  kill "$HOG" 2>/dev/null; wait "$HOG" 2>/dev/null; HOG=""
fi

say "=== 5. a broken nvcc first on PATH, CUDA_HOME unset, empty cache"
mkdir -p "$W/badnvcc"
timeout 20 /usr/local/cuda/bin/nvcc --version > "$W/badnvcc/banner.txt" 2>&1 \
  || printf 'nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88\n' > "$W/badnvcc/banner.txt"
printf '#!/bin/sh\ncat "%s"\n[ "$1" = --version ] && exit 0\nexit 1\n' "$W/badnvcc/banner.txt" > "$W/badnvcc/nvcc"
chmod +x "$W/badnvcc/nvcc"
run_case nvcc -u CUDA_HOME -u CUDA_PATH PATH="$W/badnvcc:$PATH" CUDADOCTOR_CACHE_DIR="$W/cache5" -- \
  --only toolkit.nvcc --only probe.launch
if [ "$GPU" = 1 ]; then judge nvcc "$W/nvcc.json" "$W/badnvcc/nvcc"; fi
env -u CUDA_HOME PATH="$W/badnvcc:$PATH" CUDADOCTOR_CACHE_DIR="$W/cache6" timeout 90 cudadoctor probe --quick \
  > "$W/probe.txt" 2>&1
say "cudadoctor probe --quick (exit $?):"
head -8 "$W/probe.txt" | cut -c1-200 | tee -a "$LOG"

say "== $FAILS failed check(s) in $(( $(date +%s) - T0 )) s · full outputs: $LOG"
[ "$FAILS" = 0 ]

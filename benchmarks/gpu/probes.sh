#!/usr/bin/env bash
# GPU-machine verification for the probes (issue 4). Self-checking; about 1-2 minutes.
#   1. cudadoctor probe (text) and --json: every build's driver-API and runtime-API result matches the
#      rule (native runs, PTX-older JITs, SASS-foreign and PTX-newer give "no kernel image", sm_90a runs);
#      naive/tiled GEMM and fused attention pass their CPU checks; times and GFLOP/s printed.
#   2. cudadoctor probe --quick --compiler nvrtc: the NVRTC path (libnvrtc from the toolkit or the wheel).
#   3. cudadoctor archs libtorch_cuda.so --json vs `cuobjdump --list-elf` per-arch counts (and --list-ptx).
#   4. a plain .so built for sm_80 only in a temporary site-packages-like folder: cudadoctor scan names it
#      (exit 1); cudadoctor scan of the torch interpreter's own site-packages (timed).
#   5. cudadoctor check --only probe.scan --only probe.launch: both steps' findings.
# Usage: bash benchmarks/gpu/probes.sh [python-with-torch]   (default: python3 on PATH)
set -u
PY=${1:-$(command -v python3)}
CD=$(command -v cudadoctor || true)
[ -n "$CD" ] || { echo "FAIL cudadoctor not on PATH"; exit 2; }
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUOBJDUMP=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export CUDADOCTOR_CACHE_DIR="$TMP/cache"   # a cold cache: the timings include the builds
fails=0
ok() { echo "PASS $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
t() { local s; s=$(now_ms); "$@"; local rc=$?; echo "  ($(( $(now_ms) - s )) ms, exit $rc)"; return $rc; }

echo "== 1. cudadoctor probe"
t "$CD" probe; rc=$?
[ $rc -eq 0 ] && ok "probe exit 0" || bad "probe exit $rc"
"$CD" probe --json > "$TMP/probe.json"; echo "  probe --json exit $? (cached builds)"
"$PY" - "$TMP/probe.json" <<'EOF' || fails=$((fails + 1))
import json, sys
d = json.load(open(sys.argv[1]))
rows = {b["name"]: b for b in d["builds"]}
want = {"native": "native", "ptx-older": "ptx-jit", "sass-foreign": "no-kernel-image",
        "ptx-newer": "no-kernel-image", "arch-specific": "native"}
bad = 0
for n, w in want.items():
    r = rows.get(n)
    if r is None:
        print(f"FAIL probe --json: no {n} build"); bad += 1; continue
    line = (f"{n:<14} {' '.join(r['sass'] + r['ptx']):<12} predicted={r['predicted']:<16} "
            f"driver={r['driver_api']:<16} runtime={r['runtime_api'] or '-':<16} arch={r['cuda_arch']}")
    good = r["predicted"] == w and r["driver_api"] == w and r["runtime_api"] in (w, "") and r["match"]
    print(("PASS " if good else "FAIL ") + line + ("" if good else f"  {r['driver_error']} {r['runtime_error']}"))
    bad += not good
for k in d["kernels"]:
    if "ms" in k:
        print(f"{'PASS' if k['ok'] else 'FAIL'} {k['name']:<16} {k['size']:<26} {k['ms']:.3f} ms "
              f"{k['gflops']:.0f} GFLOP/s err {k['max_rel_err']:.1e} <= {k['bound']:.0e}")
    else:
        print(f"FAIL {k['name']} {k.get('error')}")
    bad += not k.get("ok")
print(f"  device {d['device'].get('name')} cc {d['device'].get('cc')} driver CUDA {d['device'].get('driver_cuda')}; "
      f"compiler {d['compiler']}; mismatches {d['mismatches']}")
sys.exit(1 if bad or d["mismatches"] or len(d["kernels"]) < 3 else 0)
EOF

echo "== 2. NVRTC builds"
"$CD" probe --quick --compiler nvrtc --python "$PY" --json > "$TMP/nvrtc.json"; rc=$?
"$PY" - "$TMP/nvrtc.json" "$rc" <<'EOF' || fails=$((fails + 1))
import json, sys
d = json.load(open(sys.argv[1]))
rows = {b["name"]: b for b in d["builds"]}
good = (d["compiler"].startswith("nvrtc") and rows.get("native", {}).get("driver_api") == "native"
        and rows.get("sass-foreign", {}).get("driver_api") == "no-kernel-image" and sys.argv[2] == "0")
print(("PASS" if good else "FAIL") + f" nvrtc: {d['compiler']} ({d.get('compiler_path')}) "
      + "; ".join(f"{n}={r['driver_api']}" for n, r in rows.items()) + (f" {d['compiler_error']}" if d['compiler_error'] else ""))
sys.exit(0 if good else 1)
EOF

echo "== 3. archs vs cuobjdump on torch's libraries"
TLIB=$("$PY" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
for lib in libtorch_cuda.so libc10_cuda.so; do
  f="$TLIB/$lib"
  [ -f "$f" ] || { echo "  skip $lib (absent)"; continue; }
  s=$(now_ms)
  "$CD" archs "$f" --json > "$TMP/archs.json"; rc=$?
  el="$(( $(now_ms) - s )) ms"
  "$CUOBJDUMP" --list-elf "$f" 2>/dev/null | grep -o 'sm_[0-9]*[af]\?\.cubin' | sed 's/\.cubin//' | sort | uniq -c > "$TMP/elf.txt"
  "$CUOBJDUMP" --list-ptx "$f" 2>/dev/null | grep -o 'sm_[0-9]*[af]\?\.ptx' | sed 's/\.ptx//; s/sm_/compute_/' | sort | uniq -c > "$TMP/ptx.txt"
  "$PY" - "$TMP/archs.json" "$TMP/elf.txt" "$TMP/ptx.txt" "$lib" "$rc" "$el" "$HERE/../../tests/data/h200/torch_cuobjdump_elf.txt" <<'EOF' || fails=$((fails + 1))
import json, sys
d = json.load(open(sys.argv[1]))["files"][0]
def counts(p):
    out = {}
    for line in open(p):
        n, a = line.split()
        out[a] = int(n)
    return out
elf, ptx = counts(sys.argv[2]), counts(sys.argv[3])
good = d["sass_counts"] == elf and d["ptx_counts"] == ptx and sys.argv[5] == "0"
print(("PASS" if good else "FAIL") + f" {sys.argv[4]}: archs ({sys.argv[6]}) verdict={d['verdict']} "
      f"sass={d['sass_counts']} ptx={d['ptx_counts']}")
if not good:
    print(f"  cuobjdump: elf={elf} ptx={ptx}")
if sys.argv[4] == "libtorch_cuda.so":
    try:
        captured = counts(sys.argv[7])
        print(f"  {'same as' if captured == d['sass_counts'] else 'differs from'} the captured H200 counts "
              f"(torch 2.11.0+cu130): {captured}")
    except OSError:
        pass
sys.exit(0 if good else 1)
EOF
done

echo "== 4. scan: an sm_80-only extension, then the torch interpreter's site-packages"
mkdir -p "$TMP/site-packages/sm80ext"
cat > "$TMP/k.cu" <<'EOF'
extern "C" __global__ void only80(float *x) { x[threadIdx.x] *= 2.0f; }
EOF
"$NVCC" -shared -Xcompiler -fPIC -gencode arch=compute_80,code=sm_80 -o "$TMP/site-packages/sm80ext/_C.so" "$TMP/k.cu" \
  || bad "nvcc could not build the sm_80 .so"
"$CD" scan --path "$TMP/site-packages" --json > "$TMP/scan.json"; rc=$?
"$CD" scan --path "$TMP/site-packages" | sed 's/^/  /'
"$PY" - "$TMP/scan.json" "$rc" <<'EOF' || fails=$((fails + 1))
import json, sys
d = json.load(open(sys.argv[1]))
good = sys.argv[2] == "1" and any(p.endswith("sm80ext/_C.so") for p in d["cannot_run"])
print(("PASS" if good else "FAIL") + f" scan names the sm_80-only extension (exit {sys.argv[2]}, cc {d['cc']})")
sys.exit(0 if good else 1)
EOF
"$CD" scan --python "$PY" --json > "$TMP/scan2.json"; rc=$?
"$PY" - "$TMP/scan2.json" "$rc" <<'EOF' || fails=$((fails + 1))
import json, sys
d = json.load(open(sys.argv[1]))
n = len([f for f in d["files"] if not f["error"]])
good = sys.argv[2] in ("0", "1") and d["seconds"] < 10 and n > 0
print(("PASS" if good else "FAIL") + f" scan of {d['python']}: {d['candidates']} candidates, {n} with CUDA code, "
      f"{d['seconds']} s, exit {sys.argv[2]}, cannot run: {d['cannot_run'][:5]}")
for f in d["files"]:
    if f["verdict"] not in ("native",):
        print(f"  {f['verdict']:<16} {f['path']} sass={f['sass']} ptx={f['ptx']}")
sys.exit(0 if good else 1)
EOF

echo "== 5. check steps"
s=$(now_ms)
"$CD" check --python "$PY" --only probe.scan --only probe.launch --json > "$TMP/check.json"; rc=$?
el="$(( $(now_ms) - s )) ms"
"$PY" - "$TMP/check.json" "$el" <<'EOF' || fails=$((fails + 1))
import json, sys
d = json.load(open(sys.argv[1]))
st = {s["id"]: s for s in d["steps"]}
good = st.get("probe.launch", {}).get("status") == "ok" and "probe.scan" in st
for s in d["steps"]:
    print(f"  {s['id']}: {s['status']} - {s['summary']}")
    for f in s.get("findings", []):
        print(f"    {f['id']} {f['status']}: {f['summary'][:160]}")
print(("PASS" if good else "FAIL") + f" check probe steps ({sys.argv[2]})")
sys.exit(0 if good else 1)
EOF

echo "== summary: $fails failure(s)"
exit $((fails > 0))

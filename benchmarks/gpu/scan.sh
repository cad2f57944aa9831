#!/usr/bin/env bash
# GPU-machine verification for issue 12 (scan and archs, module by module, everywhere the interpreter
# loads from). Self-checking; about 90 s. Every verdict is compared with what the real import/launch does.
#   1. A real torch extension for sm_80 (setup.py + CUDAExtension, TORCH_CUDA_ARCH_LIST=8.0) installed
#      editable with $TORCH_PY, and the same source through torch.utils.cpp_extension.load_inline into a
#      fresh TORCH_EXTENSIONS_DIR (both built at once). Import + launch each: expect "no kernel image".
#   2. Plain nvcc .so files: sm_80 and compute_80 PTX-only in a PYTHONPATH folder, sm_80 in an
#      LD_LIBRARY_PATH folder; launched through ctypes.
#   3. cudadoctor scan --python $TORCH_PY --json (with those placements) and check --only probe.scan:
#      each binary's origin, owner, verdict and fix against the launches of 1-2.
#   4. A .so of two modules (a.cu sm_90 + b.cu sm_80) and -rdc executables (4 -gencode choices):
#      cudadoctor archs verdict (and the failing module's kernel) vs the real launches.
#   5. cuobjdump --list-elf/--list-ptx vs cudadoctor archs --json for every CUDA binary in torch's
#      site-packages: per-file agreement summary (family suffix sm_XYf counted apart).
#   6. benchmarks/scan_speed.py: torch's site-packages + three editable trees of 50,000 files (timed;
#      started first, in the background).
# Usage: bash benchmarks/gpu/scan.sh   (after _install.sh: cudadoctor on PATH, TORCH_PY, OUT)
set -u
. "$(dirname "$0")/_install.sh"
LOG="$OUT/i12.log"; : > "$LOG"
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUOBJDUMP=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
export CUDADOCTOR_CACHE_DIR="$TMP/cdcache"
fails=0
say() { echo "$*" | tee -a "$LOG"; }
ok() { say "PASS $*"; }
bad() { say "FAIL $*"; fails=$((fails + 1)); }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
T0=$(now_ms)
say "== issue 12 scan.sh on $(nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader | head -1); torch python $TORCH_PY"

# 6 runs in the background from the start (tree creation is I/O; the scan itself is timed inside)
timeout 110 python3 "$REPO/benchmarks/scan_speed.py" --python "$TORCH_PY" --runs 3 --json > "$TMP/bench.json" 2>>"$LOG" &
BENCH_PID=$!

# ---------------------------------------------------------------- 1. torch extensions for sm_80
EXT="$TMP/src/sm80ext"; mkdir -p "$EXT/sm80ext"; : > "$EXT/sm80ext/__init__.py"
cat > "$EXT/sm80ext/k.cu" <<'EOF'
#include <torch/extension.h>
__global__ void fill(float *o, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) o[i] = 80.f; }
std::string run(torch::Tensor x) {
  fill<<<1, 32>>>(x.data_ptr<float>(), (int)x.numel());
  cudaError_t e = cudaGetLastError(); if (e == cudaSuccess) e = cudaDeviceSynchronize();
  return std::to_string((int)e) + " " + cudaGetErrorString(e);
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run); }
EOF
# a pyproject.toml makes pip build the editable install through PEP 660 (setuptools' build_editable, the .so
# built in place in the source tree); without one, pip falls back to `setup.py develop`, which newer
# setuptools re-runs as a pip install with build isolation: it then needs the network (seen 2026-11-30)
printf '[build-system]\nrequires = ["setuptools>=64", "torch"]\nbuild-backend = "setuptools.build_meta"\n' \
    > "$EXT/pyproject.toml"
cat > "$EXT/setup.py" <<'EOF'
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension
setup(name="sm80ext", version="0.1", packages=["sm80ext"],
      ext_modules=[CUDAExtension("sm80ext._C", ["sm80ext/k.cu"])], cmdclass={"build_ext": BuildExtension})
EOF
JITDIR="$TMP/torch_extensions"; mkdir -p "$JITDIR"
VENV="$TMP/venv"
s=$(now_ms)
# the editable install goes into a fresh venv that sees the torch interpreter's packages through a .pth line,
# so the torch venv itself stays untouched; pip and ninja come from the torch venv
"$TORCH_PY" -m venv --without-pip "$VENV" >>"$LOG" 2>&1
VPY="$VENV/bin/python"
TSITE=$("$TORCH_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
VSITE=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$TSITE" > "$VSITE/_torch_site.pth"
export PATH="$(dirname "$TORCH_PY"):$PATH"
( cd "$EXT" && TORCH_CUDA_ARCH_LIST=8.0 MAX_JOBS=8 timeout 110 "$TORCH_PY" -m pip --python "$VPY" install \
    --no-build-isolation --no-deps --no-index -e . ) >"$TMP/pip.log" 2>&1 &
PIP_PID=$!
TORCH_EXTENSIONS_DIR="$JITDIR" TORCH_CUDA_ARCH_LIST=8.0 MAX_JOBS=8 timeout 110 "$TORCH_PY" - "$EXT/sm80ext/k.cu" \
    >"$TMP/jit.log" 2>&1 <<'EOF' &
import sys, torch
from torch.utils.cpp_extension import load_inline
src = open(sys.argv[1]).read().replace("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"run\", &run); }", "")
m = load_inline("sm80jit", cpp_sources="std::string run(torch::Tensor x);", cuda_sources=src, functions=["run"])
x = torch.zeros(32, device="cuda")
print("JIT-LAUNCH", m.run(x))
EOF
JIT_PID=$!
wait $PIP_PID; pip_rc=$?
wait $JIT_PID; jit_rc=$?
cat "$TMP/pip.log" >> "$LOG"; cat "$TMP/jit.log" >> "$LOG"
say "  builds: editable pip install exit $pip_rc, load_inline exit $jit_rc, $(( $(now_ms) - s )) ms (in parallel)"
[ $pip_rc -eq 0 ] && ok "editable install of sm80ext (TORCH_CUDA_ARCH_LIST=8.0)" || { bad "editable install"; tail -5 "$TMP/pip.log"; }
EDIT_LAUNCH=$(cd /tmp && timeout 60 "$VPY" -c 'import torch, sm80ext._C as m; print("EDIT-LAUNCH", m.run(torch.zeros(32, device="cuda")))' 2>&1 | tail -1)
JIT_LAUNCH=$(grep JIT-LAUNCH "$TMP/jit.log" | tail -1)
say "  real launch, editable:  $EDIT_LAUNCH"
say "  real launch, JIT cache: ${JIT_LAUNCH:-$(tail -2 "$TMP/jit.log" | head -c 300)}"
case "$EDIT_LAUNCH" in *"EDIT-LAUNCH 209 "*) ok "editable sm80ext launch fails with 209 (no kernel image)";; *) bad "editable launch: $EDIT_LAUNCH";; esac
case "$JIT_LAUNCH" in *"JIT-LAUNCH 209 "*) ok "load_inline sm80jit launch fails with 209";; *) bad "JIT launch: $JIT_LAUNCH";; esac

# ---------------------------------------------------------------- 2. plain nvcc .so on PYTHONPATH / LD_LIBRARY_PATH
PP="$TMP/pp"; LIBD="$TMP/lib"; mkdir -p "$PP/mykern" "$LIBD"
cat > "$TMP/k.cu" <<'EOF'
extern "C" __global__ void kk(int *o) { o[0] = 80; }
extern "C" int run(void) { int *d; cudaMalloc(&d, 4); kk<<<1, 1>>>(d); cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaDeviceSynchronize(); return (int)e; }
EOF
so() { timeout 60 "$NVCC" -shared -Xcompiler -fPIC -gencode "$1" -o "$2" "$TMP/k.cu" >>"$LOG" 2>&1; }
so arch=compute_80,code=sm_80 "$PP/mykern/_old.so" & so arch=compute_80,code=compute_80 "$PP/ptxonly.so" &
so arch=compute_80,code=sm_80 "$LIBD/libmine.so" & wait
launch() { timeout 60 "$TORCH_PY" -c 'import ctypes, sys; print(ctypes.CDLL(sys.argv[1]).run())' "$1" 2>&1 | tail -1; }
L_OLD=$(launch "$PP/mykern/_old.so"); L_PTX=$(launch "$PP/ptxonly.so"); L_LIB=$(launch "$LIBD/libmine.so")
say "  real launches (cudaError): PYTHONPATH sm_80 .so=$L_OLD, PYTHONPATH compute_80 PTX-only .so=$L_PTX, LD_LIBRARY_PATH sm_80 .so=$L_LIB"

# ---------------------------------------------------------------- 3. cudadoctor scan and check with all placements
export TORCH_EXTENSIONS_DIR="$JITDIR"
s=$(now_ms)
PYTHONPATH="$PYTHONPATH:$PP" LD_LIBRARY_PATH="$LIBD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout 120 cudadoctor scan \
    --python "$VPY" --json > "$TMP/scan.json" 2>>"$LOG"; scan_rc=$?
say "  cudadoctor scan --python $VPY --json: exit $scan_rc, $(( $(now_ms) - s )) ms"
cat "$TMP/scan.json" >> "$LOG"
python3 - "$TMP/scan.json" "$EDIT_LAUNCH" "${JIT_LAUNCH:-}" "$L_OLD" "$L_PTX" "$L_LIB" <<'EOF' | tee -a "$LOG" || fails=$((fails + 1))
import json, os, re, sys
d = json.load(open(sys.argv[1]))
edit, jit, old, ptx, lib = sys.argv[2:7]
by = {}
for f in d["files"]:
    by.setdefault(os.path.basename(f["path"]), f)
print("  roots: " + ", ".join(f"{r['origin']}={r['files']}" for r in d["roots"]) + f"; {len(d['files'])} CUDA binaries, "
      f"{d['seconds']} s, cut={[r['path'] for r in d['roots'] if r['cut']]}")
def real(launch):  # the real launch's cudaError: 0 runs, 209 no kernel image
    m = re.search(r"(?:LAUNCH )?(-?\d+)", launch)
    return {"0": "runs", "209": "no-kernel-image"}.get(m.group(1) if m else "", f"?{launch[:60]}")
want = [  # (file name, origin, real outcome)
    (next((n for n in by if n.startswith("_C.") and by[n]["origin"] == "editable"), "_C.so"), "editable", real(edit)),
    ("sm80jit.so", "jit-cache", real(jit)),
    ("_old.so", "PYTHONPATH", real(old)), ("ptxonly.so", "PYTHONPATH", real(ptx)),
    ("libmine.so", "LD_LIBRARY_PATH", real(lib))]
bad = 0
for name, origin, outcome in want:
    f = by.get(name)
    if f is None:
        print(f"FAIL {name}: not found by scan (real launch: {outcome})"); bad += 1; continue
    verdict = str(f["verdict"])
    agree = (outcome == "runs") == (verdict in ("native", "ptx-jit")) and outcome in ("runs", "no-kernel-image")
    good = agree and f["origin"] == origin
    print(f"{'PASS' if good else 'FAIL'} {origin:<15} {name:<36} real={outcome:<16} cudadoctor={verdict:<16} "
          f"dist={f['distribution']} {f['version'] or ''} module={f['module']}")
    bad += not good
e = next((f for f in d["files"] if f["origin"] == "editable"), {})
print(f"  editable owner: {e.get('distribution')} {e.get('version')} ({e.get('install')}), source {e.get('source')}")
sys.exit(1 if bad else 0)
EOF
PYTHONPATH="$PYTHONPATH:$PP" LD_LIBRARY_PATH="$LIBD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout 120 cudadoctor scan \
    --python "$VPY" > "$TMP/scan.txt" 2>&1
say "  --- cudadoctor scan (console)"; head -25 "$TMP/scan.txt" | tee -a "$LOG"
PYTHONPATH="$PYTHONPATH:$PP" LD_LIBRARY_PATH="$LIBD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout 120 cudadoctor check \
    --python "$VPY" --only probe.scan --json > "$TMP/check.json" 2>>"$LOG"; check_rc=$?
PYTHONPATH="$PYTHONPATH:$PP" LD_LIBRARY_PATH="$LIBD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" COLUMNS=160 timeout 120 \
    cudadoctor check --python "$VPY" --only probe.scan > "$TMP/check.txt" 2>&1
say "  --- cudadoctor check --only probe.scan (console; --json exit $check_rc)"
grep -vE '^\s*$' "$TMP/check.txt" | head -35 | tee -a "$LOG"
cat "$TMP/check.json" >> "$LOG"
python3 - "$TMP/check.json" "$check_rc" "$EXT" "$JITDIR/sm80jit" <<'EOF' | tee -a "$LOG" || fails=$((fails + 1))
import json, sys
d = json.load(open(sys.argv[1]))
rc, ext, jitf = sys.argv[2:5]
fs = [f for s in d["steps"] for f in s["findings"] if f["id"].startswith("probe.scan")]
cmds = [c for f in fs for c in ((f.get("fix") or {}).get("commands") or [])]
ids = sorted({(f["id"], f["status"]) for f in fs})
good = (rc == "1" and any(c.startswith(f"cd {ext} && TORCH_CUDA_ARCH_LIST=\"9.0\"") for c in cmds)
        and f"rm -rf {jitf}" in cmds and ("probe.scan.ptx-jit-only", "warn") in ids)
print(("PASS" if good else "FAIL") + f" check probe.scan (exit {rc}): {ids}; editable rebuild and JIT-folder removal "
      f"{'named' if good else 'MISSING'}")
sys.exit(0 if good else 1)
EOF
unset TORCH_EXTENSIONS_DIR

# ---------------------------------------------------------------- 4. modules: two-module .so and -rdc executables
M="$TMP/m"; mkdir -p "$M"
printf 'extern "C" __global__ void ka(int *o) { o[0] = 90; }\nextern "C" int run_a(void) { int *d; cudaMalloc(&d, 4); ka<<<1,1>>>(d); cudaError_t e = cudaGetLastError(); if (!e) e = cudaDeviceSynchronize(); return (int)e; }\n' > "$M/a.cu"
sed 's/ka/kb/g; s/run_a/run_b/; s/90/80/' "$M/a.cu" > "$M/b.cu"
( cd "$M" && timeout 60 "$NVCC" -Xcompiler -fPIC -gencode arch=compute_90,code=sm_90 -c a.cu -o a.o \
  && timeout 60 "$NVCC" -Xcompiler -fPIC -gencode arch=compute_80,code=sm_80 -c b.cu -o b.o \
  && timeout 60 "$NVCC" -shared a.o b.o -o libab.so ) >>"$LOG" 2>&1
RA=$(timeout 60 "$TORCH_PY" -c 'import ctypes,sys; l=ctypes.CDLL(sys.argv[1]); print(l.run_a(), l.run_b())' "$M/libab.so" 2>&1 | tail -1)
timeout 60 cudadoctor archs "$M/libab.so" --json > "$TMP/ab.json" 2>>"$LOG"
AB=$(python3 -c 'import json,sys; f=json.load(open(sys.argv[1]))["files"][0]; print(f["verdict"], "|", f["module"])' "$TMP/ab.json" 2>&1)
say "  libab.so (a.cu sm_90 + b.cu sm_80): real run_a run_b = $RA; cudadoctor archs: $AB"
[ "$RA" = "0 209" ] && case "$AB" in "no-kernel-image | module"*kb*) true;; *) false;; esac \
  && ok "two-module .so: worst module (kb) judged no-kernel-image, as the launch" || bad "two-module .so: real '$RA' vs '$AB'"
printf '__device__ int helper(int x) { return x + 41; }\n' > "$M/helper.cu"
printf '#include <cstdio>\n__device__ int helper(int x);\n__global__ void kmain(int *o) { o[0] = helper(1); }\nint main() { int *d; cudaMalloc(&d, 4); kmain<<<1,1>>>(d); cudaError_t e = cudaGetLastError(); if (!e) e = cudaDeviceSynchronize(); printf("%%d\\n", (int)e); return 0; }\n' > "$M/main_rdc.cu"
i=0
for g in 'arch=compute_80,code=compute_80' 'arch=compute_80,code=sm_80' 'arch=compute_90,code=sm_90' 'arch=compute_80,code=[sm_80,compute_80]'; do
  i=$((i + 1))
  ( cd "$M" && timeout 60 "$NVCC" -rdc=true -gencode "$g" main_rdc.cu helper.cu -o rdc_$i ) >>"$LOG" 2>&1 &
done; wait
i=0
for g in 'arch=compute_80,code=compute_80' 'arch=compute_80,code=sm_80' 'arch=compute_90,code=sm_90' 'arch=compute_80,code=[sm_80,compute_80]'; do
  i=$((i + 1))
  R=$(timeout 60 "$M/rdc_$i" 2>&1 | tail -1)
  V=$(timeout 60 cudadoctor archs "$M/rdc_$i" --json 2>>"$LOG" | python3 -c 'import json,sys; print(json.load(sys.stdin)["files"][0]["verdict"])' 2>&1)
  runs=no; [ "$R" = "0" ] && runs=yes
  ran=unknown; case "$V" in native|ptx-jit) ran=yes;; no-kernel-image) ran=no;; esac
  [ "$runs" = "$ran" ] && case "$R" in 0|209|500) true;; *) false;; esac && ok "-rdc $g: real cudaError $R, cudadoctor $V" || bad "-rdc $g: real cudaError $R vs cudadoctor $V"
done

# ---------------------------------------------------------------- 5. cuobjdump vs cudadoctor archs on torch's site-packages
SITE=$("$TORCH_PY" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
if [ -x "$CUOBJDUMP" ]; then
  timeout 60 cudadoctor scan --path "$SITE" --cc 9.0 --all --json > "$TMP/site.json" 2>>"$LOG"
  python3 -c 'import json,sys; [print(f["path"]) for f in json.load(open(sys.argv[1]))["files"] if not f["error"]]' "$TMP/site.json" > "$TMP/bins.txt"
  s=$(now_ms)
  mkdir -p "$TMP/cuo"
  n=0; while read -r f; do n=$((n + 1)); ( timeout 60 "$CUOBJDUMP" --list-elf --list-ptx "$f" > "$TMP/cuo/$n.txt" 2>&1; echo "$f" > "$TMP/cuo/$n.path" ) & 
    [ $((n % 16)) -eq 0 ] && wait; done < "$TMP/bins.txt"; wait
  say "  cuobjdump of $n binaries: $(( $(now_ms) - s )) ms"
  python3 - "$TMP/site.json" "$TMP/cuo" <<'EOF' | tee -a "$LOG" || fails=$((fails + 1))
import glob, json, os, re, sys
d = {f["path"]: f for f in json.load(open(sys.argv[1]))["files"]}
same = fam = differ = 0
for p in sorted(glob.glob(os.path.join(sys.argv[2], "*.path"))):
    path = open(p).read().strip()
    text = open(p[:-5] + ".txt", errors="replace").read()
    c_sass = {m.group(1) for m in re.finditer(r"^ELF file\s+\d+:\s+\S+?\.(sm_\d+[af]?)\.cubin", text, re.M)}
    c_ptx = {m.group(1).replace("sm_", "compute_") for m in re.finditer(r"^PTX file\s+\d+:\s+\S+?\.(sm_\d+[af]?)\.ptx", text, re.M)}
    f = d[path]
    ours_s, ours_p = set(f["sass"]), set(f["ptx"])
    strip = lambda s: {re.sub(r"f$", "", x) for x in s}
    if (ours_s, ours_p) == (c_sass, c_ptx):
        same += 1
    elif (strip(ours_s), strip(ours_p)) == (strip(c_sass), strip(c_ptx)):
        fam += 1
        print(f"  family suffix only: {os.path.basename(path)}: cudadoctor {sorted(ours_s - c_sass)} where cuobjdump lists {sorted(c_sass - ours_s)}")
    else:
        differ += 1
        print(f"  DIFFER {path}: cudadoctor sass={sorted(ours_s)} ptx={sorted(ours_p)} cuobjdump sass={sorted(c_sass)} ptx={sorted(c_ptx)} reloc={f.get('relocatable')}")
n = same + fam + differ
print(f"{'PASS' if differ == 0 and n else 'FAIL'} archs vs cuobjdump on {n} CUDA binaries in site-packages: {same} identical, "
      f"{fam} differ only by the family suffix (cuobjdump --list-elf drops it), {differ} differ")
sys.exit(1 if differ or not n else 0)
EOF
else
  say "  skip 5: no cuobjdump at $CUOBJDUMP"
fi

# ---------------------------------------------------------------- 6. speed: torch site-packages + 50,000-file editable trees
wait $BENCH_PID
B=$(tail -1 "$TMP/bench.json")
say "  scan_speed (run alongside steps 1-5): $B"
python3 -c 'import json,sys; d=json.loads(sys.argv[1]); sys.exit(0 if d["median_s"] <= 2.0 and not d["cut"] else 1)' "$B" 2>>"$LOG" \
  && ok "scan of torch site-packages + 50,000 editable files within 2 s" || bad "scan_speed: $B"

say "== scan.sh: $fails failed, $(( $(now_ms) - T0 )) ms; full log $LOG"
exit $(( fails > 0 ))

#!/usr/bin/env bash
# GPU-machine verification for `cudadoctor libs` / `cudadoctor env` (issue 5). Self-checking, < 2 min.
#   1. cudadoctor libs            -> must name cuDNN 9.19 from the pip wheel nvidia-cudnn-cu13
#   2. LD_LIBRARY_PATH=<tmp with libcuda.so.1 -> the toolkit's stub> cudadoctor libs -> libs.stub-libcuda FAIL
#   3. CUDA_VISIBLE_DEVICES=7 cudadoctor libs / env -> env.cuda-visible-devices.none FAIL, libraries still listed
#   4. cudadoctor env (plain)     -> no FAIL
# Usage: bash benchmarks/gpu/libs.sh [python-with-torch]   (default: python3 on PATH)
set -u
PY=${1:-$(command -v python3)}
CD=$(command -v cudadoctor || true)
[ -n "$CD" ] || { echo "FAIL cudadoctor not on PATH"; exit 2; }
OUT=${OUT:-$(mktemp -d)}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
ok() { echo "PASS $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
# judge FILE EXPR: a Python expression over `d` (the --json output) that must be true
judge() { "$PY" - "$1" "$2" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
f = {x["id"]: x["status"] for x in d.get("findings", [])}
libs = {x["family"]: x for x in d.get("libraries", [])}
sys.exit(0 if eval(sys.argv[2]) else 1)
EOF
}
show_libs() { "$PY" - "$1" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"  method={d.get('method')} status={d.get('status')} torch_cudnn={d.get('torch_cudnn')}")
for x in d.get("libraries", []):
    if x["family"] in ("libcuda", "libcudart", "libcublas", "libcudnn", "libnccl", "libnvJitLink"):
        print(f"  {x['family']:<12} {x['version']:<12} {x['origin']:<10} {x['origin_detail'][:34]:<34} {x['realpath']}")
for x in d.get("findings", []):
    print(f"  [{x['status']}] {x['id']}: {x['summary'][:150]}")
EOF
}

echo "== 1. cudadoctor libs (python: $PY)"
t0=$(date +%s)
"$CD" libs --python "$PY" --json > "$OUT/libs.json"; rc=$?
echo "  rc=$rc wall=$(( $(date +%s) - t0 )) s"
show_libs "$OUT/libs.json"
judge "$OUT/libs.json" 'd["method"] == "maps" and libs["libcudnn"]["origin"] == "pip-wheel" and libs["libcudnn"]["version"].startswith("9.19") and "nvidia-cudnn" in libs["libcudnn"]["origin_detail"]' \
  && ok "cuDNN 9.19 from the pip wheel" || bad "cuDNN 9.19 from the pip wheel not named"
judge "$OUT/libs.json" 'd["status"] == "ok" and "libs.copies.cudnn" in f' \
  && ok "system cuDNN named as unused (libs.copies.cudnn)" || bad "libs.copies.cudnn missing or step not ok"
"$CD" libs --python "$PY" | head -25 > "$OUT/libs.txt"; sed -n '1,25p' "$OUT/libs.txt" | sed 's/^/  | /'

echo "== 2. LD_LIBRARY_PATH -> the toolkit's stub libcuda"
STUB=""
for c in /usr/local/cuda/lib64/stubs/libcuda.so /usr/local/cuda/targets/x86_64-linux/lib/stubs/libcuda.so \
         /usr/local/cuda/targets/sbsa-linux/lib/stubs/libcuda.so; do [ -f "$c" ] && { STUB=$c; break; }; done
if [ -z "$STUB" ]; then bad "no toolkit stub libcuda.so found"; else
  ln -s "$STUB" "$TMP/libcuda.so.1"
  LD_LIBRARY_PATH="$TMP:${LD_LIBRARY_PATH:-}" "$CD" libs --python "$PY" --json > "$OUT/libs_stub.json"; rc=$?
  echo "  stub=$STUB rc=$rc"; show_libs "$OUT/libs_stub.json"
  judge "$OUT/libs_stub.json" 'f.get("libs.stub-libcuda") == "fail"' && ok "stub libcuda detected (symlink)" \
    || bad "stub libcuda (symlink) not detected"
  rm -f "$TMP/libcuda.so.1"; cp "$STUB" "$TMP/libcuda.so.1"
  LD_LIBRARY_PATH="$TMP:${LD_LIBRARY_PATH:-}" "$CD" libs --python "$PY" --json > "$OUT/libs_stub_copy.json"
  judge "$OUT/libs_stub_copy.json" 'f.get("libs.stub-libcuda") == "fail"' && ok "stub libcuda detected (copy)" \
    || bad "stub libcuda (copy) not detected"
fi

echo "== 3. CUDA_VISIBLE_DEVICES=7"
CUDA_VISIBLE_DEVICES=7 "$CD" libs --python "$PY" --json > "$OUT/libs_cvd7.json"; rc=$?
echo "  libs rc=$rc"; show_libs "$OUT/libs_cvd7.json"
judge "$OUT/libs_cvd7.json" '"libcudnn" in libs' && ok "libraries still listed with no visible GPU" \
  || bad "no libraries listed with CUDA_VISIBLE_DEVICES=7"
CUDA_VISIBLE_DEVICES=7 "$CD" env --python "$PY" --json > "$OUT/env_cvd7.json"; rc=$?
echo "  env rc=$rc"
judge "$OUT/env_cvd7.json" 'f.get("env.cuda-visible-devices.none") == "fail"' \
  && ok "CUDA_VISIBLE_DEVICES=7 -> env.cuda-visible-devices.none" || bad "CUDA_VISIBLE_DEVICES=7 not flagged"
CUDA_VISIBLE_DEVICES=7 "$CD" env --python "$PY" 2>&1 | tail -6 | sed 's/^/  | /'

echo "== 4. cudadoctor env"
"$CD" env --python "$PY" --json > "$OUT/env.json"; rc=$?
echo "  rc=$rc"
"$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); [print(f'  [{x[\"status\"]}] {x[\"id\"]}: {x[\"summary\"][:140]}') for x in d['findings']]" "$OUT/env.json"
judge "$OUT/env.json" '"fail" not in f.values() and ("TORCH_CUDA_ARCH_LIST" not in d["variables"] or f.get("env.torch-cuda-arch-list") == "ok")' \
  && ok "env: no FAIL, TORCH_CUDA_ARCH_LIST judged ok" || bad "env reported a FAIL or a wrong arch-list verdict"
"$CD" env --python "$PY" --markdown > "$OUT/env.md"
grep -q "$(hostname)" "$OUT/env.md" && bad "env --markdown shows the host name" || ok "env --markdown hides the host name"

echo "== $([ $fails -eq 0 ] && echo ALL PASS || echo "$fails FAILED") (outputs in $OUT)"
exit $fails

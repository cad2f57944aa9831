#!/usr/bin/env bash
# On the GPU machine: the report contract and the fleet summary on a real GPU report, and the
# 10,000-report summary speed with this machine's CPUs.
#
#   benchmarks/gpu/fleet.sh [TORCH_PYTHON]     (default /opt/torch/.venv/bin/python3)
#
# cudadoctor runs from this checkout (PYTHONPATH) in CUDADOCTOR_PYTHON (default: python3 on PATH, which
# needs typer, rich, packaging, platformdirs, psutil and nvidia-ml-py; jsonschema for step 1's schema
# validation). Checks: the report validates against cudadoctor/schema/report-1.json; `fleet summarize`
# reads the GPU, driver, CUDA, torch, cuDNN and nvcc of this machine; `check --facts` re-judges the
# saved report to the same verdicts; 10,000 reports are summarised within 10 s. About a minute.
set -uo pipefail
cd "$(dirname "$0")/../.."
TORCH_PY="${1:-/opt/torch/.venv/bin/python3}"
PY="${CUDADOCTOR_PYTHON:-python3}"
OUT="${OUT:-$(mktemp -d)}"
CD=(env PYTHONPATH="$PWD" SLURMD_NODENAME=gpu-test-node "$PY" -m cudadoctor)
echo "== cudadoctor: ${CD[*]} ; torch: $TORCH_PY ; output in $OUT"
fail=0

"${CD[@]}" check --json --python "$TORCH_PY" >"$OUT/gpu.json" 2>"$OUT/check.err"
echo "check --json: exit $?"
PYTHONPATH="$PWD" "$PY" - "$OUT/gpu.json" <<'PYEOF' || fail=1
import json, sys
rep = json.load(open(sys.argv[1]))
try:
    import jsonschema
    from cudadoctor.schema import report_schema
    errs = [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}"
            for e in jsonschema.Draft202012Validator(report_schema()).iter_errors(rep)]
    print("1. schema:", "valid" if not errs else "INVALID")
    for e in errs[:10]:
        print("   ", e)
    ok = not errs
except ImportError:
    print("1. schema: jsonschema not installed here, validation skipped")
    ok = True
print("   node:", rep.get("node"), "host:", rep.get("host"))
ok = ok and rep.get("node") == "gpu-test-node"
sys.exit(0 if ok else 1)
PYEOF

"${CD[@]}" fleet summarize "$OUT/gpu.json" --json >"$OUT/summary.json" 2>"$OUT/summary.err"
echo "fleet summarize: exit $?"
PYTHONPATH="$PWD" "$PY" - "$OUT/summary.json" <<'PYEOF' || fail=1
import json, sys
s = json.load(open(sys.argv[1]))
node = s["nodes"][0]
print("2. summary of this node:", {k: node[k] for k in ("gpu", "driver", "cuda", "torch", "cudnn", "nvcc", "outcome")})
want = {"gpu": "NVIDIA H200", "driver": "580.159.04", "cuda": "13.0", "torch": "2.11.0+cu130", "nvcc": "13.0"}
bad = {k: (node[k], v) for k, v in want.items() if node[k] != v}
if node["cudnn"] in ("none", "unknown"):
    bad["cudnn"] = (node["cudnn"], "a version")
for k, (got, exp) in bad.items():
    print(f"   WRONG {k}: {got!r}, expected {exp!r}")
sys.exit(1 if bad else 0)
PYEOF

"${CD[@]}" check --facts "$OUT/gpu.json" --json >"$OUT/rejudged.json" 2>"$OUT/rejudged.err"
PYTHONPATH="$PWD" "$PY" - "$OUT/gpu.json" "$OUT/rejudged.json" <<'PYEOF' || fail=1
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
sa = {s["id"]: s["status"] for s in a["steps"]}
sb = {s["id"]: s["status"] for s in b["steps"]}
diff = {k: (sa.get(k), sb.get(k)) for k in sa if sa.get(k) != sb.get(k)}
print("3. check --facts re-judged:", "same verdicts" if not diff else f"DIFFERENT {diff}", "· node", b.get("node"))
sys.exit(1 if diff or b.get("node") != a.get("node") else 0)
PYEOF

echo "4. 10,000 reports:"
PYTHONPATH="$PWD" "$PY" benchmarks/fleet_speed.py --base "$OUT/gpu.json" --runs 3 --budget 10 || fail=1
[ "$fail" = 0 ] && echo "fleet.sh: all checks passed" || echo "fleet.sh: FAILED"
exit "$fail"

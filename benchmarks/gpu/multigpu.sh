#!/usr/bin/env bash
# Issue 14 on the 2x H200 machine (NVLink through NVSwitch): the topology and nccl steps of `check`,
# `bench --collectives` next to nccl-tests built from the carried source, each with PASS/FAIL lines.
#
#   benchmarks/gpu/multigpu.sh        (the lead's session; ~2 minutes, at most 180 s)
#
# Cases: healthy (NV18 as nvidia-smi topo -m says, P2P, busbw at 64 MiB); CUDA_VISIBLE_DEVICES=1,0
# (which ordinal is which bus id); NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 (the all-reduce far below
# NVLink, and why); a bad NCCL_SOCKET_IFNAME (init fails, the interface named); one rank made to hang
# (CUDADOCTOR_TEST_NCCL_HANG_RANK=1: FAIL naming the stage and the rank, every rank killed on time);
# --expect-gpus 8; bench --collectives within 10% of nccl-tests at 64 MiB and above; the copy matrix.
# The multicast switches of _install.sh stay as they are (NCCL_NVLS_ENABLE=0 is checked to reach the
# ranks). stdout: verdicts, step lines, tables; everything else: $OUT/i14.log.
set -u
. "$(dirname "$0")/_install.sh"
LOG="$OUT/i14.log"
W="$OUT/i14"
mkdir -p "$W"
: >"$LOG"
V=(python3 "$REPO/benchmarks/gpu/multigpu_verdicts.py")
T0=$(date +%s)
fail=0
export CUDADOCTOR_CACHE_DIR
CUDADOCTOR_CACHE_DIR=$(mktemp -d)

say() { echo "$*" | tee -a "$LOG"; }
elapsed() { echo $(( $(date +%s) - T0 )); }
# run NAME TIMEOUT CMD...: the command's stdout to $W/NAME.out, stderr to $W/NAME.err, both into the log
run() {
  local name=$1 limit=$2
  shift 2
  local s=$(date +%s.%N)
  timeout -k 5 "$limit" "$@" >"$W/$name.out" 2>"$W/$name.err"
  local rc=$?
  local e
  e=$(python3 -c "print(round($(date +%s.%N)-$s,1))")
  echo "$e" >"$W/$name.s"
  { echo "== $name: exit $rc in $e s: $*"; cat "$W/$name.out" "$W/$name.err"; } >>"$LOG"
  return $rc
}
verdict() { "${V[@]}" "$@" 2>&1 | tee -a "$LOG"; [ "${PIPESTATUS[0]}" = 0 ] || fail=1; }

say "== issue 14 · $(nvidia-smi -L 2>/dev/null | wc -l) GPUs · torch: $TORCH_PY · NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE TORCH_SYMM_MEM_DISABLE_MULTICAST=$TORCH_SYMM_MEM_DISABLE_MULTICAST NVSHMEM_DISABLE_NVLS=$NVSHMEM_DISABLE_NVLS"
timeout 20 nvidia-smi topo -m >"$W/topo.txt" 2>&1
head -3 "$W/topo.txt" | tee -a "$LOG"
BUS1=$(timeout 20 nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader -i 1 2>/dev/null | tr -d ' ')

# nccl-tests builds in the background (CPU only) while the checks run
NCCLDIR=$(timeout 30 "$TORCH_PY" -c "import nvidia.nccl as n; print(list(n.__path__)[0])" 2>/dev/null)
NH=/tmp/i14_ncclhome
(
  set -e
  [ -d "$REPO/.gpu/nccl-tests" ] || { echo "no nccl-tests source in $REPO/.gpu/nccl-tests"; exit 3; }
  [ -f "$NCCLDIR/include/nccl.h" ] || { echo "no nccl.h under '$NCCLDIR'"; exit 3; }
  mkdir -p "$NH/lib"  # a private NCCL_HOME: nothing is written into the torch venv
  ln -sfn "$NCCLDIR/include" "$NH/include"
  ln -sf "$NCCLDIR/lib/libnccl.so.2" "$NH/lib/libnccl.so"
  ln -sf "$NCCLDIR/lib/libnccl.so.2" "$NH/lib/libnccl.so.2"
  rm -rf /tmp/i14_nt && cp -r "$REPO/.gpu/nccl-tests" /tmp/i14_nt && cd /tmp/i14_nt
  timeout 150 make -j16 MPI=0 CUDA_HOME=/usr/local/cuda NCCL_HOME="$NH" \
    NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 >"$W/nt_build.txt" 2>&1
) >"$W/nt_build.err" 2>&1 &
BUILD=$!

# 1. healthy: the whole check once (console kept in the log), its JSON judged
run check_healthy 90 cudadoctor check --python "$TORCH_PY" --json
run check_console 30 cudadoctor check --facts "$W/check_healthy.out" -v
grep -E "^ *[0-9]+ .*(GPU to GPU|NCCL all-reduce|NVIDIA driver|torch sees)" "$W/check_console.out" | tee -a "$LOG"
say "-- healthy ($(cat "$W/check_healthy.s") s for the whole check)"
verdict healthy "$W/check_healthy.out" "$W/topo.txt"
run expect 30 cudadoctor check --facts "$W/check_healthy.out" --expect-gpus 8 --only topology --json
verdict expect "$W/expect.out" 8

# 2. CUDA_VISIBLE_DEVICES=1,0
say "-- CUDA_VISIBLE_DEVICES=1,0"
CUDA_VISIBLE_DEVICES=1,0 run cvd 60 cudadoctor check --python "$TORCH_PY" --only topology --only nccl --json
verdict cvd "$W/cvd.out" "$BUS1"

# 3. NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
say "-- NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1"
NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 run p2poff 60 cudadoctor check --python "$TORCH_PY" \
  --only environment --only nccl --json
verdict p2poff "$W/p2poff.out"

# 4. a bad NCCL_SOCKET_IFNAME
say "-- NCCL_SOCKET_IFNAME=eth9"
NCCL_SOCKET_IFNAME=eth9 run badif 60 cudadoctor check --python "$TORCH_PY" --only nccl --json
verdict badif "$W/badif.out"

# 5. one rank made to hang before the collective
say "-- CUDADOCTOR_TEST_NCCL_HANG_RANK=1 (deadline 20 s)"
CUDADOCTOR_TEST_NCCL_HANG_RANK=1 CUDADOCTOR_TIMEOUT_NCCL=20 run hang 60 cudadoctor check --python "$TORCH_PY" \
  --only nccl --json
verdict hang "$W/hang.out" "$(cat "$W/hang.s")" 20
sleep 1
left=$(python3 -c "
import os
n = 0
for p in filter(str.isdigit, os.listdir('/proc')):
    if int(p) == os.getpid():
        continue
    try:
        n += b'child/nccl_rank.py' in open(f'/proc/{p}/cmdline', 'rb').read()
    except OSError:
        pass
print(n)")
[ "$left" = 0 ] && say "PASS no rank left running after the hang" || { say "FAIL $left rank process(es) left"; fail=1; }

# 6. bench --collectives, then nccl-tests on the same GPUs (never at the same time)
say "-- bench --collectives ($(elapsed) s so far)"
run bench 120 cudadoctor bench --collectives --python "$TORCH_PY" --json
say "   bench --collectives: exit $? in $(cat "$W/bench.s") s"
wait "$BUILD"
brc=$?
if [ "$brc" = 0 ] && [ -x /tmp/i14_nt/build/all_reduce_perf ]; then
  mkdir -p "$W/nt"
  for c in all_reduce all_gather reduce_scatter sendrecv; do
    LD_LIBRARY_PATH="$NH/lib:${LD_LIBRARY_PATH:-}" timeout 60 /tmp/i14_nt/build/${c}_perf -b 64M -e 1G -f 2 -g 2 \
      -w 5 -n 20 >"$W/nt/$c.txt" 2>&1
    cat "$W/nt/$c.txt" >>"$LOG"
  done
  verdict bench "$W/bench.out" "$W/nt"
else
  say "FAIL nccl-tests did not build (exit $brc): $(cat "$W/nt_build.err" "$W/nt_build.txt" 2>/dev/null | tail -3 | tr '\n' ' ' | cut -c1-300)"
  fail=1
fi

say "== issue 14: $([ $fail = 0 ] && echo 'all checks passed' || echo 'FAILED') in $(elapsed) s · full log $LOG"
exit $fail

#!/usr/bin/env bash
# Ring attention on a machine with 2 (or more) GPUs, one command, within --deadline seconds
# (default 540): build flashpp with the CUDA backend, the C++ ring (NCCL from torch's
# nvidia-nccl wheel) and its check program; then
#   (2) correctness: ring_attention over NCCL (torchrun, one process per GPU) against single-GPU
#       flashpp on the whole sequence, fwd+bwd, causal and not, GQA, fp16/bf16, head chunks;
#       the C++ API (ncclCommInitAll over the GPUs, one thread per rank) likewise;
#   (3) scaling and overlap: causal fwd+bwd at 128k and 512k total tokens (B=1, H=32, D=128,
#       bf16): single GPU vs ring, efficiency = t1 / (W * tW); the same ring call without
#       overlap, without transfers (compute alone), without compute (transfers alone), and with
#       the sm90 forward's persistent grid off; one profiled ring run (tools/ring_bench.py);
#   (4) 1M tokens (B=1, H=32, D=128, bf16) fwd+bwd on the ring: time and peak memory;
#   (5) the simulated ring (W = 2, 3, 4, 8 ranks in one process) on one GPU, fp16/bf16.
# Logs go to $OUT (or ./ring-check-out; see pack_logs below); the summary and the table of every
# figure (tools/ring_table.py) are printed last.
#
#   bash tools/ring_gpu_check.sh [--deadline 540] [--archs 90a] [--gpus 2] [--no-large]
#                                [--seqs "131072 524288"] [--large "1048576"]
#                                [--ctas "2 4"] [--ring-ctas C]
# --ctas (default "8", ring_group's cap): ring_bench.py also times the ring (and its transfers
# alone) over groups made by flashpp.distributed.ring_group(max_ctas=C); --ring-ctas C (default
# 8): the profiled run and the 1M run use that group (one of --ctas; "" = the default group).
# --ctas "" times the default group only.
#
# NVLink multicast stays off (NVLS / symmetric-memory multicast): the variables below are
# exported for every child process.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# The ring's diagnostic knobs and the sm90 forward's grid switch are set per call by
# ring_bench.py; inherited, they would change every step.
unset FLASHPP_RING_TRANSFERS FLASHPP_RING_COMPUTE FLASHPP_RING_OVERLAP FLASHPP_SM90_FWD_PERSISTENT
set -uo pipefail
cd "$(dirname "$0")/.."

DEADLINE=540 ARCHS="" GPUS=2 LARGE="1048576" SEQS="131072 524288" CTAS="8" RING_CTAS="8"
while [ $# -gt 0 ]; do
  case "$1" in
    --deadline) DEADLINE="$2"; shift ;;
    --archs) ARCHS="$2"; shift ;;
    --gpus) GPUS="$2"; shift ;;
    --no-large) LARGE="" ;;
    --large) LARGE="$2"; shift ;;
    --seqs) SEQS="$2"; shift ;;
    --ctas) CTAS="$2"; shift ;;
    --ring-ctas) RING_CTAS="$2"; shift ;;
    *) echo "ring_gpu_check: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
# RING_CHECK_DRY_RUN=1: the script's plumbing on a CPU machine (a stub nvidia-smi, the package
# already installed): no build, the Python steps on gloo with tiny sizes. Not a measurement.
DRY=${RING_CHECK_DRY_RUN:-0} PYARGS=() BENCHARGS=()
CTAARGS=()
[ -n "$CTAS" ] && CTAARGS+=(--ctas $CTAS)
[ -n "$RING_CTAS" ] && [ -n "$CTAS" ] && CTAARGS+=(--ring-ctas "$RING_CTAS")
if [ "$DRY" = 1 ]; then
  PYARGS=(--cpu) BENCHARGS=(--cpu --heads 2 --dim 32) SEQS="512 1024" LARGE="2048"
fi
# Logs go to a scratch folder, packed at exit into $OUT/ring_check_logs.tar.gz next to
# summary.txt, ring_results.json, ring_torch.log and ring_cpp.log (the device tool returns at
# most 8 files).
FINAL_OUT="${OUT:-$PWD/ring-check-out}"
mkdir -p "$FINAL_OUT"
OUT_DIR="$(mktemp -d /tmp/ring-check.XXXXXX)"
pack_logs() {
  "$PY" - "$OUT_DIR" > "$OUT_DIR/ring_results.json" 2>/dev/null <<'PYEOF'
import glob, json, os, sys
rows = []
for f in sorted(glob.glob(os.path.join(sys.argv[1], "ring_bench_*.json")) +
                glob.glob(os.path.join(sys.argv[1], "ring_large_*.json"))):
    rows += json.load(open(f))
print(json.dumps(rows, indent=1))
PYEOF
  for f in summary.txt ring_results.json ring_torch.log ring_cpp.log; do
    [ -f "$OUT_DIR/$f" ] && cp -f "$OUT_DIR/$f" "$FINAL_OUT/"
  done
  tar -czf "$FINAL_OUT/ring_check_logs.tar.gz" -C "$OUT_DIR" . 2>/dev/null
}
PY=python3
trap pack_logs EXIT
START=$(date +%s)
SUMMARY=()
FAILED=0
left() { echo $(( DEADLINE - ($(date +%s) - START) )); }
# have_time STEP NEEDED: true when NEEDED seconds are left, else a SKIPPED line for STEP.
have_time() {
  if [ "$(left)" -ge "$2" ]; then return 0; fi
  SUMMARY+=("$(printf '%-28s %s' "$1" "SKIPPED (deadline: $(left) s left, needs ~$2 s)")")
  echo "$1: SKIPPED (deadline)"
  return 1
}
# limit CAP: the seconds a step may run: CAP, or less when the deadline is nearer (a hung step
# cannot eat the rest of the run).
limit() { local l=$(( $(left) - 10 )); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 5 ] && l=5; echo "$l"; }
add() { SUMMARY+=("$(printf '%-28s %s' "$1" "$2")"); }
RUN=("$PY" -m torch.distributed.run --standalone --nproc-per-node "$GPUS")

echo "== environment (NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE TORCH_SYMM_MEM_DISABLE_MULTICAST=$TORCH_SYMM_MEM_DISABLE_MULTICAST NVSHMEM_DISABLE_NVLS=$NVSHMEM_DISABLE_NVLS)"
nvidia-smi -L | tee "$OUT_DIR/gpus.txt"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "$ngpu" -lt "$GPUS" ]; then
  echo "ring_gpu_check: FAIL: needs $GPUS GPUs, nvidia-smi -L shows $ngpu"
  exit 1
fi
"$PY" - <<'PYEOF' 2>&1 | tee "$OUT_DIR/versions.txt"
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "NCCL",
      ".".join(map(str, torch.cuda.nccl.version())), "GPUs", torch.cuda.device_count())
PYEOF
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "ring_gpu_check: FAIL: python3 has no working torch"; exit 1; }
NCCL_ROOT=$("$PY" - <<'PYEOF'
import os, site
cands = []
try:
    import nvidia.nccl as m
    cands += list(m.__path__)
except Exception:
    pass
cands += [os.path.join(d, "nvidia", "nccl") for d in site.getsitepackages()]
for p in cands:
    if os.path.exists(os.path.join(p, "include", "nccl.h")):
        print(p)
        break
PYEOF
)
echo "NCCL for the C++ API: ${NCCL_ROOT:-(not in site-packages; CMake searches the CUDA toolkit)}"
if [ -z "$ARCHS" ]; then
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')
  case "$cap" in 90) ARCHS="90a" ;; "") ARCHS="80;90a" ;; *) ARCHS="$cap" ;; esac
fi

# ---- (1) build: the package (extension + library) and, in the same CMake tree (build-py/),
# libflashpp_ring and flashpp_ring_check.
echo "== (1) build (archs $ARCHS, $(nproc) jobs)"
t0=$(date +%s)
if [ "$DRY" = 1 ]; then
  echo "dry run: no build" > "$OUT_DIR/build.log"
elif ! CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) timeout $(( $(left) - 30 )) "$PY" -m pip install \
    --no-build-isolation --no-deps -v -C cmake.define.FLASHPP_CUDA=ON \
    -C cmake.define.FLASHPP_CUDA_ARCHS="$ARCHS" -C cmake.define.FLASHPP_NCCL_ROOT="$NCCL_ROOT" \
    -C cmake.define.FLASHPP_RING_CHECK=ON . > "$OUT_DIR/build.log" 2>&1; then
  tail -n 40 "$OUT_DIR/build.log"
  echo "ring_gpu_check: BUILD FAILED ($(( $(date +%s) - t0 )) s; log in $OUT_DIR/build.log)"
  exit 1
fi
grep -E "flashpp: (CUDA|ring)" "$OUT_DIR/build.log" | sed 's/^ *//' | head -3
RING_CHECK=$(find build-py -name flashpp_ring_check -type f -perm -u+x 2>/dev/null | head -1)
"$PY" -c "import flashpp, flashpp.distributed; assert flashpp.cuda_available() or $DRY, 'no CUDA backend'; print('flashpp', flashpp.__version__, 'CUDA', flashpp.cuda_available())" \
  || { echo "ring_gpu_check: FAIL: the installed flashpp has no usable CUDA backend"; exit 1; }
add "build" "ok ($(( $(date +%s) - t0 )) s; C++ ring check: ${RING_CHECK:-not built, see build.log})"

# ---- (2) correctness
echo "== (2a) ring_attention over NCCL vs single GPU (torchrun, $GPUS ranks)"
if have_time "torch ring vs 1 GPU" 60; then
  timeout "$(limit 200)" "${RUN[@]}" tests/distributed/ring_torch_check.py "${PYARGS[@]}" > "$OUT_DIR/ring_torch.log" 2>&1
  rc=$?
  grep -E "^ring_torch" "$OUT_DIR/ring_torch.log"
  line=$(grep -E "^ring_torch: [0-9]+ passed" "$OUT_DIR/ring_torch.log" | tail -1)
  [ "$rc" -ne 0 ] && { FAILED=1; tail -n 30 "$OUT_DIR/ring_torch.log"; }
  add "torch ring vs 1 GPU" "${line#ring_torch: } (exit $rc)"
fi
echo "== (2b) C++ ring API vs single GPU (one process, ncclCommInitAll)"
if [ "$DRY" = 1 ]; then
  add "C++ ring vs 1 GPU" "skipped (dry run: nothing built)"
elif [ -z "$RING_CHECK" ]; then
  add "C++ ring vs 1 GPU" "FAIL: flashpp_ring_check was not built (NCCL not found? see build.log)"
  FAILED=1
elif have_time "C++ ring vs 1 GPU" 40; then
  CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((GPUS - 1))) timeout "$(limit 120)" "$RING_CHECK" > "$OUT_DIR/ring_cpp.log" 2>&1
  rc=$?
  cat "$OUT_DIR/ring_cpp.log" | tail -n 12
  line=$(grep -E "^ring_cpp: [0-9]+ passed" "$OUT_DIR/ring_cpp.log" | tail -1)
  [ "$rc" -ne 0 ] && FAILED=1
  add "C++ ring vs 1 GPU" "${line#ring_cpp: } (exit $rc)"
fi
# ---- (3) scaling, (4) the largest sequence: one torchrun per length, so that what finished
# is kept when the deadline cuts the rest (ring_bench.py rewrites its JSON after each phase).
# Seconds on 2 x H100 (estimates from the 2026-11-25 run: 128k ring 0.55 s, 512k 8.7 s, t1
# twice that): 128k ~45 s; 512k ~175 s (t1 3 runs, ring 3, five variants 2 each, 1 profiled).
# With less than the full need left, the persistent-off variants and the profile are dropped.
# The GPUs' SM clock and power during the scaling runs (clocks.csv): whether the overlapped
# ring runs at a lower clock than the compute alone (power limit).
nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,temperature.gpu --format=csv,noheader \
  -lms 250 > "$OUT_DIR/clocks.csv" 2>/dev/null &
CLOCKS_PID=$!
for N in $SEQS; do
  full=60 need=40 cap=150
  [ "$N" -ge 524288 ] && full=230 need=130 cap=330
  [ "$N" -ge 524288 ] && [ -n "$CTAS" ] && full=300 cap=420
  name="scaling N=$N"
  echo "== (3) $name (causal, B=1 H=32 D=128 bf16, fwd+bwd)"
  have_time "$name" "$need" || continue
  trim=()
  if [ "$(left)" -lt "$full" ]; then
    trim=(--skip-variants ring_p0 compute_p0 --no-profile)
    echo "$name: $(left) s left (< $full): without the persistent-off variants and the profile"
  fi
  rm -f "$OUT_DIR/ring_bench.json"  # not the previous length's
  timeout "$(limit "$cap")" "${RUN[@]}" tools/ring_bench.py "${BENCHARGS[@]}" "${CTAARGS[@]}" "${trim[@]}" --seqs "$N" \
    --out "$OUT_DIR" > "$OUT_DIR/ring_bench_$N.log" 2>&1
  rc=$?
  cp -f "$OUT_DIR/ring_bench.json" "$OUT_DIR/ring_bench_$N.json" 2>/dev/null
  grep -E "^(ring_bench|  N=|RESULT|OVERLAP)" "$OUT_DIR/ring_bench_$N.log"  # RESULT_CTAS too
  res=$(grep -E "^RESULT " "$OUT_DIR/ring_bench_$N.log" | tail -1 | sed 's/^RESULT N=[0-9]* //')
  ovl=$(grep -E "^OVERLAP " "$OUT_DIR/ring_bench_$N.log" | tail -1 | sed 's/^OVERLAP N=[0-9]* W=[0-9]* //')
  [ "$rc" -ne 0 ] && { FAILED=1; tail -n 20 "$OUT_DIR/ring_bench_$N.log"; }
  add "$name" "${res:-no result (exit $rc, see ring_bench_$N.log)}${ovl:+; $ovl}"
  while IFS= read -r line; do
    add "  capped N=$N" "${line#RESULT_CTAS N=$N }"
  done < <(grep -E "^RESULT_CTAS " "$OUT_DIR/ring_bench_$N.log")
done
kill "$CLOCKS_PID" 2>/dev/null
for N in $LARGE; do
  name="largest: N=$N"
  echo "== (4) $name on $GPUS GPUs (B=1 H=32 D=128 bf16, fwd+bwd)"
  # ~35 s of ring at 1M on 2 x H100 plus the start: 90 s, growing as N^2
  need=$(( 90 * (N / 1048576) * (N / 1048576) )); [ "$need" -lt 90 ] && need=90
  have_time "$name" "$need" || continue
  rm -f "$OUT_DIR/ring_bench.json"
  timeout "$(limit $(( need * 3 )))" "${RUN[@]}" tools/ring_bench.py "${BENCHARGS[@]}" "${CTAARGS[@]}" --seqs --million "$N" --out "$OUT_DIR" \
    > "$OUT_DIR/ring_large_$N.log" 2>&1
  rc=$?
  cp -f "$OUT_DIR/ring_bench.json" "$OUT_DIR/ring_large_$N.json" 2>/dev/null
  grep -E "^(ring_bench|RESULT)" "$OUT_DIR/ring_large_$N.log"
  res=$(grep -E "^RESULT_LARGE " "$OUT_DIR/ring_large_$N.log" | tail -1 | sed 's/^RESULT_LARGE N=[0-9]* //')
  [ "$rc" -ne 0 ] && { FAILED=1; tail -n 20 "$OUT_DIR/ring_large_$N.log"; }
  add "$name" "${res:-no result (exit $rc, see ring_large_$N.log)}"
done
rm -f "$OUT_DIR/ring_bench.json"

# ---- (5) last (CI runs the same schedule on numpy): the simulated ring on the GPU
echo "== (5) simulated ring (W = 2, 3, 4, 8 in one process) on the GPU"
if have_time "simulated ring W=2..8" 40; then
  timeout "$(limit 150)" "$PY" -m pytest -q -p no:cacheprovider tests/python/test_ring_attention_torch.py \
    -k "not gloo" > "$OUT_DIR/pytest_ring.log" 2>&1
  rc=$?
  tail -n 3 "$OUT_DIR/pytest_ring.log"
  [ "$rc" -ne 0 ] && FAILED=1
  add "simulated ring W=2..8" "$(tail -n 1 "$OUT_DIR/pytest_ring.log" | tr -d '=') (exit $rc)"
fi


{
  echo "==== ring_gpu_check summary ($(( $(date +%s) - START )) s of $DEADLINE; $(head -1 "$OUT_DIR/gpus.txt" | cut -c1-60) x$ngpu; $(cat "$OUT_DIR/versions.txt" | head -1)) ===="
  for line in "${SUMMARY[@]}"; do echo "$line"; done
  echo "overall: $([ "$FAILED" = 0 ] && echo PASS || echo FAIL)"
  echo "---- figures (tools/ring_table.py; columns explained there and in docs/ring-attention.md)"
  "$PY" tools/ring_table.py "$OUT_DIR"/ring_bench_*.json "$OUT_DIR"/ring_large_*.json 2>&1
  [ -s "$OUT_DIR/clocks.csv" ] && "$PY" tools/ring_clocks.py "$OUT_DIR/clocks.csv" "$OUT_DIR"/ring_bench_*.json 2>&1
} | tee "$OUT_DIR/summary.txt"
exit "$FAILED"

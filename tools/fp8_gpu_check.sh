#!/usr/bin/env bash
# The FP8 (e4m3) forward on the lent GPU machine, in one command:
#   build (sm_90a, every core) -> SASS check of the FP8 kernels (QGMMA e4m3, no local memory)
#   -> GPU tests (Fp8GpuForward.*: awkward-shape sweep against the float64 oracle and the naive
#   FP8 attention, poisoned outputs) -> compute-sanitizer memcheck (and racecheck) on a small
#   case -> speed: FP8 vs our bf16 forward (tools/fp8_bench) -> a short summary table, last.
#
#   tools/fp8_gpu_check.sh [--deadline SECONDS] [--no-sanitizer] [--no-bench] [--reps R]
#
# --deadline (default 480): stages that would start after it are skipped (the summary says so);
# the build and the tests always run. Logs: $OUT when set (the device tool's folder), else
# ./fp8-check-out. Exit status 0 only when the build, the tests and the sanitizer passed (the
# speed target is reported, not enforced). GoogleTest comes from ./.gtest when the machine has
# none installed (as tools/gpu_check.sh).
set -uo pipefail
cd "$(dirname "$0")/.."

DEADLINE=480 RUN_SAN=1 RUN_BENCH=1 REPS=15
while [ $# -gt 0 ]; do
  case "$1" in
    --deadline) DEADLINE="$2"; shift ;;
    --no-sanitizer) RUN_SAN=0 ;;
    --no-bench) RUN_BENCH=0 ;;
    --reps) REPS="$2"; shift ;;
    -h|--help) sed -n 2,16p "$0"; exit 0 ;;
    *) echo "fp8_gpu_check: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

LOG="${OUT:-$PWD/fp8-check-out}"
mkdir -p "$LOG"
BUILD="${FLASHPP_FP8_BUILD_DIR:-build-fp8-gpu}"
START=$(date +%s)
status=0
declare -A S  # summary fields
elapsed() { echo $(( $(date +%s) - START )); }
time_left() {  # time_left SECONDS_NEEDED: true when the stage fits before the deadline
  [ $(( $(elapsed) + ${1:-0} )) -lt "$DEADLINE" ]
}
# Runs a command with what is left of the deadline as its timeout (at least 30 s).
run_limited() {
  local left=$(( DEADLINE - $(elapsed) ))
  [ "$left" -lt 30 ] && left=30
  timeout --signal=KILL "$left" "$@"
}

summary() {
  echo
  echo "================ FP8 GPU check summary ($(elapsed) s, deadline $DEADLINE s) ================"
  printf '%-34s %s\n' "build" "${S[build]:-not run}"
  printf '%-34s %s\n' "sass (fp8 kernels)" "${S[sass]:-not run}"
  printf '%-34s %s\n' "fp8 gpu tests" "${S[tests]:-not run}"
  printf '%-34s %s\n' "max lse error / limit" "${S[lse]:-n/a}"
  printf '%-34s %s\n' "O error ours vs naive FP8" "${S[oerr]:-n/a}"
  printf '%-34s %s\n' "compute-sanitizer memcheck" "${S[memcheck]:-not run}"
  printf '%-34s %s\n' "compute-sanitizer racecheck" "${S[racecheck]:-not run}"
  printf '%-34s %s\n' "speed (fp8 vs our bf16)" "${S[bench]:-not run}"
  if [ -s "$LOG/bench_table.txt" ]; then
    echo "  D    N      causal  bf16 TFLOPS  fp8 TFLOPS  ratio  target 1.6x"
    cat "$LOG/bench_table.txt"
  fi
  echo "logs: $LOG"
  echo "overall: $([ "$status" = 0 ] && echo PASS || echo FAIL)"
}
trap 'summary' EXIT

# ---- build ------------------------------------------------------------------------------------
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
for tool in cmake ninja nvcc; do
  if ! command -v "$tool" >/dev/null; then
    S[build]="FAILED: $tool not found"; status=1; exit 1
  fi
done
GTEST_ARG=()
[ -d .gtest ] && GTEST_ARG=(-DFLASHPP_GTEST_SOURCE_DIR="$PWD/.gtest")
echo "== configure + build ($BUILD, sm_90a) =="
t0=$(date +%s)
if cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHPP_CUDA=ON -DFLASHPP_CUDA_ARCHS=90a \
      -DFLASHPP_BUILD_TESTS=ON -DFLASHPP_BUILD_TOOLS=ON "${GTEST_ARG[@]}" >"$LOG/configure.log" 2>&1 &&
   ninja -C "$BUILD" -j"$(nproc)" flashpp flashpp_gpu_tests flashpp-fp8-bench >"$LOG/build.log" 2>&1; then
  S[build]="ok ($(( $(date +%s) - t0 )) s)"
else
  tail -n 40 "$LOG/configure.log" "$LOG/build.log"
  S[build]="FAILED (see $LOG/build.log)"; status=1; exit 1
fi
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >"$LOG/gpu.txt" 2>&1
echo "GPU: $(cat "$LOG/gpu.txt")"

# ---- SASS: the FP8 kernels use the e4m3 tensor-core instruction and no local memory ---------------
objs=$(find "$BUILD" -path '*/cuda_instances/sm90_fwd_fp8_*.o' | sort)  # src/cuda/instances.cmake
if [ -n "$objs" ] && command -v cuobjdump >/dev/null; then
  qgmma=0 local_ops=0 hmma=0 details=""
  for obj in $objs; do
    sass=$(cuobjdump -sass "$obj")
    n=$(grep -c 'GMMA.*E4M3.E4M3' <<<"$sass")
    l=$(grep -cE '\b(LDL|STL)\b' <<<"$sass")
    qgmma=$((qgmma + n)); local_ops=$((local_ops + l))
    hmma=$((hmma + $(grep -c 'HMMA' <<<"$sass")))
    details+="$(basename "$obj" .cu.o): ${n} e4m3 GMMA, ${l} LDL/STL; "
  done
  echo "$details" >"$LOG/sass.txt"
  cuobjdump -res-usage $objs >>"$LOG/sass.txt" 2>&1
  if [ "$qgmma" -gt 0 ] && [ "$hmma" -eq 0 ]; then
    S[sass]="ok: $qgmma e4m3 GMMA; local-memory ops $local_ops (per object in $LOG/sass.txt)"
  else
    S[sass]="FAILED: $qgmma e4m3 GMMA, $hmma HMMA"; status=1
  fi
else
  S[sass]="skipped (no cuobjdump or no FP8 objects)"
fi

# ---- tests ------------------------------------------------------------------------------------
TESTS="$BUILD/tests/gpu/flashpp_gpu_tests"
echo "== FP8 GPU tests =="
t0=$(date +%s)
run_limited "$TESTS" --gtest_filter='Fp8GpuForward.*' >"$LOG/fp8_tests.log" 2>&1
rc=$?
passed=$(grep -cE '^\[       OK \] Fp8GpuForward' "$LOG/fp8_tests.log")
failed=$(grep -cE '^\[  FAILED  \] Fp8GpuForward\.[A-Za-z]+ \(' "$LOG/fp8_tests.log")
skipped=$(grep -cE '^\[  SKIPPED \] Fp8GpuForward\.[A-Za-z]+ \(' "$LOG/fp8_tests.log")
if [ "$rc" = 0 ] && [ "$passed" -gt 0 ] && [ "$skipped" = 0 ]; then
  S[tests]="PASSED $passed, FAILED 0 ($(( $(date +%s) - t0 )) s)"
else
  status=1
  S[tests]="PASSED $passed, FAILED $failed, SKIPPED $skipped (exit $rc; see $LOG/fp8_tests.log)"
  grep -E "Failure|Expected|Which is|fp8 case|SKIPPED|worst" "$LOG/fp8_tests.log" | grep -B1 -A3 -E "Failure|SKIPPED" | head -40
fi
line=$(grep -m1 '^fp8 summary:' "$LOG/fp8_tests.log")
if [ -n "$line" ]; then
  S[lse]=$(sed -E 's/.*max lse error ([^,]+), max lse error \/ bound ([^ ]+).*/max |dlse| \1, error\/bound \2 (limit 1)/' <<<"$line")
  S[oerr]=$(sed -E 's/.*O error ours\/naive worst ([^ ]+) \(ours ([^ ]+) vs naive ([^;]+);.*/worst ours\/naive \1 (ours \2 vs naive \3; rule ours <= 2 naive + 2e-3)/' <<<"$line")
fi

# ---- sanitizer --------------------------------------------------------------------------------
if [ "$RUN_SAN" = 1 ]; then
  if ! command -v compute-sanitizer >/dev/null; then
    S[memcheck]="skipped (compute-sanitizer not found)"
  else
    for tool in memcheck racecheck; do
      if ! time_left 40; then S[$tool]="skipped (deadline)"; continue; fi
      echo "== compute-sanitizer $tool =="
      if run_limited compute-sanitizer --tool "$tool" --error-exitcode 9 "$TESTS" \
          --gtest_filter='Fp8GpuForward.NoKeysAndEmptyRows' >"$LOG/sanitizer_$tool.log" 2>&1; then
        S[$tool]="clean ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOG/sanitizer_$tool.log" | tail -1 | sed 's/^=* *//'))"
      else
        status=1
        tail -n 20 "$LOG/sanitizer_$tool.log"
        S[$tool]="FAILED (see $LOG/sanitizer_$tool.log)"
      fi
    done
  fi
fi

# ---- speed ------------------------------------------------------------------------------------
if [ "$RUN_BENCH" = 1 ]; then
  if time_left 30; then
    echo "== speed: fp8 vs bf16 forward =="
    run_limited "$BUILD/tools/flashpp-fp8-bench" --reps "$REPS" >"$LOG/bench.log" 2>&1
    rc=$?
    grep '^fp8 bench: D=' "$LOG/bench.log" | sed -E \
      's/^fp8 bench: D=([0-9]+) N=([0-9]+) causal=([01]) B=[0-9]+ H=[0-9]+ bf16 ([0-9.]+) TFLOPS fp8 ([0-9.]+) TFLOPS ratio ([0-9.]+) \(target 1.6: ([A-Za-z]+)\)/  \1  \2  \3       \4        \5       \6   \7/' \
      >"$LOG/bench_table.txt"
    rows=$(wc -l <"$LOG/bench_table.txt")
    met=$(grep -c 'PASS' "$LOG/bench_table.txt")
    if [ "$rc" = 0 ] && [ "$rows" -gt 0 ]; then
      S[bench]="$met of $rows configurations at >= 1.6x"
    else
      S[bench]="FAILED or incomplete (exit $rc, $rows rows; see $LOG/bench.log)"
      tail -n 10 "$LOG/bench.log"
    fi
  else
    S[bench]="skipped (deadline)"
  fi
fi
exit "$status"

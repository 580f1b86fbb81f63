#!/usr/bin/env bash
# Issue 17 on the lent GPU machine, in one command: build (the build step of tools/gpu_check.sh),
# the decode/varlen GPU tests, compute-sanitizer on their small cases, then the decode, paged and
# varlen benchmarks (tools/decode_bench.py). Prints a short summary and the tables last; logs go
# to $OUT (the device tool's folder) or ./decode-check-out.
#
#   tools/decode_gpu_check.sh [--deadline SECONDS] [--quick] [--no-sanitizer] [--all-tests]
#                             [--archs "80;90a"] [--ab] [--sweep-splits 16,32,64]
#
# --deadline (default 480): stages that would start after this many seconds are skipped (and say
# so), and the benchmark stops starting new cells then, so the summary always comes out.
# --quick: Nk in {4096, 32768} only, fewer rounds. --all-tests: the whole GPU suite instead of
# the decode/varlen tests. --ab: the benchmark also times the legacy decode variant
# (FLASHPP_DECODE_VARIANT=legacy) interleaved with the default one; --sweep-splits: forced split
# counts (FLASHPP_DECODE_SPLITS) on the B = 1 decode cells (tools/decode_bench.py). Exit status 0 only when the build, tests and sanitizer passed and the
# benchmark ran (whether the speed targets are met is in the tables).
set -uo pipefail
cd "$(dirname "$0")/.."

DEADLINE=480 QUICK="" RUN_SAN=1 FILTER='*Decode*:*VarlenCuda*' ARCHS="" BENCH_EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --deadline) DEADLINE="$2"; shift ;;
    --quick) QUICK=--quick ;;
    --no-sanitizer) RUN_SAN=0 ;;
    --all-tests) FILTER='*' ;;
    --archs) ARCHS="$2"; shift ;;
    --ab) BENCH_EXTRA+=(--ab) ;;
    --sweep-splits) BENCH_EXTRA+=(--sweep-splits "$2"); shift ;;
    *) echo "decode_gpu_check: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

LOGS="${OUT:-$PWD/decode-check-out}"
mkdir -p "$LOGS"
BUILD="${FLASHPP_DECODE_BUILD_DIR:-build-decode-check}"
START=$(date +%s)
SUMMARY=()
status=0
elapsed() { echo $(( $(date +%s) - START )); }
time_left() {
  if [ "$(elapsed)" -lt "$DEADLINE" ]; then return 0; fi
  SUMMARY+=("$1: SKIPPED (deadline of $DEADLINE s reached)")
  status=1
  return 1
}
finish() {
  echo
  echo "== decode check summary ($(elapsed) s) =="
  printf '%s\n' "${SUMMARY[@]}" | tee "$LOGS/summary.txt"
  if [ -f "$LOGS/decode_tables.txt" ]; then echo; cat "$LOGS/decode_tables.txt"; fi
  exit "$status"
}

for tool in cmake ninja nvidia-smi python3; do
  command -v "$tool" >/dev/null || { SUMMARY+=("setup: FAILED: $tool not found"); status=1; finish; }
done
if [ -z "$ARCHS" ]; then
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
  case "$cap" in
    90) ARCHS="90a" ;;
    "") ARCHS="80;90a" ;;
    *) ARCHS="$cap" ;;
  esac
fi
GPU=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)
SUMMARY+=("gpu: $GPU (archs $ARCHS)")

# Build: as tools/gpu_check.sh does (GoogleTest from ./.gtest where none is installed); a plain
# (non-poison) build, since the benchmark uses it too; the tests poison outputs and workspaces.
GTEST_ARG=()
[ -d .gtest ] && GTEST_ARG=(-DFLASHPP_GTEST_SOURCE_DIR="$PWD/.gtest")
echo "== configure + build ($BUILD, archs $ARCHS) =="
t0=$(date +%s)
if cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHPP_CUDA=ON \
      -DFLASHPP_CUDA_ARCHS="$ARCHS" -DFLASHPP_BUILD_TOOLS=OFF -DFLASHPP_BUILD_TESTS=ON \
      "${GTEST_ARG[@]}" >"$LOGS/build.log" 2>&1 &&
   ninja -C "$BUILD" -j"$(nproc)" flashpp_shared flashpp_gpu_tests >>"$LOGS/build.log" 2>&1; then
  SUMMARY+=("build: ok ($(( $(date +%s) - t0 )) s)")
else
  grep -E "error|Error" "$LOGS/build.log" | head -30
  tail -n 20 "$LOGS/build.log"
  SUMMARY+=("build: FAILED (see build.log)")
  status=1
  finish
fi
TESTS="$BUILD/tests/gpu/flashpp_gpu_tests"

if time_left "gpu tests"; then
  echo "== GPU tests ($FILTER) =="
  t0=$(date +%s)
  if "$TESTS" --gtest_filter="$FILTER" >"$LOGS/gpu_tests.log" 2>&1; then
    SUMMARY+=("gpu tests: PASSED: $(grep -E '^\[  PASSED  \]' "$LOGS/gpu_tests.log" | head -1 | sed 's/\[  PASSED  \] //') ($(( $(date +%s) - t0 )) s)")
    if grep -q "SKIPPED" "$LOGS/gpu_tests.log"; then
      # The tests skip only where no GPU is visible: here that is a failure.
      status=1
      SUMMARY+=("gpu tests: FAILED: $(grep -cE '^\[  SKIPPED \] [A-Za-z]' "$LOGS/gpu_tests.log") tests skipped (no GPU visible to them?)")
    fi
  else
    status=1
    grep -E "Failure|Expected|worst|got|B=|lens_q" "$LOGS/gpu_tests.log" | head -30
    SUMMARY+=("gpu tests: FAILED: $(grep -E '^\[  FAILED  \] [A-Za-z]' "$LOGS/gpu_tests.log" | sed 's/\[  FAILED  \] //' | tr '\n' ' ' | cut -c1-400)")
  fi
fi

if [ "$RUN_SAN" = 1 ]; then
  SAN_FILTER='*DecodeVsOracle*contiguous_d128*:*DecodeVsOracle*paged16*:*DecodeVsOracle*long_splits*:*DecodeVsOracle*gqa16*:*DecodeUnchecked*:*DecodeSplits*nq4_short*:*VarlenCuda*'
  if ! command -v compute-sanitizer >/dev/null; then
    SUMMARY+=("sanitizer: FAILED: compute-sanitizer not found")
    status=1
  else
    san=()
    for tool in memcheck racecheck synccheck; do
      time_left "sanitizer $tool" || continue
      echo "== compute-sanitizer $tool =="
      if compute-sanitizer --tool "$tool" --error-exitcode 9 "$TESTS" --gtest_filter="$SAN_FILTER" \
          >"$LOGS/sanitizer_$tool.log" 2>&1; then
        san+=("$tool clean")
      else
        status=1
        tail -n 20 "$LOGS/sanitizer_$tool.log"
        san+=("$tool FAILED")
      fi
    done
    [ ${#san[@]} -gt 0 ] && SUMMARY+=("sanitizer (small cases): $(IFS=', '; echo "${san[*]}")")
  fi
fi

if time_left "benchmark"; then
  echo "== benchmarks (tools/decode_bench.py) =="
  left=$(( DEADLINE - $(elapsed) ))
  if PYTHONUNBUFFERED=1 python3 tools/decode_bench.py --lib "$BUILD/libflashpp.so" --out "$LOGS" \
        $QUICK --deadline "$left" ${BENCH_EXTRA[@]+"${BENCH_EXTRA[@]}"} >"$LOGS/bench_stdout.log" 2>&1; then
    if grep -q "skipped (deadline)" "$LOGS/decode_bench.log" 2>/dev/null; then
      SUMMARY+=("benchmark: PARTIAL ($(grep -c 'skipped (deadline)' "$LOGS/decode_bench.log") cells skipped by the deadline)")
    else
      SUMMARY+=("benchmark: ok")
    fi
  else
    status=1
    tail -n 25 "$LOGS/bench_stdout.log"
    SUMMARY+=("benchmark: FAILED (see bench_stdout.log)")
  fi
fi
finish

#!/usr/bin/env bash
# One command for the lent GPU machine (also `make gpu-check`): configure and build with every
# core, run the GPU tests, run compute-sanitizer (memcheck, racecheck, synccheck) on the small
# shapes, then benchmark against torch SDPA (tools/gpu_compare.py) and print, last, a summary
# and the table. Logs go to $OUT (the device tool's folder) or ./gpu-check-out.
#
#   tools/gpu_check.sh [--quick] [--fwd-only] [--no-tests] [--no-sanitizer] [--parallel-sanitizer]
#                      [--parallel] [--pass "VAR=VALUE" FILTER]... [--no-bench] [--no-poison]
#                      [--archs "80;90a"] [--filter GTEST_FILTER] [--bench-args "..."]
#                      [--variants "1 2 3"] [--variant NAME "NVCC FLAGS"]... [--variant-args "..."]
#                      [--baseline DIR] [--deadline SECONDS]
#
# --parallel-sanitizer: start the three compute-sanitizer runs right after the build, side by side
# with each other and with the test passes (they only check correctness, so sharing the GPU and
# the cores changes no result), and collect them before the benchmark: a check that fits one
# time-limited call. Each is cut at the deadline (timeout), which then counts as not run.
# --parallel: --parallel-sanitizer, and the test passes below (the environment passes of a Hopper
# build and any --pass) run side by side with the main pass too (needs the GPU memory of several
# large-tensor tests at once: fine on an H200, tight on an H100). --pass "VAR=VALUE" FILTER
# (repeatable): one more pass of the test binary with VAR=VALUE set, over the tests FILTER.
# --no-poison: run the tests on the plain build (by default they run on a -DFLASHPP_POISON=ON build,
# where kernels NaN-fill their shared memory and the backward its workspace before use).
# --deadline: skip the remaining stages (sanitizer, benchmark, variants) once this many seconds
# have passed since the start, so that a time-limited call still ends with its summary.
# --quick: the benchmark's N in {4096, 16384} only. --variants: also build the forward with each
# alternative tile table of src/cuda/sm80/forward/tile_config.hpp (FLASHPP_FWD_VARIANT) and time
# it alone (fp16, D 64/128, N 4096/16384, forward), for tuning. --variant NAME FLAGS (repeatable)
# builds the library once more with FLAGS added to the CUDA compile line (e.g.
# "-DFLASHPP_BWD_TILE_VARIANT=2") and runs tools/gpu_compare.py on it with --variant-args
# (default "--quick --peers none --dtypes fp16"; e.g. "--bwd-only --dims 64 --peers flash"), after
# the main benchmark, so the tables of every variant come from the same session. With --ab the
# variants are built first and timed inside the main benchmark instead (gpu_compare.py --alt:
# interleaved with ours in one process, the fairest A/B). --baseline DIR (implies --ab) also
# builds the source tree at DIR (e.g. a `git worktree` of the last commit, carried to the
# machine) and times it as column `base`: the A/B of uncommitted changes that have no knob. The build targets the GPU present
# (compute capability read from nvidia-smi, e.g. 90a on an H100) unless --archs says otherwise.
# GoogleTest is taken from ./.gtest when the machine has none installed (copy /usr/src/googletest
# there once and carry it).
set -uo pipefail
cd "$(dirname "$0")/.."

POISON=1 QUICK="" FWD_ONLY="" RUN_TESTS=1 RUN_SAN=1 RUN_BENCH=1 ARCHS="" FILTER="*" BENCH_ARGS="" VARIANTS="" DEADLINE=1000000
NAMED_VARIANTS=() VARIANT_FLAGS=() VARIANT_ARGS="--quick --peers none --dtypes fp16" AB=0 BASELINE="" PAR_SAN=0 PAR_TESTS=0
EXTRA_PASSES=() EXTRA_FILTERS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=--quick ;;
    --fwd-only) FWD_ONLY=--fwd-only ;;
    --no-tests) RUN_TESTS=0 ;;
    --no-sanitizer) RUN_SAN=0 ;;
    --parallel-sanitizer) PAR_SAN=1 ;;
    --parallel) PAR_SAN=1; PAR_TESTS=1 ;;
    --pass) EXTRA_PASSES+=("$2"); EXTRA_FILTERS+=("$3"); shift 2 ;;
    --no-bench) RUN_BENCH=0 ;;
    --no-poison) POISON=0 ;;
    --archs) ARCHS="$2"; shift ;;
    --filter) FILTER="$2"; shift ;;
    --bench-args) BENCH_ARGS="$2"; shift ;;
    --variants) VARIANTS="$2"; shift ;;
    --variant) NAMED_VARIANTS+=("$2"); VARIANT_FLAGS+=("$3"); shift 2 ;;
    --variant-args) VARIANT_ARGS="$2"; shift ;;
    --ab) AB=1 ;;
    --baseline) BASELINE="$2"; AB=1; shift ;;
    --deadline) DEADLINE="$2"; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

# Logs are written to a scratch folder and packed into $OUT/gpu_check_logs.tar.gz at the end
# (the device tool returns at most 8 files), next to summary.txt.
FINAL_OUT="${OUT:-$PWD/gpu-check-out}"
OUT="$(mktemp -d /tmp/gpu-check.XXXXXX)"
mkdir -p "$FINAL_OUT"
BUILD="${FLASHPP_GPU_BUILD_DIR:-build-gpu}"
SUMMARY=()
status=0
START=$(date +%s)
# time_left STAGE: true while the deadline has not passed; otherwise notes the skip.
time_left() {
  if [ $(( $(date +%s) - START )) -lt "$DEADLINE" ]; then return 0; fi
  SUMMARY+=("$1: skipped (deadline of $DEADLINE s reached)")
  return 1
}

if [ -z "$ARCHS" ]; then
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
  case "$cap" in
    90) ARCHS="90a" ;;
    "") ARCHS="80;90a" ;;
    *) ARCHS="$cap" ;;
  esac
fi

GTEST_ARG=()
[ -d .gtest ] && GTEST_ARG=(-DFLASHPP_GTEST_SOURCE_DIR="$PWD/.gtest")

# Two builds: the tests and the sanitizer run a poison build (-DFLASHPP_POISON=ON: kernels fill
# their shared memory, the backward its workspace, with NaN before use, so an unwritten element
# read shows; --no-poison tests the plain build instead); the benchmark times the plain build.
TEST_BUILD="$BUILD"
[ "$POISON" = 1 ] && TEST_BUILD="$BUILD-poison"
build_tree() {  # build_tree DIR POISON(ON|OFF) TARGETS...
  local dir="$1" poison="$2"; shift 2
  cmake -S . -B "$dir" -G Ninja -DFLASHPP_CUDA=ON -DFLASHPP_CUDA_ARCHS="$ARCHS" -DFLASHPP_POISON="$poison" \
      -DFLASHPP_BUILD_TOOLS=OFF -DFLASHPP_BUILD_TESTS=ON "${GTEST_ARG[@]}" >"$OUT/configure_$(basename "$dir").log" 2>&1 &&
    ninja -C "$dir" -j"$(nproc)" "$@" >"$OUT/build_$(basename "$dir").log" 2>&1
}
echo "== configure + build (archs $ARCHS) =="
t0=$(date +%s)
built=()
if [ "$RUN_TESTS" = 1 ] || [ "$RUN_SAN" = 1 ]; then
  poison_flag=OFF; [ "$POISON" = 1 ] && poison_flag=ON
  if build_tree "$TEST_BUILD" "$poison_flag" flashpp flashpp_shared flashpp_gpu_tests; then
    built+=("$TEST_BUILD")
  else
    tail -n 40 "$OUT"/configure_*.log "$OUT"/build_*.log
    echo "BUILD FAILED (logs in $OUT)"
    exit 1
  fi
fi
if [ ${#built[@]} = 0 ] || { [ "$TEST_BUILD" != "$BUILD" ] && [ "$RUN_BENCH" = 1 ]; }; then
  if build_tree "$BUILD" OFF flashpp flashpp_shared; then
    built+=("$BUILD")
  else
    tail -n 40 "$OUT"/build_*.log
    echo "BUILD FAILED (logs in $OUT)"
    exit 1
  fi
fi
SUMMARY+=("build: ok ($(( $(date +%s) - t0 )) s, archs $ARCHS: ${built[*]})")
TESTS="$TEST_BUILD/tests/gpu/flashpp_gpu_tests"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"

# The sm90 kernels must run on the Hopper instructions: HGMMA (wgmma) and bulk tensor copies
# (UTMALDG), no HMMA (mma.sync) in their objects.
# (The instances are generated into the build tree: cuda_instances/sm90_*.cu, src/cuda/instances.cmake.)
sm90_objects=$(find "${built[0]}" \( -path '*src/cuda/sm90/*' -o -path '*/cuda_instances/sm90_*' \) -name '*.o' 2>/dev/null)
if [ -n "$sm90_objects" ] && command -v cuobjdump >/dev/null; then
  hgmma=0 hmma=0 tma=0
  for obj in $sm90_objects; do
    sass=$(cuobjdump -sass "$obj")
    hgmma=$((hgmma + $(grep -c 'HGMMA' <<<"$sass")))
    hmma=$((hmma + $(grep -c 'HMMA' <<<"$sass")))
    tma=$((tma + $(grep -c 'UTMALDG' <<<"$sass")))
  done
  if [ "$hgmma" -gt 0 ] && [ "$hmma" -eq 0 ] && [ "$tma" -gt 0 ]; then
    SUMMARY+=("sass sm90: ok ($hgmma HGMMA, $tma UTMALDG, 0 HMMA in $(wc -w <<<"$sm90_objects") objects)")
  else
    status=1
    SUMMARY+=("sass sm90: FAILED ($hgmma HGMMA, $hmma HMMA, $tma UTMALDG)")
  fi
  # The same per kernel: each sm90 attention kernel holds HGMMA (QGMMA for FP8), none HMMA.
  lib="${built[0]}/libflashpp.so"
  if [ -e "$lib" ]; then
    if python3 tools/sass_check.py "$lib" >"$OUT/sass_check.txt" 2>&1; then
      SUMMARY+=("sass per kernel: $(tail -n 2 "$OUT/sass_check.txt" | head -n 1)")
    else
      status=1
      SUMMARY+=("sass per kernel: FAILED (see $OUT/sass_check.txt)")
    fi
  fi
fi

# run_sanitizer TOOL: compute-sanitizer TOOL over the small shapes of the test build.
run_sanitizer() {
  FLASHPP_SM90_BACKWARD=1 compute-sanitizer --tool "$1" --error-exitcode 9 "$TESTS" --gtest_filter='*Small*' \
    >"$OUT/sanitizer_$1.log" 2>&1
}
san_result() {  # san_result TOOL STATUS
  if [ "$2" = 0 ]; then
    SUMMARY+=("sanitizer $1: clean ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer_$1.log" | tail -1))")
  elif [ "$2" = 124 ]; then
    SUMMARY+=("sanitizer $1: NOT RUN to the end (cut at the deadline)")
  else
    status=1
    tail -n 30 "$OUT/sanitizer_$1.log"
    SUMMARY+=("sanitizer $1: FAILED (see $OUT/sanitizer_$1.log)")
  fi
}
SAN_PIDS=()
if [ "$RUN_SAN" = 1 ] && [ "$PAR_SAN" = 1 ]; then
  left=$(( DEADLINE - ($(date +%s) - START) ))
  [ "$left" -gt 1000000 ] && left=1000000
  echo "== compute-sanitizer memcheck, racecheck, synccheck (in the background, ${left} s at most) =="
  for tool in memcheck racecheck synccheck; do
    ( timeout "$left" bash -c "$(declare -f run_sanitizer); OUT='$OUT' TESTS='$TESTS' run_sanitizer $tool" ) &
    SAN_PIDS+=("$tool:$!")
  done
fi
# The passes after the main one: on Hopper builds the main pass ran the sm90 forward and backward
# wherever they apply; the oracle tests run again with the sm90 backward off
# (FLASHPP_SM90_BACKWARD=0: the sm80 backward behind the sm90 forward, as softcap/dropout users
# get), the deterministic tests with the sm90 deterministic mode opted in (=1), and on the
# portable family alone (FLASHPP_CUDA_FAMILY=sm80), which Ampere/Ada users get. Then any --pass.
PASSES=() PASS_FILTERS=()
if [[ "$ARCHS" == *90a* ]]; then
  PASSES+=("FLASHPP_SM90_BACKWARD=0" "FLASHPP_SM90_BACKWARD=1" "FLASHPP_CUDA_FAMILY=sm80")
  # =1 adds only the sm90 deterministic mode (opt-in) to what the main pass ran.
  PASS_FILTERS+=("$FILTER:-*Families*:*Sm90*:Primitives*" "CudaBackward.*Determin*:CudaBackward.Empty*"
                 "$FILTER:-*Families*:*Sm90*:Primitives*")
fi
PASSES+=("${EXTRA_PASSES[@]}") PASS_FILTERS+=("${EXTRA_FILTERS[@]}")
run_pass() {  # run_pass VAR=VALUE FILTER LOG
  env "$1" "$TESTS" --gtest_filter="$2" >"$3" 2>&1
}
pass_result() {  # pass_result VAR=VALUE LOG STATUS
  if [ "$3" = 0 ]; then
    SUMMARY+=("gpu tests ($1): $(grep -E '^\[  PASSED  \]' "$2" | head -1)")
  elif [ "$3" = 124 ]; then
    status=1
    SUMMARY+=("gpu tests ($1): NOT RUN to the end (cut at the deadline)")
  else
    status=1
    grep -E "Failure|FAILED|Expected|Which is" "$2" | head -20
    SUMMARY+=("gpu tests ($1): FAILED: $(grep -E '^\[  FAILED  \] [A-Za-z]' "$2" | tr '\n' ' ')")
  fi
}
PASS_PIDS=()
if [ "$RUN_TESTS" = 1 ] && [ "$PAR_TESTS" = 1 ]; then
  left=$(( DEADLINE - ($(date +%s) - START) ))
  [ "$left" -gt 1000000 ] && left=1000000
  for idx in "${!PASSES[@]}"; do
    echo "== GPU tests, ${PASSES[$idx]} (in the background) =="
    log="$OUT/gpu_tests_${PASSES[$idx]//=/_}.log"
    ( timeout "$left" bash -c "$(declare -f run_pass); TESTS='$TESTS' run_pass '${PASSES[$idx]}' '${PASS_FILTERS[$idx]}' '$log'" ) &
    PASS_PIDS+=("$!")
  done
fi

if [ "$RUN_TESTS" = 1 ]; then
  echo "== GPU tests =="
  t0=$(date +%s)
  if "$TESTS" --gtest_filter="$FILTER" >"$OUT/gpu_tests.log" 2>&1; then
    SUMMARY+=("gpu tests: $(grep -E '^\[  PASSED  \]' "$OUT/gpu_tests.log" | head -1) ($(( $(date +%s) - t0 )) s)")
  else
    status=1
    grep -E "Failure|FAILED|error|Expected|Which is|describe|B=" "$OUT/gpu_tests.log" | head -40
    SUMMARY+=("gpu tests: FAILED: $(grep -E '^\[  FAILED  \] [A-Za-z]' "$OUT/gpu_tests.log" | tr '\n' ' ')")
  fi
  for idx in "${!PASSES[@]}"; do
    log="$OUT/gpu_tests_${PASSES[$idx]//=/_}.log"
    if [ "$PAR_TESTS" = 1 ]; then
      wait "${PASS_PIDS[$idx]}"
      pass_result "${PASSES[$idx]}" "$log" $?
    else
      time_left "gpu tests (${PASSES[$idx]})" || continue
      echo "== GPU tests, ${PASSES[$idx]} =="
      run_pass "${PASSES[$idx]}" "${PASS_FILTERS[$idx]}" "$log"
      pass_result "${PASSES[$idx]}" "$log" $?
    fi
  done
fi

if [ "$RUN_SAN" = 1 ] && [ "$PAR_SAN" = 1 ]; then
  for entry in "${SAN_PIDS[@]}"; do
    wait "${entry#*:}"
    san_result "${entry%%:*}" $?
  done
elif [ "$RUN_SAN" = 1 ]; then
  for tool in memcheck racecheck synccheck; do
    time_left "sanitizer $tool" || continue
    echo "== compute-sanitizer $tool =="
    run_sanitizer "$tool"
    san_result "$tool" $?
  done
fi

# build_variant NAME FLAGS [SOURCE_DIR]: configure and build the library with FLAGS added (into
# $BUILD-NAME), from this tree or SOURCE_DIR.
build_variant() {
  cmake -S "${3:-.}" -B "$BUILD-$1" -G Ninja -DFLASHPP_CUDA=ON -DFLASHPP_CUDA_ARCHS="$ARCHS" \
    -DFLASHPP_BUILD_TOOLS=OFF -DFLASHPP_BUILD_TESTS=OFF -DCMAKE_CUDA_FLAGS="$2" \
    >"$OUT/configure_$1.log" 2>&1 && ninja -C "$BUILD-$1" -j"$(nproc)" flashpp_shared >"$OUT/build_$1.log" 2>&1
}
ALT_ARGS=()
if [ -n "$BASELINE" ]; then
  echo "== baseline tree $BASELINE: build for the A/B benchmark =="
  if build_variant base "" "$BASELINE"; then
    ALT_ARGS+=(--alt "base=$BUILD-base/libflashpp.so")
    SUMMARY+=("baseline $BASELINE: built, timed in the main benchmark as 'base'")
  else
    tail -n 20 "$OUT/build_base.log"
    SUMMARY+=("baseline $BASELINE: BUILD FAILED")
  fi
fi
if [ "$AB" = 1 ]; then
  for idx in "${!NAMED_VARIANTS[@]}"; do
    name="${NAMED_VARIANTS[$idx]}"
    echo "== variant $name (${VARIANT_FLAGS[$idx]}): build for the A/B benchmark =="
    if build_variant "$name" "${VARIANT_FLAGS[$idx]}"; then
      ALT_ARGS+=(--alt "$name=$BUILD-$name/libflashpp.so")
      SUMMARY+=("variant $name: built, timed in the main benchmark")
    else
      tail -n 20 "$OUT/build_$name.log"
      SUMMARY+=("variant $name: BUILD FAILED")
    fi
  done
  NAMED_VARIANTS=()
fi

if [ "$RUN_BENCH" = 1 ] && time_left "benchmark"; then
  echo "== benchmark vs torch SDPA =="
  if PYTHONUNBUFFERED=1 python3 tools/gpu_compare.py --lib "$BUILD/libflashpp.so" --out "$OUT" \
      $QUICK $FWD_ONLY $BENCH_ARGS "${ALT_ARGS[@]}" >"$OUT/bench_stdout.log" 2>&1; then
    SUMMARY+=("benchmark: ok")
  else
    status=1
    tail -n 30 "$OUT/bench_stdout.log"
    SUMMARY+=("benchmark: FAILED (see $OUT/bench_stdout.log)")
  fi
fi

for v in $VARIANTS; do
  time_left "variant $v" || continue
  echo "== tile variant $v =="
  vb="$BUILD-v$v"
  if cmake -S . -B "$vb" -G Ninja -DFLASHPP_CUDA=ON -DFLASHPP_CUDA_ARCHS="$ARCHS" \
        -DFLASHPP_BUILD_TOOLS=OFF -DFLASHPP_BUILD_TESTS=OFF -DCMAKE_CUDA_FLAGS="-DFLASHPP_FWD_VARIANT=$v" \
        >"$OUT/configure_v$v.log" 2>&1 && ninja -C "$vb" -j"$(nproc)" flashpp_shared >"$OUT/build_v$v.log" 2>&1 &&
     PYTHONUNBUFFERED=1 python3 tools/gpu_compare.py --lib "$vb/libflashpp.so" --out "$OUT" --tag "v$v" \
        --fwd-only --quick --peers none --dtypes fp16 >>"$OUT/bench_variants.log" 2>&1; then
    SUMMARY+=("variant $v: ok")
  else
    tail -n 20 "$OUT/build_v$v.log" "$OUT/bench_variants.log" 2>/dev/null
    SUMMARY+=("variant $v: FAILED")
  fi
done

for idx in "${!NAMED_VARIANTS[@]}"; do
  name="${NAMED_VARIANTS[$idx]}" flags="${VARIANT_FLAGS[$idx]}"
  time_left "variant $name" || continue
  echo "== variant $name ($flags) =="
  vb="$BUILD-$name"
  # shellcheck disable=SC2086  # VARIANT_ARGS is a list of options
  if build_variant "$name" "$flags" &&
     PYTHONUNBUFFERED=1 python3 tools/gpu_compare.py --lib "$vb/libflashpp.so" --out "$OUT" --tag "$name" \
        $VARIANT_ARGS >>"$OUT/bench_variants.log" 2>&1; then
    SUMMARY+=("variant $name: ok")
  else
    tail -n 20 "$OUT/build_$name.log" "$OUT/bench_variants.log" 2>/dev/null
    SUMMARY+=("variant $name: FAILED")
  fi
done

echo
echo "== summary =="
printf '%s\n' "${SUMMARY[@]}" | tee "$OUT/summary.txt"
for v in $VARIANTS; do [ -f "$OUT/gpu_compare_table_v$v.txt" ] && { echo; cat "$OUT/gpu_compare_table_v$v.txt"; }; done
for name in "${NAMED_VARIANTS[@]}"; do [ -f "$OUT/gpu_compare_table_$name.txt" ] && { echo; cat "$OUT/gpu_compare_table_$name.txt"; }; done
[ -f "$OUT/gpu_compare_table.txt" ] && { echo; cat "$OUT/gpu_compare_table.txt"; }
tar -czf "$FINAL_OUT/gpu_check_logs.tar.gz" -C "$OUT" . 2>/dev/null
cp "$OUT/summary.txt" "$FINAL_OUT/" 2>/dev/null
cat "$OUT"/gpu_compare_table*.txt >"$FINAL_OUT/tables.txt" 2>/dev/null
exit $status

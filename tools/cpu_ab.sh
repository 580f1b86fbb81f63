#!/usr/bin/env bash
# A/B of CPU-backend builds in one process (for the GPU host's Xeon, or any machine): builds the
# library once per variant with its compiler flags added, optionally the test binary of some of
# them (and runs the CPU oracle tests on them at one kernel level), then times every variant's
# forward against torch's CPU SDPA in the same rounds (tools/flashpp_capi.py --alt).
#
#   tools/cpu_ab.sh [--baseline DIR] [--test NAME]... [--isa LEVEL] [--threads "2 16"]
#                   [--args "..."] NAME="FLAGS" [NAME="FLAGS"]...
#
# --baseline DIR: a source tree (e.g. `git archive <rev> | tar -x -C .base`) built as one more
# variant, `base`. The first NAME is the reference (flashpp_capi.py's --lib: its ROW lines time its
# forward and backward against torch); the others, base last, are ALT lines (forward only). --test NAME: also build that
# variant's flashpp_tests and run the oracle sweep, dropout and empty-row tests with
# FLASHPP_CPU_ISA=LEVEL (default amx). --args: extra flashpp_capi.py arguments (default
# "--dtypes bf16 --fwd-only --reps 5"). Builds go to /tmp/cpu-ab-NAME; logs and tables to $OUT
# (or ./cpu-ab-out). The variants are built with -fno-gnu-unique so that several copies of the
# library keep their own globals in one process.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/cpu-ab-out}"
mkdir -p "$OUT"
BASELINE="" ISA=amx THREADS="2 16" ARGS="--dtypes bf16 --fwd-only --reps 5"
TESTS=() NAMES=() FLAGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --baseline) BASELINE="$2"; shift ;;
    --test) TESTS+=("$2"); shift ;;
    --isa) ISA="$2"; shift ;;
    --threads) THREADS="$2"; shift ;;
    --args) ARGS="$2"; shift ;;
    *=*) NAMES+=("${1%%=*}"); FLAGS+=("${1#*=}") ;;
    *) echo "cpu_ab.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
if [ -n "$BASELINE" ]; then NAMES+=(base); FLAGS+=(""); fi
[ "${#NAMES[@]}" -gt 0 ] || { echo "cpu_ab.sh: no variants" >&2; exit 2; }
GTEST_ARG=()
[ -d .gtest ] && GTEST_ARG=(-DFLASHPP_GTEST_SOURCE_DIR="$PWD/.gtest")

wants_tests() { local t; for t in "${TESTS[@]}"; do [ "$t" = "$1" ] && return 0; done; return 1; }
build() {  # build NAME FLAGS
  local src=. tests=OFF targets=(flashpp_shared)
  [ "$1" = base ] && [ -n "$BASELINE" ] && src="$BASELINE"
  if wants_tests "$1"; then tests=ON; targets+=(flashpp_tests); fi
  cmake -S "$src" -B "/tmp/cpu-ab-$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHPP_CUDA=OFF \
      -DFLASHPP_BUILD_TOOLS=OFF -DFLASHPP_BUILD_TESTS=$tests "${GTEST_ARG[@]}" \
      "-DCMAKE_CXX_FLAGS=-fno-gnu-unique $2" >"$OUT/configure_$1.log" 2>&1 &&
    ninja -C "/tmp/cpu-ab-$1" "${targets[@]}" >"$OUT/build_$1.log" 2>&1
}
for i in "${!NAMES[@]}"; do build "${NAMES[$i]}" "${FLAGS[$i]}" & done
wait
ok=()
for n in "${NAMES[@]}"; do
  if [ -f "/tmp/cpu-ab-$n/libflashpp.so" ]; then ok+=("$n"); else
    echo "BUILD FAILED: $n"; tail -n 15 "$OUT/build_$n.log" 2>/dev/null || tail -n 15 "$OUT/configure_$n.log"
  fi
done

FILTER='*CpuVsOracle*:*NoVisibleKey*/cpu_*:*DropoutMask*/cpu:CpuBackend.*'
for n in "${TESTS[@]}"; do
  bin="/tmp/cpu-ab-$n/tests/flashpp_tests"
  [ -x "$bin" ] || { echo "tests $n: not built"; continue; }
  FLASHPP_CPU_ISA="$ISA" "$bin" --gtest_filter="$FILTER" >"$OUT/tests_$n.log" 2>&1
  echo "tests $n (FLASHPP_CPU_ISA=$ISA): exit $? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/tests_$n.log" | tr '\n' ' ')"
done

[ "${#ok[@]}" -gt 0 ] || exit 1
ALTS=()
for n in "${ok[@]:1}"; do ALTS+=(--alt "$n=/tmp/cpu-ab-$n/libflashpp.so"); done
for t in $THREADS; do
  # shellcheck disable=SC2086
  python3 tools/flashpp_capi.py --lib "/tmp/cpu-ab-${ok[0]}/libflashpp.so" "${ALTS[@]}" \
      --threads "$t" $ARGS >"$OUT/ab_threads$t.log" 2>&1
  echo "== threads $t (reference: ${ok[0]}) =="
  grep -E "^(#|ALT|ROW)" "$OUT/ab_threads$t.log"
done

#!/usr/bin/env bash
# Nsight Compute profiles of the CUDA kernels at one shape each, for tuning on the lent GPU:
# builds libflashpp.so (with all cores), then for each case runs one forward or backward under
# ncu (full set + SASS-level source counters) and writes, to $OUT (or ./profile-out):
#   <case>.txt       the details page (throughput, occupancy, stall reasons)
#   <case>_sass.csv  per-SASS-instruction samples (stall reasons, executed instructions);
#                    tools/sass_summary.py prints its stall reasons, opcode mix and hot spots
#
#   tools/profile_kernels.sh [CASE ...]     CASE = pass:dtype:D:N:causal[:impl[:kernel]],
#                                           e.g. bwd:fp16:64:4096:0 or bwd:fp16:64:4096:0:ours:postprocess
#                                           impl: ours (default) or flash (torch SDPA's FA2 kernel)
#                                           kernel: a name regex instead of the pass's main kernel
#                                           or fp8:D:N (the FP8 forward, bf16 output, non-causal)
#                                           and fp8ref:D:N (our bf16 forward, same shape): the first
#                                           launch of each in tools/fp8_bench (B*N = 16384, H*D = 2048)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/profile-out}"
mkdir -p "$OUT"
BUILD="${FLASHPP_GPU_BUILD_DIR:-build-gpu}"
CASES=("$@")
[ ${#CASES[@]} -eq 0 ] && CASES=(bwd:fp16:64:4096:0 bwd:fp16:128:4096:0 fwd:fp16:128:4096:0)
TOOLS=OFF TARGETS=(flashpp_shared)
case " ${CASES[*]}" in *" fp8"*) TOOLS=ON; TARGETS+=(flashpp-fp8-bench) ;; esac
cmake -S . -B "$BUILD" -G Ninja -DFLASHPP_CUDA=ON -DFLASHPP_CUDA_ARCHS=90a -DFLASHPP_BUILD_TOOLS=$TOOLS \
  -DFLASHPP_BUILD_TESTS=OFF >"$OUT/configure.log" 2>&1 &&
  ninja -C "$BUILD" -j"$(nproc)" "${TARGETS[@]}" >"$OUT/build.log" 2>&1 || { tail -n 30 "$OUT/build.log"; exit 1; }
report() {  # report NAME: the details page and the SASS export of $OUT/NAME.ncu-rep, and a summary
  ncu --import "$OUT/$1.ncu-rep" --page details >"$OUT/$1.txt" 2>&1
  ncu --import "$OUT/$1.ncu-rep" --page source --csv --print-source sass >"$OUT/${1}_sass.csv" 2>&1
  rm -f "$OUT/$1.ncu-rep"
  grep -E "Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|Executed Ipc A|Compute \(SM\) Throughput" "$OUT/$1.txt" | sed "s/^/$1: /"
}
for c in "${CASES[@]}"; do
  case "$c" in
    fp8:*|fp8ref:*)
      IFS=: read -r kind d n <<<"$c"
      name="${kind}_d${d}_n${n}"
      kernel=$([ "$kind" = fp8 ] && echo "regex:flash_fwd_fp8_sm90" || echo "regex:flash_fwd_sm90_kernel")
      bench=$(find "$BUILD" -name flashpp-fp8-bench -type f | head -1)
      ncu --set full --import-source yes -k "$kernel" -c 1 -f -o "$OUT/$name" \
        "$bench" --reps 1 --dims "$d" --lens "$n" >"$OUT/${name}_ncu.log" 2>&1 ||
        { tail -n 5 "$OUT/${name}_ncu.log"; continue; }
      report "$name"
      continue ;;
  esac
  IFS=: read -r pass dtype d n causal impl only <<<"$c"
  impl="${impl:-ours}"
  name="${pass}_${dtype}_d${d}_n${n}_c${causal}$([ "$impl" = ours ] || echo "_$impl")${only:+_$only}"
  if [ "$impl" = flash ]; then
    kernel=$([ "$pass" = fwd ] && echo "regex:flash_fwd" || echo "regex:flash_bwd_dq_dk_dv")
  else
    kernel=$([ "$pass" = fwd ] && echo "regex:fwd" || echo "regex:bwd_main")
  fi
  [ -n "${only:-}" ] && kernel="regex:$only"
  ncu --set full --import-source yes -k "$kernel" -c 1 -f -o "$OUT/$name" \
    python3 tools/run_once.py --lib "$BUILD/libflashpp.so" --pass "$pass" --dtype "$dtype" \
    --dim "$d" --seqlen "$n" --causal "$causal" --impl "$impl" >"$OUT/${name}_ncu.log" 2>&1 || { tail -n 5 "$OUT/${name}_ncu.log"; continue; }
  report "$name"
done

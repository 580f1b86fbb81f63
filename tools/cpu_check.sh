#!/usr/bin/env bash
# CPU check on one machine (made for the GPU host's Xeon: AMX, AVX-512): builds flashpp with
# CUDA off, runs ctest (every CPU kernel level the machine supports, incl. the bf16 engines),
# then flashpp against torch's CPU SDPA in one process (tools/flashpp_capi.py) at B=1, H=8,
# N=4096, D=128, f32/bf16, causal/not, fwd/bwd, 2 and 16 threads. Logs and summary.txt go to
# $OUT (default ./cpu_check_out), with a logs tarball; the short summary is printed last.
#   tools/cpu_check.sh [--deadline SECONDS (default 500)] [--threads "2 16"] [--N 4096]
#                      [--reps 3] [--quick]
#                      [--avx2] (also: flashpp forced to avx2 against torch with
#                                ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2
#                                ONEDNN_MAX_CPU_ISA=AVX2, fp32: an AVX2 machine's proxy)
# ctest runs the bf16 engines' tests first (the amx level's and avx512bf16 level's test sets,
# then the AMX emulation's), so that a deadline cuts the other levels, not those; --quick runs
# only those first tests and benchmarks with 2 repetitions (about 3-4 minutes on a 16-core Xeon).
set -uo pipefail
cd "$(dirname "$0")/.."
deadline_s=500 threads="2 16" N=4096 avx2=0 quick=0 reps=3
while [ $# -gt 0 ]; do
  case $1 in
    --deadline) deadline_s=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --N) N=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --quick) quick=1; reps=2; shift ;;
    --avx2) avx2=1; shift ;;
    *) echo "cpu_check: unknown argument $1" >&2; exit 2 ;;
  esac
done
start=$(date +%s)
end=$((start + deadline_s))
left() { echo $((end - $(date +%s))); }
OUT=${OUT:-$PWD/cpu_check_out}
mkdir -p "$OUT/logs"
log=$OUT/logs
build=${FLASHPP_CPU_CHECK_BUILD:-build-cpu-check}  # (another build directory: for testing this script)
jobs=$(nproc)
summary=$OUT/summary.txt
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }

say "== flashpp cpu_check $(git rev-parse --short HEAD 2>/dev/null || echo '?') on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cpus, deadline ${deadline_s}s"

# ---- build ---------------------------------------------------------------------------------------
# GoogleTest: the installed one, else ./.gtest (a copy of /usr/src/googletest, as gpu_check.sh
# takes it), else /usr/src/googletest.
gtest_arg=""
if [ -d .gtest ]; then
  gtest_arg="-DFLASHPP_GTEST_SOURCE_DIR=$PWD/.gtest"
elif ! [ -e /usr/include/gtest/gtest.h ] && [ -d /usr/src/googletest ]; then
  gtest_arg="-DFLASHPP_GTEST_SOURCE_DIR=/usr/src/googletest"
fi
t0=$(date +%s)
if cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHPP_CUDA=OFF $gtest_arg > "$log/configure.log" 2>&1 &&
   timeout $(( $(left) > 30 ? $(left) - 30 : 1 )) cmake --build $build -j "$jobs" > "$log/build.log" 2>&1; then
  build_ok=1; say "build: ok ($(( $(date +%s) - t0 )) s)"
else
  build_ok=0; say "build: FAILED (logs/configure.log, logs/build.log)"; tail -20 "$log/build.log" "$log/configure.log" 2>/dev/null
fi

lib=$build/libflashpp.so
if [ $build_ok = 1 ]; then
  python3 - "$lib" <<'PY' 2>&1 | tee -a "$summary"
import ctypes, sys
L = ctypes.CDLL(sys.argv[1]); L.flashpp_cpu_kernel.restype = ctypes.c_char_p
f32 = L.flashpp_cpu_kernel(0, 0).decode(); bf = L.flashpp_cpu_kernel(2, 0).decode()
print("cpu: " + f32.split("; cpu: ")[1])
print("kernels: f32 fwd/bwd " + f32.split(";")[0] + "; bf16 fwd " + bf.split(";")[0] + ", bwd " + L.flashpp_cpu_kernel(2, 1).decode().split(";")[0])
PY
fi

# ---- ctest ---------------------------------------------------------------------------------------
if [ $build_ok = 1 ]; then
  budget=$(( $(left) * 45 / 100 ))
  t0=$(date +%s)
  rm -f "$OUT/logs/ctest_engines.xml" "$OUT/logs/ctest.xml"
  # 1. the bf16 engines: the amx and avx512bf16 levels' test sets (skipped with the reason where
  #    the CPU lacks them) and the AMX emulation's; 2. everything else (not with --quick).
  engines='^(isa_amx|isa_avx512bf16|isa_amx_emulated|isa_amx_emulated_omp5)\.'
  ctest --test-dir $build -j "$jobs" --timeout 600 -R "$engines" \
        --stop-time "$(date -d "+${budget} seconds" +%H:%M:%S)" \
        --output-junit "$OUT/logs/ctest_engines.xml" > "$log/ctest_engines.log" 2>&1
  if [ $quick = 0 ]; then
    ctest --test-dir $build -j "$jobs" --timeout 600 -E "$engines" \
          --stop-time "$(date -d "+$(( budget - ($(date +%s) - t0) > 10 ? budget - ($(date +%s) - t0) : 10 )) seconds" +%H:%M:%S)" \
          --output-junit "$OUT/logs/ctest.xml" > "$log/ctest.log" 2>&1
  fi
  python3 - "$OUT/logs/ctest_engines.xml" "$OUT/logs/ctest.xml" <<'PY' 2>&1 | tee -a "$summary"
import os, sys, collections, xml.etree.ElementTree as ET
cases = []
for path in sys.argv[1:]:
    if not os.path.exists(path):
        continue
    try:
        cases += list(ET.parse(path).getroot().iter("testcase"))
    except Exception as e:
        print(f"ctest: no result in {os.path.basename(path)} ({e})")
if not cases:
    print("ctest: no result"); sys.exit()
by = collections.defaultdict(collections.Counter); failed = []
for tc in cases:
    name = tc.get("name"); status = tc.get("status", "")
    group = name.split(".", 1)[0] if name.startswith(("isa_", "omp")) else "default"
    s = "skipped" if (status in ("notrun", "disabled") or tc.find("skipped") is not None) else \
        ("failed" if (tc.find("failure") is not None or status == "fail") else "passed")
    by[group][s] += 1
    if s == "failed": failed.append(name)
tot = collections.Counter()
for c in by.values(): tot.update(c)
print(f"ctest: {tot['passed']} passed, {tot['failed']} failed, {tot['skipped']} skipped/not run")
for g in sorted(by):
    if g.startswith("isa_"):
        c = by[g]; print(f"  engine/level {g[4:]:<11} {c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped")
for n in failed[:10]: print("  FAILED " + n[:160])
PY
  grep -h -m1 "SKIPPED: FLASHPP_CPU_ISA=amx:" "$log/ctest_engines.log" $build/Testing/Temporary/LastTest*.log 2>/dev/null | head -1 | sed 's/^/  amx: /' | tee -a "$summary"
  say "ctest time: $(( $(date +%s) - t0 )) s"
fi

# ---- flashpp vs torch ----------------------------------------------------------------------------
if [ $build_ok = 1 ]; then
  if python3 -c "import torch" 2> "$log/torch_import.log"; then
    for t in $threads; do
      [ "$(left)" -gt 15 ] || { say "bench threads=$t: skipped (deadline)"; continue; }
      timeout $(( $(left) - 5 )) python3 tools/flashpp_capi.py --lib "$lib" --threads "$t" --N "$N" --reps "$reps" \
        --deadline $(( end - 20 )) > "$log/bench_t$t.log" 2>&1 || echo "bench threads=$t: exit $?" >> "$log/bench_t$t.log"
    done
    if [ $avx2 = 1 ] && [ "$(left)" -gt 30 ]; then
      # torch's matrix products go to MKL / oneDNN, which ignore ATEN_CPU_CAPABILITY: cap them too
      FLASHPP_CPU_ISA=avx2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 timeout $(( $(left) - 5 )) python3 tools/flashpp_capi.py \
        --lib "$lib" --threads 2 --N "$N" --reps "$reps" --dtypes f32 --deadline $(( end - 5 )) > "$log/bench_avx2.log" 2>&1
    fi
  else
    say "bench: skipped, python3 cannot import torch (logs/torch_import.log)"
  fi
fi

tar -czf "$OUT/cpu_check_logs.tar.gz" -C "$OUT" logs 2>/dev/null
{
  echo
  echo "== flashpp vs torch CPU SDPA, B=1 H=8 N=$N D=128, GFLOPS (ratio = flashpp / torch; maxdiff vs torch: O fwd, max of dQ/dK/dV bwd)"
  printf "%-4s %-5s %-6s %-4s %8s %8s %6s %8s  %s\n" thr dtype causal dir flashpp torch ratio maxdiff kernel
  for f in "$log"/bench_t*.log "$log"/bench_avx2.log; do
    [ -e "$f" ] || continue
    tag=""; [ "$(basename "$f")" = bench_avx2.log ] && tag=" [avx2 forced; torch ATEN_CPU_CAPABILITY=avx2]"
    grep '^ROW' "$f" | sed -E 's/^ROW threads=([0-9]+) dtype=([a-z0-9]+) causal=([01]) dir=([a-z]+) flashpp=([0-9.]+) torch=([0-9.]+) ratio=([0-9.]+) maxdiff=([^ ]+) kernel="([^"]*)"/\1 \2 \3 \4 \5 \6 \7 \8 \9/' |
      while read -r th dt ca di fp to ra md ke; do
        printf "%-4s %-5s %-6s %-4s %8s %8s %6s %8s  %s%s\n" "$th" "$dt" "$ca" "$di" "$fp" "$to" "$ra" "$md" "$ke" "$tag"
      done
    grep -E '^SKIP|Error|error|Traceback' "$f" | head -3
  done
  echo "total: $(( $(date +%s) - start )) s; logs: $OUT/cpu_check_logs.tar.gz"
} | tee -a "$summary"

#!/usr/bin/env bash
# Compiler launcher for the library's CUDA objects (CMakeLists.txt: CUDA_COMPILER_LAUNCHER): runs
# the compile, passes its output through, and flags a compile in which ptxas reports a serialised
# wgmma pipeline. ptxas prints that as an info line, "(C7510)" to "(C7518)" ("wgmma.mma_async
# instructions are serialized ..."), and builds the kernel anyway; such a kernel loses 20-30%
# (docs/perf-notes.md, "A regression at D=192"). C7519 (an injected warpgroup.arrive) is not a
# serialisation and passes.
#   default                  a warning naming the object; the build goes on (another nvcc may
#                            schedule differently: a user's build must not fail on a speed note)
#   FLASHPP_STRICT_PTXAS=1   an error, the object removed (CI sets it: .ci/run)
set -uo pipefail
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$@" >"$log" 2>&1
status=$?
cat "$log" >&2
if [ "$status" -eq 0 ] && grep -qE '\(C751[0-8]\)' "$log"; then
  out="(unknown object)"
  for ((i = 1; i <= $#; i++)); do
    if [ "${!i}" = "-o" ]; then j=$((i + 1)); out="${!j}"; fi
  done
  if [ "${FLASHPP_STRICT_PTXAS:-0}" = 1 ]; then
    echo "ptxas_guard: error: ptxas serialised wgmma products in $out (the C751x lines above);" \
         "the kernel would run far below its speed (FLASHPP_STRICT_PTXAS=1)." >&2
    rm -f "$out"
    exit 1
  fi
  echo "ptxas_guard: warning: ptxas serialised wgmma products in $out (the C751x lines above);" \
       "the kernel will run far below its speed with this compiler." >&2
fi
exit "$status"

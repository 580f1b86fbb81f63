#!/usr/bin/env bash
# Compiler launcher for the library's CUDA objects (CMakeLists.txt: CUDA_COMPILER_LAUNCHER): runs
# the compile, passes its output through, and fails it when ptxas reports a serialised wgmma
# pipeline. ptxas prints that as an info line, "(C7510)" to "(C7518)" ("wgmma.mma_async
# instructions are serialized ..."), and builds the kernel anyway; such a kernel loses 20-30%
# (docs/perf-notes.md, "A regression at D=192"). C7519 (an injected warpgroup.arrive) is not a
# serialisation and passes. FLASHPP_ALLOW_WGMMA_SERIALIZATION=1 in the environment turns the
# check off (for experiments).
set -uo pipefail
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$@" >"$log" 2>&1
status=$?
cat "$log" >&2
if [ "$status" -eq 0 ] && [ "${FLASHPP_ALLOW_WGMMA_SERIALIZATION:-0}" != 1 ] &&
   grep -qE '\(C751[0-8]\)' "$log"; then
  out="(unknown object)"
  for ((i = 1; i <= $#; i++)); do
    if [ "${!i}" = "-o" ]; then j=$((i + 1)); out="${!j}"; fi
  done
  echo "ptxas_guard: ptxas serialised wgmma products in $out (the C751x lines above); the kernel" \
       "would run far below its speed. Change the code, or set FLASHPP_ALLOW_WGMMA_SERIALIZATION=1" \
       "for an experiment." >&2
  rm -f "$out"
  exit 1
fi
exit "$status"

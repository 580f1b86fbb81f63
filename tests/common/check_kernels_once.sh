#!/usr/bin/env bash
# Every CUDA kernel is compiled in one object only: its instance file (src/cuda/instances.cmake),
# or the one source that defines it. A second object that instantiates the same kernel (a
# dispatcher that includes the launch header, as the sm90 forward's dispatch.cu did until session
# 36) compiles it twice, and a program linking the static library may get that copy instead of
# the instance file's, so a variant built by recompiling the instance files changes nothing there.
# The statics of a kernel's host stub ("guard variable for __device_stub__<mangled kernel>(...)")
# mark each object that compiled it. Usage: check_kernels_once.sh NM OBJECT...
set -euo pipefail
nm_tool=$1; shift
listing=$(for object in "$@"; do
  "$nm_tool" -C --defined-only "$object" 2>/dev/null |
    sed -n 's/.*__device_stub__\([A-Za-z0-9_]*\)(.*/\1/p' | sort -u | sed "s|\$| $object|"
done)
twice=$(awk '{n[$1]++; o[$1] = o[$1] " " $2} END {for (k in n) if (n[k] > 1) print k ":" o[k]}' <<<"$listing")
if [ -n "$twice" ]; then
  echo "kernels compiled in more than one object:"
  echo "$twice" | head -20
  exit 1
fi
kernels=$(grep -c . <<<"$listing" || true)
if [ "$kernels" -eq 0 ]; then
  echo "no kernel stub in $# objects: nothing checked (is this a CUDA build?)"
  exit 1
fi
echo "ok: $kernels kernels in $# objects, each compiled in one object"

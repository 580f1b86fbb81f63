#!/usr/bin/env bash
# A GPU-free check that a refactor left the kernels alone: dump the SASS of every CUDA object of a
# build, then compare two dumps. Each object's functions are written in the order of their
# (target, demangled name), so the order in which a file instantiates its templates does not count;
# names go through c++filt, so the anonymous-namespace hash (which follows the file's name and
# contents) reads "(anonymous namespace)"; the "identifier =" lines (source file names) are left
# out. Instructions must match. Objects are named by their path under src/cuda, or instances/<name>
# for the instances generated from src/cuda/instances.cmake; earlier names are mapped: the instance
# renames of session 11 (sm80 fwd_hdim -> instances/fwd_d, main_/dq_ -> bwd_main_/bwd_dq_), issue
# 13's backward moves (backward/ -> sm80/backward/, backward/pre_post -> common/backward_pre_post,
# backward/run_backward -> backward_dispatch) and its generated instances (sm80/forward/instances/
# fwd_d128_bf16 -> instances/sm80_fwd_d128_bf16, likewise bwd_main, bwd_dq, decode, sm90's fwd,
# fwd_fp8 and bwd). Dumps made before the functions were sorted compare only with each other.
#
#   tools/sass_snapshot.sh dump BUILD_DIR OUT_DIR     e.g. before and after a change
#   tools/sass_snapshot.sh compare BEFORE_DIR AFTER_DIR
#
# cuobjdump comes from the CUDA toolkit (or triton's copy: CUOBJDUMP=.../triton/backends/nvidia/bin/cuobjdump).
set -euo pipefail
CUOBJDUMP=${CUOBJDUMP:-$(command -v cuobjdump || true)}
case "${1:-}" in
  dump)
    [ -n "$CUOBJDUMP" ] || { echo "sass_snapshot: no cuobjdump (set CUOBJDUMP)" >&2; exit 2; }
    mkdir -p "$3"
    n=0
    while IFS= read -r o; do
      name=$(echo "${o%.o}" | sed 's|.*src/cuda/||; s|.*/cuda_instances/|instances/|; s|/|__|g')
      # Lines outside a function (the fatbin's headers) are dropped; each function's lines are
      # keyed by (target, name, line number) and sorted on that key.
      "$CUOBJDUMP" -sass "$o" 2>/dev/null | c++filt | sed -E 's/^\s+//' |
        grep -v -e '^$' -e 'identifier =' |
        awk -v OFS='\t' '/^Fatbin /{fn = ""} /^arch = /{arch = $3} /^Function : /{fn = substr($0, 12); n = 0}
                         fn != "" {print arch, fn, n++, $0}' |
        LC_ALL=C sort -t $'\t' -k1,1 -k2,2 -k3,3n | cut -f4- > "$3/$name.sass" || true
      n=$((n + 1))
    done < <(find "$2" \( -path '*src/cuda/*' -o -path '*/cuda_instances/*' \) -name '*.cu.o')
    echo "sass_snapshot: $n objects dumped to $3"
    ;;
  compare)
    same=0 differ=0 missing=0 gone=0
    declare -A matched=()
    for f in "$3"/*.sass; do
      b=$(basename "$f")
      moved=$(echo "$b" | sed -E 's/^sm80__backward__/backward__/; s/^common__backward_pre_post/backward__pre_post/;
        s/^backward_dispatch\./backward__run_backward./')
      old=$(echo "$moved" | sed -E 's/^sm80__forward__instances__fwd_d/sm80__forward__fwd_hdim/;
        s/__bwd_(main|dq)_(d[0-9]+)_fp16/__\1_\2_f16/; s/__bwd_(main|dq)_/__\1_/')
      generated=$(echo "$b" | sed -E 's/^instances__sm80_fwd_/sm80__forward__instances__fwd_/;
        s/^instances__sm80_bwd_/sm80__backward__instances__bwd_/;
        s/^instances__sm80_decode_/sm80__decode__instances__decode_/;
        s/^instances__sm90_fwd_fp8_/sm90__forward_fp8__instances__fwd_fp8_/;
        s/^instances__sm90_fwd_/sm90__forward__instances__fwd_/;
        s/^instances__sm90_bwd_/sm90__backward__instances__bwd_/')
      ref=""
      for cand in "$b" "$moved" "$old" "$generated"; do [ -f "$2/$cand" ] && { ref="$2/$cand"; break; }; done
      if [ -z "$ref" ]; then missing=$((missing + 1)); echo "new: $b"; continue; fi
      matched[$(basename "$ref")]=1
      if cmp -s "$ref" "$f"; then same=$((same + 1)); else differ=$((differ + 1)); echo "DIFFERS: $b"; fi
    done
    for f in "$2"/*.sass; do
      [ -n "${matched[$(basename "$f")]:-}" ] || { gone=$((gone + 1)); echo "gone: $(basename "$f")"; }
    done
    echo "sass_snapshot: $same identical, $differ differ, $missing without a counterpart, $gone gone"
    [ "$differ" = 0 ]
    ;;
  *) sed -n '2,19p' "$0"; exit 2 ;;
esac

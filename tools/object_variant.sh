#!/usr/bin/env bash
# A variant of a built library without a second full build, for A/B runs on the lent GPU: copy
# the objects and the link step of a configured and built Ninja build directory, recompile only
# the objects whose path matches a regular expression with extra compile flags, and link the
# shared library again. Compile definitions that change a few kernels' instances (tile tables,
# pipeline depths) cost seconds this way instead of a rebuild of every kernel.
#
#   tools/object_variant.sh BUILD OUTDIR "FLAGS" REGEX [TARGET...]
#     BUILD   a built Ninja build directory (e.g. build-gpu)
#     OUTDIR  where the variant goes (its libflashpp.so at OUTDIR/libflashpp.so)
#     FLAGS   added to each recompiled object's compile line, e.g. "-DFLASHPP_FP8_STAGES=5"
#     REGEX   extended regular expression over object paths, e.g. 'sm90_fwd_d64_'
#     TARGET  Ninja targets to link again, in order (default flashpp_shared); e.g. libflashpp.a
#             tools/flashpp-fp8-bench for the FP8 bench, which links the static library
#
# Example: tools/object_variant.sh build-gpu build-v4 "-DFLASHPP_SM90_FWD_VARIANT=4" 'sm90_fwd_d64_'
# then tools/gpu_compare.py --alt v4=build-v4/libflashpp.so. The objects are compiled from BUILD's
# own sources (generated instance files included) with BUILD's command lines plus FLAGS; nothing in
# BUILD changes. Fails (status 1) when REGEX matches no object.
set -euo pipefail
[ $# -ge 4 ] || { sed -n 2,18p "$0"; exit 2; }
BUILD=$(cd "$1" && pwd) OUTDIR="$2" FLAGS="$3" REGEX="$4"
shift 4
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(flashpp_shared)
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)

# The link lines of the targets (each one's last command), run from OUTDIR against copies of
# BUILD's objects and libraries.
links=()
for t in "${TARGETS[@]}"; do links+=("$(ninja -C "$BUILD" -t commands "$t" | tail -n 1)"); done
objects=$(for l in "${links[@]}"; do tr ' ' '\n' <<<"$l"; done | grep -E '\.o$' | sort -u)
chosen=$(grep -E "$REGEX" <<<"$objects" || true)
[ -n "$chosen" ] || { echo "object_variant: no object of ${TARGETS[*]} matches '$REGEX'" >&2; exit 1; }

# Copies of every object and library the link lines name relative to BUILD ...
(cd "$BUILD" && tar cf - $(for l in "${links[@]}"; do tr ' ' '\n' <<<"$l"; done |
  grep -E '\.(o|a|so[.0-9]*)$' | grep -v '^/' | sort -u | while read -r f; do [ -e "$f" ] && echo "$f"; done)) |
  (cd "$OUTDIR" && tar xf -)
# ... then the chosen ones compiled again with FLAGS, side by side.
pids=()
for obj in $chosen; do
  cmd=$(ninja -C "$BUILD" -t commands "$obj" | tail -n 1)
  # The compile line's own "-o OBJ" and dependency-file options stay; FLAGS go after the compiler
  # (after nvcc where a launcher such as tools/ptxas_guard.sh comes first).
  if [[ "$cmd" =~ ^((bash [^ ]+ )?[^ ]*nvcc)\ (.*)$ ]]; then
    compiler=${BASH_REMATCH[1]} rest=${BASH_REMATCH[3]}
  else
    compiler=${cmd%% *} rest=${cmd#* }
  fi
  mkdir -p "$OUTDIR/$(dirname "$obj")"
  (cd "$OUTDIR" && eval "$compiler $FLAGS $rest") &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
[ "$status" = 0 ] || { echo "object_variant: a compile failed" >&2; exit 1; }
for l in "${links[@]}"; do (cd "$OUTDIR" && eval "$l"); done
echo "object_variant: $OUTDIR ($(wc -w <<<"$chosen") objects recompiled with $FLAGS)"

#!/usr/bin/env bash
# Issue 12.3 on the lent GPU machine in one call: install the Python package (CUDA, sm_90a by
# default), then
#   1. tools/bench_host_overhead.py: host us per call of flashpp vs sdpa-flash / sdpa-cudnn
#      (fwd, fwd+grad, fwd+bwd, bwd; interleaved rounds) and the ratios against the targets;
#   2. tools/profile_eager.py: the same call layer by layer (functional.py, the eager path, the
#      nanobind call, the C++ side alone) and each CUDA runtime/driver step alone;
#   3. the torch tests that guard the eager path: bit-identity with the operators,
#      torch.compile(fullgraph=True) and CUDA-graph capture.
# BASELINE=DIR (a checkout of another commit, e.g. `git worktree add /tmp/base main`, carried to
# the machine) also installs DIR into a separate folder and runs step 1 for it and for this tree
# alternately (A, B, A, B): the A/B on the same machine. Logs go to $OUT (or ./host-time-out).
#
#   bash tools/host_time_check.sh                  # ~build time + 2 min
#   ARCHS="80;90a" ROUNDS=15 bash tools/host_time_check.sh
#   BASELINE=/tmp/base DEADLINE_S=580 bash tools/host_time_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-host-time-out}
mkdir -p "$out"
archs=${ARCHS:-90a}
rounds=${ROUNDS:-9}
start=$(date +%s)
left() { echo $(( ${DEADLINE_S:-100000} - ($(date +%s) - start) )); }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
lscpu | grep -E "^Model name|^CPU\(s\)|MHz" | head -4
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"

install() {  # install SRC [--target DIR]
  local src=$1; shift
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) python3 -m pip install --no-build-isolation --no-deps \
    -v -C cmake.define.FLASHPP_CUDA=ON -C cmake.define.FLASHPP_CUDA_ARCHS="$archs" "$@" "$src"
}
echo "== install (archs $archs)"
if ! install . > "$out/install.log" 2>&1; then
  tail -n 40 "$out/install.log"; echo "host time check: install FAILED"; exit 1
fi
echo "installed in $(( $(date +%s) - start )) s"
python3 -c "import flashpp; print('flashpp', flashpp.__version__, flashpp._C.cuda_kernel_families(0))"

base_py=""
if [ -n "${BASELINE:-}" ]; then
  echo "== install baseline $BASELINE"
  base_py=$(mktemp -d /tmp/host-time-base.XXXXXX)
  # A build folder of its own: the baseline's build-py/ is inside its tree.
  if ! install "$BASELINE" --target "$base_py" > "$out/install_base.log" 2>&1; then
    tail -n 40 "$out/install_base.log"; echo "baseline install FAILED: no A/B"; base_py=""
  fi
fi

echo "== 1. host time per call (tools/bench_host_overhead.py --rounds $rounds)"
timeout $(( $(left) > 60 ? ($(left) - 30) / 3 : 30 )) \
  python3 tools/bench_host_overhead.py --rounds "$rounds" 2>&1 | tee "$out/host_overhead.txt"
if [ -n "$base_py" ]; then
  for pass in 1 2; do
    for side in baseline this; do
      echo "== A/B pass $pass: $side"
      if [ "$side" = baseline ]; then pp="$base_py"; else pp=""; fi
      PYTHONPATH="$pp" timeout 120 python3 tools/bench_host_overhead.py --rounds "$rounds" \
        --no-do-bench 2>&1 | sed -n '/^provider/,$p' | tee -a "$out/ab_$side.txt"
    done
  done
fi

echo "== 2. layers (tools/profile_eager.py --rounds $rounds)"
timeout $(( $(left) > 60 ? ($(left) - 30) / 2 : 30 )) \
  python3 tools/profile_eager.py --rounds "$rounds" 2>&1 | tee "$out/profile_eager.txt"

echo "== 3. torch tests (eager path, compile fullgraph, CUDA graphs)"
timeout $(( $(left) > 40 ? $(left) - 10 : 30 )) python3 -m pytest -q -p no:cacheprovider \
  tests/python/test_torch_eager_path.py tests/python/test_torch_compile_graphs.py \
  tests/python/test_torch_attention.py 2>&1 | tee "$out/pytest.txt" | tail -n 15
echo "host time check: done in $(( $(date +%s) - start )) s"

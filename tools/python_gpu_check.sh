#!/usr/bin/env bash
# The Python package on a GPU machine without registry access (the lent GPU machine): install
# it with the nanobind and scikit-build-core already there (pip install --no-build-isolation),
# run every Python test (the torch and CUDA ones included), then the quick benchmark.
#
#   bash tools/python_gpu_check.sh            logs and plots under $OUT (or gpu-out/)
#   ARCHS="80;90a" BENCH="--dtypes fp16 bf16" bash tools/python_gpu_check.sh
#   DEADLINE_S=560: finish within that many seconds (pytest and the bench get what is left)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
archs=${ARCHS:-90a}
start=$(date +%s)
python3 -m pip list 2>/dev/null | grep -iE "^(nanobind|scikit.build.core|torch|numpy|ml.dtypes|pytest) "
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lscpu | grep -E "Model name|Flags" | sed 's/Flags:.*\(avx512f\).*/Flags: has avx512f/' | cut -c1-80

echo "== install (FLASHPP_CUDA=ON, archs $archs)"
if ! CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) python3 -m pip install --no-build-isolation --no-deps \
    -v -C cmake.define.FLASHPP_CUDA=ON -C cmake.define.FLASHPP_CUDA_ARCHS="$archs" . \
    > "$out/install.log" 2>&1; then
  tail -n 60 "$out/install.log"
  echo "python gpu check: install FAILED"
  exit 1
fi
echo "installed in $(( $(date +%s) - start )) s"
python3 -c "import flashpp; print('flashpp', flashpp.__version__, 'cuda compiled', flashpp.cuda_compiled(), 'available', flashpp.cuda_available())"

echo "== pytest"
left() { echo $(( ${DEADLINE_S:-100000} - ($(date +%s) - start) )); }
# One pytest process per file: a crash in one file does not hide the others' results.
test_rc=0
: > "$out/pytest.log"
# Time kept back for the benchmark after the tests (none when BENCH=none).
reserve=${BENCH_RESERVE_S:-150}
[ "${BENCH:-}" = none ] && reserve=0
for f in ${PYTEST_FILES:-tests/python/test_*.py}; do
  budget=$(( $(left) - reserve ))
  if [ "$budget" -lt 30 ]; then echo "$f: no time left" | tee -a "$out/pytest.log"; test_rc=1; continue; fi
  echo "### $f" >> "$out/pytest.log"
  PYTHONUNBUFFERED=1 timeout "$budget" python3 -X faulthandler -m pytest -q -s -rs \
    -p no:cacheprovider "$f" ${PYTEST_ARGS:-} >> "$out/pytest.log" 2>&1
  rc=$?
  [ "$rc" -ne 0 ] && test_rc=$rc
  echo "$f: exit $rc, $(grep -E "(passed|failed|skipped|error)" "$out/pytest.log" | tail -1)"
done

bench_rc=0
if [ "${BENCH:-quick}" != "none" ]; then
  echo "== bench"
  bench_args=${BENCH:---quick}
  [ "$bench_args" = quick ] && bench_args=--quick
  timeout $(( $(left) - 15 > 30 ? $(left) - 15 : 30 )) python3 tools/bench.py $bench_args --out-dir "$out" > "$out/bench.log" 2> "$out/bench.progress"
  bench_rc=$?
fi

echo "== summary ($(( $(date +%s) - start )) s)"
grep -E "^(FAILED|ERROR)|Fatal Python error|^  File .*flashpp" "$out/pytest.log" | head -30
sed -n '/^step  sdpa/,/^last/p' "$out/pytest.log"  # the tiny-GPT loss curves
if [ "${BENCH:-quick}" = "none" ]; then
  :  # no benchmark asked for
elif [ "$bench_rc" -eq 0 ]; then
  sed -n '/^wrote/,$p' "$out/bench.log"
elif [ -s "$out/bench.csv" ]; then  # cut off: the rows measured so far
  tail -n 3 "$out/bench.progress"
  cut -d, -f1,2,5,6,7,10,11,14 "$out/bench.csv" | column -s, -t
fi
exit $(( test_rc != 0 || bench_rc != 0 ))

#!/usr/bin/env bash
# The Python tests, as `make test` runs them: a virtual environment (.venv-py), the package
# installed into it from this checkout, then pytest over tests/python.
#
#   tools/python_test.sh                 CPU-only package build (fast; what CI runs)
#   FLASHPP_PY_CUDA=AUTO tools/python_test.sh   build the CUDA backend too when nvcc is found
#   FLASHPP_PY_VENV=dir  tools/python_test.sh   another venv
#   extra arguments go to pytest, e.g. tools/python_test.sh -k numpy -x
#
# Installs numpy, ml_dtypes, pytest, scikit-build-core and nanobind from PyPI (torch is not
# installed: the torch tests skip without it). The build reuses build-py/ between runs.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
venv=${FLASHPP_PY_VENV:-.venv-py}
cuda=${FLASHPP_PY_CUDA:-OFF}
python=${PYTHON:-python3}

if [ ! -x "$venv/bin/python" ]; then
  echo "python tests: creating $venv"
  "$python" -m venv "$venv"
fi
py="$venv/bin/python"
"$py" -m pip install -q --disable-pip-version-check numpy ml_dtypes pytest \
  "scikit-build-core>=0.10" "nanobind>=2.0"
# --no-build-isolation: build with the nanobind/scikit-build-core just installed (no second,
# throw-away build environment per run).
echo "python tests: building and installing flashpp (FLASHPP_CUDA=$cuda)"
"$py" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps \
  -C cmake.define.FLASHPP_CUDA="$cuda" .
echo "python tests: installed in $(( $(date +%s) - start )) s"

# pytest exits 5 when it collected nothing: a failure only if there are tests to collect.
set +e
"$py" -m pytest -q tests/python "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ] && ! ls tests/python/test_*.py > /dev/null 2>&1; then
  echo "python tests: none present"
  rc=0
fi
echo "python tests: finished in $(( $(date +%s) - start )) s (pytest exit code $rc)"
exit "$rc"

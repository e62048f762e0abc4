#!/usr/bin/env bash
# Runs every test: builds (scripts/build.sh), then the GoogleTest suite through ctest and the
# pytest suite. GPU tests run when a GPU is visible and are skipped otherwise.
#   scripts/test.sh [extra pytest args]
#   FUSEDOPS_CTEST_BESIDE_PYTEST=1  run ctest in the background while pytest runs (the GPU check:
#     ctest's model export is one serial compile, pytest keeps the other cores busy)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
BUILD_DIR="${FUSEDOPS_BUILD_DIR:-$FUSEDOPS_ROOT/build}"
"$FUSEDOPS_ROOT/scripts/build.sh" "$BUILD_DIR"
fusedops_activate_python
export FUSEDOPS_LIBRARY="$BUILD_DIR/libfusedops.so"
export PYTHONPATH="$FUSEDOPS_ROOT/models${PYTHONPATH:+:$PYTHONPATH}"
export FUSEDOPS_BUILD_DIR="$BUILD_DIR"
status=0
run_ctest() { ctest --test-dir "$BUILD_DIR" --output-on-failure -j "${FUSEDOPS_JOBS:-$(nproc)}"; }
if [[ ${FUSEDOPS_CTEST_BESIDE_PYTEST:-0} == 1 ]]; then
  run_ctest >"$BUILD_DIR/ctest.log" 2>&1 &
  ctest_pid=$!
  echo "== pytest (ctest in the background) =="
  "$PYTHON" -m pytest "$FUSEDOPS_ROOT/tests/python" -q -rs "$@" || status=1
  wait "$ctest_pid" || status=1
  echo "== ctest =="
  cat "$BUILD_DIR/ctest.log"
else
  echo "== ctest =="
  run_ctest || status=1
  echo "== pytest =="
  "$PYTHON" -m pytest "$FUSEDOPS_ROOT/tests/python" -q -rs "$@" || status=1
fi
exit $status

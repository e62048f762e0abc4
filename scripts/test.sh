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
# Each suite's output goes to the terminal and to a log, from which its totals are printed last
# (pytest's list of skip reasons would otherwise bury them).
ctest_log="$BUILD_DIR/ctest.log"; pytest_log="$BUILD_DIR/pytest.log"
run_ctest() { ctest --test-dir "$BUILD_DIR" --output-on-failure -j "${FUSEDOPS_JOBS:-$(nproc)}"; }
run_pytest() { "$PYTHON" -m pytest "$FUSEDOPS_ROOT/tests/python" -q -rs "$@" 2>&1 | tee "$pytest_log"; }
if [[ ${FUSEDOPS_CTEST_BESIDE_PYTEST:-0} == 1 ]]; then
  run_ctest >"$ctest_log" 2>&1 &
  ctest_pid=$!
  echo "== pytest (ctest in the background) =="
  run_pytest "$@" && pytest_status=0 || pytest_status=$?
  wait "$ctest_pid" && ctest_status=0 || ctest_status=$?
  echo "== ctest =="
  cat "$ctest_log"
else
  echo "== ctest =="
  run_ctest 2>&1 | tee "$ctest_log" && ctest_status=0 || ctest_status=$?
  echo "== pytest =="
  run_pytest "$@" && pytest_status=0 || pytest_status=$?
fi
((ctest_status == 0 && pytest_status == 0)) || status=1
totals() {  # the suite's own summary line, or why there is none
  local line; line=$(grep -E "$2" "$1" | tail -n 1 || true)
  echo "${line:-no summary line (see $1)}"
}
echo
echo "== test.sh: totals =="
printf '  ctest   %-7s %s\n' "$( ((ctest_status == 0)) && echo OK || echo FAILED)" \
  "$(totals "$ctest_log" 'tests passed|tests failed')"
printf '  pytest  %-7s %s\n' "$( ((pytest_status == 0)) && echo OK || echo FAILED)" \
  "$(totals "$pytest_log" '^=* *[0-9]+ (passed|failed|skipped|error|deselected|xfailed).* in [0-9.]+s')"
exit $status

#!/usr/bin/env bash
# Runs every test: builds (scripts/build.sh), then the GoogleTest suite through ctest and the
# pytest suite. GPU tests run when a GPU is visible and are skipped otherwise.
#   scripts/test.sh [extra pytest args]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
BUILD_DIR="${FUSEDOPS_BUILD_DIR:-$FUSEDOPS_ROOT/build}"
"$FUSEDOPS_ROOT/scripts/build.sh" "$BUILD_DIR"
fusedops_activate_python
export FUSEDOPS_LIBRARY="$BUILD_DIR/libfusedops.so"
export PYTHONPATH="$FUSEDOPS_ROOT/models${PYTHONPATH:+:$PYTHONPATH}"
export FUSEDOPS_BUILD_DIR="$BUILD_DIR"
status=0
echo "== ctest =="
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "${FUSEDOPS_JOBS:-$(nproc)}" || status=1
echo "== pytest =="
"$PYTHON" -m pytest "$FUSEDOPS_ROOT/tests/python" -q -rs "$@" || status=1
exit $status

#!/usr/bin/env bash
# The main job: build fusedops, then run the four ModelNew against their reference models at
# the SPEC default sizes (GPU when present, else CPU) and print agreement and time per model.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
BUILD_DIR="${FUSEDOPS_BUILD_DIR:-$FUSEDOPS_ROOT/build}"
"$FUSEDOPS_ROOT/scripts/build.sh" "$BUILD_DIR"
fusedops_activate_python
export FUSEDOPS_LIBRARY="$BUILD_DIR/libfusedops.so"
export PYTHONPATH="$FUSEDOPS_ROOT/models${PYTHONPATH:+:$PYTHONPATH}"
"$PYTHON" -m fusedops.compare "$@"

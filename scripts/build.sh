#!/usr/bin/env bash
# Configure and build libfusedops, the C++ tests and the app against the active Python's
# torch (installing what is missing first; see scripts/env.sh).
#   scripts/build.sh [BUILD_DIR]      default: build/
#   FUSEDOPS_CMAKE_ARGS="-DFUSEDOPS_CUDA_ARCHITECTURES=90"  extra CMake arguments
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
fusedops_setup
BUILD_DIR="${1:-${FUSEDOPS_BUILD_DIR:-$FUSEDOPS_ROOT/build}}"
# shellcheck disable=SC2086
cmake -S "$FUSEDOPS_ROOT" -B "$BUILD_DIR" -G Ninja -DPython3_EXECUTABLE="$PYTHON" \
  ${FUSEDOPS_CMAKE_ARGS:-} >"$BUILD_DIR.configure.log" 2>&1 || { cat "$BUILD_DIR.configure.log"; exit 1; }
# Which build this is (CUDA on or off, its GPU architectures), from CMake's own status line.
build_line=$(grep -m1 '^-- fusedops: torch ' "$BUILD_DIR.configure.log" || true)
echo "[fusedops] build $BUILD_DIR: ${build_line#-- fusedops: }" >&2
cmake --build "$BUILD_DIR" -j "${FUSEDOPS_JOBS:-$(nproc)}"

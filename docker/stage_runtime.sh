#!/usr/bin/env bash
# Collects what an installed fusedops_app loads at run time, for an image without Python or a
# CUDA toolkit (docker/Dockerfile's runtime stage):
#   docker/stage_runtime.sh PREFIX DEST
#     PREFIX  the fusedops install prefix (bin/fusedops_app, lib/libfusedops.so)
#     DEST    receives torch/lib and nvidia/ with the layout of site-packages, because
#             libtorch finds its CUDA libraries through RUNPATH $ORIGIN/../../nvidia/*/lib;
#             and extra/ for libraries from elsewhere in the Python install (a conda torch).
# Libraries of the build image's system folders (spdlog, fmt) go to PREFIX/lib, where the
# app's RUNPATH ($ORIGIN/../lib) finds them.
set -euo pipefail
PREFIX="$1"
DEST="$2"
PYTHON="${FUSEDOPS_PYTHON:-python3}"
APP="$PREFIX/bin/fusedops_app"

torch_lib="$("$PYTHON" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')"
site_packages="$(dirname "$(dirname "$torch_lib")")"
python_prefix="$("$PYTHON" -c 'import sys; print(sys.prefix)')"

mkdir -p "$DEST/torch" "$DEST/extra"
# Python bindings are not needed without Python.
cp -a "$torch_lib" "$DEST/torch/lib"
rm -f "$DEST/torch/lib/libtorch_python.so"
if [[ -d "$site_packages/nvidia" ]]; then
  # Shared libraries only: the wheels also carry headers and Python files.
  (cd "$site_packages" && find nvidia -name '*.so*' -exec cp -a --parents {} "$DEST" \;)
fi

# Whatever else the app resolves outside the runtime image's own system libraries.
while read -r path; do
  case "$path" in
    "$torch_lib"/* | "$site_packages"/nvidia/* | "$PREFIX"/*) ;;
    "$python_prefix"/*) cp -L "$path" "$DEST/extra/" ;;
    */libspdlog.so* | */libfmt.so*) cp -L "$path" "$PREFIX/lib/" ;;
  esac
done < <(ldd "$APP" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }')

echo "staged libtorch runtime in $DEST ($(du -sh "$DEST" | cut -f1)); app libraries in $PREFIX/lib"

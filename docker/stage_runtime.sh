#!/usr/bin/env bash
# Collects what an installed fusedops_app loads at run time, for an image without Python or a
# CUDA toolkit (docker/Dockerfile's runtime stage):
#   docker/stage_runtime.sh PREFIX DEST
#     PREFIX  the fusedops install prefix (bin/fusedops_app, lib/libfusedops.so)
#     DEST    receives torch/lib and nvidia/ with the layout of site-packages, because
#             libtorch finds its CUDA libraries through RUNPATH $ORIGIN/../../nvidia/*/lib;
#             and extra/ (on the image's LD_LIBRARY_PATH) for every other library the app
#             loads: the build image's libzip, protobuf, OpenSSL and what they load, and those
#             from elsewhere in the Python install (a conda torch).
# spdlog and fmt go to PREFIX/lib, where the app's RUNPATH ($ORIGIN/../lib) finds them.
# Not copied: the C and C++ runtime (glibc's libraries, libstdc++, libgcc_s), which must be the
# runtime image's own. The runtime image is another distribution (its libzip, protobuf may be
# missing or of another soname), so extra/ holds them all, and the runtime stage removes those
# it has itself (docker/Dockerfile), so that its newer builds serve and nothing else in the
# image sees an older copy.
set -euo pipefail
PREFIX="$1"
DEST="$2"
PYTHON="${FUSEDOPS_PYTHON:-python3}"
APP="$PREFIX/bin/fusedops_app"

torch_lib="$("$PYTHON" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')"
site_packages="$(dirname "$(dirname "$torch_lib")")"

mkdir -p "$DEST/torch" "$DEST/extra"
# Python bindings are not needed without Python.
cp -a "$torch_lib" "$DEST/torch/lib"
rm -f "$DEST/torch/lib/libtorch_python.so"
if [[ -d "$site_packages/nvidia" ]]; then
  # Shared libraries only: the wheels also carry headers and Python files.
  (cd "$site_packages" && find nvidia -name '*.so*' -exec cp -a --parents {} "$DEST" \;)
fi

# Whatever else the app resolves (ldd: every library it loads, direct or not), by soname.
ldd_output="$(ldd "$APP")"
while read -r path; do
  case "$path" in
    "$torch_lib"/* | "$site_packages"/nvidia/* | "$PREFIX"/*) ;;
    */libspdlog.so* | */libfmt.so*) cp -L "$path" "$PREFIX/lib/" ;;
    */ld-linux*.so* | */libc.so.* | */libm.so.* | */libdl.so.* | */libpthread.so.* | \
      */librt.so.* | */libresolv.so.* | */libutil.so.* | */libstdc++.so.* | */libgcc_s.so.*) ;;
    *) cp -L "$path" "$DEST/extra/" ;;
  esac
done < <(awk '$2 == "=>" && $3 ~ /^\// { print $3 }' <<<"$ldd_output")

echo "staged libtorch runtime in $DEST ($(du -sh "$DEST" | cut -f1)); app libraries in $PREFIX/lib"

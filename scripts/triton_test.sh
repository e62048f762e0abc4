#!/usr/bin/env bash
# The exported model repository served by the real Triton Inference Server (issue 22): the
# server binary from the nvidia-pytriton wheel (Triton 2.51.0), Triton's PyTorch backend built
# from source against this venv's torch, libfusedops preloaded, every answer checked through
# tritonclient over HTTP and gRPC (tests/triton/; README.md, "The real Triton server test").
#   scripts/triton_test.sh [pytest args]
#
# Steps (the slow ones cached under ~/.cache/fusedops, or $FUSEDOPS_CACHE):
#   1. a venv of its own, triton-venv-<key>: the project venv's packages through a .pth line
#      (as scripts/check_wheel.sh does: torch, pytest and the pins of requirements.txt, nothing
#      downloaded twice), tests/triton/requirements.txt (tritonclient's HTTP and gRPC clients)
#      and, without their dependencies, tests/triton/server-requirements.txt (tritonserver,
#      CMake >= 3.31.8);
#   2. the PyTorch backend, CPU-only, once per torch version, source commits and build recipe
#      (triton-backend-<key>), and the same backend with tests/triton/pt2_first_dim_batching.patch
#      applied (the upstream fix of docs/TRITON_PT2_BATCHING.md; one file recompiled);
#   3. libfusedops (scripts/build.sh: incremental, so CI reuses what scripts/test.sh built), the
#      small repository exported in both formats, model 98 at SPEC size as TorchScript (the
#      memory check) and the nn.Linear .pt2 of the upstream reproduction, into
#      <build>/triton_test/;
#   4. pytest tests/triton: each server bound to 127.0.0.1 on free ports, stopped by its PID.
#
# Environment:
#   FUSEDOPS_TRITON_SOURCES  a folder holding the four `git archive` tarballs named in SOURCES
#     below; they are checked against the pinned commits and extracted into a build folder,
#     never changed. Default: ../shared/third_party/triton beside the checkout when it exists;
#     otherwise the pinned commits are fetched with git from $TRITON_REPO_ORGANIZATION.
#   FUSEDOPS_BUILD_DIR  the fusedops build folder (default build/).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
fusedops_setup
# Triton's backend build: RapidJSON (triton common's JSON), googletest's sources (common
# configures its unit tests even when only the backend is built; Debian's copy replaces the
# download), Python's headers (the backend's CMake asks for Python3 Development.Module), a C++
# compiler and ninja (fusedops_setup has them).
fusedops_install_debian_packages rapidjson-dev googletest python3-dev

BUILD_DIR="${FUSEDOPS_BUILD_DIR:-$FUSEDOPS_ROOT/build}"
CACHE="${FUSEDOPS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fusedops}"
TESTS="$FUSEDOPS_ROOT/tests/triton"
JOBS="${FUSEDOPS_JOBS:-$(nproc)}"
TRITON_REPO_ORGANIZATION="${TRITON_REPO_ORGANIZATION:-https://github.com/triton-inference-server}"
# name, branch (the archive is <name>-<branch>.tar.gz), commit: the PyTorch backend of r26.05
# and the three repositories its CMake would fetch, at the commits it was tested with.
SOURCES=(
  "pytorch_backend r26.05 55bbe27ff7b6be1642dbd0d2737c148d0684c3a7"
  "core r26.05 e6fcb0c78e072672beab614384fd4f763c302134"
  "common r26.05 ecb874c3126f9f07810f4900d4e7b088fee5eb8c"
  "backend main 3f57fb90bee16b86232ee79c45eb4ce69c9ad489"
)
start=$(date +%s)
step() { echo "== triton: $* ($(( $(date +%s) - start )) s) =="; }

# -- 1. the test's venv -----------------------------------------------------------------------
venv_key=$( (cat "$FUSEDOPS_ROOT/requirements.txt" "$TESTS/requirements.txt" \
               "$TESTS/server-requirements.txt"; "$PYTHON" -c 'import sys; print(sys.version)') |
            sha256sum | cut -c1-16)
VENV="$CACHE/triton-venv-$venv_key"
purelib='import sysconfig; print(sysconfig.get_path("purelib"))'
if [[ ! -f "$VENV/.complete" ]]; then
  step "creating $VENV"
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  "$PYTHON" -c "$purelib" >"$("$VENV/bin/python" -c "$purelib")/project-venv.pth"
  pip_install=("$VENV/bin/python" -m pip install -q --cache-dir "$CACHE/pip")
  "${pip_install[@]}" -r "$TESTS/requirements.txt" -c "$FUSEDOPS_ROOT/requirements.txt"
  "${pip_install[@]}" --no-deps -r "$TESTS/server-requirements.txt"
  touch "$VENV/.complete"
fi
TRITON_PYTHON="$VENV/bin/python"
site="$("$TRITON_PYTHON" -c "$purelib")"
SERVER="$site/pytriton/tritonserver/bin/tritonserver"
# auditwheel renamed libtritonserver.so inside the wheel; a backend asks for it by its plain
# name, so each backend folder gets a link to this file (the same file: one copy in the process).
libtritonserver=("$site"/nvidia_pytriton.libs/libtritonserver-*.so)
[[ -x "$SERVER" && ${#libtritonserver[@]} == 1 && -f "${libtritonserver[0]}" ]] ||
  { echo "triton: no tritonserver and one libtritonserver-*.so in $site" >&2; exit 1; }

# -- 2. the PyTorch backend -------------------------------------------------------------------
sources_dir="${FUSEDOPS_TRITON_SOURCES:-}"
if [[ -z "$sources_dir" && -d "$FUSEDOPS_ROOT/../shared/third_party/triton" ]]; then
  sources_dir="$(cd "$FUSEDOPS_ROOT/../shared/third_party/triton" && pwd)"
fi

# Puts each pinned source tree at $1/<name>: from the archives of $sources_dir (their commit,
# which `git archive` records in the tarball, must be the pinned one), else fetched with git.
get_sources() {
  local dest="$1" entry name branch commit archive found
  mkdir -p "$dest"
  for entry in "${SOURCES[@]}"; do
    read -r name branch commit <<<"$entry"
    if [[ -n "$sources_dir" ]]; then
      archive="$sources_dir/$name-$branch.tar.gz"
      found="$(gzip -dc "$archive" | git get-tar-commit-id)" || true
      [[ "$found" == "$commit" ]] ||
        { echo "triton: $archive is commit '$found', expected $commit" >&2; return 1; }
      tar -xzf "$archive" -C "$dest"
    else
      git init -q "$dest/$name"
      git -C "$dest/$name" fetch -q --depth 1 "$TRITON_REPO_ORGANIZATION/$name.git" "$commit"
      git -C "$dest/$name" checkout -q FETCH_HEAD
    fi
    [[ -f "$dest/$name/CMakeLists.txt" ]] ||
      { echo "triton: no $name sources in $dest" >&2; return 1; }
  done
}

# Builds libtriton_pytorch.so in $1 (a new folder) and writes the backend, unpatched and patched.
build_backend() {
  local work="$1" torch_dir
  torch_dir="$("$PYTHON" -c 'import os, torch; print(os.path.dirname(torch.__file__))')"
  get_sources "$work/src"
  # CPU-only (no CUDA toolkit needed, and the server here has no GPU); no TorchVision, NVSHMEM
  # or TorchTRT (the pip torch has none of them); the triton repositories from local sources
  # instead of FetchContent's git clone; only the backend target, not common's unit tests.
  "$VENV/bin/cmake" -S "$work/src/pytorch_backend" -B "$work/build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DTRITON_ENABLE_GPU=OFF \
    -DTRITON_PYTORCH_ENABLE_TORCHVISION=OFF -DTRITON_PYTORCH_NVSHMEM=OFF \
    -DTRITON_PYTORCH_INCLUDE_PATHS="$torch_dir/include;$torch_dir/include/torch/csrc/api/include" \
    -DTRITON_PYTORCH_LIB_PATHS="$torch_dir/lib" \
    -DFETCHCONTENT_SOURCE_DIR_REPO-CORE="$work/src/core" \
    -DFETCHCONTENT_SOURCE_DIR_REPO-COMMON="$work/src/common" \
    -DFETCHCONTENT_SOURCE_DIR_REPO-BACKEND="$work/src/backend" \
    -DFETCHCONTENT_SOURCE_DIR_GOOGLETEST=/usr/src/googletest \
    -DPython3_EXECUTABLE="$PYTHON" >"$work/configure.log" 2>&1 ||
    { cat "$work/configure.log"; return 1; }
  "$VENV/bin/cmake" --build "$work/build" --target triton-pytorch-backend -j "$JOBS"
  mkdir -p "$work/out/unpatched" "$work/out/patched"
  cp "$work/build/libtriton_pytorch.so" "$work/out/unpatched/"
  (cd "$work/src/pytorch_backend" && git apply "$TESTS/pt2_first_dim_batching.patch")
  "$VENV/bin/cmake" --build "$work/build" --target triton-pytorch-backend -j "$JOBS"
  cp "$work/build/libtriton_pytorch.so" "$work/out/patched/"
}

backend_key=$( ("$PYTHON" -c 'import torch; print(torch.__version__)'; printf '%s\n' "${SOURCES[@]}"
                cat "$TESTS/pt2_first_dim_batching.patch"; declare -f get_sources build_backend) |
               sha256sum | cut -c1-16)
BACKEND="$CACHE/triton-backend-$backend_key"
if [[ ! -f "$BACKEND/unpatched/libtriton_pytorch.so" ]]; then
  step "building Triton's PyTorch backend into $BACKEND (sources: ${sources_dir:-git})"
  work="$(mktemp -d "$CACHE/triton-backend-build.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  build_backend "$work"
  # Whole or not at all: an interrupted build is never taken as done. mv -T fails on a
  # folder that another run of this script finished meanwhile, which is as good.
  mv -T "$work/out" "$BACKEND" 2>/dev/null || [[ -f "$BACKEND/unpatched/libtriton_pytorch.so" ]]
  rm -rf "$work"
  trap - EXIT
fi

# -- 3. libfusedops and the exported models ---------------------------------------------------
step "libfusedops"
"$FUSEDOPS_ROOT/scripts/build.sh" "$BUILD_DIR"
export FUSEDOPS_LIBRARY="$BUILD_DIR/libfusedops.so"
export PYTHONPATH="$FUSEDOPS_ROOT/models${PYTHONPATH:+:$PYTHONPATH}"
WORK="$BUILD_DIR/triton_test"
rm -rf "$WORK"
mkdir -p "$WORK"

# The server's backend folder: the PyTorch backend as Triton 2.51 names it ("pytorch": the .pt
# models), a copy named pytorch_aoti (2.51 has no torch_aoti platform; a .pt2 config names this
# backend), and the patched copy for the batching checks. Copies, not links: to the dynamic
# loader a link is the file it points to, so two backend names would share one loaded library.
for name in pytorch pytorch_aoti pytorch_aoti_patched; do
  mkdir -p "$WORK/backends/$name"
  variant=unpatched; [[ $name == *_patched ]] && variant=patched
  cp "$BACKEND/$variant/libtriton_pytorch.so" "$WORK/backends/$name/libtriton_$name.so"
  ln -s "${libtritonserver[0]}" "$WORK/backends/$name/libtritonserver.so"
done

step "exporting the models"
(cd "$FUSEDOPS_ROOT" &&
  "$TRITON_PYTHON" -m scripted.export --sizes small --output "$WORK/exported" &&
  "$TRITON_PYTHON" -m scripted.export --sizes spec --models 98 --batch-size 1 --formats pt \
    --output "$WORK/exported_spec" &&
  "$TRITON_PYTHON" "$TESTS/pt2_batching_repro.py" export "$WORK/repro") >"$WORK/export.log" 2>&1 ||
  { cat "$WORK/export.log"; exit 1; }

# -- 4. the servers and the checks ------------------------------------------------------------
step "pytest tests/triton"
export FUSEDOPS_TRITON_SERVER="$SERVER" FUSEDOPS_TRITON_BACKENDS="$WORK/backends"
export FUSEDOPS_TRITON_WORK="$WORK"
status=0
(cd "$FUSEDOPS_ROOT" && "$TRITON_PYTHON" -m pytest "$TESTS" -q -rs -p no:cacheprovider "$@") ||
  status=$?
step "finished, pytest exit status $status"
exit $status

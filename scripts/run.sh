#!/usr/bin/env bash
# The main job, on a fresh machine: build fusedops (library + C++ app), run the four ModelNew
# against their reference models (agreement and time per model), export the four models as
# TorchScript (.pt) and AOTInductor (.pt2) into a Triton-layout model repository, then run the
# C++ app (no Python) on it:
# `check` against the reference outputs and a short `bench`. GPU when one is visible, else CPU.
#   scripts/run.sh [--device cpu|cuda] [--sizes spec|small]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
device=""; sizes=spec
while (($#)); do
  case "$1" in
    --device) device="$2"; shift 2 ;;
    --sizes) sizes="$2"; shift 2 ;;
    *) echo "usage: scripts/run.sh [--device cpu|cuda] [--sizes spec|small]" >&2; exit 2 ;;
  esac
done
BUILD_DIR="${FUSEDOPS_BUILD_DIR:-$FUSEDOPS_ROOT/build}"
"$FUSEDOPS_ROOT/scripts/build.sh" "$BUILD_DIR"
fusedops_activate_python
export FUSEDOPS_LIBRARY="$BUILD_DIR/libfusedops.so"
export PYTHONPATH="$FUSEDOPS_ROOT/models${PYTHONPATH:+:$PYTHONPATH}"
[[ -n "$device" ]] || device=$("$PYTHON" -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')")

echo "== ModelNew against the reference models ($device) =="
compare_args=(--device "$device")
[[ "$sizes" == small ]] && compare_args+=(--batch 64)
"$PYTHON" -m fusedops.compare "${compare_args[@]}"

repo="$BUILD_DIR/model_repo"
echo "== export to $repo =="
"$PYTHON" "$FUSEDOPS_ROOT/scripted/export.py" --output "$repo" --sizes "$sizes" --device "$device"

echo "== fusedops_app (C++, no Python): check and bench =="
FUSEDOPS_APP="$BUILD_DIR/app/fusedops_app" FUSEDOPS_MODEL_REPOSITORY="$repo" FUSEDOPS_DEVICE="$device" \
  bash "$FUSEDOPS_ROOT/docker/entrypoint.sh"

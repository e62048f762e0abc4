#!/usr/bin/env bash
# The main job, on a fresh machine: build fusedops (library + C++ app), run the four ModelNew
# against their reference models (agreement and time per model), export the four models as
# TorchScript (.pt) and AOTInductor (.pt2) into a Triton-layout model repository, then run the
# C++ app (no Python) on it:
# `check` against the reference outputs and a short `bench`. GPU when one is visible, else CPU.
#   scripts/run.sh [--device cpu|cuda] [--sizes spec|small]
#   Prints which build it made first (CUDA on or off, GPU architectures) and a verdict last:
#   each step OK or FAILED, check's n/n, where the model repository is. Exit 1 when a step failed.
# A step's failure is caught where it runs (run_step) and reported in the verdict; the steps
# after it that need it are marked "not run".
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
repo="$BUILD_DIR/model_repo"
app="$BUILD_DIR/app/fusedops_app"
steps=(build compare export check bench)
declare -A status detail
verdict() {
  echo
  echo "== verdict =="
  local failed=0
  for name in "${steps[@]}"; do
    local state="${status[$name]:-not run}"
    [[ $state == OK ]] || failed=1
    printf '  %-8s %-8s %s\n' "$name" "$state" "${detail[$name]:-}"
  done
  if [[ ${status[export]:-} == OK ]]; then
    echo "  model repository: $repo"
    echo "  (fusedops_app info|check|bench on it: $app; app/README.md)"
  else
    echo "  model repository: not written"
  fi
  exit $failed
}
# run_step NAME command...: runs it, its status OK or FAILED.
run_step() { local name=$1; shift; "$@" && status[$name]=OK || status[$name]=FAILED; }

run_step build "$FUSEDOPS_ROOT/scripts/build.sh" "$BUILD_DIR"
detail[build]="$BUILD_DIR: $(grep -m1 -o 'CUDA: .*' "$BUILD_DIR.configure.log" 2>/dev/null || true)"
[[ ${status[build]} == OK ]] || verdict
fusedops_activate_python || { status[build]=FAILED; verdict; }
export FUSEDOPS_LIBRARY="$BUILD_DIR/libfusedops.so"
export PYTHONPATH="$FUSEDOPS_ROOT/models${PYTHONPATH:+:$PYTHONPATH}"
[[ -n "$device" ]] || device=$("$PYTHON" -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')")

echo "== ModelNew against the reference models ($device) =="
compare_args=(--device "$device")
[[ "$sizes" == small ]] && compare_args+=(--batch 64)
run_step compare "$PYTHON" -m fusedops.compare "${compare_args[@]}"

echo "== export to $repo =="
run_step export "$PYTHON" "$FUSEDOPS_ROOT/scripted/export.py" --output "$repo" --sizes "$sizes" \
  --device "$device"
[[ ${status[export]} == OK ]] || verdict

echo "== fusedops_app (C++, no Python): check on $device =="
run_step check bash -c 'set -o pipefail; "$0" check "$1" --device "$2" | tee "$3"' "$app" "$repo" \
  "$device" "$BUILD_DIR/run_check.log"
total=$(grep -cE '^(PASS|FAIL|ERROR) ' "$BUILD_DIR/run_check.log" || true)
detail[check]="$(grep -c '^PASS ' "$BUILD_DIR/run_check.log" || true)/$total models match their reference output on $device"

echo "== fusedops_app (C++, no Python): bench on $device =="
if [[ $device == cpu ]]; then
  # 100 timed calls: the app reports p99 from 100 samples on (fewer print '-'); batch 1024 at
  # SPEC sizes takes seconds a call on a CPU.
  bench_args=(--batch 1,32 --iters 100 --warmup 5)
else
  bench_args=(--batch 1,32,1024 --iters 100 --warmup 10)
fi
status[bench]=OK
shopt -s nullglob
for model in "$repo"/*/1/model.pt "$repo"/*/1/model.pt2; do
  "$app" bench "$model" --device "$device" "${bench_args[@]}" || status[bench]=FAILED
done
verdict

#!/usr/bin/env bash
# The GPU check, in one call on the GPU machine: build, the full test suite with CUDA (ctest +
# pytest), compute-sanitizer memcheck and racecheck over every op's CUDA kernels, then the
# benchmark. Logs and JSON go to $OUT (default ./out); a summary table is printed last.
#   scripts/gpu_check.sh [bench args...]     e.g. --models 18,98 --no-compile
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-$ROOT/out}"; mkdir -p "$OUT"
export FUSEDOPS_SKIP_APT=1                      # the GPU machine has no registry access
export FUSEDOPS_PYTHON="${FUSEDOPS_PYTHON:-python3}"  # its preinstalled torch 2.11.0+cu130
export FUSEDOPS_CMAKE_ARGS="-DFUSEDOPS_CUDA_ARCHITECTURES=90 ${FUSEDOPS_CMAKE_ARGS:-}"
export FUSEDOPS_BUILD_DIR="$ROOT/build-gpu"
export FUSEDOPS_LIBRARY="$FUSEDOPS_BUILD_DIR/libfusedops.so"
export PYTHONPATH="$ROOT/models${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
declare -A status

step() {  # step NAME LOG command...
  local name=$1 log=$2; shift 2
  local t0=$SECONDS
  echo "== $name ==" >&2
  "$@" >"$OUT/$log" 2>&1
  status[$name]=$?
  echo "   $name: exit ${status[$name]} in $((SECONDS - t0)) s (log $log)" >&2
  tail -n 5 "$OUT/$log" >&2
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$OUT/gpu.txt" 2>&1
step build build.log "$ROOT/scripts/build.sh" "$FUSEDOPS_BUILD_DIR"
step tests tests.log "$ROOT/scripts/test.sh" --junitxml="$OUT/pytest.xml"
for tool in memcheck racecheck; do
  step "sanitizer-$tool" "sanitizer_$tool.log" compute-sanitizer --tool "$tool" --error-exitcode 3 \
    "$FUSEDOPS_PYTHON" "$ROOT/tests/python/gpu_sanitizer_workload.py"
done
step bench bench.log "$FUSEDOPS_PYTHON" "$ROOT/bench/bench.py" --json "$OUT/bench.json" "$@"

echo
echo "GPU: $(cat "$OUT/gpu.txt")"
grep -E "passed|failed" "$OUT/tests.log" | tail -n 3
grep -E "tests passed|tests failed" "$OUT/tests.log" | tail -n 1
for name in build tests sanitizer-memcheck sanitizer-racecheck bench; do
  printf '%-20s %s\n' "$name" "$([[ ${status[$name]:-1} == 0 ]] && echo ok || echo "FAILED (${status[$name]:-not run})")"
done
sed -n '/^GPU: /,$p' "$OUT/bench.log"
fail=0; for v in "${status[@]}"; do [[ $v == 0 ]] || fail=1; done
exit $fail

#!/usr/bin/env bash
# Builds fusedops_app's libFuzzer targets (app/fuzz: clang, -fsanitize=fuzzer,address) in a
# build folder of their own and runs each for a bounded time, starting from the committed seed
# corpus (app/fuzz/corpus/<target>/). Fails on the first crash, leak of an exception, hang or
# sanitizer report; the input that did it is left in <build>/artifacts/.
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     default: 60 s, every target
#   FUSEDOPS_FUZZ_BUILD_DIR   build folder (default: build-fuzz/)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
fusedops_setup
seconds="${1:-${FUSEDOPS_FUZZ_SECONDS:-60}}"
shift || true
build="${FUSEDOPS_FUZZ_BUILD_DIR:-$FUSEDOPS_ROOT/build-fuzz}"
targets=("$@")
if ((${#targets[@]} == 0)); then
  targets=(fuzz_tensor_file fuzz_manifest fuzz_model_metadata fuzz_triton_config
           fuzz_aoti_package fuzz_repository_names)
fi

start=$(date +%s)
cmake -S "$FUSEDOPS_ROOT/app/fuzz" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ \
  -DPython3_EXECUTABLE="$PYTHON" >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
cmake --build "$build" -j "${FUSEDOPS_JOBS:-$(nproc)}" --target "${targets[@]}"
echo "fuzz: built in $(( $(date +%s) - start )) s"

# libtorch keeps allocations alive until exit and frees some with a mismatched call; neither
# is what these targets look for.
export ASAN_OPTIONS="detect_leaks=0:alloc_dealloc_mismatch=0:abort_on_error=1"
# -malloc_limit_mb: one allocation above 512 MB is a finding. An input of at most 64 KiB that
# makes a reader take that much has had a size it states taken at its word (libtorch's archive
# reader allocated a 2 GiB `version` record for a 1.6 KB file; with the default limit, equal
# to -rss_limit_mb, that was found only when a second copy pushed the heap past 4 GB).
mkdir -p "$build/artifacts"
for target in "${targets[@]}"; do
  corpus="$build/corpus/$target"   # new inputs go here, not into the repository
  mkdir -p "$corpus"
  target_start=$(date +%s)
  "$build/$target" "$corpus" "$FUSEDOPS_ROOT/app/fuzz/corpus/$target" \
    -max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 -malloc_limit_mb=512 \
    -max_len=65536 \
    -artifact_prefix="$build/artifacts/$target-" -print_final_stats=1 \
    >"$build/$target.log" 2>&1 || { tail -n 60 "$build/$target.log"; echo "fuzz: $target FAILED"; exit 1; }
  echo "fuzz: $target ran $(( $(date +%s) - target_start )) s, $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$build/$target.log" | grep -o '[0-9]*$') inputs, no finding"
done
echo "fuzz: finished in $(( $(date +%s) - start )) s"

#!/usr/bin/env bash
# The fusedops image's entry point. Without arguments: `fusedops_app check` on the whole model
# repository, then `fusedops_app bench` on each model, on the GPU when one is visible, else on
# the CPU. With arguments: runs fusedops_app with them (docker run IMAGE info MODEL.pt).
#
#   FUSEDOPS_MODEL_REPOSITORY  the repository (default /opt/fusedops/models)
#   FUSEDOPS_DEVICE            cpu, cuda or cuda:N instead of the automatic choice
#   FUSEDOPS_BENCH_ARGS        bench options instead of the per-device defaults below
#   FUSEDOPS_APP               the app (default: fusedops_app on PATH)
set -euo pipefail

app="${FUSEDOPS_APP:-fusedops_app}"
if (($# > 0)); then
  exec "$app" "$@"
fi

repo="${FUSEDOPS_MODEL_REPOSITORY:-/opt/fusedops/models}"
if [[ -n "${FUSEDOPS_DEVICE:-}" ]]; then
  device="$FUSEDOPS_DEVICE"
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  device=cuda
else
  device=cpu
fi

if [[ -n "${FUSEDOPS_BENCH_ARGS:-}" ]]; then
  read -r -a bench_args <<<"$FUSEDOPS_BENCH_ARGS"
elif [[ "$device" == cpu ]]; then
  # At SPEC sizes one CPU call at batch 1024 takes seconds: fewer, smaller calls.
  bench_args=(--batch "1,32" --iters 10 --warmup 2)
else
  bench_args=(--batch "1,32,1024" --iters 100 --warmup 10)
fi

echo "== fusedops: check on $device =="
"$app" check "$repo" --device "$device"

echo "== fusedops: bench on $device =="
shopt -s nullglob
models=("$repo"/*/1/model.pt "$repo"/*/1/model.pt2)
if ((${#models[@]} == 0)); then
  echo "no model in $repo" >&2
  exit 2
fi
for model in "${models[@]}"; do
  "$app" bench "$model" --device "$device" "${bench_args[@]}"
done

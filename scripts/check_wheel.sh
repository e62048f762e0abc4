#!/usr/bin/env bash
# The Python package as a user gets it: builds the wheel (pip wheel --no-build-isolation, with
# the cached venv's torch), checks its contents (scripts/check_wheel.py), installs it into a
# fresh venv that reuses the cached venv's torch (a .pth line: nothing downloaded, pip
# --no-index), and imports it from / with no PYTHONPATH or FUSEDOPS_LIBRARY.
#   scripts/check_wheel.sh [--cuda]
# Without --cuda the wheel is built CPU-only (-DFUSEDOPS_WITH_CUDA=OFF): CI checks the
# packaging (layout, RUNPATH, install, import) in ~4 min on 2 cores instead of recompiling
# the CUDA kernels, which scripts/test.sh's build has already compiled and tested.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
fusedops_setup
cuda=OFF
case "${1:-}" in
  "") ;;
  --cuda) cuda=ON ;;
  *) echo "usage: scripts/check_wheel.sh [--cuda]" >&2; exit 2 ;;
esac

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
echo "== wheel: build (CUDA $cuda) =="
(cd "$FUSEDOPS_ROOT" && "$PYTHON" -m pip wheel --no-build-isolation --no-deps -q \
   -w "$work/dist" -C build-dir="$work/build" -C cmake.define.FUSEDOPS_WITH_CUDA="$cuda" .)
wheel=("$work"/dist/fusedops-*.whl)
echo "built ${wheel[0]##*/} in $(( $(date +%s) - start )) s"
"$PYTHON" "$FUSEDOPS_ROOT/scripts/check_wheel.py" "${wheel[0]}"

echo "== wheel: install into a fresh venv (torch from the cached venv) and import from / =="
"$PYTHON" -m venv "$work/venv"
"$PYTHON" -c 'import sysconfig; print(sysconfig.get_path("purelib"))' \
  > "$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/cached-torch.pth"
"$work/venv/bin/python" -m pip install -q --no-index "${wheel[0]}"
(cd / && env -u PYTHONPATH -u FUSEDOPS_LIBRARY "$work/venv/bin/python" -c '
import sys
import fusedops, torch
print(fusedops.__version__, fusedops.ModelNew18(16, 8)(torch.rand(2, 16)))
if not fusedops.library_path.startswith(sys.prefix):
    sys.exit(f"imported {fusedops.library_path}, not the wheel installed in {sys.prefix}")
print("loaded", fusedops.library_path)')
echo "check_wheel: done in $(( $(date +%s) - start )) s"

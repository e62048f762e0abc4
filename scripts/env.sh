#!/usr/bin/env bash
# Sourced by every fusedops script: installs what the build needs (idempotent) and
# activates the cached Python venv.  Safe to source repeatedly.
#
#   FUSEDOPS_CACHE   where the venv lives (default ~/.cache/fusedops); it is keyed on
#                    requirements.txt and the Python version so a pin change makes a new one.
#   FUSEDOPS_SKIP_APT=1   do not call apt-get (machines without root, the GPU machine).
#   FUSEDOPS_PYTHON  use this python (and its packages) instead of a venv, e.g. the GPU
#                    machine's preinstalled torch 2.11.0+cu130.
#
# Safe to `source` from an interactive shell: it changes no shell option (the scripts that
# source it set their own `set -euo pipefail` first), and its functions report failure by
# their return status instead of relying on `set -e`.
FUSEDOPS_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export FUSEDOPS_ROOT

_fusedops_log() { printf '[fusedops] %s\n' "$*" >&2; }

fusedops_install_system_packages() {
  fusedops_install_debian_packages cmake ninja-build g++ libgtest-dev libspdlog-dev libfmt-dev \
    libcli11-dev nlohmann-json3-dev python3-venv libprotobuf-dev libzip-dev libssl-dev \
    clang libclang-rt-dev
}

# Installs those of the given Debian packages that are missing (scripts/triton_test.sh adds
# the ones Triton's backend build needs).
fusedops_install_debian_packages() {
  [[ "${FUSEDOPS_SKIP_APT:-0}" == 1 ]] && return 0
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return 0
  command -v apt-get >/dev/null || { _fusedops_log "missing packages ${missing[*]} and no apt-get"; return 1; }
  local sudo=""; [[ $(id -u) -ne 0 ]] && sudo="sudo"
  _fusedops_log "installing Debian packages: ${missing[*]}"
  $sudo apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

fusedops_activate_python() {
  if [[ -n "${FUSEDOPS_PYTHON:-}" ]]; then
    export PYTHON="$FUSEDOPS_PYTHON"
    return 0
  fi
  local py="${FUSEDOPS_BASE_PYTHON:-python3}"
  local key
  key=$( (cat "$FUSEDOPS_ROOT/requirements.txt"; "$py" -c 'import sys; print(sys.version)') | sha256sum | cut -c1-16)
  local cache="${FUSEDOPS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fusedops}"
  local venv="$cache/venv-$key"
  if [[ ! -f "$venv/.complete" ]]; then
    _fusedops_log "creating Python venv $venv (torch 2.11.0 and test tools; a few minutes once)"
    if ! { rm -rf "$venv" && mkdir -p "$cache" &&
           "$py" -m venv "$venv" &&
           "$venv/bin/python" -m pip install -q --upgrade pip &&
           "$venv/bin/python" -m pip install -q --cache-dir "$cache/pip" \
             -r "$FUSEDOPS_ROOT/requirements.txt" &&
           touch "$venv/.complete"; }; then
      _fusedops_log "could not create the venv $venv"
      return 1
    fi
  fi
  # shellcheck disable=SC1091
  source "$venv/bin/activate" || return 1
  export PYTHON="$venv/bin/python"
}

fusedops_setup() {
  fusedops_install_system_packages && fusedops_activate_python
}

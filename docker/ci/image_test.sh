#!/usr/bin/env bash
# Builds the fusedops image from docker/Dockerfile exactly as users build it, runs it as they
# run it, and checks what it does (CI step; README "The Docker image, tested"):
#   1. the build: `build -f docker/Dockerfile` of this checkout, changing only the BUILD_IMAGE
#      and RUNTIME_IMAGE build arguments (to the local stand-ins below) and EXPORT_SIZES=small;
#   2. the image's own entry point, no arguments, as the image's user (which must be 10001):
#      `check` of every model and `bench` of each, on the CPU; every model must PASS;
#   3. `info` on a model, `ldd` of the app (every library found), the user's view of the image
#      (uid, a read-only install, no compiler or Python), the image's environment;
#   4. the image's size.
# Usage:
#   docker/ci/image_test.sh               build and check; removes the image and containers it
#                                         made, keeps the stand-in bases (a cache, like the venv)
#   docker/ci/image_test.sh --real-bases  the same with the Dockerfile's default bases (the real
#                                         PyTorch and NVIDIA images: needs a registry)
#   docker/ci/image_test.sh --clean       removes the stand-in bases too, then exits
# Engine: Docker when a daemon answers (`docker info`), else buildah (daemonless; needs root);
# FUSEDOPS_IMAGE_ENGINE=docker|buildah chooses. buildah and debootstrap are installed with
# apt-get when missing.
#
# Why stand-ins: the Dockerfile's defaults, pytorch/pytorch:2.11.0-cuda13.0-cudnn9-devel and
# nvidia/cuda:13.0.1-base-ubuntu24.04, stay the defaults users build with, but CI here reaches
# no container registry. The stand-ins are built locally from a Debian root made by debootstrap
# (docker/ci/build-base.Dockerfile and runtime-base.Dockerfile say what each provides: what the
# Dockerfile expects of the real image, and no more, so that a missing step fails here as it
# would there). Without a CUDA toolkit in the build stand-in, the library is built CPU-only.
# FUSEDOPS_CI_DEBIAN_IMAGE=debian:bookworm takes that Debian from a registry instead.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ci_dir="$root/docker/ci"
cache="${FUSEDOPS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fusedops}"
# The four models of docs/MODELS.md (models/fusedops/problems.py): each must be exported,
# checked and benchmarked.
expected_models=(18 39 62 98)
# Local names only (localhost/...): nothing here is pushed.
ci_repo=localhost/fusedops-ci
debian_suite=bookworm
image="$ci_repo/fusedops:test-$$"

log() { printf '[image-test] %s\n' "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }
now() { date +%s; }
started=$(now)
phase_start=$started
phase() {  # name of the phase just finished: prints its time
  local t; t=$(now)
  log "$1: $((t - phase_start)) s"
  phase_start=$t
}

mode="test"
# buildah's pull policy: never for the stand-ins (local names only: looking them up in a
# registry would fail or find another image); the real bases are pulled when missing.
pull=never
case "${1:-}" in
  "") ;;
  --real-bases) mode=real; pull=false ;;
  --clean) mode=clean ;;
  *) echo "usage: $0 [--real-bases | --clean]" >&2; exit 2 ;;
esac

# --- the engine -----------------------------------------------------------------------------
engine="${FUSEDOPS_IMAGE_ENGINE:-}"
if [[ -z "$engine" ]]; then
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    engine=docker
  else
    engine=buildah
  fi
fi
[[ "$engine" == docker || "$engine" == buildah ]] ||
  die "FUSEDOPS_IMAGE_ENGINE=$engine: expected docker or buildah"

apt_install() {  # PACKAGE...: the missing Debian packages, as scripts/env.sh installs its own
  ((EUID == 0)) || die "needs ${*} installed (apt-get install ${*}) or root to install them"
  log "installing Debian packages: $*"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
if [[ "$engine" == buildah ]]; then
  # Daemonless, as root, in chroot isolation: OCI-runtime isolation (runc, crun) needs cgroups
  # that CI's sandbox does not give. RUN steps share the host's network (PyPI, Debian's mirror).
  ((EUID == 0)) || die "buildah here needs root (or run with a Docker daemon)"
  command -v buildah >/dev/null 2>&1 || apt_install buildah
  export BUILDAH_ISOLATION=chroot
  # Docker's image format, as users build: buildah's default (OCI) ignores the Dockerfile's
  # SHELL, and its RUN steps would run in /bin/sh instead of bash with pipefail.
  export BUILDAH_FORMAT=docker
fi

# Engine-neutral verbs. buildah has no `run` of an image (podman's needs cgroups this sandbox
# lacks): a working container of the image, and `buildah run` in it as the image's user, with
# the image's environment and entry point, is what `docker run` does minus the isolation.
image_id() {
  if [[ "$engine" == docker ]]; then docker image inspect --format '{{.Id}}' "$1"
  else buildah inspect --type image --format '{{.FromImageID}}' "$1"; fi
}
has_image() {
  if [[ "$engine" == docker ]]; then docker image inspect "$1" >/dev/null 2>&1
  else buildah inspect --type image "$1" >/dev/null 2>&1; fi
}
build() {  # docker-build arguments; the last is the context
  if [[ "$engine" == docker ]]; then docker build "$@"
  else buildah bud --pull="$pull" "$@"; fi
}
remove_image() {  # not forced: an image some other container still uses stays
  if [[ "$engine" == docker ]]; then docker rmi "$1" >/dev/null
  else buildah rmi "$1" >/dev/null; fi
}
images_named() {  # REPOSITORY: its local images, NAME:TAG a line
  if [[ "$engine" == docker ]]; then
    docker images --format '{{.Repository}}:{{.Tag}}' "$1"
  else
    buildah images --format '{{.Name}}:{{.Tag}}' | awk -v repo="$1" 'index($0, repo ":") == 1'
  fi
}
image_size() {  # IMAGE: its size as the engine reports it
  if [[ "$engine" == docker ]]; then
    echo "$(($(docker image inspect --format '{{.Size}}' "$1") / 1000000)) MB"
  else
    buildah images --format '{{.Size}}' "$1"
  fi
}
image_config() {  # IMAGE FIELD: User, Env (NAME=VALUE lines) or Entrypoint (one word a line)
  local template
  if [[ "$engine" == docker ]]; then
    template="{{range .Config.$2}}{{println .}}{{end}}"
    [[ "$2" == User ]] && template='{{.Config.User}}'
    docker image inspect --format "$template" "$1"
  else
    template="{{range .OCIv1.Config.$2}}{{println .}}{{end}}"
    [[ "$2" == User ]] && template='{{.OCIv1.Config.User}}'
    buildah inspect --type image --format "$template" "$1"
  fi
}

containers=()
tmp_dirs=()
cleanup() {
  local status=$?
  local c d
  for c in "${containers[@]}"; do buildah rm "$c" >/dev/null 2>&1 || true; done
  if [[ "$mode" != clean ]] && has_image "$image"; then
    remove_image "$image" || log "could not remove $image"
  fi
  for d in "${tmp_dirs[@]}"; do
    # A debootstrap root may still have /proc or /sys mounted if debootstrap was interrupted.
    umount -R "$d"/rootfs/proc "$d"/rootfs/sys 2>/dev/null || true
    rm -rf --one-file-system "$d"
  done
  if ((status != 0)); then log "failed after $(($(now) - started)) s"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [[ "$mode" == clean ]]; then
  for name in $(images_named "$ci_repo/debian") $(images_named "$ci_repo/build-base") \
              $(images_named "$ci_repo/runtime-base"); do
    log "removing $name"
    remove_image "$name"
  done
  exit 0
fi

# --- the stand-in bases ---------------------------------------------------------------------
# A Debian root from debootstrap (minbase: apt, bash, coreutils, passwd, libc-bin) as a local
# image, the common base of both stand-ins; debootstrap's default mirror, as apt uses here.
debian_image="${FUSEDOPS_CI_DEBIAN_IMAGE:-$ci_repo/debian:$debian_suite}"
debian_path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
make_debian_image() {
  command -v debootstrap >/dev/null 2>&1 || apt_install debootstrap
  local dir; dir="$(mktemp -d /var/tmp/fusedops-debian.XXXXXX)"
  tmp_dirs+=("$dir")
  log "debootstrap --variant=minbase $debian_suite (once; kept as $debian_image)"
  debootstrap --variant=minbase "$debian_suite" "$dir/rootfs" >"$dir/debootstrap.log" 2>&1 ||
    { tail -20 "$dir/debootstrap.log" >&2; die "debootstrap $debian_suite"; }
  rm -rf "$dir"/rootfs/var/cache/apt/archives/*.deb "$dir"/rootfs/var/lib/apt/lists/*
  # An image from a bare root has no environment: PATH as Debian's own image sets it (an unset
  # PATH would make the stand-ins' `PATH=...:${PATH}` end in ':', the current directory).
  if [[ "$engine" == docker ]]; then
    tar -C "$dir/rootfs" -c . |
      docker import --change "ENV PATH=$debian_path" --change 'CMD ["bash"]' - "$debian_image" >/dev/null
  else
    local ctr mnt
    ctr="$(buildah from scratch)"
    containers+=("$ctr")
    mnt="$(buildah mount "$ctr")"
    cp -a "$dir/rootfs/." "$mnt/"
    buildah unmount "$ctr" >/dev/null
    buildah config --env "PATH=$debian_path" --cmd bash "$ctr"
    buildah commit --quiet --rm "$ctr" "$debian_image" >/dev/null
  fi
}

# Each stand-in is tagged with a digest of everything it is made from, so that a change to its
# Dockerfile, the torch pin or the CAs builds a new one, and an unchanged one is reused (as
# scripts/env.sh keys its venv); older tags of it are removed then.
pin() {  # PACKAGE: its line in requirements.txt (torch==2.11.0)
  grep -E "^$1==" "$root/requirements.txt" || die "no $1== pin in requirements.txt"
}
stand_in() {  # NAME CONTEXT [--build-arg A=V...]: prints the stand-in's name, building it
  local name="$1" context="$2"
  shift 2
  local key
  key="$( { cat "$ci_dir/$name.Dockerfile"; image_id "$debian_image"; printf '%s\n' "$@";
            find "$context" -type f -print0 | sort -z | xargs -0 -r cat; } | sha256sum | cut -c1-16)"
  local ref="$ci_repo/$name:$key"
  if ! has_image "$ref"; then
    log "building the stand-in $ref (docker/ci/$name.Dockerfile)"
    local volume=()
    if [[ "$engine" == buildah ]]; then
      # pip's cache folder of scripts/env.sh's venv: torch and its CUDA libraries are ~3 GB,
      # downloaded once where the index's responses may be cached (this workplace's proxy
      # marks them uncacheable; PyPI is fast here). docker build has no such mount.
      mkdir -p "$cache/pip"
      volume=(--volume "$cache/pip:/root/.cache/pip")
    fi
    build -f "$ci_dir/$name.Dockerfile" --build-arg "DEBIAN_IMAGE=$debian_image" "$@" \
      "${volume[@]}" -t "$ref" "$context" >&2 || die "the stand-in $name did not build"
    local old
    for old in $(images_named "$ci_repo/$name"); do
      [[ "$old" == "$ref" ]] || remove_image "$old" || log "kept $old (in use)"
    done
  fi
  printf '%s\n' "$ref"
}

build_args=(--build-arg "FUSEDOPS_VERSION=$(cat "$root/VERSION")" --build-arg EXPORT_SIZES=small)
if [[ "$mode" == test ]]; then
  if ! has_image "$debian_image"; then
    [[ -n "${FUSEDOPS_CI_DEBIAN_IMAGE:-}" ]] && die "no image $debian_image here"
    make_debian_image
  fi
  context="$(mktemp -d /var/tmp/fusedops-standin.XXXXXX)"
  tmp_dirs+=("$context")
  mkdir "$context/local-ca"
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$context/local-ca/"
  fi
  build_base="$(stand_in build-base "$context" --build-arg "TORCH_REQUIREMENT=$(pin torch)" \
                 --build-arg "NUMPY_REQUIREMENT=$(pin numpy)")"
  runtime_base="$(stand_in runtime-base "$context")"
  build_args+=(--build-arg "BUILD_IMAGE=$build_base" --build-arg "RUNTIME_IMAGE=$runtime_base")
  phase "stand-in bases ready ($build_base, $runtime_base)"
fi

# --- the image, built as users build it ----------------------------------------------------
log "building $image from docker/Dockerfile (${build_args[*]})"
build -f "$root/docker/Dockerfile" "${build_args[@]}" -t "$image" "$root" ||
  die "docker/Dockerfile did not build"
phase "image built"

# --- run it as users run it -----------------------------------------------------------------
user="$(image_config "$image" User)"
[[ "$user" == 10001 ]] || die "the image runs as user '$user', not 10001"
if [[ "$engine" == buildah ]]; then
  ctr="$(buildah from --pull=never "$image")"
  containers+=("$ctr")
  mapfile -t entrypoint < <(image_config "$image" Entrypoint)
  ((${#entrypoint[@]} > 0)) || die "the image has no entry point"
fi
run_image() {  # ARGS...: `docker run IMAGE ARGS...` (the entry point, as the image's user)
  if [[ "$engine" == docker ]]; then docker run --rm --network none "$image" "$@"
  else buildah run --user "$user" "$ctr" -- "${entrypoint[@]}" "$@"; fi
}
exec_image() {  # PROGRAM ARGS...: another program of the image, as the image's user
  if [[ "$engine" == docker ]]; then docker run --rm --network none --entrypoint "$1" "$image" "${@:2}"
  else buildah run --user "$user" "$ctr" -- "$@"; fi
}
logs="$(mktemp -d /var/tmp/fusedops-image-test.XXXXXX)"
tmp_dirs+=("$logs")

log "the entry point (check, then bench of each model) as uid $user"
run_image 2>&1 | tee "$logs/entrypoint.txt" || die "the entry point failed"
grep -q '^== fusedops: check on cpu ==$' "$logs/entrypoint.txt" ||
  die "the entry point did not check on the CPU"
for m in "${expected_models[@]}"; do
  grep -Eq "^PASS fusedops_${m}_[a-z_]+ on cpu " "$logs/entrypoint.txt" ||
    die "no PASS line for model $m"
  grep -Eq "^model fusedops_${m}_[a-z_]+ on cpu, " "$logs/entrypoint.txt" ||
    die "no bench of model $m"
done
passes=$(grep -c '^PASS ' "$logs/entrypoint.txt")
! grep -Eq '^(FAIL|ERROR) ' "$logs/entrypoint.txt" || die "a model failed its check"
phase "check + bench: $passes models PASS"

model="$(exec_image find /opt/fusedops/models -path '*/fusedops_18_*/1/model.pt')"
[[ -n "$model" ]] || die "no model 18 in /opt/fusedops/models"
run_image info "$model" | tee "$logs/info.txt" || die "info $model failed"
grep -q '^model       fusedops_18_' "$logs/info.txt" || die "info did not name the model"

exec_image ldd /opt/fusedops/bin/fusedops_app | tee "$logs/ldd.txt" || die "ldd of the app failed"
! grep -q 'not found' "$logs/ldd.txt" || die "the app's libraries are not all found"
grep -q 'libfusedops\.so' "$logs/ldd.txt" || die "the app does not load libfusedops"
log "ldd: all $(grep -c '=> /' "$logs/ldd.txt") libraries found"

# What the Dockerfile promises of the runtime stage: an unprivileged user that cannot change
# the installed files, no compiler, Python or CUDA toolkit.
# shellcheck disable=SC2016  # expanded inside the image
exec_image bash -c '
  [[ "$(id -u)" == 10001 ]] || { echo "runs as uid $(id -u)"; exit 1; }
  for path in /opt/fusedops/bin /opt/fusedops/lib /opt/fusedops/models /opt/libtorch; do
    [[ ! -w "$path" ]] || { echo "uid 10001 can write $path"; exit 1; }
  done
  for tool in cc gcc g++ python python3 nvcc pip; do
    ! command -v "$tool" >/dev/null || { echo "the runtime image has $tool"; exit 1; }
  done' || die "the runtime stage is not as docker/Dockerfile says"

# The image keeps its base's library path (the NVIDIA runtime's driver folders) and adds no
# empty entry, which the loader would read as the current directory.
# (--real-bases: the Dockerfile's default RUNTIME_IMAGE, which the build pulled.)
runtime_base="${runtime_base:-$(sed -n 's/^ARG RUNTIME_IMAGE=//p' "$root/docker/Dockerfile")}"
base_library_path="$(image_config "$runtime_base" Env | sed -n 's/^LD_LIBRARY_PATH=//p')"
library_path="$(image_config "$image" Env | sed -n 's/^LD_LIBRARY_PATH=//p')"
log "LD_LIBRARY_PATH=$library_path"
[[ ":$library_path:" != *::* ]] || die "LD_LIBRARY_PATH has an empty entry: '$library_path'"
IFS=: read -r -a base_entries <<<"$base_library_path"
for entry in "${base_entries[@]}"; do
  [[ ":$library_path:" == *":$entry:"* ]] || die "LD_LIBRARY_PATH lost the base image's $entry"
done

phase "info, ldd, user and environment checked"
# What the size is made of: libtorch and its CUDA libraries (the same +cu130 wheel as the real
# build image's, so about the same size there), the app, the model repository.
exec_image du -sh /opt/libtorch/torch/lib /opt/libtorch/nvidia /opt/libtorch/extra \
  /opt/fusedops/lib /opt/fusedops/models || die "du in the image failed"
size="$(image_size "$image")"
[[ -n "$size" ]] || die "could not read the image's size"
log "image size: $size ($engine images; base $(image_size "$runtime_base"))"
log "passed: docker/Dockerfile built and ran, all $passes models PASS as uid 10001" \
    "in $(($(now) - started)) s"

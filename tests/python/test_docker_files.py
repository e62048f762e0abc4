"""The Docker files' promises that no Docker engine is needed to check (docker/ci/image_test.sh
builds and runs the image itself, a CI step): the runtime stage runs as a non-root user and
carries OCI labels whose version is VERSION's, the build context keeps every source file and
leaves out build folders, venvs and .git (a 2.4 GiB build/ whose CMakeCache.txt broke the
configure), and the build stage installs what the configure step imports."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (REPO_ROOT / "docker" / "Dockerfile").read_text()


def runtime_stage() -> list[str]:
    """Instructions of the last stage, continuation lines joined."""
    text = DOCKERFILE.replace("\\\n", " ")
    stage = text[text.rindex("\nFROM "):]
    return [line.strip() for line in stage.splitlines()
            if line.strip() and not line.strip().startswith("#")]


def test_runtime_stage_runs_as_a_non_root_user():
    users = [line.split()[1] for line in runtime_stage() if line.startswith("USER ")]
    assert users, "the runtime stage has no USER: it runs as root"
    assert users[-1] not in ("0", "root"), users


def test_runtime_stage_has_oci_labels_with_the_version_checked_against_VERSION():
    labels = " ".join(line for line in runtime_stage() if line.startswith("LABEL "))
    for key in ("title", "description", "version", "licenses"):
        assert f"org.opencontainers.image.{key}=" in labels, key
    assert 'org.opencontainers.image.version="${FUSEDOPS_VERSION}"' in labels
    assert 'if [ "${FUSEDOPS_VERSION}" != "$(cat VERSION)" ]' in DOCKERFILE


def dockerignore_excludes(path: str) -> bool:
    """Whether .dockerignore leaves `path` out of the build context, as Docker (and buildah)
    match: a pattern is cleaned (a leading or trailing '/' means nothing: it matches files and
    folders alike), '**' spans folders, '*' and '?' stay within one name, a path is left out
    when it or a folder above it matches, and a later '!' pattern takes a match back."""
    def regex(pattern: str) -> re.Pattern:
        out, i = "", 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                out, i = out + "(?:.*/)?", i + 3
            elif pattern.startswith("**", i):
                out, i = out + ".*", i + 2
            elif pattern[i] == "*":
                out, i = out + "[^/]*", i + 1
            elif pattern[i] == "?":
                out, i = out + "[^/]", i + 1
            else:
                out, i = out + re.escape(pattern[i]), i + 1
        return re.compile(out)

    parts = path.split("/")
    candidates = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    excluded = False
    for line in (REPO_ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = regex(line.lstrip("!").strip("/"))
        if any(pattern.fullmatch(candidate) for candidate in candidates):
            excluded = not negated
    return excluded


def test_dockerignore_keeps_every_source_file():
    """`**/build*/` also matched scripts/build.sh and cmake/build_info.cpp.in (a trailing '/'
    does not mean folders only to Docker): the image's build step found no scripts/build.sh."""
    files = subprocess.run(["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    assert "scripts/build.sh" in files
    dropped = [f for f in files
               if not f.startswith((".ci/", "docker/ci/")) and dockerignore_excludes(f)]
    assert dropped == [], dropped


def test_dockerignore_leaves_out_build_output_venvs_and_git():
    for path in ("build/CMakeCache.txt", "build-fuzz/x.o", "build-gpu/libfusedops.so",
                 "build-editable/CMakeCache.txt", "examples/consumer/build/app",
                 "build.configure.log", ".git/HEAD", ".venv/bin/python", "venv/bin/python",
                 "models/fusedops/__pycache__/model_new.cpython-311.pyc",
                 "build/model_repo/fusedops_18/1/model.pt", "docker/ci/image_test.sh"):
        assert dockerignore_excludes(path), path


def build_stage() -> str:
    text = DOCKERFILE.replace("\\\n", " ")
    return text[text.index("\nFROM "):text.rindex("\nFROM ")]


def test_build_stage_installs_what_the_configure_step_imports_at_requirements_pins():
    """The app's configure step reads Triton's schema from the tritonclient wheel (with its
    protobuf) and the CUDA build the nvidia-cutlass headers: the PyTorch image has neither, and
    the image's configure stopped at "tritonclient is not installed in this Python"."""
    match = re.search(r"grep -E '\^\(([a-z|-]+)\)==' /tmp/requirements\.txt", build_stage())
    assert match, "the build stage installs no packages from requirements.txt"
    requirements = (REPO_ROOT / "requirements.txt").read_text()
    for name in ("nvidia-cutlass", "tritonclient", "protobuf"):
        assert name in match.group(1).split("|"), name
        assert re.search(rf"^{name}==", requirements, re.MULTILINE), name

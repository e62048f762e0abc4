"""The Docker files' promises that no Docker engine is needed to check (none exists in this
workplace, so the image itself is never built here): the runtime stage runs as a non-root
user and carries OCI labels whose version is VERSION's, and the build context leaves out
build folders, venvs and .git (a 2.4 GiB build/ whose CMakeCache.txt broke the configure)."""
from __future__ import annotations

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


def test_dockerignore_leaves_out_build_output_venvs_and_git():
    patterns = {line.strip() for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")}
    for pattern in ("**/build*/", ".git/", "**/.venv/", "**/venv/", "**/__pycache__/"):
        assert pattern in patterns, pattern

"""The Python package as a user meets it: which libfusedops `import fusedops` loads and when it
refuses (issue 14 item 7: a second copy in one process, a FUSEDOPS_LIBRARY that does not
exist, a library built against another torch), and the one version source (VERSION) seen from
Python, the C++ API, the CMake package and `fusedops_app --version`.

Each case runs in a child Python, since a library once loaded stays loaded and a second copy
aborts the process that loads it.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch

import fusedops

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_DIR = Path(os.environ.get("FUSEDOPS_BUILD_DIR", REPO_ROOT / "build"))
LIBRARY = Path(fusedops.library_path)
VERSION_FILE = REPO_ROOT / "VERSION"


def run_python(code: str, cwd: Path, **env_overrides: str | None) -> subprocess.CompletedProcess:
    """`python -c code` with the checkout's package on the path, from cwd."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "models"))
    env.pop("FUSEDOPS_LIBRARY", None)
    for key, value in env_overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_loads_the_library_named_by_FUSEDOPS_LIBRARY(tmp_path):
    result = run_python("import fusedops; print(fusedops.library_path)", tmp_path,
                        FUSEDOPS_LIBRARY=str(LIBRARY))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(LIBRARY)


def test_a_FUSEDOPS_LIBRARY_that_does_not_exist_is_an_error(tmp_path):
    """Not a silent fall-back to the checkout's build/ or the package's own copy."""
    missing = tmp_path / "nonexistent" / "libfusedops.so"
    result = run_python("import fusedops; print(fusedops.library_path)", tmp_path,
                        FUSEDOPS_LIBRARY=str(missing))
    assert result.returncode != 0, result.stdout
    assert f"ImportError: fusedops: FUSEDOPS_LIBRARY={missing} is not a file" in result.stderr


def test_a_second_copy_is_refused_naming_the_loaded_one(tmp_path):
    """Loading two files that both register the fusedops namespace aborts the process in
    PyTorch; import fusedops must say which copy is already loaded instead."""
    copy = tmp_path / "other" / "libfusedops.so"
    copy.parent.mkdir()
    shutil.copy2(LIBRARY, copy)
    result = run_python(f"import torch; torch.ops.load_library({str(copy)!r}); import fusedops",
                        tmp_path, FUSEDOPS_LIBRARY=str(LIBRARY))
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert (f"ImportError: fusedops: another libfusedops is already loaded in this process: "
            f"{copy}; loading {LIBRARY} as well would abort the process") in result.stderr


def test_operators_registered_by_a_renamed_copy_are_refused(tmp_path):
    renamed = tmp_path / "my_ops.so"
    shutil.copy2(LIBRARY, renamed)
    result = run_python(f"import torch; torch.ops.load_library({str(renamed)!r}); "
                        "import fusedops", tmp_path, FUSEDOPS_LIBRARY=str(LIBRARY))
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert ("the fusedops operators are already registered in this process by a library that "
            "is not a file named libfusedops*") in result.stderr


def test_the_same_library_loaded_first_is_used(tmp_path):
    """torch.ops.load_library(path) before import fusedops, same file: nothing to refuse."""
    result = run_python(f"import torch; torch.ops.load_library({str(LIBRARY)!r}); "
                        "import fusedops; print(fusedops.__version__)",
                        tmp_path, FUSEDOPS_LIBRARY=str(LIBRARY))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == VERSION_FILE.read_text().strip()


def test_a_library_built_against_another_torch_is_refused_naming_both(tmp_path):
    built_with = str(torch.__version__)  # the build uses the test environment's torch
    result = run_python("import torch; torch.__version__ = '2.99.0+cu999'; import fusedops",
                        tmp_path, FUSEDOPS_LIBRARY=str(LIBRARY))
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert (f"ImportError: fusedops: {LIBRARY} was built against torch {built_with}, but this "
            f"process runs torch 2.99.0+cu999") in result.stderr
    assert f"Install torch=={built_with}" in result.stderr


def test_a_library_that_records_no_torch_version_is_refused(tmp_path):
    """A file without the build-info marker (an older build, or not fusedops at all) is
    never loaded: its torch ABI is unknown."""
    unknown = tmp_path / "libfusedops.so"
    shutil.copy2(Path(torch.__file__).parent / "lib" / "libc10.so", unknown)
    result = run_python("import fusedops", tmp_path, FUSEDOPS_LIBRARY=str(unknown))
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert f"{unknown} does not record the torch version it was built against" in result.stderr


def test_version_is_the_VERSION_file_everywhere():
    VERSION = VERSION_FILE.read_text().strip()
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION), VERSION
    assert fusedops.__version__ == VERSION
    assert torch.ops.fusedops.version() == VERSION
    config_version = (BUILD_DIR / "fusedopsConfigVersion.cmake").read_text()
    assert f'set(PACKAGE_VERSION "{VERSION}")' in config_version
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    assert pyproject["tool"]["scikit-build"]["metadata"]["version"]["input"] == "VERSION"


@pytest.mark.skipif(not (BUILD_DIR / "app" / "fusedops_app").is_file(),
                    reason="fusedops_app is not built")
def test_app_version_flag():
    result = subprocess.run([str(BUILD_DIR / "app" / "fusedops_app"), "--version"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    torch_release = str(torch.__version__).split("+")[0]
    assert result.stdout.strip() == (f"fusedops_app {VERSION_FILE.read_text().strip()} "
                                      f"(libtorch {torch_release})")


def test_pyproject_pins_the_torch_of_requirements_txt():
    """The wheel's build and run requirement is the torch the checkout is developed with."""
    pins = [line.strip() for line in (REPO_ROOT / "requirements.txt").read_text().splitlines()
            if line.startswith("torch==")]
    assert len(pins) == 1, pins
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    assert pins[0] in pyproject["build-system"]["requires"]
    assert pyproject["project"]["dependencies"] == [pins[0]]


def test_check_wheel_finds_a_bad_wheel(tmp_path):
    """scripts/check_wheel.py (CI's wheel check) flags stray files, soname copies, a
    build-tree RUNPATH and missing metadata, not only passes good wheels."""
    import zipfile
    wheel = tmp_path / "fusedops-0.0.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("fusedops/__init__.py", "")
        archive.writestr("fusedops/_library.py", "")
        archive.write(LIBRARY, "fusedops/libfusedops.so")
        archive.write(LIBRARY, "fusedops/libfusedops.so.0")
        archive.writestr("include/fusedops/fusedops.h", "")
        archive.writestr("fusedops-0.0.0.dist-info/METADATA", "Name: fusedops\n")
    result = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "check_wheel.py"),
                             str(wheel)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "files outside the fusedops package: ['include/fusedops/fusedops.h']" in result.stderr
    assert ("expected one library, fusedops/libfusedops.so, got ['fusedops/libfusedops.so', "
            "'fusedops/libfusedops.so.0']") in result.stderr
    assert "the metadata does not require a torch version" in result.stderr
    assert "expected ['$ORIGIN/../torch/lib']" in result.stderr  # the build tree's RUNPATH

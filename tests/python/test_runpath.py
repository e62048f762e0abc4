"""Relocatable binaries (issue 13) and no library hijack (issue 14 item 5), read from the ELF
files with readelf and checked by running them:

- every RUNPATH entry is $ORIGIN-relative or, in the build tree only, the folder of the torch
  the build used: no empty entry (the loader reads one as the current directory), no relative
  entry, no CUDA toolkit folder, none of torch's CMake junk (/lib/intel64, ...);
- installed, libfusedops.so has no RUNPATH and fusedops_app only $ORIGIN/../lib;
- libfusedops links no CUDA runtime or cuBLAS of its own, and a C++ host resolves the CUDA
  runtime, cuBLAS and cuBLASLt to the very files libtorch_cuda resolves (one copy each);
- libraries planted in the current directory under the names fusedops_app needs are not
  loaded.

Needs readelf/ldd (binutils, glibc) and, for the planted libraries, a C compiler.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_DIR = Path(os.environ.get("FUSEDOPS_BUILD_DIR", REPO_ROOT / "build"))
TORCH_LIB = Path(torch.__file__).resolve().parent / "lib"
APP = BUILD_DIR / "app" / "fusedops_app"
BUILD_TREE_BINARIES = [BUILD_DIR / "libfusedops.so", APP,
                       BUILD_DIR / "tests" / "cpp" / "fusedops_cpp_tests",
                       BUILD_DIR / "app" / "tests" / "test_load_models"]
JUNK = ("/lib/intel64", "/lib/intel64_win", "/lib/win-x64")

pytestmark = pytest.mark.skipif(shutil.which("readelf") is None, reason="readelf not installed")


def dynamic_section(binary: Path) -> str:
    return subprocess.run(["readelf", "-d", str(binary)], capture_output=True, text=True,
                          check=True).stdout


def runpath(binary: Path) -> list[str] | None:
    """The RUNPATH (or old-style RPATH) entries, None when there is neither."""
    match = re.search(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[(.*)\]",
                      dynamic_section(binary))
    return None if match is None else match.group(1).split(":")


def needed(binary: Path) -> list[str]:
    return re.findall(r"\(NEEDED\)\s+Shared library: \[(.*)\]", dynamic_section(binary))


def resolved(binary: Path, env: dict | None = None) -> dict[str, str]:
    """soname -> file, as the loader resolves them (ldd)."""
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True,
                         env=env).stdout
    return {m.group(1): os.path.realpath(m.group(2))
            for m in re.finditer(r"^\s*(\S+) => (/\S+)", out, re.MULTILINE)}


def assert_runpath_rules(binary: Path, allowed_absolute: tuple[Path, ...]):
    entries = runpath(binary) or []
    for entry in entries:
        assert entry, f"{binary}: empty RUNPATH entry (the current directory) in {entries}"
        assert entry not in JUNK, f"{binary}: junk RUNPATH entry {entry} in {entries}"
        if entry.startswith("$ORIGIN"):
            continue
        assert entry.startswith("/"), f"{binary}: relative RUNPATH entry {entry} in {entries}"
        assert Path(entry) in allowed_absolute, (
            f"{binary}: RUNPATH entry {entry} is neither $ORIGIN-relative nor torch's lib "
            f"folder {TORCH_LIB}: {entries}")


@pytest.mark.parametrize("binary", BUILD_TREE_BINARIES, ids=lambda p: p.name)
def test_build_tree_runpath(binary):
    if not binary.is_file():
        pytest.skip(f"{binary} is not built")
    assert_runpath_rules(binary, allowed_absolute=(TORCH_LIB,))


def test_libfusedops_links_no_cuda_runtime_or_cublas_of_its_own():
    libs = needed(BUILD_DIR / "libfusedops.so")
    assert not [n for n in libs if n.startswith(("libcudart", "libcublas"))], libs


def test_cpp_host_uses_the_cuda_runtime_and_cublas_that_torch_uses():
    """Before: libcublas.so.13 and libcudart from /usr/local/cuda (libfusedops' RUNPATH),
    libcublasLt.so.13 from the pip wheel that libtorch_cuda loads: two cuBLAS in one process."""
    if not APP.is_file():
        pytest.skip(f"{APP} is not built")
    torch_side = resolved(TORCH_LIB / "libtorch_cuda.so")
    ours = resolved(APP)
    names = [n for n in torch_side if n.startswith(("libcudart.so", "libcublas.so",
                                                    "libcublasLt.so"))]
    if not names:
        pytest.skip("this torch has no CUDA libraries")
    for name in names:
        assert ours.get(name) == torch_side[name], (
            f"{APP} resolves {name} to {ours.get(name)}, libtorch_cuda to {torch_side[name]}")


@pytest.fixture(scope="module")
def install_prefix(tmp_path_factory) -> Path:
    prefix = tmp_path_factory.mktemp("prefix")
    subprocess.run(["cmake", "--install", str(BUILD_DIR), "--prefix", str(prefix)], check=True,
                   capture_output=True)
    return prefix


def test_installed_runpath(install_prefix):
    library = install_prefix / "lib" / "libfusedops.so"
    assert runpath(library) is None, runpath(library)
    if APP.is_file():
        assert runpath(install_prefix / "bin" / "fusedops_app") == ["$ORIGIN/../lib"]


def test_installed_app_runs_with_torch_on_LD_LIBRARY_PATH(install_prefix):
    """Relocatable: moved to another folder, the installed app finds libfusedops next to it
    and libtorch where LD_LIBRARY_PATH says (as the Docker image runs it)."""
    if not APP.is_file():
        pytest.skip(f"{APP} is not built")
    moved = install_prefix.parent / (install_prefix.name + "-moved")
    shutil.copytree(install_prefix, moved, symlinks=True)
    env = dict(os.environ, LD_LIBRARY_PATH=str(TORCH_LIB))
    result = subprocess.run([str(moved / "bin" / "fusedops_app"), "--version"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    loaded = resolved(moved / "bin" / "fusedops_app", env=env)
    assert loaded["libfusedops.so.0"].startswith(str(moved / "lib")), loaded


@pytest.mark.parametrize("where", ["build", "installed"])
def test_libraries_planted_in_the_current_directory_are_not_loaded(where, install_prefix,
                                                                   tmp_path):
    """Issue 14 item 5: with an empty RUNPATH entry, `fusedops_app --help` run from a folder
    holding ./libspdlog.so.1.10 loaded and ran that file."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the planted libraries")
    app = APP if where == "build" else install_prefix / "bin" / "fusedops_app"
    if not app.is_file():
        pytest.skip(f"{app} is not built")
    source = tmp_path / "planted.c"
    source.write_text('#include <unistd.h>\n'
                      '__attribute__((constructor)) static void planted(void) {\n'
                      '  static const char msg[] = "PLANTED LIBRARY LOADED\\n";\n'
                      '  write(2, msg, sizeof msg - 1);\n}\n')
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    # Every library the app and libfusedops need, except glibc's own (a planted libc would
    # break the process before it could show anything).
    names = {n for binary in (app, BUILD_DIR / "libfusedops.so") for n in needed(binary)
             if not n.startswith(("libc.so", "libm.so", "ld-linux"))}
    assert any(n.startswith("libspdlog") for n in names), names
    for name in sorted(names):
        subprocess.run([compiler, "-shared", "-fPIC", "-o", str(cwd / name), str(source),
                        f"-Wl,-soname,{name}"], check=True, capture_output=True)
    env = dict(os.environ, LD_LIBRARY_PATH=str(TORCH_LIB)) if where == "installed" else None
    result = subprocess.run([str(app), "--help"], cwd=cwd, env=env, capture_output=True,
                            text=True, timeout=60)
    assert "PLANTED LIBRARY LOADED" not in result.stderr, result.stderr[-2000:]
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Usage:" in result.stdout

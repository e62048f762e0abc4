"""Finds, checks and loads libfusedops.so so that torch.ops.fusedops.* exists.

Which file: $FUSEDOPS_LIBRARY when set (it must exist: no fall-back to another copy), else the
one inside this package (the wheel, an editable install), else <checkout>/build/
(PYTHONPATH=models development).

Before loading, two checks turn a crash into a message:
- one copy per process: a second libfusedops registers the fusedops namespace again and
  PyTorch aborts the process ("Only a single TORCH_LIBRARY can be used to register the
  namespace fusedops"), so a copy already loaded from another file is refused, naming it;
- the torch it was built against: the library's ABI is that torch's, and loading it into
  another can crash in its static initializers, so the version recorded in the file
  (cmake/build_info.cpp.in) must equal torch.__version__.
"""
from __future__ import annotations

import mmap
import os
import sys
from pathlib import Path

import torch

LIBRARY_ENV = "FUSEDOPS_LIBRARY"
_LIB_NAME = "libfusedops.so"
_BUILD_INFO_MARKER = b"fusedops-build-info:torch="
_loaded_path: str | None = None


def _default_paths() -> list[Path]:
    # The package's folders: the wheel's (or an editable install's build output, which
    # scikit-build-core adds to the package's __path__ next to the source folder) ...
    package_dirs = getattr(sys.modules.get(__package__), "__path__", [])
    found = [Path(d) / _LIB_NAME for d in package_dirs]
    # ... then a checkout's default build folder (PYTHONPATH=models development).
    found.append(Path(__file__).resolve().parent.parent.parent / "build" / _LIB_NAME)
    return found


def _choose_path() -> Path:
    configured = os.environ.get(LIBRARY_ENV)
    if configured:
        path = Path(configured)
        if not path.is_file():
            raise ImportError(
                f"fusedops: {LIBRARY_ENV}={configured} is not a file; set it to a built "
                f"{_LIB_NAME} (scripts/build.sh writes build/{_LIB_NAME}) or unset it to use "
                f"the package's own library")
        return path
    tried = _default_paths()
    for path in tried:
        if path.is_file():
            return path
    raise ImportError(
        f"fusedops: could not find {_LIB_NAME}; install the package (pip install .), build "
        f"it (scripts/build.sh) or set {LIBRARY_ENV} to its path. Looked in: "
        + ", ".join(str(p) for p in tried))


def _mapped_fusedops_files() -> list[str]:
    """Files named libfusedops* mapped into this process, from /proc/self/maps."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:  # not Linux: only the dispatcher check below applies
        return []
    found = set()
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and os.path.basename(fields[5]).startswith("libfusedops"):
            found.add(fields[5])
    return sorted(found)


def _same_file(a: str | Path, b: str | Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # a mapped file deleted since: not the one we are about to load
        return False


def _refuse_other_loaded_copy(path: Path) -> None:
    mapped = _mapped_fusedops_files()
    others = [m for m in mapped if not _same_file(m, path)]
    if others:
        raise ImportError(
            f"fusedops: another libfusedops is already loaded in this process: {others[0]}; "
            f"loading {path} as well would abort the process (a second registration of the "
            f"fusedops operators). Load one copy only: set {LIBRARY_ENV}={others[0]} to use "
            f"the loaded one")
    if not mapped and torch._C._jit_get_schemas_for_operator("fusedops::version"):
        raise ImportError(
            "fusedops: the fusedops operators are already registered in this process by a "
            f"library that is not a file named libfusedops* (see /proc/self/maps); loading "
            f"{path} as well would abort the process. Load one copy only")


def built_against_torch(path: str | Path) -> str | None:
    """The torch version recorded in a libfusedops file, or None if it records none."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        start = data.find(_BUILD_INFO_MARKER)
        if start < 0:
            return None
        start += len(_BUILD_INFO_MARKER)
        end = data.find(b"\0", start)
        return data[start:end].decode("ascii", "replace")


def _refuse_other_torch(path: Path) -> None:
    built = built_against_torch(path)
    running = str(torch.__version__)
    if built is None:
        raise ImportError(
            f"fusedops: {path} does not record the torch version it was built against (a "
            f"build older than fusedops 0.1.0's packaging, or not a fusedops library); "
            f"rebuild it (scripts/build.sh or pip install .)")
    if built != running:
        raise ImportError(
            f"fusedops: {path} was built against torch {built}, but this process runs torch "
            f"{running}; a fusedops build works only with the torch it was built against. "
            f"Install torch=={built}, or rebuild fusedops against torch {running} "
            f"(pip install --no-build-isolation --force-reinstall ., or scripts/build.sh)")


def load_library() -> str:
    """Loads the operator library once (checked as the module docstring says); returns its
    path."""
    global _loaded_path
    if _loaded_path is not None:
        return _loaded_path
    path = _choose_path()
    _refuse_other_loaded_copy(path)
    _refuse_other_torch(path)
    torch.ops.load_library(str(path))
    _loaded_path = str(path)
    return _loaded_path

"""Finds and loads libfusedops.so so that torch.ops.fusedops.* exists."""
from __future__ import annotations

import os
from pathlib import Path

import torch

_LIB_NAME = "libfusedops.so"
_loaded_path: str | None = None


def _candidates() -> list[Path]:
    found = []
    env = os.environ.get("FUSEDOPS_LIBRARY")
    if env:
        found.append(Path(env))
    here = Path(__file__).resolve().parent
    found.append(here / "lib" / _LIB_NAME)          # installed next to the package
    repo = here.parent.parent
    found.append(repo / "build" / _LIB_NAME)         # the default build folder of a checkout
    return found


def load_library() -> str:
    """Loads the operator library once and returns its path.

    Looks at $FUSEDOPS_LIBRARY, then fusedops/lib/, then <repo>/build/.
    """
    global _loaded_path
    if _loaded_path is not None:
        return _loaded_path
    tried = _candidates()
    for path in tried:
        if path.is_file():
            torch.ops.load_library(str(path))
            _loaded_path = str(path)
            return _loaded_path
    raise ImportError(
        "fusedops: could not find " + _LIB_NAME + "; build it (README: scripts/build.sh) or set "
        "FUSEDOPS_LIBRARY to its path. Looked in: " + ", ".join(str(p) for p in tried))

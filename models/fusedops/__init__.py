"""fusedops: fused PyTorch operators for four Linear+reduction models.

Importing the package loads libfusedops.so, which registers torch.ops.fusedops.*.
"""
import torch

from ._library import load_library

library_path = load_library()
# The library's version: the repository's VERSION file, compiled in (fusedops::version()).
__version__ = torch.ops.fusedops.version()

from .reference import Model18, Model39, Model62, Model98  # noqa: E402
from .model_new import ModelNew18, ModelNew39, ModelNew62, ModelNew98  # noqa: E402
from .problems import PROBLEMS, Problem, get_init_inputs, get_inputs, get_problem  # noqa: E402
from .routes import checking_folds, explain, reload_settings, settings  # noqa: E402
from .cuda_graphs import CudaGraphs  # noqa: E402

# The FUSEDOPS_* settings, read now: a bad value fails the import, naming the variable, the
# allowed values and the value given (ops/plan/settings.h), rather than the first call.
reload_settings()

__all__ = [
    "Model18", "Model39", "Model62", "Model98",
    "ModelNew18", "ModelNew39", "ModelNew62", "ModelNew98",
    "PROBLEMS", "Problem", "get_init_inputs", "get_inputs", "get_problem",
    "library_path", "load_library", "checking_folds", "explain", "reload_settings", "settings",
    "CudaGraphs",
]

"""What ran, and the settings that steer it.

    >>> lines = fusedops.explain(model, x)      # runs model(x) once, under torch.no_grad()
    >>> print("\\n".join(lines))
    matmul_groupnorm_leakyrelu_sum float16 accurate m=1024 n=8192 k=8192 cuda:0: sm90-half-fused (...)

The planner (ops/plan/planner.cpp) picks one GEMM route per call and says why; CPU kernels plan
no GEMM. FUSEDOPS_LOG=routes prints each new choice to stderr instead, process-wide.

The FUSEDOPS_* settings (README: FUSEDOPS_FP32_GEMM, FUSEDOPS_HALF_GEMM, FUSEDOPS_3XTF32_CHUNK,
FUSEDOPS_LOG, FUSEDOPS_CHECK_FOLDS) are read from the environment once, at first use;
reload_settings() reads them again, and `with fusedops.settings(FUSEDOPS_HALF_GEMM="cublas"):`
changes them for a block. `with fusedops.checking_folds():` checks every weight-fold cache hit
in the block against a fresh fold (what FUSEDOPS_CHECK_FOLDS=1 does for the whole process).
"""
import contextlib
import os

import torch


def explain(fn, *args, **kwargs):
    """Calls fn(*args, **kwargs) on this thread without autograd and returns the routes taken."""
    torch.ops.fusedops.record_routes(True)
    try:
        with torch.no_grad():
            fn(*args, **kwargs)
    finally:
        torch.ops.fusedops.record_routes(False)
    return list(torch.ops.fusedops.routes_taken())


def reload_settings():
    """Reads the FUSEDOPS_* environment variables again (they are read once, at first use);
    a bad value raises RuntimeError naming the variable, the allowed values and the value."""
    torch.ops.fusedops.reload_settings()


@contextlib.contextmanager
def settings(**values):
    """Sets FUSEDOPS_* variables (None unsets one) for the block, then restores them."""
    for name in values:
        if not name.startswith("FUSEDOPS_"):
            raise ValueError(f"fusedops.settings: {name} is not a FUSEDOPS_* setting")
    saved = {name: os.environ.get(name) for name in values}

    def apply(assignments):
        for name, value in assignments.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = str(value)
        reload_settings()

    try:
        apply(values)  # a bad value raises here, naming the variable
    except BaseException:
        apply(saved)
        raise
    try:
        yield
    finally:
        apply(saved)


@contextlib.contextmanager
def checking_folds():
    """Checks every weight-fold cache hit against a fresh fold while the block runs, in every
    thread (ops/common/fold_cache.h, "Checking"): a weight written where its version counter does
    not see it (through .data, its storage, numpy, a host copy) then raises a RuntimeError naming
    the operator, the fold, the weight's shape and the largest difference, instead of a result
    computed from the old weights. Each hit costs a fresh fold while the block runs: for tests."""
    torch.ops.fusedops.fold_check(True)
    try:
        yield
    finally:
        torch.ops.fusedops.fold_check(False)

"""The accuracy contract of docs/MODELS.md as one rule: `python -m fusedops.compare` and the
tests decide "matches the reference" here. C++ has the same rule in fusedops/accuracy.h
(fusedops_app's check and the C++ tests); tests/python/test_accuracy.py holds both to the same
cases.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Tolerance:
    """allclose's bound on one element: |actual - expected| <= atol + rtol * |expected|."""
    atol: float
    rtol: float


# The contract's tolerance for a result of each dtype.
TOLERANCES = {
    # The same chain in float64 differs only in summation order.
    torch.float64: Tolerance(atol=1e-10, rtol=1e-9),
    # The public KernelBench bar.
    torch.float32: Tolerance(atol=1e-4, rtol=1e-4),
    # The reference is computed in float32 and rounded once, as fusedops rounds its float32
    # accumulation once: the two differ by about one unit in the last place (bfloat16: 2^-8).
    torch.float16: Tolerance(atol=1e-2, rtol=1e-2),
    torch.bfloat16: Tolerance(atol=1e-2, rtol=1e-2),
}


def tolerance_for(dtype: torch.dtype) -> Tolerance:
    try:
        return TOLERANCES[dtype]
    except KeyError:
        raise ValueError(f"tolerance_for: dtype must be one of "
                         f"{', '.join(map(str, TOLERANCES))}, got {dtype}") from None


def within_tolerance(actual: torch.Tensor, expected: torch.Tensor,
                     tolerance: Tolerance | None = None,
                     expected_float64: torch.Tensor | None = None) -> torch.Tensor:
    """Element by element (a bool tensor of expected's shape, on the CPU), whether actual
    matches: it is within `tolerance` (default: tolerance_for(expected.dtype)) of expected (NaN
    matches NaN and an infinity the same infinity, torch.isclose(equal_nan=True)), or, where
    expected_float64 (the same reference computed in float64) is given, it is at least as close
    to expected_float64 as expected itself is. The second clause is the contract's "as close to
    float64 as PyTorch's own result": where a sum cancels to near zero, PyTorch's float32 result
    can itself be farther than 1e-4 from the exact value. Everything is compared in float64."""
    if actual.shape != expected.shape:
        raise ValueError(f"within_tolerance: actual must have the shape of expected, "
                         f"{tuple(expected.shape)}, got {tuple(actual.shape)}")
    tolerance = tolerance_for(expected.dtype) if tolerance is None else tolerance
    got = actual.detach().to(device="cpu", dtype=torch.float64)
    want = expected.detach().to(device="cpu", dtype=torch.float64)
    within = torch.isclose(got, want, rtol=tolerance.rtol, atol=tolerance.atol, equal_nan=True)
    if expected_float64 is not None:
        if expected_float64.shape != expected.shape:
            raise ValueError(f"within_tolerance: expected_float64 must have the shape of "
                             f"expected, {tuple(expected.shape)}, got "
                             f"{tuple(expected_float64.shape)}")
        exact = expected_float64.detach().to(device="cpu", dtype=torch.float64)
        # NaN compares false: a NaN result is never "at least as close".
        within |= (got - exact).abs() <= (want - exact).abs()
    return within


def mismatch_message(actual: torch.Tensor, expected: torch.Tensor, tolerance: Tolerance,
                     within: torch.Tensor) -> str:
    """What within_tolerance rejected: how many elements, and the worst one."""
    got = actual.detach().to(device="cpu", dtype=torch.float64).flatten()
    want = expected.detach().to(device="cpu", dtype=torch.float64).flatten()
    excess = ((got - want).abs() - (tolerance.atol + tolerance.rtol * want.abs())).nan_to_num(
        nan=float("inf"))
    excess[within.flatten()] = -float("inf")
    worst = int(excess.argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), expected.shape))
    return (f"{int((~within).sum())} of {within.numel()} elements outside the tolerance "
            f"(atol {tolerance.atol:g}, rtol {tolerance.rtol:g}), worst at {list(index)}: got "
            f"{got[worst].item():.8g}, expected {want[worst].item():.8g}")


def assert_within_tolerance(actual: torch.Tensor, expected: torch.Tensor,
                            tolerance: Tolerance | None = None,
                            expected_float64: torch.Tensor | None = None) -> None:
    """Raises AssertionError unless actual has expected's shape, dtype and device (as
    torch.testing.assert_close checks) and within_tolerance holds for every element; the message
    names the worst element."""
    for what in ("shape", "dtype", "device"):
        if getattr(actual, what) != getattr(expected, what):
            raise AssertionError(f"{what} {getattr(actual, what)} differs from the expected "
                                 f"{getattr(expected, what)}")
    tolerance = tolerance_for(expected.dtype) if tolerance is None else tolerance
    within = within_tolerance(actual, expected, tolerance, expected_float64)
    if not bool(within.all()):
        raise AssertionError(mismatch_message(actual, expected, tolerance, within))

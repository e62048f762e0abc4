"""The one tolerance rule (fusedops.accuracy; C++: fusedops/accuracy.h, the same cases in
app/tests/test_load_models.cpp): docs/MODELS.md's table, the float64 clause, non-finite values,
and the messages."""
from __future__ import annotations

import math

import pytest
import torch

from fusedops.accuracy import (Tolerance, assert_within_tolerance, tolerance_for,
                               within_tolerance)

FLOAT32 = tolerance_for(torch.float32)


def test_one_table_for_every_dtype():
    assert tolerance_for(torch.float32) == Tolerance(atol=1e-4, rtol=1e-4)
    assert tolerance_for(torch.float16) == Tolerance(atol=1e-2, rtol=1e-2)
    assert tolerance_for(torch.bfloat16) == Tolerance(atol=1e-2, rtol=1e-2)
    assert tolerance_for(torch.float64) == Tolerance(atol=1e-10, rtol=1e-9)
    with pytest.raises(ValueError, match="dtype must be one of .*, got torch.int32"):
        tolerance_for(torch.int32)


def test_allclose_against_the_reference():
    reference = torch.tensor([0.0, 1.0, -100.0])
    # atol + rtol * |expected|: 1e-4, 2e-4, 1.01e-2
    inside = reference + torch.tensor([0.9e-4, 1.9e-4, -1.0e-2])
    outside = reference + torch.tensor([1.1e-4, 2.1e-4, -1.02e-2])
    assert within_tolerance(inside, reference).tolist() == [True, True, True]
    assert within_tolerance(outside, reference).tolist() == [False, False, False]


def test_float64_decides_only_as_close_as_the_float32_reference():
    exact = torch.tensor([0.0], dtype=torch.float64)
    # PyTorch's float32 result 3e-4 off the exact value (a sum that cancels): an element 1e-5
    # off passes, one 4e-4 off on the other side does not.
    assert not within_tolerance(torch.tensor([1e-5]), torch.tensor([3e-4])).item()
    assert within_tolerance(torch.tensor([1e-5]), torch.tensor([3e-4]), FLOAT32, exact).item()
    assert not within_tolerance(torch.tensor([-4e-4]), torch.tensor([3e-4]), FLOAT32,
                                exact).item()
    # Within 1e-4 of the exact value is not enough where PyTorch's result is closer than that.
    assert not within_tolerance(torch.tensor([-9e-5]), torch.tensor([5e-5]), FLOAT32,
                                exact).item()
    # As close as PyTorch's result, where that one is 1e-3 off.
    assert within_tolerance(torch.tensor([5e-4]), torch.tensor([1e-3]), FLOAT32, exact).item()


def test_non_finite_values_match_only_themselves():
    reference = torch.tensor([math.nan, math.inf, -math.inf, 1.0])
    assert within_tolerance(reference.clone(), reference).all()
    assert within_tolerance(torch.tensor([1.0, math.inf, -math.inf, 1.0]),
                            reference).tolist() == [False, True, True, True]
    assert within_tolerance(torch.tensor([math.nan, -math.inf, -math.inf, math.nan]),
                            reference).tolist() == [True, False, True, False]
    # A NaN result is never "at least as close" to the float64 value.
    assert not within_tolerance(torch.tensor([math.nan]), torch.tensor([1.0]), FLOAT32,
                                torch.tensor([1.0], dtype=torch.float64)).item()


def test_assert_names_the_worst_element_and_checks_shape_dtype_device():
    reference = torch.zeros(2, 3)
    out = reference.clone()
    out[1, 2] = 5e-4
    out[0, 1] = 2e-4
    with pytest.raises(AssertionError, match=r"2 of 6 elements outside the tolerance "
                       r"\(atol 0.0001, rtol 0.0001\), worst at \[1, 2\]: got 0.000500"):
        assert_within_tolerance(out, reference)
    with pytest.raises(AssertionError, match="dtype torch.float64 differs from the expected "
                       "torch.float32"):
        assert_within_tolerance(reference.double(), reference)
    with pytest.raises(ValueError, match=r"must have the shape of expected, \(2, 3\), got "
                       r"\(3, 2\)"):
        within_tolerance(out.t(), reference)
    assert_within_tolerance(out, reference, Tolerance(atol=1e-3, rtol=0.0))  # a named looser one

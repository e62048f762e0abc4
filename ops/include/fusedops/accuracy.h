// The accuracy contract of docs/MODELS.md as one rule: fusedops_app's `check` and the C++ tests
// both decide "matches the reference" here. Python has the same rule in fusedops/accuracy.py;
// the two are kept equal by tests/python/test_accuracy.py and app/tests/test_load_models.cpp.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <optional>

namespace fusedops::accuracy {

// allclose's bound on one element: |actual - expected| <= atol + rtol * |expected|.
struct Tolerance {
  double atol;
  double rtol;
};

// The contract's tolerance for a result of this dtype.
inline Tolerance tolerance_for(at::ScalarType dtype) {
  switch (dtype) {
    case at::kDouble:
      return {1e-10, 1e-9};  // the same chain in float64 differs only in summation order
    case at::kFloat:
      return {1e-4, 1e-4};  // the public KernelBench bar
    case at::kHalf:
    case at::kBFloat16:
      // The reference is computed in float32 and rounded once, as fusedops rounds its float32
      // accumulation once: the two differ by about one unit in the last place (bfloat16: 2^-8).
      return {1e-2, 1e-2};
    default:
      TORCH_CHECK(false, "fusedops::accuracy::tolerance_for: dtype must be float64, float32, "
                         "float16 or bfloat16, got ", dtype);
  }
}

// Element by element (a bool tensor of expected's shape, on the CPU), whether actual matches:
// it is within `tolerance` of expected (NaN matches NaN and an infinity the same infinity, as
// torch.isclose(equal_nan=True)), or, where expected_float64 (the same reference computed in
// float64) is given, it is at least as close to expected_float64 as expected itself is. The
// second clause is the contract's "as close to float64 as PyTorch's own result": where a sum
// cancels to near zero, PyTorch's float32 result can itself be farther than 1e-4 from the exact
// value, and an element closer to the exact value than that is not an error. Everything is
// compared in float64.
inline at::Tensor within_tolerance(const at::Tensor& actual, const at::Tensor& expected,
                                   Tolerance tolerance,
                                   const std::optional<at::Tensor>& expected_float64 =
                                       std::nullopt) {
  TORCH_CHECK(actual.sizes() == expected.sizes(), "fusedops::accuracy::within_tolerance: actual "
              "must have the shape of expected, ", expected.sizes(), ", got ", actual.sizes());
  const at::Tensor got = actual.detach().to(at::kCPU, at::kDouble);
  const at::Tensor want = expected.detach().to(at::kCPU, at::kDouble);
  at::Tensor within = at::isclose(got, want, tolerance.rtol, tolerance.atol, /*equal_nan=*/true);
  if (expected_float64) {
    TORCH_CHECK(expected_float64->sizes() == expected.sizes(),
                "fusedops::accuracy::within_tolerance: expected_float64 must have the shape of "
                "expected, ", expected.sizes(), ", got ", expected_float64->sizes());
    const at::Tensor exact = expected_float64->detach().to(at::kCPU, at::kDouble);
    // NaN compares false: a NaN result is never "at least as close".
    within = within | ((got - exact).abs() <= (want - exact).abs());
  }
  return within;
}

}  // namespace fusedops::accuracy

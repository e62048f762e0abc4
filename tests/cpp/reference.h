// The reference chains of docs/MODELS.md as ATen composites (what the four reference models
// compute, op for op), plus the comparison helpers the GoogleTest files share.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include "fusedops/accuracy.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

namespace fusedops::testing {

// x W^T + b as elementwise products and a sum, without BLAS: IEEE semantics for inf and NaN.
// A BLAS kernel may turn inf into NaN where it multiplies zero padding (seen with the CPU
// GEMM on the GPU machine's Xeon, not on ours), so the non-finite tests compare with this.
inline at::Tensor linear_without_blas(const at::Tensor& x, const at::Tensor& w,
                                      const at::Tensor& b) {
  return (x.unsqueeze(1) * w.unsqueeze(0)).sum(-1) + b;
}

// Model 98: max_j(scale * gelu(avg_pool1d(x W^T + b, k)))
inline at::Tensor reference98(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                              int64_t k, double scale, bool without_blas = false) {
  const at::Tensor y = without_blas ? linear_without_blas(x, w, b) : at::linear(x, w, b);
  const at::Tensor pooled = at::avg_pool1d(y.unsqueeze(1), {k}).squeeze(1);
  at::Tensor gelu = at::gelu(pooled);
  if (without_blas) {
    // The exact GELU from std::erf, element by element: ATen's vectorized CPU erf gave
    // gelu(+inf) = NaN on the GPU machine's Xeon (0 * inf inside its polynomial).
    at::Tensor p64 = pooled.to(at::kDouble).contiguous();
    auto acc = p64.accessor<double, 2>();
    for (int64_t i = 0; i < p64.size(0); ++i) {
      for (int64_t j = 0; j < p64.size(1); ++j) {
        const double v = acc[i][j];
        acc[i][j] = 0.5 * v * (1.0 + std::erf(v * M_SQRT1_2));
      }
    }
    gelu = p64.to(pooled.scalar_type());
  }
  const at::Tensor s = gelu * scale;
  return std::get<0>(at::max(s, 1));
}

// Model 18: sum, then max / mean / logsumexp / logsumexp over the size-1 dim.
inline at::Tensor reference18(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                              bool without_blas = false) {
  at::Tensor s = (without_blas ? linear_without_blas(x, w, b) : at::linear(x, w, b))
                     .sum(1, /*keepdim=*/true);
  s = std::get<0>(at::max(s, 1, /*keepdim=*/true));
  s = s.mean(1, /*keepdim=*/true);
  s = at::logsumexp(s, {1}, /*keepdim=*/true);
  return at::logsumexp(s, {1}, /*keepdim=*/true);
}

// Model 39: BatchNorm1d((x W^T + b) * scale), including nn.BatchNorm1d's num_batches_tracked
// bookkeeping (momentum nullopt: cumulative average, factor 1 / num_batches_tracked).
inline at::Tensor reference39(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                              const at::Tensor& scale, const at::Tensor& gamma,
                              const at::Tensor& beta, at::Tensor& running_mean,
                              at::Tensor& running_var, at::Tensor& num_batches_tracked,
                              bool training, std::optional<double> momentum, double eps) {
  double factor = momentum.value_or(0.0);
  if (training) {
    num_batches_tracked.add_(1);
    if (!momentum.has_value()) {
      factor = 1.0 / static_cast<double>(num_batches_tracked.item<int64_t>());
    }
  }
  const at::Tensor z = at::linear(x, w, b) * scale;
  return at::batch_norm(z, gamma, beta, running_mean, running_var, training, factor, eps,
                        /*cudnn_enabled=*/false);
}

// Model 62: 2 * leaky_relu(group_norm(x W^T + b)), written as the reference's x + x.
inline at::Tensor reference62(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                              int64_t groups, const at::Tensor& gamma, const at::Tensor& beta,
                              double eps, double slope) {
  const at::Tensor y = at::group_norm(at::linear(x, w, b), groups, gamma, beta, eps);
  const at::Tensor l = at::leaky_relu(y, slope);
  return l + l;
}

// docs/MODELS.md's accuracy contract: the one rule the app's check uses too. A test that needs
// another bound passes its own Tolerance{atol, rtol} to the same rule.
using fusedops::accuracy::Tolerance;
using fusedops::accuracy::tolerance_for;

// fusedops::accuracy::within_tolerance for every element (NaN == NaN), the same shape, dtype and
// device; the message names the worst element.
inline ::testing::AssertionResult AllClose(const at::Tensor& actual, const at::Tensor& expected,
                                           Tolerance tol) {
  if (actual.sizes() != expected.sizes()) {
    std::ostringstream m;
    m << "shape " << actual.sizes() << " != expected " << expected.sizes();
    return ::testing::AssertionFailure() << m.str();
  }
  if (actual.scalar_type() != expected.scalar_type()) {
    return ::testing::AssertionFailure() << "dtype " << actual.scalar_type() << " != expected "
                                         << expected.scalar_type();
  }
  if (actual.device() != expected.device()) {
    return ::testing::AssertionFailure() << "device " << actual.device() << " != expected "
                                         << expected.device();
  }
  if (actual.numel() == 0) return ::testing::AssertionSuccess();
  const at::Tensor a = actual.to(at::kCPU, at::kDouble);
  const at::Tensor e = expected.to(at::kCPU, at::kDouble);
  if (fusedops::accuracy::within_tolerance(a, e, tol).all().item<bool>()) {
    return ::testing::AssertionSuccess();
  }
  const at::Tensor diff = (a - e).abs().nan_to_num(/*nan=*/1e300).flatten();
  const int64_t worst = diff.argmax().item<int64_t>();
  std::ostringstream m;
  m << "max |actual - expected| = " << diff[worst].item<double>() << " at flat index " << worst
    << " (actual " << a.flatten()[worst].item<double>() << ", expected "
    << e.flatten()[worst].item<double>() << "), rtol " << tol.rtol << ", atol " << tol.atol;
  return ::testing::AssertionFailure() << m.str();
}

// The message of the c10::Error f throws (without the C++ backtrace), or a marker if it does
// not throw one.
template <typename F>
std::string ErrorMessage(F&& f) {
  try {
    f();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    return std::string("<not a c10::Error: ") + e.what() + ">";
  }
  return "<no error thrown>";
}

inline std::string DtypeName(at::ScalarType t) { return c10::toString(t); }

}  // namespace fusedops::testing

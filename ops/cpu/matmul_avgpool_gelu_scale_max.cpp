// CPU kernels for model 98 (Matmul_AvgPool_GELU_Scale_Max) and its fold helper.
//
// AvgPool1d(k) over the outputs of a Linear is itself a Linear whose rows are the means of each
// k consecutive rows of W (and entries of b), so the GEMM runs on out/k rows instead of out.
// GELU is not monotonic and a negative scale turns the max into a min, so the epilogue
// (GELU, scale, row max) runs on every pooled value.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>
#include <optional>

#include "common/checks.h"
#include "plan/settings.h"
#include "common/operator_folds.h"
#include "common/numerics.h"
#include "cpu/cpu_helpers.h"
#include "math/gelu_scale_max.h"

namespace fusedops {
namespace {

// Row r of pooled_weight is the mean of weight rows r*k .. r*k+k-1 and pooled_bias[r] the mean
// of the matching bias entries; the last out % k rows are dropped, as AvgPool1d drops them.
// The sums run in double so the fold adds no rounding beyond the final cast to out_t.
template <typename scalar_t, typename out_t>
void fold_avgpool_rows(const scalar_t* weight, const scalar_t* bias, int64_t pooled,
                       int64_t in_features, int64_t k, out_t* pooled_weight, out_t* pooled_bias) {
  at::parallel_for(0, pooled, cpu::grain_for(k * in_features), [&](int64_t begin, int64_t end) {
    std::vector<double> window_sum(in_features);
    for (int64_t r = begin; r < end; ++r) {
      std::fill(window_sum.begin(), window_sum.end(), 0.0);
      double bias_sum = 0.0;
      for (int64_t t = 0; t < k; ++t) {
        const scalar_t* weight_row = weight + (r * k + t) * in_features;
        for (int64_t c = 0; c < in_features; ++c) {
          window_sum[c] += static_cast<double>(weight_row[c]);
        }
        bias_sum += static_cast<double>(bias[r * k + t]);
      }
      out_t* pooled_row = pooled_weight + r * in_features;
      for (int64_t c = 0; c < in_features; ++c) {
        pooled_row[c] = static_cast<out_t>(window_sum[c] / static_cast<double>(k));
      }
      pooled_bias[r] = static_cast<out_t>(bias_sum / static_cast<double>(k));
    }
  });
}

// The pooled Linear (weight (out/k, in), bias (out/k,)) in out_dtype, which is weight's dtype
// or its accumulation dtype.
FoldTensors fold_avgpool_linear(const at::Tensor& weight, const at::Tensor& bias,
                                            int64_t k, at::ScalarType out_dtype) {
  const at::Tensor weight_c = weight.contiguous();
  const at::Tensor bias_c = bias.contiguous();
  const int64_t pooled = weight_c.size(0) / k;
  const int64_t in_features = weight_c.size(1);
  at::Tensor pooled_weight = at::empty({pooled, in_features}, weight_c.options().dtype(out_dtype));
  at::Tensor pooled_bias = at::empty({pooled}, bias_c.options().dtype(out_dtype));
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, weight_c.scalar_type(), "avgpool_fold_linear", [&] {
        using acc_t = at::opmath_type<scalar_t>;
        const scalar_t* w = weight_c.const_data_ptr<scalar_t>();
        const scalar_t* b = bias_c.const_data_ptr<scalar_t>();
        if (out_dtype == weight_c.scalar_type()) {
          fold_avgpool_rows(w, b, pooled, in_features, k, pooled_weight.data_ptr<scalar_t>(),
                            pooled_bias.data_ptr<scalar_t>());
        } else {
          TORCH_INTERNAL_ASSERT(out_dtype == c10::CppTypeToScalarType<acc_t>::value);
          fold_avgpool_rows(w, b, pooled, in_features, k, pooled_weight.data_ptr<acc_t>(),
                            pooled_bias.data_ptr<acc_t>());
        }
      });
  return {pooled_weight, pooled_bias};
}

// max_j scale * gelu(pooled_j) (math/gelu_scale_max.h), with `eager` rounded where the
// reference writes each step. (The Linear output itself is never formed: the fold pools the
// weights, so its rounding is the one eager cannot repeat.) A NaN ends the row; of equal values
// the first is kept.
template <typename scalar_t, typename acc_t = at::opmath_type<scalar_t>>
acc_t scaled_gelu_max(const acc_t* pooled, int64_t width, acc_t scale, bool eager) {
  using Math = epilogues::GeluScaleMax<acc_t>;
  const Math math{scale};
  acc_t best = -std::numeric_limits<acc_t>::infinity();
  with_store<scalar_t>(eager, [&](auto store) {
    for (int64_t j = 0; j < width && !std::isnan(best); ++j) {
      best = Math::nan_max(math.template scaled_gelu<decltype(store)>(pooled[j]), best);
    }
  });
  return best;
}

template <typename acc_t>
bool all_finite(const acc_t* values, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    if (!std::isfinite(values[j])) return false;
  }
  return true;
}

// out[rows[q]] from the unfolded Linear: pool its k-windows, then the same epilogue.
template <typename scalar_t>
void unfolded_rows(const at::Tensor& x_acc, const at::Tensor& weight, const at::Tensor& bias,
                   int64_t k, double scale_factor, bool eager, const std::vector<int64_t>& rows,
                   scalar_t* out) {
  using acc_t = at::opmath_type<scalar_t>;
  const at::Tensor linear = cpu::linear_of_rows(x_acc, weight, bias, rows);
  const int64_t out_features = linear.size(1);
  const int64_t pooled_width = out_features / k;
  const acc_t* y = linear.const_data_ptr<acc_t>();
  const acc_t scale = static_cast<acc_t>(scale_factor);
  const int64_t count = static_cast<int64_t>(rows.size());
  at::parallel_for(0, count, cpu::grain_for(out_features), [&](int64_t begin, int64_t end) {
    std::vector<acc_t> pooled(pooled_width);
    for (int64_t q = begin; q < end; ++q) {
      const acc_t* y_row = y + q * out_features;
      for (int64_t r = 0; r < pooled_width; ++r) {
        acc_t window_sum = 0;
        for (int64_t t = 0; t < k; ++t) window_sum += y_row[r * k + t];
        pooled[r] = window_sum / static_cast<acc_t>(k);
      }
      out[rows[q]] = static_cast<scalar_t>(
          scaled_gelu_max<scalar_t>(pooled.data(), pooled_width, scale, eager));
    }
  });
}

at::Tensor matmul_avgpool_gelu_scale_max_cpu(const at::Tensor& x, const at::Tensor& weight,
                                             const at::Tensor& bias, int64_t pool_kernel_size,
                                             double scale_factor, std::optional<bool> cache_folds_arg,
                                             c10::string_view numerics) {
  const Numerics numerics_mode = parse_numerics("matmul_avgpool_gelu_scale_max", numerics);
  const OperatorCall call("matmul_avgpool_gelu_scale_max", cache_folds_arg);
  const bool cache_folds = call.cache_folds();
  checks::matmul_avgpool_gelu_scale_max(x, weight, bias, pool_kernel_size);
  plan::check_cpu_call("matmul_avgpool_gelu_scale_max", x.scalar_type());
  const at::ScalarType acc_dtype = at::toOpMathType(x.scalar_type());
  const bool eager = rounds_intermediates(numerics_mode, x.scalar_type() != acc_dtype);
  const FoldTensors fold =
      fold_weights(kAvgPoolLinearFold, pool_kernel_size, {weight, bias}, cache_folds,
                   [&] { return fold_avgpool_linear(weight, bias, pool_kernel_size, acc_dtype); });
  const at::Tensor& pooled_weight = fold[0];
  const at::Tensor& pooled_bias = fold[1];

  const at::Tensor x_acc = x.to(acc_dtype).contiguous();
  const at::Tensor pooled = at::addmm(pooled_bias, x_acc, pooled_weight.t()).contiguous();
  const int64_t batch = x.size(0);
  const int64_t pooled_width = pooled.size(1);
  at::Tensor out = at::empty({batch}, x.options());

  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x.scalar_type(), "matmul_avgpool_gelu_scale_max", [&] {
        using acc_t = at::opmath_type<scalar_t>;
        const acc_t* p = pooled.const_data_ptr<acc_t>();
        scalar_t* o = out.data_ptr<scalar_t>();
        const acc_t scale = static_cast<acc_t>(scale_factor);
        // A non-finite pooled value means an inf or NaN in x or W (or an overflow): the fold
        // may have changed it, so that row is redone unfolded below.
        const std::vector<int64_t> rows =
            cpu::rows_not_finished(batch, cpu::grain_for(pooled_width), [&](int64_t i) {
              const acc_t* row = p + i * pooled_width;
              if (!all_finite(row, pooled_width)) return false;
              o[i] = static_cast<scalar_t>(
                  scaled_gelu_max<scalar_t>(row, pooled_width, scale, eager));
              return true;
            });
        if (!rows.empty()) {
          unfolded_rows<scalar_t>(x_acc, weight, bias, pool_kernel_size, scale_factor, eager, rows,
                                 o);
        }
      });
  return out;
}

std::tuple<at::Tensor, at::Tensor> avgpool_fold_linear_cpu(const at::Tensor& weight,
                                                           const at::Tensor& bias,
                                                           int64_t pool_kernel_size) {
  checks::avgpool_fold_linear(weight, bias, pool_kernel_size);
  const FoldTensors fold =
      fold_avgpool_linear(weight, bias, pool_kernel_size, weight.scalar_type());
  return {fold[0], fold[1]};
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, CPU, m) {
  m.impl("matmul_avgpool_gelu_scale_max", &matmul_avgpool_gelu_scale_max_cpu);
  m.impl("avgpool_fold_linear", &avgpool_fold_linear_cpu);
}

}  // namespace fusedops

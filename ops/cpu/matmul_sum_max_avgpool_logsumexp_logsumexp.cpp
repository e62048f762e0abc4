// CPU kernels for model 18 (Matmul_Sum_Max_AvgPool_LogSumExp_LogSumExp) and its fold helper.
//
// sum_j (x . w_j + b_j) = x . (sum_j w_j) + sum_j b_j: with W's column sums folded once, the
// whole model is a matrix-vector product. The max, mean and two logsumexps that follow act on a
// size-1 dimension and return their input unchanged.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <vector>
#include <optional>

#include "common/checks.h"
#include "plan/settings.h"
#include "common/operator_folds.h"
#include "common/numerics.h"
#include "cpu/cpu_helpers.h"

namespace fusedops {
namespace {

// Narrower column blocks would read W's rows in pieces smaller than a few cache lines.
constexpr int64_t kMinColumnsPerTask = 64;

// column_sums[c] = sum_j weight[j, c] and bias_sum = sum_j bias[j], accumulated in double.
// Each task owns a block of columns and walks all rows, so it reads W row-contiguously.
template <typename scalar_t, typename out_t>
void fold_column_sums(const scalar_t* weight, const scalar_t* bias, int64_t out_features,
                      int64_t in_features, out_t* column_sums, out_t* bias_sum) {
  const int64_t grain = std::max(kMinColumnsPerTask, cpu::grain_for(out_features));
  at::parallel_for(0, in_features, grain, [&](int64_t begin, int64_t end) {
    std::vector<double> block_sum(end - begin, 0.0);
    for (int64_t j = 0; j < out_features; ++j) {
      const scalar_t* weight_row = weight + j * in_features;
      for (int64_t c = begin; c < end; ++c) {
        block_sum[c - begin] += static_cast<double>(weight_row[c]);
      }
    }
    for (int64_t c = begin; c < end; ++c) {
      column_sums[c] = static_cast<out_t>(block_sum[c - begin]);
    }
  });
  double total = 0.0;
  for (int64_t j = 0; j < out_features; ++j) total += static_cast<double>(bias[j]);
  *bias_sum = static_cast<out_t>(total);
}

// (column_sums (in,), bias_sum ()) in out_dtype: weight's dtype for the helper op, double for
// the kernel's cached fold.
FoldTensors fold_sum_linear(const at::Tensor& weight, const at::Tensor& bias,
                                        at::ScalarType out_dtype) {
  const at::Tensor weight_c = weight.contiguous();
  const at::Tensor bias_c = bias.contiguous();
  const int64_t out_features = weight_c.size(0);
  const int64_t in_features = weight_c.size(1);
  at::Tensor column_sums = at::empty({in_features}, weight_c.options().dtype(out_dtype));
  at::Tensor bias_sum = at::empty({}, bias_c.options().dtype(out_dtype));
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, weight_c.scalar_type(), "sum_fold_linear", [&] {
        const scalar_t* w = weight_c.const_data_ptr<scalar_t>();
        const scalar_t* b = bias_c.const_data_ptr<scalar_t>();
        if (out_dtype == weight_c.scalar_type()) {
          fold_column_sums(w, b, out_features, in_features, column_sums.data_ptr<scalar_t>(),
                           bias_sum.data_ptr<scalar_t>());
        } else {
          TORCH_INTERNAL_ASSERT(out_dtype == at::kDouble);
          fold_column_sums(w, b, out_features, in_features, column_sums.data_ptr<double>(),
                           bias_sum.data_ptr<double>());
        }
      });
  return {column_sums, bias_sum};
}

// dot(x, w) in double. Four independent partial sums let the adds overlap; one running sum
// would be a single dependency chain.
template <typename scalar_t>
double dot_in_double(const scalar_t* x, const double* w, int64_t n) {
  double partial[4] = {0.0, 0.0, 0.0, 0.0};
  int64_t c = 0;
  for (; c + 4 <= n; c += 4) {
    for (int u = 0; u < 4; ++u) partial[u] += static_cast<double>(x[c + u]) * w[c + u];
  }
  for (; c < n; ++c) partial[0] += static_cast<double>(x[c]) * w[c];
  return (partial[0] + partial[1]) + (partial[2] + partial[3]);
}

// o[rows[q]] (rows null: o[q]) = the sum of row q of y (count, width) in double, rounded once
// to scalar_t, as torch.sum writes it.
template <typename scalar_t, typename acc_t>
void row_sums_in_double(const acc_t* y, int64_t count, int64_t width, const int64_t* rows,
                        scalar_t* o) {
  at::parallel_for(0, count, cpu::grain_for(width), [&](int64_t begin, int64_t end) {
    for (int64_t q = begin; q < end; ++q) {
      double sum = 0.0;
      for (int64_t j = 0; j < width; ++j) sum += static_cast<double>(y[q * width + j]);
      o[rows != nullptr ? rows[q] : q] = static_cast<scalar_t>(sum);
    }
  });
}

// "eager" numerics on a float16/bfloat16 model: the reference rounds every Linear output y_j
// to the model's dtype before its sum, and the fold (which never forms y_j) cannot repeat that,
// so this runs the full GEMM (out_features times the fold's work) as the reference's Linear
// writes it (common/numerics.h) and sums the rounded values in double; the sum is rounded
// once, as torch.sum writes it. Non-finite values need no second path: this is the
// reference's own order of operations.
at::Tensor eager_linear_sum(const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias) {
  const at::Tensor y = linear_as_the_reference_writes_it(x, weight, bias)
                           .to(at::toOpMathType(x.scalar_type()));
  const int64_t batch = y.size(0), out_features = y.size(1);
  at::Tensor out = at::empty({batch, 1}, x.options());
  AT_DISPATCH_REDUCED_FLOATING_TYPES(x.scalar_type(), "eager_linear_sum", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    row_sums_in_double(y.const_data_ptr<acc_t>(), batch, out_features, nullptr,
                       out.data_ptr<scalar_t>());
  });
  return out;
}

at::Tensor matmul_sum_max_avgpool_logsumexp_logsumexp_cpu(const at::Tensor& x,
                                                          const at::Tensor& weight,
                                                          const at::Tensor& bias,
                                                          std::optional<bool> cache_folds_arg,
                                                          c10::string_view numerics) {
  const Numerics numerics_mode =
      parse_numerics("matmul_sum_max_avgpool_logsumexp_logsumexp", numerics);
  const OperatorCall call("matmul_sum_max_avgpool_logsumexp_logsumexp", cache_folds_arg);
  const bool cache_folds = call.cache_folds();
  checks::matmul_sum_max_avgpool_logsumexp_logsumexp(x, weight, bias);
  plan::check_cpu_call("matmul_sum_max_avgpool_logsumexp_logsumexp", x.scalar_type());
  const at::ScalarType acc_dtype = at::toOpMathType(x.scalar_type());
  if (rounds_intermediates(numerics_mode, x.scalar_type() != acc_dtype)) {
    return eager_linear_sum(x, weight, bias);
  }
  // The fold stays in double so that float32 results carry no fold rounding.
  const FoldTensors fold =
      fold_weights(kSumLinearFold, 0, {weight, bias}, cache_folds,
                   [&] { return fold_sum_linear(weight, bias, at::kDouble); });
  const double* column_sums = fold[0].const_data_ptr<double>();
  const double bias_sum = *fold[1].const_data_ptr<double>();

  const at::Tensor x_c = x.contiguous();
  const int64_t batch = x_c.size(0);
  const int64_t in_features = x_c.size(1);
  at::Tensor out = at::empty({batch, 1}, x.options());

  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x.scalar_type(), "matmul_sum_max_avgpool_logsumexp_logsumexp", [&] {
        const scalar_t* x_data = x_c.const_data_ptr<scalar_t>();
        scalar_t* o = out.data_ptr<scalar_t>();
        // An inf or NaN in x (or W) makes the folded sum non-finite, and the fold may have
        // changed which one it is; a sum past the output dtype's range may be an overflow the
        // reference sees differently. Those rows are redone unfolded below.
        const std::vector<int64_t> rows =
            cpu::rows_not_finished(batch, cpu::grain_for(in_features), [&](int64_t i) {
              const scalar_t sum = static_cast<scalar_t>(
                  dot_in_double(x_data + i * in_features, column_sums, in_features) + bias_sum);
              if (!std::isfinite(static_cast<double>(sum))) return false;
              o[i] = sum;
              return true;
            });
        if (rows.empty()) return;

        using acc_t = at::opmath_type<scalar_t>;
        const at::Tensor x_acc = x_c.to(c10::CppTypeToScalarType<acc_t>::value);
        const at::Tensor linear = cpu::linear_of_rows(x_acc, weight, bias, rows);
        row_sums_in_double(linear.const_data_ptr<acc_t>(), linear.size(0), linear.size(1),
                           rows.data(), o);
      });
  return out;
}

std::tuple<at::Tensor, at::Tensor> sum_fold_linear_cpu(const at::Tensor& weight,
                                                       const at::Tensor& bias) {
  checks::sum_fold_linear(weight, bias);
  const FoldTensors fold = fold_sum_linear(weight, bias, weight.scalar_type());
  return {fold[0], fold[1]};
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, CPU, m) {
  m.impl("matmul_sum_max_avgpool_logsumexp_logsumexp",
         &matmul_sum_max_avgpool_logsumexp_logsumexp_cpu);
  m.impl("sum_fold_linear", &sum_fold_linear_cpu);
}

}  // namespace fusedops

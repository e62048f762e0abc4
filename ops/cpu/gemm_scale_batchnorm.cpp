// CPU kernel for model 39 (Gemm_Scale_BatchNorm): BatchNorm1d((x W^T + b) * scale).
//
// Training mode normalizes with the batch statistics of each feature (a column of the GEMM
// output) and updates the running statistics in place, exactly as nn.BatchNorm1d does; eval
// mode normalizes with the running statistics.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "common/checks.h"
#include "plan/settings.h"
#include "common/numerics.h"
#include "cpu/cpu_helpers.h"
#include "math/scale_batchnorm.h"

namespace fusedops {
namespace {

using Math = epilogues::ScaleBatchNorm;

// Columns a training task sweeps together: the three passes over a block (sum, squared
// deviations, normalize) then read each row's span as whole cache lines.
constexpr int64_t kColumnBlock = 64;

// The GEMM output y (batch, features) with scale as strides of its (batch, features)
// broadcast: a stride is 0 along a broadcast dimension. With `eager` ("eager" numerics on a
// float16/bfloat16 model) y is the rounded Linear output (common/numerics.h) and the product is
// rounded to scalar_t, where the reference's `* scale` writes it.
template <typename scalar_t>
struct ScaledLinear {
  using acc_t = at::opmath_type<scalar_t>;
  const acc_t* y;
  const acc_t* scale;
  int64_t scale_row_stride;
  int64_t scale_column_stride;
  int64_t features;
  bool eager;

  acc_t value(int64_t i, int64_t j) const {
    return stored_as<scalar_t>(
        y[i * features + j] * scale[i * scale_row_stride + j * scale_column_stride], eager);
  }
};

// Per-feature vectors (affine parameters, running statistics) as contiguous doubles.
at::Tensor feature_vector_in_double(const at::Tensor& t) {
  return t.to(at::kDouble).contiguous();
}

// Training: batch mean and biased variance of every feature z[:, j] (two passes, double), the
// normalized output, and the updated running statistics (the unbiased variance goes into
// running_var). z is written over y between the passes; out may alias y.
template <typename scalar_t>
void batchnorm_train(const ScaledLinear<scalar_t>& z_in,
                     at::opmath_type<scalar_t>* z_buffer, int64_t batch, const double* gamma,
                     const double* beta, const double* running_mean, const double* running_var,
                     double eps, double factor, scalar_t* out, double* new_running_mean,
                     double* new_running_var) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t features = z_in.features;
  const double count = static_cast<double>(batch);
  const int64_t grain = std::max(kColumnBlock, cpu::grain_for(batch));
  at::parallel_for(0, features, grain, [&](int64_t begin, int64_t end) {
    double sum[kColumnBlock];
    double squared_deviation[kColumnBlock];
    for (int64_t block = begin; block < end; block += kColumnBlock) {
      const int64_t width = std::min(kColumnBlock, end - block);
      std::fill(sum, sum + width, 0.0);
      std::fill(squared_deviation, squared_deviation + width, 0.0);
      for (int64_t i = 0; i < batch; ++i) {
        acc_t* z_row = z_buffer + i * features + block;
        for (int64_t u = 0; u < width; ++u) {
          const acc_t z = z_in.value(i, block + u);
          z_row[u] = z;
          sum[u] += static_cast<double>(z);
        }
      }
      double mean[kColumnBlock];
      for (int64_t u = 0; u < width; ++u) mean[u] = sum[u] / static_cast<double>(batch);
      for (int64_t i = 0; i < batch; ++i) {
        const acc_t* z_row = z_buffer + i * features + block;
        for (int64_t u = 0; u < width; ++u) {
          const double deviation = static_cast<double>(z_row[u]) - mean[u];
          squared_deviation[u] += deviation * deviation;
        }
      }
      acc_t shift[kColumnBlock];
      acc_t multiplier[kColumnBlock];
      acc_t offset[kColumnBlock];
      for (int64_t u = 0; u < width; ++u) {
        const int64_t j = block + u;
        const double variance = squared_deviation[u] / static_cast<double>(batch);
        shift[u] = static_cast<acc_t>(mean[u]);
        multiplier[u] = static_cast<acc_t>(Math::multiplier(gamma[j], variance, eps));
        offset[u] = static_cast<acc_t>(beta[j]);
        new_running_mean[j] = Math::blend(running_mean[j], mean[u], factor);
        new_running_var[j] = Math::running_var_cpu(running_var[j], variance, count, factor);
      }
      for (int64_t i = 0; i < batch; ++i) {
        const acc_t* z_row = z_buffer + i * features + block;
        scalar_t* out_row = out + i * features + block;
        for (int64_t u = 0; u < width; ++u) {
          out_row[u] = static_cast<scalar_t>(
              Math::normalize(z_row[u], shift[u], multiplier[u], offset[u]));
        }
      }
    }
  });
}

// Eval: out = (z - running_mean) / sqrt(running_var + eps) * gamma + beta, row by row.
template <typename scalar_t>
void batchnorm_eval(const ScaledLinear<scalar_t>& z_in, int64_t batch,
                    const double* gamma, const double* beta, const double* running_mean,
                    const double* running_var, double eps, scalar_t* out) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t features = z_in.features;
  std::vector<acc_t> shift(features), multiplier(features), offset(features);
  for (int64_t j = 0; j < features; ++j) {
    shift[j] = static_cast<acc_t>(running_mean[j]);
    multiplier[j] = static_cast<acc_t>(Math::multiplier(gamma[j], running_var[j], eps));
    offset[j] = static_cast<acc_t>(beta[j]);
  }
  at::parallel_for(0, batch, cpu::grain_for(features), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      scalar_t* out_row = out + i * features;
      for (int64_t j = 0; j < features; ++j) {
        out_row[j] = static_cast<scalar_t>(
            Math::normalize(z_in.value(i, j), shift[j], multiplier[j], offset[j]));
      }
    }
  });
}

at::Tensor gemm_scale_batchnorm_cpu(const at::Tensor& x, const at::Tensor& weight,
                                    const at::Tensor& bias, const at::Tensor& scale,
                                    const at::Tensor& bn_weight, const at::Tensor& bn_bias,
                                    at::Tensor& running_mean, at::Tensor& running_var,
                                    at::Tensor& num_batches_tracked, bool training,
                                    std::optional<double> momentum, double eps, std::optional<bool> /*cache_folds: nothing to fold here*/,
                                    c10::string_view numerics) {
  const Numerics numerics_mode = parse_numerics("gemm_scale_batchnorm", numerics);
  checks::gemm_scale_batchnorm(x, weight, bias, scale, bn_weight, bn_bias, running_mean,
                               running_var, num_batches_tracked, training, eps);
  plan::check_cpu_call("gemm_scale_batchnorm", x.scalar_type());
  const int64_t batch = x.size(0);
  const int64_t features = weight.size(0);
  const at::ScalarType acc_dtype = at::toOpMathType(x.scalar_type());
  const bool eager = rounds_intermediates(numerics_mode, x.scalar_type() != acc_dtype);

  // y is a fresh (batch, features) buffer: training overwrites it with z, and when the output
  // dtype is the accumulation dtype the output is written over it too.
  const at::Tensor y = cpu::linear_in(acc_dtype, x, weight, bias, eager);
  const at::Tensor scale_broadcast = scale.to(acc_dtype).expand({batch, features});
  at::Tensor out = x.scalar_type() == acc_dtype ? y : at::empty({batch, features}, x.options());

  const at::Tensor gamma = feature_vector_in_double(bn_weight);
  const at::Tensor beta = feature_vector_in_double(bn_bias);
  const at::Tensor mean_before = feature_vector_in_double(running_mean);
  const at::Tensor var_before = feature_vector_in_double(running_var);

  at::Tensor new_mean, new_var;
  double factor = 0.0;
  if (training) {
    // nn.BatchNorm1d counts the batch; momentum=None then averages over all batches, this one
    // included.
    factor = Math::factor(!momentum.has_value(), momentum.value_or(0.0),
                          num_batches_tracked.item<int64_t>());
    num_batches_tracked.add_(1);
    // An empty batch has no statistics: BatchNorm returns the empty output and leaves the
    // running statistics as they were (it still counts the batch).
    if (batch == 0) return out;
    new_mean = at::empty({features}, mean_before.options());
    new_var = at::empty({features}, var_before.options());
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x.scalar_type(), "gemm_scale_batchnorm", [&] {
        using acc_t = at::opmath_type<scalar_t>;
        const ScaledLinear<scalar_t> z{
            y.const_data_ptr<acc_t>(), scale_broadcast.const_data_ptr<acc_t>(),
            scale_broadcast.stride(0), scale_broadcast.stride(1), features, eager};
        const double* gamma_p = gamma.const_data_ptr<double>();
        const double* beta_p = beta.const_data_ptr<double>();
        const double* mean_p = mean_before.const_data_ptr<double>();
        const double* var_p = var_before.const_data_ptr<double>();
        if (training) {
          batchnorm_train<scalar_t>(z, y.data_ptr<acc_t>(), batch, gamma_p, beta_p, mean_p, var_p,
                                    eps, factor, out.data_ptr<scalar_t>(),
                                    new_mean.data_ptr<double>(), new_var.data_ptr<double>());
        } else {
          batchnorm_eval<scalar_t>(z, batch, gamma_p, beta_p, mean_p, var_p, eps,
                                   out.data_ptr<scalar_t>());
        }
      });
  if (training) {
    // copy_ converts to the buffers' dtype, honours their strides and bumps their versions.
    running_mean.copy_(new_mean);
    running_var.copy_(new_var);
  }
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, CPU, m) {
  m.impl("gemm_scale_batchnorm", &gemm_scale_batchnorm_cpu);
}

}  // namespace fusedops

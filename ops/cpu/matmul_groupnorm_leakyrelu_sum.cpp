// CPU kernel for model 62 (Matmul_GroupNorm_LeakyReLU_Sum):
// 2 * leaky_relu(GroupNorm(x W^T + b)).
//
// GroupNorm's statistics cover one sample's group of hidden/num_groups consecutive channels,
// never the batch, so every row of the GEMM output is finished on its own.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "common/checks.h"
#include "plan/settings.h"
#include "common/numerics.h"
#include "cpu/cpu_helpers.h"
#include "math/groupnorm_leakyrelu_sum.h"

namespace fusedops {
namespace {

// For every row of y (batch, channels) and every group of group_size channels: mean and
// biased variance (two passes, double), then the chain of math/groupnorm_leakyrelu_sum.h
// (normalize, per-channel affine, leaky ReLU, doubled). out may alias y: each element is read
// before it is written. Store: the eager roundings, where the reference's group_norm and
// leaky_relu write their outputs (y is then already the rounded Linear output,
// common/numerics.h).
template <typename scalar_t, typename Store>
void groupnorm_leakyrelu_sum(const at::opmath_type<scalar_t>* y, int64_t batch, int64_t channels,
                             int64_t num_groups, const at::opmath_type<scalar_t>* gamma,
                             const at::opmath_type<scalar_t>* beta, double eps,
                             double negative_slope, scalar_t* out) {
  using acc_t = at::opmath_type<scalar_t>;
  using Statistics = epilogues::GroupNormLeakyReluSum<double>;
  const int64_t group_size = channels / num_groups;
  const double count = static_cast<double>(group_size);
  const Statistics statistics{eps, negative_slope};
  const epilogues::GroupNormLeakyReluSum<acc_t> chain{static_cast<acc_t>(eps),
                                                      static_cast<acc_t>(negative_slope)};
  at::parallel_for(0, batch, cpu::grain_for(channels), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      for (int64_t g = 0; g < num_groups; ++g) {
        const int64_t first = g * group_size;
        const acc_t* y_group = y + i * channels + first;
        scalar_t* out_group = out + i * channels + first;
        double sum = 0.0;
        for (int64_t c = 0; c < group_size; ++c) sum += static_cast<double>(y_group[c]);
        const double mean = Statistics::mean(sum, count);
        double squared_deviation = 0.0;
        for (int64_t c = 0; c < group_size; ++c) {
          const double deviation = static_cast<double>(y_group[c]) - mean;
          squared_deviation += deviation * deviation;
        }
        const acc_t shift = static_cast<acc_t>(mean);
        const acc_t inv_std = static_cast<acc_t>(statistics.rstd(squared_deviation, count));
        for (int64_t c = 0; c < group_size; ++c) {
          out_group[c] = static_cast<scalar_t>(chain.template output<Store>(
              y_group[c] - shift, inv_std, gamma[first + c], beta[first + c]));
        }
      }
    }
  });
}

at::Tensor matmul_groupnorm_leakyrelu_sum_cpu(const at::Tensor& x, const at::Tensor& weight,
                                              const at::Tensor& bias, int64_t num_groups,
                                              const at::Tensor& gn_weight,
                                              const at::Tensor& gn_bias, double eps,
                                              double negative_slope, std::optional<bool> /*cache_folds: nothing to fold here*/,
                                              c10::string_view numerics) {
  const Numerics numerics_mode = parse_numerics("matmul_groupnorm_leakyrelu_sum", numerics);
  checks::matmul_groupnorm_leakyrelu_sum(x, weight, bias, num_groups, gn_weight, gn_bias);
  plan::check_cpu_call("matmul_groupnorm_leakyrelu_sum", x.scalar_type());
  const int64_t batch = x.size(0);
  const int64_t channels = weight.size(0);
  const at::ScalarType acc_dtype = at::toOpMathType(x.scalar_type());
  const bool eager = rounds_intermediates(numerics_mode, x.scalar_type() != acc_dtype);

  const at::Tensor y = cpu::linear_in(acc_dtype, x, weight, bias, eager);
  // y is a fresh buffer: when the output dtype is the accumulation dtype, write over it.
  at::Tensor out = x.scalar_type() == acc_dtype ? y : at::empty({batch, channels}, x.options());
  const at::Tensor gamma = gn_weight.to(acc_dtype).contiguous();
  const at::Tensor beta = gn_bias.to(acc_dtype).contiguous();

  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x.scalar_type(), "matmul_groupnorm_leakyrelu_sum", [&] {
        using acc_t = at::opmath_type<scalar_t>;
        with_store<scalar_t>(eager, [&](auto store) {
          groupnorm_leakyrelu_sum<scalar_t, decltype(store)>(
              y.const_data_ptr<acc_t>(), batch, channels, num_groups,
              gamma.const_data_ptr<acc_t>(), beta.const_data_ptr<acc_t>(), eps, negative_slope,
              out.data_ptr<scalar_t>());
        });
      });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, CPU, m) {
  m.impl("matmul_groupnorm_leakyrelu_sum", &matmul_groupnorm_leakyrelu_sum_cpu);
}

}  // namespace fusedops

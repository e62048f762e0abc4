// Model 62 on CUDA, a composition: checks, plan (cuda/linear.h), then either a fused route
// (a group-statistics epilogue: bias, GroupNorm, LeakyReLU and x2 inside the GEMM, y never
// written: epilogues/groupnorm_leakyrelu_sum_fused.h) or the planned GEMM followed by one pass
// over y (epilogues/groupnorm_leakyrelu_sum.h). The math is math/groupnorm_leakyrelu_sum.h in
// both.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <optional>

#include "common/checks.h"
#include "common/fold_cache.h"
#include "common/kept_linear.h"
#include "common/numerics.h"
#include "cuda/epilogues/groupnorm_leakyrelu_sum.h"
#include "cuda/epilogues/groupnorm_leakyrelu_sum_fused.h"
#include "cuda/gemm/skinny_half.h"
#include "cuda/linear.h"

namespace fusedops {
namespace {

// The fused epilogue loads and stores channel pairs.
bool pair_aligned(const at::Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % (2 * t.element_size()) == 0;
}

void run_sm90(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
              int64_t group_size, const at::Tensor& gamma, const at::Tensor& beta, double eps,
              double negative_slope, int sm_count, at::Tensor& out) {
  const int64_t m = x.size(0), n = weight.size(0), k = x.size(1);
  const cuda::gemm::Fp16GemmShape shape{static_cast<int>(m), static_cast<int>(n),
                                        static_cast<int>(k), 1, k, k, 0, 0, sm_count};
  const cuda::GroupNormGemmArgs epilogue{bias.data_ptr(),
                                                   gamma.data_ptr(),
                                                   beta.data_ptr(),
                                                   static_cast<int>(group_size),
                                                   static_cast<float>(eps),
                                                   static_cast<float>(negative_slope),
                                                   out.data_ptr(),
                                                   out.scalar_type() == at::kFloat};
  const auto type = x.scalar_type() == at::kHalf ? cuda::gemm::HalfType::kFloat16
                                                 : cuda::gemm::HalfType::kBFloat16;
  cuda::groupnorm_leakyrelu_sum_gemm_sm90(type, shape, x.data_ptr(), weight.data_ptr(), epilogue,
                                          at::cuda::getCurrentCUDAStream());
}

at::Tensor matmul_groupnorm_leakyrelu_sum_cuda(const at::Tensor& x, const at::Tensor& weight,
                                               const at::Tensor& bias, int64_t num_groups,
                                               const at::Tensor& gn_weight,
                                               const at::Tensor& gn_bias, double eps,
                                               double negative_slope, std::optional<bool> cache_folds_arg,
                                               c10::string_view numerics) {
  const Numerics mode = parse_numerics("matmul_groupnorm_leakyrelu_sum", numerics);
  const OperatorCall call("matmul_groupnorm_leakyrelu_sum", cache_folds_arg);
  const bool cache_folds = call.cache_folds();
  checks::matmul_groupnorm_leakyrelu_sum(x, weight, bias, num_groups, gn_weight, gn_bias);
  const c10::cuda::CUDAGuard device_guard(x.device());
  const int64_t batch = x.size(0), hidden = weight.size(0);
  // x's dtype, or float32 in the autocast form (common/checks.h).
  const at::ScalarType out_dtype = checks::params_dtype(x, bias);
  at::Tensor out = at::empty({batch, hidden}, x.options().dtype(out_dtype));
  if (batch == 0 || hidden == 0) return out;
  const at::Tensor xc = x.contiguous(), wc = weight.contiguous(), bc = bias.contiguous();
  const at::Tensor gamma = gn_weight.contiguous(), beta = gn_bias.contiguous();
  const int64_t group_size = hidden / num_groups;
  // The fused epilogues reduce a group in registers (the Hopper GEMM's layout rule) or own one
  // per block (the skinny-half kernel's): the same group sizes in half precision.
  static_assert(cuda::gemm::kHalfTileN == 128, "skinny_group_ok takes the same groups");
  const bool fusable = (x.scalar_type() == at::kFloat
                           ? cuda::skinny_group_ok(group_size, /*float32=*/true)
                           : cuda::sm90_group_ok(group_size)) &&
                       pair_aligned(bc) && pair_aligned(gamma) && pair_aligned(beta);
  cuda::LinearNeeds needs{"matmul_groupnorm_leakyrelu_sum"};
  needs.epilogue = plan::Epilogue::kGroupStatistics;
  needs.epilogue_fits = fusable;
  needs.autocast_form = out_dtype != x.scalar_type();
  const cuda::PlannedLinear planned = cuda::plan_linear(needs, xc, wc, mode, cache_folds);
  const int sm_count = planned.request.device.sm_count;
  if (planned.plan.route == plan::Route::kSm90HalfFused) {
    run_sm90(xc, wc, bc, group_size, gamma, beta, eps, negative_slope, sm_count, out);
    return out;
  }
  if (planned.plan.route == plan::Route::kSkinnyHalfFused ||
      planned.plan.route == plan::Route::kSkinny3xFp16Fused) {
    cuda::gemm::SkinnyOperands ops;
    if (cuda::gemm::skinny_operands(xc, wc, weight, cache_folds, ops)) {
      cuda::groupnorm_leakyrelu_sum_skinny(ops, bc, group_size, gamma, beta, eps, negative_slope,
                                           out, sm_count);
      return out;
    }
  }
  const cuda::LinearOutput linear = cuda::run_linear(planned, xc, wc, bc, weight, cache_folds);
  keep_linear(linear.y, linear.bias_added);  // for the backward (common/kept_linear.h)
  // Eager (float16/bfloat16 results): the reference's roundings of the GroupNorm and LeakyReLU
  // outputs.
  cuda::groupnorm_leakyrelu_sum_pass(cuda::y_for_epilogue(linear, out_dtype),
                                     linear.bias_added ? at::Tensor() : bc, num_groups, gamma,
                                     beta, eps, negative_slope, rounds_intermediates(mode, out_dtype),
                                     out);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, CUDA, m) {
  m.impl("matmul_groupnorm_leakyrelu_sum", &matmul_groupnorm_leakyrelu_sum_cuda);
}

}  // namespace fusedops

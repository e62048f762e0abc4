// Model 39 on CUDA, a composition: checks, the planned GEMM y = x W^T (cuda/linear.h), then
// z = (y + b) * scale and BatchNorm1d in training or eval mode (cuda/epilogues/batchnorm.h).
// With one scale value per column, in eval mode the chain is a per-column affine map (at few
// rows all of it in one kernel: epilogues/scale_batchnorm_fused.h), and in training its
// statistics follow from y's column moments, which a GEMM's epilogue can take by tiles (TF32
// allowed: gemm/gemm_3xfp16.h; float16/bfloat16: gemm/gemm_half.h).
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <optional>

#include "common/checks.h"
#include "common/fold_cache.h"
#include "common/kept_linear.h"
#include "common/numerics.h"
#include "cuda/epilogues/batchnorm.h"
#include "cuda/epilogues/scale_batchnorm_fused.h"
#include "cuda/gemm/gemm_3xfp16.h"
#include "cuda/gemm/gemm_half.h"
#include "cuda/gemm/skinny_half.h"
#include "cuda/linear.h"

namespace fusedops {
namespace {

// y = x W^T (float32) and its column moments by tiles, from the Hopper half GEMM's epilogue.
void run_half_moments(const at::Tensor& x, const at::Tensor& weight, int sm_count, at::Tensor& y,
                      cuda::TileMoments& tiles) {
  const int64_t m = x.size(0), n = weight.size(0), k = x.size(1);
  const cuda::gemm::Fp16GemmShape shape{static_cast<int>(m), static_cast<int>(n),
                                        static_cast<int>(k), 1, k, k, 0, 0, sm_count};
  const auto type = x.scalar_type() == at::kHalf ? cuda::gemm::HalfType::kFloat16
                                                 : cuda::gemm::HalfType::kBFloat16;
  cuda::gemm::half_moments_gemm_sm90(type, shape, x.data_ptr(), weight.data_ptr(),
                                     y.data_ptr<float>(), tiles.mean.data_ptr<float>(),
                                     tiles.m2.data_ptr<float>(), at::cuda::getCurrentCUDAStream());
  tiles.written = true;
}

at::Tensor gemm_scale_batchnorm_cuda(const at::Tensor& x, const at::Tensor& weight,
                                     const at::Tensor& bias, const at::Tensor& scale,
                                     const at::Tensor& bn_weight, const at::Tensor& bn_bias,
                                     at::Tensor& running_mean, at::Tensor& running_var,
                                     at::Tensor& num_batches_tracked, bool training,
                                     std::optional<double> momentum, double eps, std::optional<bool> cache_folds_arg,
                                     c10::string_view numerics) {
  const Numerics mode = parse_numerics("gemm_scale_batchnorm", numerics);
  const OperatorCall call("gemm_scale_batchnorm", cache_folds_arg);
  const bool cache_folds = call.cache_folds();
  checks::gemm_scale_batchnorm(x, weight, bias, scale, bn_weight, bn_bias, running_mean,
                               running_var, num_batches_tracked, training, eps);
  const c10::cuda::CUDAGuard device_guard(x.device());
  const int64_t batch = x.size(0), n = weight.size(0);
  // x's dtype, or float32 in the autocast form (common/checks.h).
  const at::ScalarType out_dtype = checks::params_dtype(x, bias);
  at::Tensor out = at::empty({batch, n}, x.options().dtype(out_dtype));
  if (batch == 0) {
    if (training) cuda::count_empty_batch(num_batches_tracked);
    return out;
  }
  const at::Tensor xc = x.contiguous(), wc = weight.contiguous(), bc = bias.contiguous();
  const at::Tensor gamma = bn_weight.contiguous(), beta = bn_bias.contiguous();
  const bool per_column = scale.dim() == 1 && scale.size(0) == n;
  cuda::LinearNeeds needs{"gemm_scale_batchnorm"};
  needs.epilogue = training ? plan::Epilogue::kColumnMoments : plan::Epilogue::kColumnAffine;
  needs.epilogue_fits = per_column;
  needs.one_pass_rows = cuda::kBatchNormOnePassRows;
  needs.autocast_form = out_dtype != x.scalar_type();
  const cuda::PlannedLinear planned = cuda::plan_linear(needs, xc, wc, mode, cache_folds);
  const int sm_count = planned.request.device.sm_count;
  if (planned.plan.route == plan::Route::kSkinnyHalfFused ||
      planned.plan.route == plan::Route::kSkinny3xFp16Fused) {
    cuda::gemm::SkinnyOperands ops;
    if (cuda::gemm::skinny_operands(xc, wc, weight, cache_folds, ops)) {
      cuda::scale_batchnorm_eval_skinny(ops, bc, scale, gamma, beta, running_mean.contiguous(),
                                        running_var.contiguous(), eps, out, sm_count);
      return out;
    }
  }
  cuda::LinearOutput linear;
  std::optional<cuda::TileMoments> tiles;
  if (planned.plan.route == plan::Route::kFp16x1Fused ||
      planned.plan.route == plan::Route::kSm90HalfFused) {
    linear.y = at::empty({batch, n}, x.options().dtype(at::kFloat));
    tiles = cuda::make_tile_moments(batch, n, cuda::gemm::kMomentsTileRows, linear.y);
    if (planned.plan.route == plan::Route::kSm90HalfFused) {
      run_half_moments(xc, wc, sm_count, linear.y, *tiles);
    } else if (!cuda::gemm::linear_nt_1xfp16_moments(xc, wc, weight, cache_folds, sm_count,
                                                     linear.y, *tiles)) {
      tiles.reset();
    }
  }
  if (!tiles) linear = cuda::run_linear(planned, xc, wc, bc, weight, cache_folds);
  keep_linear(linear.y, linear.bias_added);  // for the backward (common/kept_linear.h)
  cuda::BatchNormArgs args{linear.bias_added ? at::Tensor() : bc,
                           scale,
                           gamma,
                           beta,
                           running_mean,
                           running_var,
                           num_batches_tracked,
                           training,
                           momentum,
                           eps,
                           rounds_intermediates(mode, out_dtype)};
  cuda::scale_batchnorm_pass(cuda::y_for_epilogue(linear, out_dtype), args, out,
                             tiles ? &*tiles : nullptr);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, CUDA, m) {
  m.impl("gemm_scale_batchnorm", &gemm_scale_batchnorm_cuda);
}

}  // namespace fusedops

// BatchNorm in eval mode on the skinny-half kernel's tile (scale_batchnorm_fused.h): a
// column's (center, multiplier) once, then each element of the tile straight to out.
#include "cuda/epilogues/scale_batchnorm_fused.h"

#include <cstdint>

#include "cuda/gemm/skinny_half_launch.cuh"
#include "math/scale_batchnorm.h"

namespace fusedops::cuda {
namespace {

// P: the type of the per-column vectors and out (the model's dtype, or float32 in the
// autocast form). scale[j * scale_stride] is column j's scale.
template <typename P>
struct SkinnyBatchNormEvalStore {
  static constexpr int kMaxRows = 16;
  static constexpr int kMaxBlockRows = 16;
  const P* bias;
  const P* scale;
  int64_t scale_stride;
  const P* gamma;
  const P* beta;
  const P* running_mean;
  const P* running_var;
  P* out;
  double eps;

  template <int kRows, int kCols>
  __device__ __forceinline__ void apply(float* tile, int row0, int chunk0, int m, int n,
                                        int threads) const {
    using Math = epilogues::ScaleBatchNorm;
    // A column's (center, multiplier) once (a double square root and division), in the second
    // warp's slots, free after the reduction.
    float* center = tile + kRows * kCols;
    float* mul = center + kRows;
    for (int r = threadIdx.x; r < kRows; r += threads) {
      const int j = min(row0 + r, n - 1);
      Math::eval_column(running_mean[j], running_var[j], gamma[j], eps, center[r], mul[r]);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kRows * kCols; i += threads) {
      const int r = i % kRows, c = i / kRows, j = row0 + r;
      if (j >= n || c >= m) continue;
      const float z = Math::z(tile[r * kCols + c], bias[j], scale[j * scale_stride]);
      out[static_cast<int64_t>(chunk0 + c) * n + j] =
          static_cast<P>(Math::normalize(z, center[r], mul[r], static_cast<float>(beta[j])));
    }
  }
};

}  // namespace

void scale_batchnorm_eval_skinny(const gemm::SkinnyOperands& ops, const at::Tensor& bias,
                                 const at::Tensor& scale, const at::Tensor& gamma,
                                 const at::Tensor& beta, const at::Tensor& running_mean,
                                 const at::Tensor& running_var, double eps, at::Tensor& out,
                                 int sm_count) {
  gemm::check_skinny_operands(ops, SkinnyBatchNormEvalStore<float>::kMaxRows);
  TORCH_INTERNAL_ASSERT(scale.dim() == 1 && scale.size(0) == ops.weight.size(0));
  gemm::with_kernel_type(ops, [&](auto t) {
    using T = decltype(t);
    gemm::with_params_type<T>(out, [&](auto p) {
      using P = decltype(p);
      const auto ptr = [](const at::Tensor& v) { return reinterpret_cast<const P*>(v.data_ptr()); };
      const SkinnyBatchNormEvalStore<P> store{
          ptr(bias), ptr(scale), scale.stride(0), ptr(gamma), ptr(beta), ptr(running_mean),
          ptr(running_var), reinterpret_cast<P*>(out.data_ptr()), eps};
      gemm::launch_skinny<T>(ops, store, sm_count, 16);
    });
  });
}

}  // namespace fusedops::cuda

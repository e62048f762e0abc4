// GroupNorm -> LeakyReLU -> x2 on the skinny-half kernel's tile (groupnorm_leakyrelu_sum_fused.h):
// a block owns whole groups of channels (16 x kRowTiles rows of W, a multiple of the group) for
// every row of x, so the statistics of each (row of x, group) are in its shared-memory tile:
// bias added, one warp per (row of x, group) reduces the group (the mean, then the squared
// deviations from it), and every channel takes the chain of math/groupnorm_leakyrelu_sum.h.
#include "cuda/epilogues/groupnorm_leakyrelu_sum_fused.h"

#include "common/store.h"
#include "cuda/cuda_helpers.cuh"
#include "cuda/gemm/skinny_half_launch.cuh"
#include "math/groupnorm_leakyrelu_sum.h"

namespace fusedops::cuda {
namespace {

// P: the type of bias, gamma, beta and out (the model's dtype, or float32 in the autocast form).
template <typename P>
struct SkinnyGroupNormStore {
  static constexpr int kMaxRows = 16;
  static constexpr int kMaxBlockRows = gemm::kHalfTileN;
  const P* bias;
  const P* gamma;
  const P* beta;
  P* out;
  epilogues::GroupNormLeakyReluSum<float> chain;
  int group;  // channels a group: kRows is a multiple of it

  template <int kRows, int kCols>
  __device__ __forceinline__ void apply(float* tile, int row0, int chunk0, int m, int n,
                                        int threads) const {
    const int groups = kRows / group;
    float* mean = tile + kRows * kCols;  // the second warp's slots: free after the reduction
    float* rstd = mean + kCols * groups;
    for (int i = threadIdx.x; i < kRows * kCols; i += threads) {
      const int r = i % kRows;
      if (row0 + r < n) tile[r * kCols + i / kRows] += static_cast<float>(bias[row0 + r]);
    }
    __syncthreads();
    const int lane = threadIdx.x % kWarpSize;
    const float count = static_cast<float>(group);
    for (int cg = threadIdx.x / kWarpSize; cg < kCols * groups; cg += threads / kWarpSize) {
      const int c = cg % kCols, first = cg / kCols * group;
      float s = 0.f;
      for (int r = first + lane; r < first + group; r += kWarpSize) s += tile[r * kCols + c];
      const float mu = chain.mean(warp_sum(s), count);
      float sq = 0.f;
      for (int r = first + lane; r < first + group; r += kWarpSize) {
        const float d = tile[r * kCols + c] - mu;
        sq += d * d;
      }
      const float rs = chain.rstd(warp_sum(sq), count);
      if (lane == 0) {
        mean[cg] = mu;
        rstd[cg] = rs;
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kRows * kCols; i += threads) {
      const int r = i % kRows, c = i / kRows;
      if (c >= m || row0 + r >= n) continue;
      const int ch = row0 + r, cg = r / group * kCols + c;
      out[static_cast<int64_t>(chunk0 + c) * n + ch] =
          static_cast<P>(chain.template output<Unrounded>(tile[r * kCols + c] - mean[cg],
                                                          rstd[cg], static_cast<float>(gamma[ch]),
                                                          static_cast<float>(beta[ch])));
    }
  }
};

}  // namespace

void groupnorm_leakyrelu_sum_skinny(const gemm::SkinnyOperands& ops, const at::Tensor& bias,
                                    int64_t group_size, const at::Tensor& gamma,
                                    const at::Tensor& beta, double eps, double negative_slope,
                                    at::Tensor& out, int sm_count) {
  gemm::check_skinny_operands(ops, SkinnyGroupNormStore<float>::kMaxRows);
  TORCH_INTERNAL_ASSERT(skinny_group_ok(group_size, ops.is_pair()) &&
                        ops.weight.size(0) % group_size == 0);
  const epilogues::GroupNormLeakyReluSum<float> chain{static_cast<float>(eps),
                                                      static_cast<float>(negative_slope)};
  gemm::with_kernel_type(ops, [&](auto t) {
    using T = decltype(t);
    gemm::with_params_type<T>(out, [&](auto p) {
      using P = decltype(p);
      const SkinnyGroupNormStore<P> store{
          reinterpret_cast<const P*>(bias.data_ptr()), reinterpret_cast<const P*>(gamma.data_ptr()),
          reinterpret_cast<const P*>(beta.data_ptr()), reinterpret_cast<P*>(out.data_ptr()), chain,
          static_cast<int>(group_size)};
      gemm::launch_skinny<T>(ops, store, sm_count, static_cast<int>(group_size));
    });
  });
}

}  // namespace fusedops::cuda

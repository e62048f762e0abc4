#include "cuda/gemm/skinny_half.h"

#include <ATen/ATen.h>

#include "cuda/gemm/skinny_half_launch.cuh"

namespace fusedops::cuda::gemm {

bool skinny_operands(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& weight_key,
                     bool cache_folds, SkinnyOperands& out) {
  out.x = x;
  out.weight = weight;
  return x.scalar_type() != at::kFloat || split_pair(x, weight, weight_key, cache_folds, out.pair);
}

void skinny_half_linear(const SkinnyOperands& ops, at::Tensor& y, int sm_count) {
  check_skinny_operands(ops, StoreFloatY::kMaxRows);
  const StoreFloatY store{y.data_ptr<float>()};
  with_kernel_type(ops, [&](auto t) { launch_skinny<decltype(t)>(ops, store, sm_count, 16); });
}

namespace {

// A block's sums as a K-slice partial (gemv_half_kernel.cuh's apply_terms): slice blockIdx.y,
// rows chunk0 on. Consecutive threads take consecutive columns of y: coalesced stores.
struct StorePartials {
  static constexpr bool kTerms = true;
  float* main;    // the main term's first slice (float16/bfloat16: the product's)
  float* cross;   // the cross terms' first slice (the float32 form), else null
  int64_t count;  // M * N: the stride between slices

  template <int kRows, int kCols>
  __device__ __forceinline__ void apply_terms(const float* main_tile, const float* cross_tile,
                                              int row0, int chunk0, int m, int n,
                                              int threads) const {
    const int64_t slice = blockIdx.y * count;
    for (int i = threadIdx.x; i < kRows * kCols; i += threads) {
      const int r = i % kRows, c = i / kRows;
      if (row0 + r >= n || c >= m) continue;
      const int64_t at = slice + static_cast<int64_t>(chunk0 + c) * n + row0 + r;
      main[at] = main_tile[r * kCols + c];
      if (cross != nullptr) cross[at] = cross_tile[r * kCols + c];
    }
  }
};

}  // namespace

void skinny_partials(const SkinnyOperands& ops, int sm_count, Partials3xFp16& out) {
  const at::Tensor& x = ops.x;
  const bool pair = ops.is_pair();
  const int64_t m = x.size(0), n = ops.weight.size(0), kp = pair ? ops.pair.kp : x.size(1);
  TORCH_INTERNAL_ASSERT(m >= 1 && m <= INT32_MAX && n <= INT32_MAX && kp > 0 &&
                        (pair ? 2 * kp : kp) <= INT32_MAX && kp % 8 == 0);
  const SkinnySlices s = skinny_partials_shape(m, n, kp, sm_count);
  const int cross_slices = pair ? s.slices : 0;
  out.partials = at::empty({cross_slices + s.slices, m, n}, x.options().dtype(at::kFloat));
  out.guard = pair ? ops.pair.guard : at::Tensor();
  float* base = out.partials.data_ptr<float>();
  const int64_t count = m * n;
  const float* alpha = nullptr;
  const float* beta = nullptr;
  if (pair) {
    const GuardLayout layout{m};
    const float* guard = reinterpret_cast<const float*>(ops.pair.guard.data_ptr<int>());
    alpha = guard + layout.alpha();
    beta = guard + layout.beta();
  }
  out.view = {base, cross_slices, s.slices, n, count, alpha, beta};
  const StorePartials store{base + cross_slices * count, pair ? base : nullptr, count};
  with_kernel_type(ops, [&](auto t) {
    using T = decltype(t);
    switch (s.shape.tiles) {
      case 1: return launch_shape<T, 8, 1, 1>(ops, store, s.slices, s.chunks, s.slice_k);
      case 2: return launch_shape<T, 8, 2, 1>(ops, store, s.slices, s.chunks, s.slice_k);
      default: return launch_shape<T, 8, 4, 1>(ops, store, s.slices, s.chunks, s.slice_k);
    }
  });
}

}  // namespace fusedops::cuda::gemm

// Model 98's epilogue (gelu_scale_max.h here, its math in math/gelu_scale_max.h): one row
// maximum (RowMax) fed by two readers.
#include "cuda/epilogues/gelu_scale_max.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include <type_traits>

#include "common/numerics.h"
#include "cuda/cuda_helpers.cuh"
#include "math/gelu_scale_max.h"

namespace fusedops::cuda {
namespace {

// The running maximum of a row's scaled GELUs (math/gelu_scale_max.h), and whether every
// pooled value was finite.
template <typename Store, typename acc>
struct RowMax {
  using Math = epilogues::GeluScaleMax<acc>;
  Math math;
  acc best = -INFINITY;
  bool finite = true;
  __device__ __forceinline__ void take(acc p) {
    finite &= is_finite(p);
    best = Math::nan_max(best, math.template scaled_gelu<Store>(p));
  }
};

// A row recomputed unfolded, in the reference's order (pooled windows of the Linear output),
// by one warp; every lane returns the row's result.
template <typename Store, typename scalar_t, typename acc = acc_t<scalar_t>>
__device__ acc unfolded_row_max(const scalar_t* __restrict__ xr, const scalar_t* __restrict__ weight,
                                const scalar_t* __restrict__ bias, int64_t pooled_n, int64_t k,
                                int64_t pool, acc scale, int lane) {
  RowMax<Store, acc> row{{scale}};
  for (int64_t j = 0; j < pooled_n; ++j) {
    acc window = 0;
    for (int64_t t = 0; t < pool; ++t) {
      const scalar_t* wr = weight + (j * pool + t) * k;
      acc dot = 0;
      for (int64_t c = lane; c < k; c += kWarpSize) {
        dot += static_cast<acc>(xr[c]) * static_cast<acc>(wr[c]);
      }
      window += warp_sum(dot) + static_cast<acc>(bias[j * pool + t]);
    }
    row.take(window / static_cast<acc>(pool));
  }
  return row.best;
}

constexpr int kWarpsPerBlock = 8;

// Reader 1, a pass over p: one warp per row.
template <typename Store, typename scalar_t>
__global__ void gelu_scale_max_kernel(const acc_t<scalar_t>* __restrict__ pooled,
                                      const scalar_t* __restrict__ pooled_bias,
                                      const scalar_t* __restrict__ x,
                                      const scalar_t* __restrict__ weight,
                                      const scalar_t* __restrict__ bias, scalar_t* __restrict__ out,
                                      int64_t batch, int64_t pooled_n, int64_t k, int64_t pool,
                                      acc_t<scalar_t> scale) {
  using acc = acc_t<scalar_t>;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / kWarpSize;
  if (row >= batch) return;
  const acc* pr = pooled + row * pooled_n;
  RowMax<Store, acc> row_max{{scale}};
  for (int64_t j = lane; j < pooled_n; j += kWarpSize) {
    row_max.take(pr[j] + static_cast<acc>(pooled_bias[j]));
  }
  acc best = row_max.best;
  if (!__all_sync(0xffffffffu, row_max.finite)) {
    best = unfolded_row_max<Store>(x + row * k, weight, bias, pooled_n, k, pool, scale, lane);
  }
  best = warp_nan_max(best);
  if (lane == 0) out[row] = static_cast<scalar_t>(best);
}

// Reader 2, an engine's K-slice partials (float32: the 3xFP16 engine's or the skinny kernels',
// gemm/skinny_half.h), summed as they are read: one block per row, a thread per 4 columns
// (16-byte loads of every slice: the sum is bound by reading the partials, so it needs many
// loads in flight). A row the float32 split's guard rejected is recomputed here exactly (a
// warp per value), as the engine's own fixup does; float16/bfloat16 partials guard no row.
constexpr int kRowThreads = 128;

template <typename scalar_t>
__device__ __forceinline__ float4 load4(const scalar_t* p) {
  if constexpr (std::is_same_v<scalar_t, float>) {
    return *reinterpret_cast<const float4*>(p);
  } else {
    return make_float4(static_cast<float>(p[0]), static_cast<float>(p[1]),
                       static_cast<float>(p[2]), static_cast<float>(p[3]));
  }
}

template <typename Store, typename scalar_t>
__global__ void __launch_bounds__(kRowThreads)
gelu_scale_max_partials_kernel(gemm::Partials3xFp16View view, const scalar_t* __restrict__ folded,
                               const scalar_t* __restrict__ pooled_bias,
                               const scalar_t* __restrict__ x, const scalar_t* __restrict__ weight,
                               const scalar_t* __restrict__ bias, scalar_t* __restrict__ out,
                               int64_t batch, int64_t pooled_n, int64_t k, int64_t pool,
                               float scale) {
  __shared__ float warp_best[kRowThreads / kWarpSize];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  constexpr int kWarps = kRowThreads / kWarpSize;
  for (int64_t row = blockIdx.x; row < batch; row += gridDim.x) {
    RowMax<Store, float> row_max{{scale}};
    if (!view.guarded(row)) {
      for (int64_t j = 4 * static_cast<int64_t>(threadIdx.x); j < pooled_n; j += 4 * kRowThreads) {
        const float4 p = view.at4(row, j);
        const float4 b = load4(pooled_bias + j);
        row_max.take(p.x + b.x);
        row_max.take(p.y + b.y);
        row_max.take(p.z + b.z);
        row_max.take(p.w + b.w);
      }
    } else if constexpr (std::is_same_v<scalar_t, float>) {
      for (int64_t j = warp; j < pooled_n; j += kWarps) {
        const float p = gemm::exact_dot(x + row * k, folded + j * k, k, lane);
        if (lane == 0) row_max.take(p + pooled_bias[j]);
      }
    }
    const bool finite = __syncthreads_and(row_max.finite);
    float best = warp_nan_max(row_max.best);
    if (lane == 0) warp_best[warp] = best;
    __syncthreads();
    if (warp == 0) {
      if (finite) {
        best = warp_best[0];
        for (int w = 1; w < kWarps; ++w) best = nan_max(best, warp_best[w]);
      } else {
        best = unfolded_row_max<Store>(x + row * k, weight, bias, pooled_n, k, pool, scale, lane);
      }
      if (lane == 0) out[row] = static_cast<scalar_t>(best);
    }
    __syncthreads();  // warp_best is read before the next row writes it
  }
}

}  // namespace

void gelu_scale_max_pass(const at::Tensor& p, const GeluScaleMaxArgs& a, at::Tensor& out) {
  const int64_t batch = p.size(0), pooled_n = p.size(1), k = a.x.size(1);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, a.x.scalar_type(), "gelu_scale_max", [&] {
    using acc = acc_t<scalar_t>;
    auto launch = [&](auto store) {
      gelu_scale_max_kernel<decltype(store), scalar_t>
          <<<ceil_div(batch, kWarpsPerBlock), kWarpsPerBlock * kWarpSize, 0,
             at::cuda::getCurrentCUDAStream()>>>(
              p.data_ptr<acc>(), a.pooled_bias.data_ptr<scalar_t>(), a.x.data_ptr<scalar_t>(),
              a.weight.data_ptr<scalar_t>(), a.bias.data_ptr<scalar_t>(),
              out.data_ptr<scalar_t>(), batch, pooled_n, k, a.pool, static_cast<acc>(a.scale));
    };
    with_store<scalar_t>(a.eager, launch);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void gelu_scale_max_partials(const gemm::Partials3xFp16& p, const at::Tensor& folded,
                             const GeluScaleMaxArgs& a, at::Tensor& out) {
  const int64_t batch = a.x.size(0), k = a.x.size(1), pooled_n = folded.size(0);
  TORCH_INTERNAL_ASSERT(pooled_n % 4 == 0 && !a.eager &&
                        (a.x.scalar_type() != at::kFloat ||
                         is_16_byte_aligned(a.pooled_bias.data_ptr())));
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(batch, 1 << 20));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, a.x.scalar_type(), "gelu_scale_max_partials", [&] {
    if constexpr (!std::is_same_v<scalar_t, double>) {
      gelu_scale_max_partials_kernel<Unrounded, scalar_t>
          <<<blocks, kRowThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
              p.view, folded.data_ptr<scalar_t>(), a.pooled_bias.data_ptr<scalar_t>(),
              a.x.data_ptr<scalar_t>(), a.weight.data_ptr<scalar_t>(), a.bias.data_ptr<scalar_t>(),
              out.data_ptr<scalar_t>(), batch, pooled_n, k, a.pool, static_cast<float>(a.scale));
    } else {
      TORCH_INTERNAL_ASSERT(false, "fusedops: no float64 partials");
    }
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace fusedops::cuda

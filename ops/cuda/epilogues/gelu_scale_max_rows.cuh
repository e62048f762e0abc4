// Model 98's row reduction (gelu_scale_max.h) as device code two kernels share: the RowMax of
// a row's scaled GELUs, the unfolded recompute of a non-finite row, and the reader of an
// engine's K-slice partials (GeluScaleMaxRows), run by gelu_scale_max.cu's own kernel or, after
// the grid's GEMM, by the weight-streaming kernel's blocks themselves (gelu_scale_max_skinny.cu).
#pragma once

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>

#include <type_traits>

#include "common/numerics.h"
#include "cuda/cuda_helpers.cuh"
#include "cuda/epilogues/gelu_scale_max.h"
#include "cuda/gemm/epilogue_3xfp16.cuh"
#include "math/gelu_scale_max.h"

namespace fusedops::cuda {

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

template <typename scalar_t>
__device__ __forceinline__ float4 load4(const scalar_t* p) {
  if constexpr (std::is_same_v<scalar_t, float>) {
    return *reinterpret_cast<const float4*>(p);
  } else {
    return make_float4(static_cast<float>(p[0]), static_cast<float>(p[1]),
                       static_cast<float>(p[2]), static_cast<float>(p[3]));
  }
}

// Rows of p read from an engine's K-slice partials (float32: the 3xFP16 engine's or the skinny
// kernels', gemm/skinny_half.h), summed as they are read: a block per row, a thread per 4
// columns (16-byte loads of every slice: the sum is bound by reading the partials, so it needs
// many loads in flight). A row the float32 split's guard rejected is recomputed here exactly
// (a warp per value), as the engine's own fixup does; float16/bfloat16 partials guard no row.
template <typename scalar_t>
struct GeluScaleMaxRows {
  gemm::Partials3xFp16View view;
  const scalar_t* folded;  // the pooled weight (out / pool, k): a guarded row's exact path
  const scalar_t* pooled_bias;
  const scalar_t* x;       // the unfolded Linear: a non-finite row's path
  const scalar_t* weight;
  const scalar_t* bias;
  scalar_t* out;
  int64_t batch, pooled_n, k, pool;
  float scale;

  // Rows first, first + step, ... by a block of kThreads threads.
  template <typename Store, int kThreads>
  __device__ void run(int64_t first, int64_t step) const {
    constexpr int kWarps = kThreads / kWarpSize;
    __shared__ float warp_best[kWarps];
    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
    for (int64_t row = first; row < batch; row += step) {
      RowMax<Store, float> row_max{{scale}};
      if (!view.guarded(row)) {
        for (int64_t j = 4 * static_cast<int64_t>(threadIdx.x); j < pooled_n; j += 4 * kThreads) {
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
          best = unfolded_row_max<Store>(x + row * k, weight, bias, pooled_n, k, pool, scale,
                                         lane);
        }
        if (lane == 0) out[row] = static_cast<scalar_t>(best);
      }
      __syncthreads();  // warp_best is read before the next row writes it
    }
  }

  // As the weight-streaming kernel's grid finisher (gemv_half_kernel.cuh, FinishesGrid): after
  // the grid's partials are written, every block of the grid takes rows.
  template <int kThreads>
  __device__ void finish() const {
    const int64_t block =
        blockIdx.x + gridDim.x * (blockIdx.y + static_cast<int64_t>(gridDim.y) * blockIdx.z);
    run<Unrounded, kThreads>(block, static_cast<int64_t>(gridDim.x) * gridDim.y * gridDim.z);
  }
};

// The dtypes of x a partials route takes (the engines' partials are float32 sums of float32,
// float16 or bfloat16 operands; float64 never takes one: the planner's rule).
#define FUSEDOPS_DISPATCH_PARTIALS_TYPES(TYPE, NAME, ...)                    \
  AT_DISPATCH_SWITCH(TYPE, NAME, AT_DISPATCH_CASE(at::kFloat, __VA_ARGS__) \
                                     AT_DISPATCH_CASE_REDUCED_FLOATING_TYPES(__VA_ARGS__))

// The reader of one call's partials (view), for out (batch,) of x's dtype (scalar_t).
template <typename scalar_t>
GeluScaleMaxRows<scalar_t> gelu_scale_max_rows(const gemm::Partials3xFp16View& view,
                                               const at::Tensor& folded,
                                               const GeluScaleMaxArgs& a, at::Tensor& out) {
  // The reader's 4-column loads, and no rounding of intermediates ("eager" numerics never
  // take a partials route: the planner's rule).
  TORCH_INTERNAL_ASSERT(folded.size(0) % 4 == 0 && !a.eager &&
                        (a.x.scalar_type() != at::kFloat ||
                         is_16_byte_aligned(a.pooled_bias.data_ptr())));
  return {view, folded.data_ptr<scalar_t>(), a.pooled_bias.data_ptr<scalar_t>(),
          a.x.data_ptr<scalar_t>(), a.weight.data_ptr<scalar_t>(), a.bias.data_ptr<scalar_t>(),
          out.data_ptr<scalar_t>(), a.x.size(0), folded.size(0), a.x.size(1), a.pool,
          static_cast<float>(a.scale)};
}

}  // namespace fusedops::cuda

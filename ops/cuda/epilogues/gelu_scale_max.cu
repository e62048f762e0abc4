// Model 98's epilogue (gelu_scale_max.h here, its math in math/gelu_scale_max.h): one row
// maximum (RowMax, gelu_scale_max_rows.cuh) fed by two readers.
#include "cuda/epilogues/gelu_scale_max.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include "common/numerics.h"
#include "cuda/cuda_helpers.cuh"
#include "cuda/epilogues/gelu_scale_max_rows.cuh"

namespace fusedops::cuda {
namespace {

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

// Reader 2, an engine's K-slice partials (gelu_scale_max_rows.cuh), one block per row.
constexpr int kRowThreads = 128;

template <typename Store, typename scalar_t>
__global__ void __launch_bounds__(kRowThreads)
gelu_scale_max_partials_kernel(GeluScaleMaxRows<scalar_t> rows) {
  rows.template run<Store, kRowThreads>(blockIdx.x, gridDim.x);
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
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(a.x.size(0), 1 << 20));
  FUSEDOPS_DISPATCH_PARTIALS_TYPES(a.x.scalar_type(), "gelu_scale_max_partials", [&] {
    gelu_scale_max_partials_kernel<Unrounded, scalar_t>
        <<<blocks, kRowThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
            gelu_scale_max_rows<scalar_t>(p.view, folded, a, out));
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace fusedops::cuda

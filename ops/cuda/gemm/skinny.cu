#include "cuda/gemm/skinny.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include "cuda/cuda_helpers.cuh"

namespace fusedops::cuda::gemm {
namespace {

// Batch-1 serving (m <= 4 rows of x): y = x W^T is then bound by reading W once (268 MB at
// 8192 x 8192: 63 us at 4.2 TB/s), where cuBLAS's SGEMM measured ~2.8 TB/s. A warp owns two
// rows of W and its lanes stride along K with 16-byte loads (W streamed with an evict-first
// hint; x, at most 128 KB, re-read from L1/L2). Accuracy: a first version with one float
// chain per lane (K/32 terms) measured twice PyTorch's error at batch 1 (3.0e-7 against
// 1.7e-7), so each lane now sums kSkinnyFold 16-byte steps in float (one accumulator per
// component: 4-term chains), adds that into a double, and the warp reduces in double. Used at
// full precision and with TF32 allowed alike.
constexpr int kSkinnyThreads = 256;
constexpr int kSkinnyRowsPerWarp = 2;
constexpr int kSkinnyFold = 4;

template <int kM>
__global__ void __launch_bounds__(kSkinnyThreads)
skinny_linear_kernel(const float* __restrict__ x, const float* __restrict__ w,
                     float* __restrict__ y, int64_t n, int64_t k) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warp = blockIdx.x * static_cast<int64_t>(kSkinnyThreads / kWarpSize) +
                       threadIdx.x / kWarpSize;
  const int64_t j0 = warp * kSkinnyRowsPerWarp;
  if (j0 >= n) return;
  const bool second = j0 + 1 < n;  // the last warp may own one row: it reads that row twice
  const float4* w0 = reinterpret_cast<const float4*>(w + j0 * k);
  const float4* w1 = reinterpret_cast<const float4*>(w + (second ? j0 + 1 : j0) * k);
  const float4* x4 = reinterpret_cast<const float4*>(x);
  const int64_t k4 = k / 4;
  double total[kM][2];
#pragma unroll
  for (int r = 0; r < kM; ++r) total[r][0] = total[r][1] = 0.0;
  for (int64_t base = lane; base < k4; base += kWarpSize * kSkinnyFold) {
    float4 part[kM][2];
#pragma unroll
    for (int r = 0; r < kM; ++r) part[r][0] = part[r][1] = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int u = 0; u < kSkinnyFold; ++u) {
      const int64_t q = base + static_cast<int64_t>(u) * kWarpSize;
      if (q < k4) {
        const float4 a = __ldcs(w0 + q);
        const float4 b = __ldcs(w1 + q);
#pragma unroll
        for (int r = 0; r < kM; ++r) {
          const float4 v = __ldg(x4 + r * k4 + q);
          float4& p = part[r][0];
          float4& t = part[r][1];
          p.x = fmaf(v.x, a.x, p.x); p.y = fmaf(v.y, a.y, p.y);
          p.z = fmaf(v.z, a.z, p.z); p.w = fmaf(v.w, a.w, p.w);
          t.x = fmaf(v.x, b.x, t.x); t.y = fmaf(v.y, b.y, t.y);
          t.z = fmaf(v.z, b.z, t.z); t.w = fmaf(v.w, b.w, t.w);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kM; ++r) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const float4 p = part[r][c];
        total[r][c] += static_cast<double>((p.x + p.y) + (p.z + p.w));
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kM; ++r) {
    const double s0 = warp_sum(total[r][0]);
    const double s1 = warp_sum(total[r][1]);
    if (lane == 0) {
      y[r * n + j0] = static_cast<float>(s0);
      if (second) y[r * n + j0 + 1] = static_cast<float>(s1);
    }
  }
}

}  // namespace

void skinny_linear(const at::Tensor& x, const at::Tensor& weight, at::Tensor& y) {
  const int64_t m = x.size(0), n = weight.size(0), k = x.size(1);
  const int64_t rows_per_block = kSkinnyRowsPerWarp * (kSkinnyThreads / kWarpSize);
  const dim3 grid(static_cast<unsigned>(ceil_div(n, rows_per_block)));
  auto kernel = m == 1   ? skinny_linear_kernel<1>
                : m == 2 ? skinny_linear_kernel<2>
                : m == 3 ? skinny_linear_kernel<3>
                         : skinny_linear_kernel<4>;
  kernel<<<grid, kSkinnyThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), weight.data_ptr<float>(), y.data_ptr<float>(), n, k);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace fusedops::cuda::gemm

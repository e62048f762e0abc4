#include "cuda/gemm/skinny.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include "cuda/cuda_helpers.cuh"
#include "cuda/gemm/heuristics.h"

namespace fusedops::cuda::gemm {
namespace {

// Batch-1 serving (m <= 4 rows of x): y = x W^T is then bound by reading W once, which
// cuBLAS's SGEMM does well below HBM bandwidth (docs/PERFORMANCE.md). A warp owns two
// rows of W and its lanes stride along K with 16-byte loads (W streamed with an evict-first
// hint; x, at most 128 KB, re-read from L1/L2). Accuracy: one float chain per lane (K/32
// terms) measured twice PyTorch's error at batch 1, so each lane sums kSkinnyFold 16-byte
// steps in float (one accumulator per component), adds that into a double, and the warp
// reduces in double. Used at full precision and with TF32 allowed alike.
//
// kSplit warps share a pair of rows, splitting K between them in interleaved 512-byte steps,
// and their double sums add in warp order in shared memory (deterministic, one kernel): where
// N / 16 blocks would leave SMs idle (a narrow W streamed by few blocks ran far below HBM speed;
// the split per call: heuristics.h).
constexpr int kSkinnyThreads = 256;
constexpr int kSkinnyWarps = kSkinnyThreads / kWarpSize;
constexpr int kSkinnyRowsPerWarp = 2;
constexpr int kSkinnyFold = 4;

template <int kM, int kSplit>
__global__ void __launch_bounds__(kSkinnyThreads)
skinny_linear_kernel(const float* __restrict__ x, const float* __restrict__ w,
                     float* __restrict__ y, int64_t n, int64_t k) {
  static_assert(kSkinnyWarps % kSplit == 0, "a block holds whole groups of kSplit warps");
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int part = warp % kSplit;  // this warp's share of K
  const int64_t pair = blockIdx.x * static_cast<int64_t>(kSkinnyWarps / kSplit) + warp / kSplit;
  const int64_t j0 = pair * kSkinnyRowsPerWarp;
  // A warp past the end still reaches the block's barrier below (kSplit > 1).
  const bool active = j0 < n;
  const bool second = j0 + 1 < n;  // the last warp may own one row: it reads that row twice
  const float4* w0 = reinterpret_cast<const float4*>(w + (active ? j0 : 0) * k);
  const float4* w1 = reinterpret_cast<const float4*>(w + (second ? j0 + 1 : active ? j0 : 0) * k);
  const float4* x4 = reinterpret_cast<const float4*>(x);
  const int64_t k4 = active ? k / 4 : 0;
  double total[kM][2];
#pragma unroll
  for (int r = 0; r < kM; ++r) total[r][0] = total[r][1] = 0.0;
  constexpr int64_t kStride = static_cast<int64_t>(kWarpSize) * kSplit;  // float4s between steps
  for (int64_t base = part * kWarpSize + lane; base < k4; base += kStride * kSkinnyFold) {
    float4 partial[kM][2];
#pragma unroll
    for (int r = 0; r < kM; ++r) partial[r][0] = partial[r][1] = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int u = 0; u < kSkinnyFold; ++u) {
      const int64_t q = base + static_cast<int64_t>(u) * kStride;
      if (q < k4) {
        const float4 a = __ldcs(w0 + q);
        const float4 b = __ldcs(w1 + q);
#pragma unroll
        for (int r = 0; r < kM; ++r) {
          const float4 v = __ldg(x4 + r * k4 + q);
          float4& p = partial[r][0];
          float4& t = partial[r][1];
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
        const float4 p = partial[r][c];
        total[r][c] += static_cast<double>((p.x + p.y) + (p.z + p.w));
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kM; ++r) {
#pragma unroll
    for (int c = 0; c < 2; ++c) total[r][c] = warp_sum(total[r][c]);
  }
  if constexpr (kSplit > 1) {
    __shared__ double sums[kSkinnyWarps][kM][2];
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < kM; ++r) {
        sums[warp][r][0] = total[r][0];
        sums[warp][r][1] = total[r][1];
      }
    }
    __syncthreads();
    if (part != 0) return;
#pragma unroll
    for (int r = 0; r < kM; ++r) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        for (int v = 1; v < kSplit; ++v) total[r][c] += sums[warp + v][r][c];
      }
    }
  }
  if (lane == 0 && active) {
#pragma unroll
    for (int r = 0; r < kM; ++r) {
      y[r * n + j0] = static_cast<float>(total[r][0]);
      if (second) y[r * n + j0 + 1] = static_cast<float>(total[r][1]);
    }
  }
}

template <int kM>
void launch(const at::Tensor& x, const at::Tensor& weight, at::Tensor& y, int sm_count) {
  const int64_t n = weight.size(0), k = x.size(1);
  // The fewest warps a pair of rows that gives every SM two blocks (8 at most).
  const auto blocks = [&](int split) {
    return ceil_div(n, static_cast<int64_t>(kSkinnyRowsPerWarp) * (kSkinnyWarps / split));
  };
  const auto run = [&](auto kernel, int split) {
    kernel<<<static_cast<unsigned>(blocks(split)), kSkinnyThreads, 0,
             at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), weight.data_ptr<float>(),
                                                 y.data_ptr<float>(), n, k);
  };
  switch (skinny_f32_split(n, kSkinnyRowsPerWarp * kSkinnyWarps, sm_count)) {
    case 1: return run(skinny_linear_kernel<kM, 1>, 1);
    case 2: return run(skinny_linear_kernel<kM, 2>, 2);
    case 4: return run(skinny_linear_kernel<kM, 4>, 4);
    default: return run(skinny_linear_kernel<kM, 8>, 8);
  }
}

}  // namespace

void skinny_linear(const at::Tensor& x, const at::Tensor& weight, at::Tensor& y, int sm_count) {
  switch (x.size(0)) {
    case 1: launch<1>(x, weight, y, sm_count); break;
    case 2: launch<2>(x, weight, y, sm_count); break;
    case 3: launch<3>(x, weight, y, sm_count); break;
    default: launch<4>(x, weight, y, sm_count); break;
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace fusedops::cuda::gemm

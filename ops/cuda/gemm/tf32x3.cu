// The 3xTF32 engine (tf32x3.h).
//
// Why 3xTF32: TF32 tensor cores are several times faster than an SGEMM on the CUDA cores but
// keep only 10 mantissa bits of each operand (relative error ~3e-4: fails the float32
// contract). Splitting each operand v = hi + lo (hi = tf32(v), lo = v - hi) and computing
// hi*hi + hi*lo + lo*hi restores ~21 bits per product.
//
// The tensor cores' own accumulation over a long K then limits accuracy (8.5e-5 measured when
// all of K runs in one GEMM), but only for the large hi*hi term: the cross terms are 2^-11
// smaller, so their accumulation error does not show. Hence two kinds of GEMM over one
// interleaved layout, chunk c of K holding [hi_c | lo_c] for x and [lo_c | hi_c] for W:
//   - cross terms: the full-width product x' . W'^T = sum_c x_hi_c W_lo_c + x_lo_c W_hi_c,
//   - main term: per chunk, the windows x_hi_c . W_hi_c, promoted into a float32 sum after
//     every chunk (the "promotion").
// The cross GEMM runs first, then the chunks one after another, cuBLAS adding each into y in
// float32 (beta = 1). W's split is a cached fold (common/fold_cache.h), x's is redone per call.
#include "cuda/gemm/tf32x3.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include "common/fold_cache.h"
#include "cuda/cuda_helpers.cuh"
#include "cuda/gemm/cublas.h"

namespace fusedops::cuda::gemm {
namespace {

// W's interleaved TF32 hi/lo split (twice W's memory; param: the K-chunk).
constexpr FoldKind kSplit3xTf32Fold{"3xtf32 weight split"};

// Which part goes first in each chunk: x stores [hi | lo], W stores [lo | hi].
enum class SplitOrder : bool { kHiFirst, kLoFirst };

__device__ __forceinline__ float round_to_tf32(float v) {
  uint32_t bits;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(bits) : "f"(v));
  return __uint_as_float(bits);
}

constexpr int kSplitThreads = 256;

struct HiLo {
  float hi, lo;
};
__device__ __forceinline__ HiLo split_value(float v) {
  const float hi = round_to_tf32(v);
  return {hi, v - hi};  // v - hi is exact in float32
}

// src (rows, k) -> dst (rows, 2 * k_padded): chunk c of dst holds src's columns
// [c*chunk, (c+1)*chunk) twice, as hi then lo parts (or lo then hi); columns past k are zero.
// Each thread moves 4 consecutive columns (16-byte loads and stores when k allows; chunk is a
// multiple of 32, so the 4 never straddle a chunk). blockIdx.y walks the rows: no per-element
// 64-bit division by k.
__global__ void split_3xtf32_kernel(const float* __restrict__ src, float* __restrict__ dst,
                                    int64_t rows, int64_t k, int64_t k_padded, int chunk,
                                    SplitOrder order) {
  const bool hi_first = order == SplitOrder::kHiFirst;
  const bool vector_loads = k % 4 == 0 && is_16_byte_aligned(src);
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const float* s = src + row * k;
    float* d = dst + row * 2 * k_padded;
    for (int64_t col = 4 * (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x);
         col < k_padded; col += 4 * static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const float4 v = load4(s, col, k, vector_loads);
      const HiLo a = split_value(v.x), b = split_value(v.y), c = split_value(v.z),
                 e = split_value(v.w);
      const float4 hi = {a.hi, b.hi, c.hi, e.hi};
      const float4 lo = {a.lo, b.lo, c.lo, e.lo};
      const int64_t chunk_index = col / chunk;
      float* out = d + chunk_index * 2 * chunk + (col - chunk_index * chunk);
      *reinterpret_cast<float4*>(out) = hi_first ? hi : lo;
      *reinterpret_cast<float4*>(out + chunk) = hi_first ? lo : hi;
    }
  }
}

at::Tensor split_3xtf32(const at::Tensor& src, SplitOrder order, int64_t chunk) {
  const int64_t rows = src.size(0), k = src.size(1);
  const int64_t k_padded = ceil_div(k, chunk) * chunk;
  at::Tensor dst = at::empty({rows, 2 * k_padded}, src.options());
  if (rows == 0 || k_padded == 0) return dst;
  dim3 grid(static_cast<unsigned>(std::min<int64_t>(ceil_div(k_padded, 4 * kSplitThreads), 64)),
            static_cast<unsigned>(std::min<int64_t>(rows, 65535)));
  split_3xtf32_kernel<<<grid, kSplitThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      src.data_ptr<float>(), dst.data_ptr<float>(), rows, k, k_padded, static_cast<int>(chunk),
      order);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return dst;
}

}  // namespace

void tf32x3_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& weight_key,
                   bool cache_folds, int64_t chunk, at::Tensor& y) {
  const int64_t m = x.size(0), n = weight.size(0);
  const at::Tensor w_split =
      fold_weights(kSplit3xTf32Fold, chunk, {weight_key}, cache_folds, [&] {
        return FoldTensors{split_3xtf32(weight, SplitOrder::kLoFirst, chunk), at::Tensor()};
      })[0];
  const at::Tensor x_split = split_3xtf32(x, SplitOrder::kHiFirst, chunk);
  const int64_t ld = x_split.size(1);
  const int64_t chunks = ld / (2 * chunk);
  const float* w_lo_hi = w_split.data_ptr<float>();
  const float* x_hi_lo = x_split.data_ptr<float>();
  cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();
  MathModeGuard math(handle, CUBLAS_DEFAULT_MATH);
  gemm_nt(handle, CUBLAS_COMPUTE_32F_FAST_TF32, w_lo_hi, ld, x_hi_lo, ld, y.data_ptr(), m, n, ld,
          CUDA_R_32F, CUDA_R_32F, /*accumulate=*/false);
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t offset = c * 2 * chunk;
    gemm_nt(handle, CUBLAS_COMPUTE_32F_FAST_TF32, w_lo_hi + offset + chunk, ld, x_hi_lo + offset,
            ld, y.data_ptr(), m, n, chunk, CUDA_R_32F, CUDA_R_32F, /*accumulate=*/true);
  }
}

}  // namespace fusedops::cuda::gemm
